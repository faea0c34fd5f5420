"""A zone ring: one primary in the first zone and one replica per other zone (:class:`ZoneRing`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import redis

from dynoqueue.embedded.server import RedisServer
from dynoqueue.embedded.tls import TlsFiles
from dynoqueue.embedded.topology import Topology
from dynoqueue.errors import InvalidArgumentError, RedisServerStartError

logger = logging.getLogger("dynoqueue.embedded")

_SYNC_PROBE_KEY = "__dynoqueue_embedded_sync_probe__"


class ZoneRing(Topology):
    """One primary in the first zone and one replica per other zone, all on 127.0.0.1.

    This is the dyno-queues deployment in miniature: writes (the quorum connection) go to
    :attr:`primary`, and a consumer in zone ``z`` reads locally from :meth:`node_for` ``(z)``.
    :meth:`start` returns once every replica reports ``master_link_status:up`` and the primary
    counts them all in ``connected_slaves``.

    Args:
        zones: zone names, at least one, no duplicates; ``zones[0]`` hosts the primary.
        extra_args: configuration added to every server's command line.
        replica_args: configuration added to the replicas' command lines only.
        executable: the redis-server binary; ``None`` uses :func:`find_redis_server`.
        startup_timeout_s: per-server wait for PING, in seconds.
        sync_timeout_s: wait for every replica to be in sync with the primary, in seconds.
        tls, acl_users: as :class:`RedisServer`, for every server.
        port: the primary's port (default: a free one; the replicas always take free ones).

    Raises:
        InvalidArgumentError: ``zones`` is empty, has duplicates or empty names, or a timeout
            is not positive.
    """

    def __init__(
        self,
        zones: Sequence[str],
        *,
        extra_args: Sequence[str] = (),
        replica_args: Sequence[str] = (),
        executable: str | None = None,
        startup_timeout_s: float = 10.0,
        sync_timeout_s: float = 15.0,
        tls: TlsFiles | None = None,
        acl_users: Mapping[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__()
        zone_list = list(zones)
        if isinstance(zones, str) or not zone_list:
            raise InvalidArgumentError("zones must be a non-empty sequence of zone names")
        if any(not isinstance(zone, str) or not zone for zone in zone_list):
            raise InvalidArgumentError(f"zone names must be non-empty strings, got {zone_list}")
        if len(set(zone_list)) != len(zone_list):
            raise InvalidArgumentError(f"zone names must be unique, got {zone_list}")
        if sync_timeout_s <= 0:
            raise InvalidArgumentError(f"sync_timeout_s must be > 0, got {sync_timeout_s}")
        self.zones: list[str] = zone_list
        self.primary_zone: str = zone_list[0]
        self.tls = tls
        common: dict[str, Any] = dict(
            executable=executable, startup_timeout_s=startup_timeout_s, tls=tls,
            acl_users=acl_users,
        )
        self.primary: RedisServer = RedisServer(extra_args=extra_args, port=port, **common)
        self.replicas: dict[str, RedisServer] = {
            zone: RedisServer(
                extra_args=[*extra_args, *replica_args], replicaof=self.primary, **common
            )
            for zone in zone_list[1:]
        }
        self._sync_timeout_s = sync_timeout_s

    def node_for(self, zone: str) -> RedisServer:
        """Return the server that serves local reads in ``zone``.

        Args:
            zone: one of :attr:`zones`.

        Returns:
            :attr:`primary` for the primary's zone, else that zone's replica.

        Raises:
            KeyError: ``zone`` is not one of :attr:`zones`.
        """
        if zone == self.primary_zone:
            return self.primary
        try:
            return self.replicas[zone]
        except KeyError:
            raise KeyError(f"unknown zone {zone!r}; zones are {self.zones}") from None

    def servers(self) -> list[RedisServer]:
        """Return the primary followed by the replicas, in zone order."""
        return [self.primary, *self.replicas.values()]

    def _start(self) -> None:
        self._add(self.primary).start()
        for replica in self.replicas.values():
            self._add(replica).start()
        self._wait_in_sync()
        logger.info(
            "zone ring up: primary %s in %s, replicas %s",
            self.primary.port,
            self.primary_zone,
            {zone: server.port for zone, server in self.replicas.items()},
        )

    def _wait_in_sync(self) -> None:
        expected = len(self.replicas)
        deadline = time.monotonic() + self._sync_timeout_s
        while True:
            status = self._sync_status()
            links_up = all(link == "up" for link in status["replicas"].values())
            if links_up and status["connected_slaves"] == expected:
                break
            if time.monotonic() > deadline:
                self._raise_not_in_sync(status)
            time.sleep(0.05)
        if expected:
            # A link reported "up" may still hold back the command stream until the replica's
            # first REPLCONF ACK (up to 1 s later). Replicate a throw-away write and WAIT for
            # every replica, so that a ready ring replicates (and WAITs) without delay.
            remaining_ms = max(100, int((deadline - time.monotonic()) * 1000))
            waiter = self.primary._internal_client(remaining_ms / 1000 + 2.0)
            try:
                waiter.set(_SYNC_PROBE_KEY, "1")
                waiter.delete(_SYNC_PROBE_KEY)
                acknowledged = int(waiter.wait(expected, remaining_ms))
            finally:
                waiter.close()
            if acknowledged < expected:
                self._raise_not_in_sync(
                    {**self._sync_status(), "acknowledged": acknowledged, "expected": expected}
                )

    def _raise_not_in_sync(self, status: dict[str, Any]) -> None:
        tails = "\n".join(server._log_tail() for server in self.servers())
        raise RedisServerStartError(
            f"zone ring replicas not in sync after {self._sync_timeout_s:g} s: {status}\n{tails}"
        )

    def _sync_status(self) -> dict[str, Any]:
        def read(server: RedisServer, field: str) -> Any:
            try:
                return server.info("replication").get(field)
            except (redis.RedisError, RuntimeError) as exc:
                return f"error: {exc}"

        return {
            "connected_slaves": read(self.primary, "connected_slaves"),
            "replicas": {
                zone: read(server, "master_link_status") for zone, server in self.replicas.items()
            },
        }


@contextlib.contextmanager
def zone_ring(zones: Sequence[str], **kwargs: Any) -> Iterator[ZoneRing]:
    """Run a :class:`ZoneRing` (a primary plus one replica per other zone) for a ``with`` block.

    Args:
        zones: zone names; ``zones[0]`` hosts the primary, every other zone gets a replica.
        **kwargs: passed to :class:`ZoneRing` (``extra_args``, ``replica_args``, ``executable``,
            ``startup_timeout_s``, ``sync_timeout_s``).

    Yields:
        The running, in-sync ring. Every server is stopped on exit, also when the block raises
        or start-up fails part-way.

    Raises:
        InvalidArgumentError: bad ``zones`` or timeouts.
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: a server did not start or the replicas did not sync in time.
    """
    with ZoneRing(zones, **kwargs) as ring:
        yield ring
