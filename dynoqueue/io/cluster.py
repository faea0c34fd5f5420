"""Where a request goes on a Redis Cluster (the node of a key's slot, picked for a replica
read; a client's slot map) and which server a client talks to (for telemetry). Both drivers use
it; nothing here sends a command."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio.sentinel
import redis.sentinel
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

SCRIPT_CALLS = ("EVALSHA", "EVAL")
#: Errors after which a batched Cluster command is sent again through the client's routing,
#: which follows the cluster (batched commands are writes that may be repeated, and reads).
REROUTED = (AskError, MovedError, TryAgainError, ClusterDownError, RedisConnectionError,
            RedisTimeoutError)
#: The same for a single script call, which may be a claim: not after a read timeout (the
#: connection's Retry has decided that one, see RETRY_TIMEOUTS).
REDIRECTED = (AskError, MovedError, TryAgainError, ClusterDownError, RedisConnectionError)


def key_of(args: Sequence[Any]) -> Any:
    """The key a Cluster routes a command by: a script call's first key, else its first
    argument."""
    if args[0] in SCRIPT_CALLS:
        return args[3]
    return args[1]


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
