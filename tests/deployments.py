"""The five local deployments the contract suite runs on, each started for real.

A :class:`Deployment` knows how to build :class:`RedisQueues` on its topology *through the
public builders* (``RedisQueues.from_url``), so the contract tests exercise the builders too, and
how to open a plain client for looking at keys.

The contract suite reads through the primary (``read_from_replicas=False``): replica reads are
eventually consistent by design, which would make "push, then peek" assertions racy. Replica
reads are proven separately (test_multizone, test_deployments) with ``eventually``.

``dynomite`` is a real Netflix Dynomite datacenter (three racks, one node each, DC_QUORUM reads
and writes), built with the Dynomite profile (``dynomite=True``). It needs the dynomite binary
(``dynoqueue.embedded.find_dynomite``: ``$DYNOQUEUE_DYNOMITE`` or ``PATH``): without one those
tests skip and say why (:data:`NEEDS_DYNOMITE`), since no package registry ships it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dynoqueue import QueuePolicy, RedisQueues
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import (
    ClusterTopology,
    DynomiteTopology,
    RedisServer,
    SentinelRing,
    Topology,
    ZoneRing,
    find_dynomite,
)
from dynoqueue.errors import DynomiteNotFoundError
from dynoqueue.model.keys import PrefixKeys

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
#: Deployment names, in the order the suite runs them. The multi-process ones are "slow".
#: ``partitioned`` is the ``cluster`` deployment (the same processes) whose factories give every
#: queue :data:`PARTITIONS` partitions (a queue spread over all three primaries).
NAMES = ("single", "managed", "ring", "sentinel", "cluster", "partitioned", "dynomite")
SLOW = frozenset({"sentinel", "cluster", "partitioned", "dynomite"})
#: The partitions of every queue of the ``partitioned`` deployment.
PARTITIONS = 4


def _dynomite_missing() -> str | None:
    """Why the Dynomite tests cannot run here (no binary found), or None when they can."""
    try:
        find_dynomite()
    except DynomiteNotFoundError as missing:
        return str(missing)
    return None


#: Marks a test (or a ``dynomite`` deployment parameter) that needs a real dynomite binary.
NEEDS_DYNOMITE = pytest.mark.skipif(_dynomite_missing() is not None,
                                    reason=f"Dynomite: {_dynomite_missing()}")
#: Waiting pops poll on Dynomite (no pub/sub): the suite polls often instead of every second.
DYNOMITE_POLL_MS = 20


class Deployment:
    """One started topology plus the URL the builders take for it."""

    def __init__(self, name: str, url: str, topology: Topology | RedisServer,
                 partitions: int = 1) -> None:
        self.name = name
        self.url = url
        self.topology = topology
        #: The partitions the factories built here give every queue (1: the layout of one).
        self.partitions = partitions

    def build(self, *, decode: bool = False, api: str = "sync", bridge: Any = None,
              **settings: Any) -> Any:
        """RedisQueues on this deployment through ``RedisQueues.from_url``; with
        ``api="async"`` the asyncio one, behind ``bridge`` (see tests/apis.py)."""
        if self.name == "dynomite":
            settings = {"dynomite": True, "poll_interval_ms": DYNOMITE_POLL_MS, **settings}
        if self.partitions > 1:
            settings["policy"] = dataclasses.replace(settings.get("policy") or QueuePolicy(),
                                                     partitions=self.partitions)
        if api == "async":
            return bridge.wrap_factory(AsyncRedisQueues.from_url(
                self.url, read_from_replicas=False,
                client_options={"decode_responses": decode}, **settings))
        return RedisQueues.from_url(
            self.url,
            read_from_replicas=False,
            client_options={"decode_responses": decode},
            **settings,
        )

    def raw(self) -> Any:
        """A decoding client of the primary (a RedisCluster client on the cluster; on Dynomite,
        the first node, see :class:`DynomiteRaw`)."""
        if isinstance(self.topology, DynomiteTopology):
            return DynomiteRaw(self.topology)
        if isinstance(self.topology, ClusterTopology):
            return self.topology.client(decode_responses=True)
        if isinstance(self.topology, ZoneRing):
            primary = (self.topology.current_primary()
                       if isinstance(self.topology, SentinelRing) else self.topology.primary)
            return primary.client(decode_responses=True)
        assert isinstance(self.topology, RedisServer)
        if self.name == "managed":
            return ManagedRaw(host="127.0.0.1", port=self.topology.port, decode_responses=True)
        return self.topology.client(decode_responses=True)

    def __repr__(self) -> str:
        return f"Deployment({self.name})"


#: ``managed``: one redis-server limited as managed services limit theirs (ElastiCache,
#: Memorystore, Azure Cache): ``CONFIG`` renamed, ``DEBUG`` off, and the application's ACL user
#: has neither ``@admin`` nor ``@dangerous`` (no ``INFO``, ``CONFIG``, ``CLIENT KILL`` ...) and
#: may not ``CLIENT SETINFO``. The queues connect as that user; ``raw()`` is the default user.
MANAGED_USER = ("app", "app-pw")
MANAGED_CONFIG = "CONFIG-renamed-by-the-provider"


def _managed() -> RedisServer:
    server = RedisServer(extra_args=["--rename-command", "CONFIG", MANAGED_CONFIG]).start()
    rules = ["on", f">{MANAGED_USER[1]}", "~*", "&*", "+@all", "-@admin", "-@dangerous"]
    if server.version >= (7, 2):  # CLIENT SETINFO exists (older servers refuse it anyway)
        rules.append("-client|setinfo")
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", MANAGED_USER[0], *rules)
    return server


def _start(name: str) -> tuple[Deployment, Callable[[], None]]:
    if name == "single":
        server = RedisServer().start()
        return Deployment(name, server.url, server), server.stop
    if name == "managed":
        server = _managed()
        user, password = MANAGED_USER
        return (Deployment(name, f"redis://{user}:{password}@127.0.0.1:{server.port}/0", server),
                server.stop)
    topology: Topology
    if name == "ring":
        topology = ZoneRing(ZONES).start()
        url = topology.primary.url
    elif name == "sentinel":
        topology = SentinelRing(ZONES).start()
        url = topology.url
    elif name == "cluster":
        topology = ClusterTopology(3, 1).start()
        url = topology.url
    elif name == "dynomite":
        topology = DynomiteTopology(ZONES).start()
        url = topology.url
    else:  # pragma: no cover - a typo in a test's parametrisation
        raise ValueError(f"unknown deployment {name!r}")
    return Deployment(name, url, topology), topology.stop


class DynomiteRaw:
    """A decoding client of a Dynomite topology's first node, so what a test writes directly
    replicates to every rack like the queue's own writes; the commands Dynomite does not
    serve (KEYS, TIME, INFO, CONFIG) go to that node's own redis-server."""

    _LOCAL = frozenset({"keys", "time", "info", "config_resetstat", "config_get"})

    def __init__(self, topology: DynomiteTopology) -> None:
        self._node = topology.nodes[0].client(decode_responses=True)
        self._backend = topology.nodes[0].backend.client(decode_responses=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend if name in self._LOCAL else self._node, name)

    def close(self) -> None:
        self._node.close()
        self._backend.close()


