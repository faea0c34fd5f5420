"""Redis Sentinel: a sentinel process (:class:`RedisSentinel`) and a zone ring watched by them.

:class:`SentinelRing` fails the primary over when it goes silent; its :attr:`~SentinelRing.url`
is the ``redis+sentinel://`` URL the builders take.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from dynoqueue.embedded.ring import ZoneRing
from dynoqueue.embedded.server import RedisServer
from dynoqueue.embedded.tls import TlsFiles
from dynoqueue.errors import InvalidArgumentError, RedisServerStartError

logger = logging.getLogger("dynoqueue.embedded")


class RedisSentinel(RedisServer):
    """One Redis Sentinel process (``redis-server sentinel.conf --sentinel``) watching a primary.

    The configuration file is written into the sentinel's directory at first start; Sentinel
    rewrites it as it learns the topology, so a restarted sentinel keeps what it knew.

    Args:
        primary: the server to monitor.
        service_name: the name clients ask for (``sentinel monitor <name> ...``).
        quorum: sentinels that must agree the primary is down before a failover.
        down_after_ms: silence after which a server counts as down, ms.
        failover_timeout_ms: Sentinel's ``failover-timeout``, ms.
        tls: talk TLS to clients and to the data nodes.
        **kwargs: passed to :class:`RedisServer` (``executable``, ``startup_timeout_s``).
    """

    def __init__(
        self,
        primary: RedisServer,
        service_name: str,
        *,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 4000,
        tls: TlsFiles | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tls=tls, **kwargs)
        self.service_name = service_name
        self._monitored = primary
        self._quorum = quorum
        self._down_after_ms = down_after_ms
        self._failover_timeout_ms = failover_timeout_ms

    def _command_line(self) -> list[str]:
        conf = self.directory / "sentinel.conf"
        if not conf.exists():
            name = self.service_name
            port_lines = self._port_args()
            lines = [f"{key.lstrip('-')} {value}"
                     for key, value in zip(port_lines[::2], port_lines[1::2], strict=True)]
            lines += [
                f"bind {self.host}",
                "daemonize no",
                "protected-mode no",
                f"dir {self.directory}",
                f"logfile {self.log_path}",
                "sentinel resolve-hostnames no",
                f"sentinel monitor {name} {self._monitored.host} {self._monitored.port} "
                f"{self._quorum}",
                f"sentinel down-after-milliseconds {name} {self._down_after_ms}",
                f"sentinel failover-timeout {name} {self._failover_timeout_ms}",
                f"sentinel parallel-syncs {name} 4",
            ]
            # The data nodes' credentials (from --requirepass or password=/username=).
            if self._monitored.password is not None:
                lines.append(f"sentinel auth-pass {name} {_quoted(self._monitored.password)}")
            if self._monitored.username is not None:
                lines.append(f"sentinel auth-user {name} {_quoted(self._monitored.username)}")
            conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return [self.executable, str(conf), "--sentinel", *self._extra_args]

    def _send_shutdown(self) -> None:
        # Sentinel has no SHUTDOWN NOSAVE; SIGTERM ends it at once.
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()

    def primary_address(self) -> tuple[str, int] | None:
        """``SENTINEL get-master-addr-by-name``: the primary this sentinel believes in."""
        reply = self._admin_client().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
        )
        return (str(reply[0]), int(reply[1])) if reply else None


class SentinelRing(ZoneRing):
    """A :class:`ZoneRing` watched by Redis Sentinels, which fail the primary over.

    :meth:`start` returns once every sentinel agrees on the primary, knows every replica and
    has discovered the other sentinels, so a failover can start right away.

    Args:
        zones: as :class:`ZoneRing`; ``zones[0]`` hosts the first primary.
        service_name: the Sentinel service name.
        sentinels: number of sentinel processes, >= 1 (quorum = majority).
        down_after_ms, failover_timeout_ms: as :class:`RedisSentinel`.
        ready_timeout_s: wait for the sentinels to know everything, seconds.
        **kwargs: passed to :class:`ZoneRing` (``extra_args`` such as
            ``["--min-replicas-to-write", "1"]``, ``tls``, ``acl_users``, ...).
    """

    def __init__(
        self,
        zones: Sequence[str],
        *,
        service_name: str = "dynoqueue",
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 4000,
        ready_timeout_s: float = 20.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(zones, **kwargs)
        if sentinels < 1:
            raise InvalidArgumentError(f"sentinels must be >= 1, got {sentinels}")
        self.service_name = service_name
        self.sentinels: list[RedisSentinel] = [
            RedisSentinel(
                self.primary, service_name, quorum=sentinels // 2 + 1,
                down_after_ms=down_after_ms, failover_timeout_ms=failover_timeout_ms,
                tls=self.tls, executable=kwargs.get("executable"),
            )
            for _ in range(sentinels)
        ]
        self._ready_timeout_s = ready_timeout_s

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``[(host, port), ...]`` of the sentinels."""
        return [sentinel.address for sentinel in self.sentinels]

    @property
    def url(self) -> str:
        """``redis+sentinel://h:p,h:p,h:p/<service>`` (``rediss+`` with TLS) for the builders.

        With a password on the data nodes it carries it: ``redis+sentinel://[user]:pw@...``.
        """
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        return f"{scheme}://{self.primary.userinfo}{hosts}/{self.service_name}"

    def servers(self) -> list[RedisServer]:
        """The data nodes (primary first), then the sentinels."""
        return [*super().servers(), *self.sentinels]

    def data_nodes(self) -> list[RedisServer]:
        """The primary and the replicas, in zone order."""
        return super().servers()

    def current_primary(self) -> RedisServer:
        """The data node the sentinels currently name as primary (asks the first live one).

        Raises:
            RedisServerStartError: no sentinel answered.
        """
        for sentinel in self.sentinels:
            if not sentinel.is_running():
                continue
            try:
                address = sentinel.primary_address()
            except redis.RedisError:
                continue
            for server in self.data_nodes():
                if address is not None and server.port == address[1]:
                    return server
        raise RedisServerStartError("no sentinel could name the primary")

    def wait_for_new_primary(self, old: RedisServer, timeout_s: float = 30.0) -> RedisServer:
        """Block until the sentinels promoted a node other than ``old`` and it accepts writes.

        Returns:
            The new primary.

        Raises:
            RedisServerStartError: no failover within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                primary = self.current_primary()
                if primary is not old and primary.info("replication")["role"] == "master":
                    return primary
            except (redis.RedisError, RedisServerStartError, RuntimeError):
                pass
            time.sleep(0.1)
        raise RedisServerStartError(f"no failover away from port {old.port} in {timeout_s:g} s")

    def _start(self) -> None:
        super()._start()
        for sentinel in self.sentinels:
            self._add(sentinel).start()
        deadline = time.monotonic() + self._ready_timeout_s
        while not self._sentinels_ready():
            if time.monotonic() > deadline:
                tails = "\n".join(s._log_tail() for s in self.sentinels)
                raise RedisServerStartError(
                    f"sentinels did not discover the ring in {self._ready_timeout_s:g} s\n{tails}"
                )
            time.sleep(0.1)
        logger.info("sentinel ring up: sentinels %s", [s.port for s in self.sentinels])

    def _sentinels_ready(self) -> bool:
        want_replicas = len(self.replicas)
        for sentinel in self.sentinels:
            try:
                admin = sentinel._admin_client()
                if sentinel.primary_address() != self.primary.address:
                    return False
                replicas = admin.execute_command("SENTINEL", "REPLICAS", self.service_name)
                others = admin.execute_command("SENTINEL", "SENTINELS", self.service_name)
            except redis.RedisError:
                return False
            if len(replicas) != want_replicas or len(others) != len(self.sentinels) - 1:
                return False
        return True


def _quoted(value: str) -> str:
    """A sentinel.conf argument in double quotes, so spaces and quotes survive."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextlib.contextmanager
def sentinel_ring(zones: Sequence[str], **kwargs: Any) -> Iterator[SentinelRing]:
    """Run a :class:`SentinelRing` (zone ring + sentinels) for the duration of a ``with`` block.

    Raises:
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: a process did not start or the sentinels did not get ready.
    """
    with SentinelRing(zones, **kwargs) as ring:
        yield ring
