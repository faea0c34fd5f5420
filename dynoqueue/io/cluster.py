"""Where a request goes on a Redis Cluster (the node of a key's slot, picked for a replica
read; a client's slot map) and which server a client talks to (for telemetry). Both drivers use
it; nothing here sends a command."""

from __future__ import annotations

from typing import Any

import redis.asyncio.sentinel
import redis.sentinel


def replica_node(cluster: Any, key: str) -> Any:
    """A node serving ``key``'s slot, picked by the Cluster client's replica strategy."""
    return cluster.nodes_manager.get_node_from_slot(
        cluster.keyslot(key), load_balancing_strategy=cluster.load_balancing_strategy)


_SENTINEL_POOLS = (redis.sentinel.SentinelConnectionPool,
                   redis.asyncio.sentinel.SentinelConnectionPool)


def endpoint_of(client: Any) -> tuple[str, int | None] | None:
    """The server a client talks to, for telemetry: ``(host, port)``, ``(socket path, None)``
    for a Unix socket, a Cluster's default node, or None where the pool finds its server at
    connect time (Sentinel)."""
    node = getattr(client, "get_default_node", None)
    if node is not None:  # a Cluster client (either API)
        default = node()
        return (default.host, int(default.port)) if default is not None else None
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if kwargs.get("path"):
        return str(kwargs["path"]), None
    host, port = kwargs.get("host"), kwargs.get("port")
    if not host or isinstance(client.connection_pool, _SENTINEL_POOLS):
        return None
    return str(host), int(port) if port is not None else None


def slot_map(client: Any) -> Any:
    """The nodes manager of a Cluster client (whose ``initialize`` re-reads the slot map), or
    None for a standalone client."""
    return getattr(client, "nodes_manager", None)