class ManagedRaw(redis.Redis):
    """The provider's own client of the ``managed`` deployment: every permission, and CONFIG
    under the name the provider renamed it to."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and isinstance(args[0], str) and args[0].upper().startswith("CONFIG"):
            args = (MANAGED_CONFIG + args[0][len("CONFIG"):], *args[1:])
        return super().execute_command(*args, **options)


class DeploymentPool:
    """Starts each deployment on first use and stops them all at the end of the session."""

    def __init__(self) -> None:
        self._running: dict[str, Deployment] = {}
        self._stops = contextlib.ExitStack()

    def get(self, name: str) -> Deployment:
        if name == "partitioned":
            cluster = self.get("cluster")
            return Deployment(name, cluster.url, cluster.topology, partitions=PARTITIONS)
        if name not in self._running:
            deployment, stop = _start(name)
            self._stops.callback(stop)
            self._running[name] = deployment
        return self._running[name]

    def close(self) -> None:
        self._stops.close()
        self._running.clear()


def rack_contents(topology: DynomiteTopology, prefix: str) -> dict[str, dict[str, Any]]:
    """What each rack's redis-servers hold under ``prefix``, read directly (not through
    Dynomite): rack -> key -> a hash's {field: value} or a sorted set's sorted ids. Lease
    scores are left out: concurrent claims may apply in different orders on different racks.
    The prefix's queue registry and zone heartbeats are no queue's: left out too."""
    shared = PrefixKeys(prefix)
    contents: dict[str, dict[str, Any]] = {}
    for rack in topology.racks:
        keys: dict[str, Any] = {}
        for node in topology.rack(rack):
            with node.backend.client(decode_responses=True) as backend:
                for key in backend.keys(f"{prefix}.*"):
                    if key in (shared.queues, shared.zones):
                        continue
                    if backend.type(key) == "hash":
                        keys[key] = backend.hgetall(key)
                    else:
                        keys[key] = sorted(backend.zrange(key, 0, -1))
        contents[rack] = keys
    return contents
