"""Where the demo's zones run: a zone ring of local redis-servers, or one given Redis."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from .flights import ZONES
from .options import DemoOptions


@dataclass
class Topology:
    summary: str  # one short line
    nodes: list[str]  # one short line per node
    url: str  # the primary (quorum connection) of every zone
    replica_urls: dict[str, str] | None  # zone -> its own node (non-quorum connection)
    write_quorum: int


def open_topology(options: DemoOptions, stack: contextlib.ExitStack) -> Topology:
    if options.redis_url:
        client = redis.Redis.from_url(options.redis_url)
        stack.callback(client.close)
        replicas = int(client.info("replication").get("connected_slaves", 0))
        quorum = 1 if replicas > 0 else 0
        return Topology(
            summary=f"one server for every zone ({replicas} connected replicas), "
                    f"write_quorum={quorum}",
            nodes=[f"every zone {_where(options.redis_url)}"],
            url=options.redis_url, replica_urls=None, write_quorum=quorum,
        )
    from ..embedded import zone_ring

    ring = stack.enter_context(zone_ring(list(ZONES)))
    quorum = 1 if ring.replicas else 0
    nodes = [
        f"{zone} {'primary' if ring.node_for(zone) is ring.primary else 'replica'} "
        f"{ring.node_for(zone).host}:{ring.node_for(zone).port}" for zone in ZONES
    ]
    return Topology(
        summary=f"local zone ring: a primary, a replica in each other zone; write_quorum={quorum}",
        nodes=nodes, url=ring.primary.url,
        replica_urls={zone: ring.node_for(zone).url for zone in ZONES}, write_quorum=quorum,
    )


def _where(url: str) -> str:
    """host:port (or the socket path) of a URL, without its credentials."""
    parts = urlsplit(url)
    if parts.hostname:
        return f"{parts.hostname}:{parts.port or 6379}"
    return parts.path or "?"
