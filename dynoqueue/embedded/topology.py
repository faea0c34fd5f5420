"""The :class:`Topology` base: several servers started, stopped and used as one."""

from __future__ import annotations

import abc
import logging
from types import TracebackType
from typing import TypeVar

from dynoqueue.embedded.server import RedisServer

logger = logging.getLogger("dynoqueue.embedded")

_TopologyT = TypeVar("_TopologyT", bound="Topology")


class Topology(abc.ABC):
    """Base class of multi-process topologies: start all, stop all, use as a context manager.

    Subclasses implement :meth:`_start` (start their servers, registering each one with
    :meth:`_add` as soon as it is created, and wait until the topology is usable) and
    :meth:`servers`. If :meth:`_start` fails part-way, :meth:`start` stops whatever was started.
    """

    def __init__(self) -> None:
        self._started: list[RedisServer] = []

    def _add(self, server: RedisServer) -> RedisServer:
        self._started.append(server)
        return server

    @abc.abstractmethod
    def _start(self) -> None:
        """Start every process and wait until the topology is ready."""

    @abc.abstractmethod
    def servers(self) -> list[RedisServer]:
        """Return every server of the topology."""

    def is_running(self) -> bool:
        """Return whether every server of the topology is running."""
        servers = self.servers()
        return bool(servers) and all(server.is_running() for server in servers)

    def start(self: _TopologyT) -> _TopologyT:
        """Start the topology; on any failure stop what was started and re-raise.

        Returns:
            This topology.

        Raises:
            RedisServerNotFoundError: no redis-server binary was found.
            RedisServerStartError: a server did not start or the topology did not become ready.
        """
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server that was started (in reverse order) and remove their directories.

        Errors stopping one server are logged and do not keep the others running.
        """
        for server in reversed(self._started):
            try:
                server.stop()
            except Exception:
                logger.exception("could not stop %r", server)
        self._started.clear()

    def __enter__(self: _TopologyT) -> _TopologyT:
        """Start the topology (see :meth:`start`) and return it."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the topology (see :meth:`stop`)."""
        self.stop()
