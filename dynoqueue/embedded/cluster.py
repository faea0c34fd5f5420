"""Redis Cluster built from :class:`RedisServer` processes, without ``redis-cli``."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import redis

from dynoqueue.embedded.ports import _LOCALHOST, _free_cluster_port
from dynoqueue.embedded.server import RedisServer
from dynoqueue.embedded.tls import TlsFiles
from dynoqueue.embedded.topology import Topology
from dynoqueue.errors import InvalidArgumentError, RedisServerStartError

logger = logging.getLogger("dynoqueue.embedded")

_CLUSTER_SLOTS = 16384


class ClusterTopology(Topology):
    """A Redis Cluster on 127.0.0.1: ``primaries`` primaries, each with its replicas.

    Built without ``redis-cli``: slots are assigned with ``CLUSTER ADDSLOTS``, the nodes meet,
    replicas attach with ``CLUSTER REPLICATE``. :meth:`start` returns once every node reports
    ``cluster_state:ok``, every replica's link is up and every node's ``CLUSTER SLOTS`` lists a
    primary and all its replicas for every range (clients read the topology from there).

    Args:
        primaries: number of primaries, >= 1 (3 is the smallest that survives a failover).
        replicas_per_primary: replicas of each primary, >= 0.
        node_timeout_ms: ``cluster-node-timeout``: how long a silent primary has before its
            replica takes over, ms.
        extra_args: configuration added to every node.
        ready_timeout_s: wait for the cluster to be ready, seconds.
        tls, acl_users, executable, startup_timeout_s: as :class:`RedisServer`.
        port: the first primary's port (default: a free one; the cluster bus takes port +
            10000 too); every other node takes a free one.
    """

    def __init__(
        self,
        primaries: int = 3,
        replicas_per_primary: int = 1,
        *,
        node_timeout_ms: int = 2000,
        extra_args: Sequence[str] = (),
        ready_timeout_s: float = 30.0,
        tls: TlsFiles | None = None,
        acl_users: Mapping[str, str] | None = None,
        executable: str | None = None,
        startup_timeout_s: float = 10.0,
        port: int | None = None,
    ) -> None:
        super().__init__()
        if primaries < 1 or replicas_per_primary < 0:
            raise InvalidArgumentError("a cluster needs primaries >= 1 and replicas >= 0")
        if port is not None and not 0 < port <= 65535 - 10000:
            raise InvalidArgumentError(f"a cluster node's port must be in 1..55535 (its bus "
                                       f"listens on port + 10000), got {port}")
        self.tls = tls
        node_args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-announce-ip", _LOCALHOST,
            # Other queues keep working while one primary's slots fail over.
            "--cluster-require-full-coverage", "no",
            *extra_args,
        ]  # fmt: skip

        def node(fixed: int | None = None) -> RedisServer:
            # The cluster bus listens on port + 10000, so the port must leave room for it.
            return RedisServer(port=fixed or _free_cluster_port(), extra_args=node_args,
                               tls=tls, acl_users=acl_users,
                               executable=executable, startup_timeout_s=startup_timeout_s)

        self.primaries: list[RedisServer] = [node(port if i == 0 else None)
                                             for i in range(primaries)]
        self.replicas: dict[int, list[RedisServer]] = {
            i: [node() for _ in range(replicas_per_primary)] for i in range(primaries)
        }
        self._ready_timeout_s = ready_timeout_s

    def servers(self) -> list[RedisServer]:
        """The primaries, then the replicas (in the order of their first primaries)."""
        return [*self.primaries, *(r for group in self.replicas.values() for r in group)]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``[(host, port), ...]`` of every node."""
        return [server.address for server in self.servers()]

    @property
    def url(self) -> str:
        """``redis+cluster://h:p,h:p,...`` (``rediss+`` with TLS) for the builders.

        With a password on the nodes it carries it: ``redis+cluster://[user]:pw@h:p,...``.
        """
        scheme = "rediss+cluster" if self.tls else "redis+cluster"
        hosts = ",".join(f"{h}:{p}" for h, p in self.startup_nodes)
        return f"{scheme}://{self.primaries[0].userinfo}{hosts}"

    def client(self, **kwargs: Any) -> Any:
        """A new ``redis.cluster.RedisCluster`` on this cluster (the caller closes it).

        The nodes' credentials and TLS options are defaults that ``kwargs`` may override.
        """
        from redis.cluster import ClusterNode, RedisCluster

        if self.tls is not None:
            kwargs = {**self.tls.client_options(), **kwargs}
        kwargs = {**self.primaries[0].credentials(), **kwargs}
        nodes = [ClusterNode(h, p)  # type: ignore[no-untyped-call]
                 for h, p in self.startup_nodes if self._is_up(p)]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    def owner_of(self, key: str) -> RedisServer:
        """The node currently serving ``key``'s slot as primary (asks a live node).

        Raises:
            RedisServerStartError: no live node knows an owner.
        """
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for server in self.servers():
            if not server.is_running():
                continue
            try:
                ranges = server._admin_client().execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            for start, end, primary, *_ in ranges:
                if int(start) <= slot <= int(end):
                    port = int(primary[1])
                    for candidate in self.servers():
                        if candidate.port == port:
                            return candidate
        raise RedisServerStartError(f"no live node knows who serves slot {slot}")

    def _is_up(self, port: int) -> bool:
        return any(s.port == port and s.is_running() for s in self.servers())

    def _start(self) -> None:
        for server in self.servers():
            self._add(server).start()
        admins = [server._admin_client() for server in self.servers()]
        for epoch, admin in enumerate(admins, start=1):
            admin.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        count = len(self.primaries)
        for i, primary in enumerate(self.primaries):
            first, last = i * _CLUSTER_SLOTS // count, (i + 1) * _CLUSTER_SLOTS // count - 1
            primary._admin_client().execute_command("CLUSTER", "ADDSLOTS",
                                                    *range(first, last + 1))
        for server in self.servers()[1:]:
            admins[0].execute_command("CLUSTER", "MEET", server.host, server.port)
        deadline = time.monotonic() + self._ready_timeout_s
        self._wait(deadline, self._all_met, "nodes did not all meet")
        for i, primary in enumerate(self.primaries):
            node_id = primary._admin_client().execute_command("CLUSTER", "MYID")
            for replica in self.replicas[i]:
                self._replicate(replica, node_id, deadline)
        self._wait(deadline, self._ready, "cluster not ready")
        logger.info("cluster up: primaries %s", [p.port for p in self.primaries])

    def _replicate(self, replica: RedisServer, node_id: Any, deadline: float) -> None:
        # The replica must know the primary's id first; gossip may still be spreading it.
        while True:
            try:
                replica._admin_client().execute_command("CLUSTER", "REPLICATE", node_id)
                return
            except redis.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _wait(self, deadline: float, check: Callable[[], bool], what: str) -> None:
        while not check():
            if time.monotonic() > deadline:
                tails = "\n".join(s._log_tail() for s in self.servers()[:2])
                raise RedisServerStartError(f"{what} in {self._ready_timeout_s:g} s: "
                                            f"{self._state()}\n{tails}")
            time.sleep(0.05)

    def _all_met(self) -> bool:
        total = len(self.servers())
        for server in self.servers():
            lines = str(server._admin_client().execute_command("CLUSTER", "NODES")).splitlines()
            if len(lines) != total or any("handshake" in line for line in lines):
                return False
        return True

    def _ready(self) -> bool:
        # Every range must list its primary and all its replicas: clients read replicas there.
        want = 1 + len(self.replicas[0])
        for server in self.servers():
            if not server.is_running():
                continue
            try:
                admin = server._admin_client()
                if admin.cluster("info")["cluster_state"] != "ok":
                    return False
                ranges = admin.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                return False
            covered = sum(int(r[1]) - int(r[0]) + 1 for r in ranges)
            if covered != _CLUSTER_SLOTS or any(len(r) - 2 < want for r in ranges):
                return False
            if server not in self.primaries:
                if server.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _state(self) -> dict[int, Any]:
        state: dict[int, Any] = {}
        for server in self.servers():
            try:
                state[server.port] = server._admin_client().cluster("info")["cluster_state"]
            except (redis.RedisError, RuntimeError) as exc:
                state[server.port] = f"error: {exc}"
        return state


@contextlib.contextmanager
def cluster(primaries: int = 3, replicas_per_primary: int = 1,
            **kwargs: Any) -> Iterator[ClusterTopology]:
    """Run a :class:`ClusterTopology` (default 3 primaries + 3 replicas) for a ``with`` block.

    Raises:
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: a node did not start or the cluster did not become ready.
    """
    with ClusterTopology(primaries, replicas_per_primary, **kwargs) as topology:
        yield topology
