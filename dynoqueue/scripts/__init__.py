"""The Lua scripts, one file per state change, and the code that loads them.

Each ``*.lua`` file starts with a header naming its KEYS and ARGV (with units) and what it
returns. ``_prelude.lua`` holds helpers shared by all of them; :func:`source` prepends it, so
the sync client and a later asyncio twin run exactly the same text.
"""

from __future__ import annotations

import contextlib
import hashlib
from functools import cache
from importlib import resources
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: Scripts that change state: they run on the quorum connection.
WRITE_SCRIPTS = (
    "push",
    "ensure",
    "claim",
    "claim_id",
    "claim_match",
    "ack",
    "set_unack_timeout",
    "set_timeout",
    "remove",
    "requeue_expired",
)
#: Read-only scripts: they may run on a replica through the non-quorum connection.
READ_SCRIPTS = ("peek", "find_match", "find_stale")
#: Cluster replies meaning the slot map is stale or the slot is changing hands (MOVED is an
#: AskError). Matched by type: a pipeline rewrites the message ("Command # 1 ... caused error").
SLOT_MOVED_ERRORS = (AskError, ClusterDownError, TryAgainError, ReadOnlyError)


_DOORBELL_ON = "local DOORBELL = true"


@cache
def source(name: str, doorbell: bool = True) -> str:
    """The full text of script ``name``: the shared prelude followed by the script's body.

    Args:
        doorbell: ring the shard's pub/sub doorbell on changes; False for servers without
            pub/sub (Dynomite).

    Raises:
        FileNotFoundError: there is no ``name.lua``.
    """
    folder = resources.files(__package__)
    prelude = folder.joinpath("_prelude.lua").read_text(encoding="utf-8")
    if not doorbell:
        prelude = prelude.replace(_DOORBELL_ON, "local DOORBELL = false")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return prelude + "\n" + body


def register(client: Any, names: tuple[str, ...], doorbell: bool = True) -> dict[str, Any]:
    """Register scripts on a redis-py client (sync or asyncio, standalone or cluster).

    Returns:
        name -> the client's Script object (EVALSHA, loading the script on NOSCRIPT).
    """
    return {name: client.register_script(source(name, doorbell)) for name in names}


def register_read(client: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Register read-only scripts; on Redis Cluster they run as ``EVALSHA_RO`` on a replica.

    redis-py sends ``EVALSHA`` to the slot's primary whatever the client's replica-read
    setting, so on a cluster client that reads from replicas the scripts are wrapped in
    :class:`ReplicaScript`. Elsewhere (a standalone client pointed at a replica already) they
    are plain registered scripts.
    """
    if isinstance(client, RedisCluster) and client.load_balancing_strategy is not None:
        return {name: ReplicaScript(client, source(name)) for name in names}
    return register(client, names)


class ReplicaScript:
    """A read-only script run with ``EVALSHA_RO`` on a replica of the slot of its first key.

    Falls back to ``EVAL_RO`` when the replica has not loaded the script yet, and to the
    primary with plain ``EVALSHA`` on servers older than Redis 7 (no ``EVALSHA_RO``).
    """

    def __init__(self, client: RedisCluster, text: str) -> None:
        self.client = client
        self.text = text
        self.sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        self._fallback = client.register_script(text)
        self._ro_supported = True

    def __call__(self, keys: list[str], args: list[Any], client: Any = None) -> Any:
        if not self._ro_supported:
            return self._fallback(keys=keys, args=args)
        cluster = self.client
        node = cluster.nodes_manager.get_node_from_slot(
            cluster.keyslot(keys[0]),  # type: ignore[no-untyped-call]
            load_balancing_strategy=cluster.load_balancing_strategy
        )
        conn: Any = cluster.get_redis_connection(node)
        try:
            try:
                return conn.evalsha_ro(self.sha, len(keys), *keys, *args)
            except NoScriptError:
                return conn.eval_ro(self.text, len(keys), *keys, *args)
        except (RedisConnectionError, RedisTimeoutError, *SLOT_MOVED_ERRORS):
            # The replica is gone or no longer serves the slot: refresh the slot map, read once
            # through RedisCluster's own routing, which retries.
            with contextlib.suppress(RedisError, RedisClusterException):
                cluster.nodes_manager.initialize()
            return self._fallback(keys=keys, args=args)
        except ResponseError as exc:
            if "unknown command" not in str(exc).lower():
                raise
            self._ro_supported = False  # Redis < 7: read on the primary instead
            return self._fallback(keys=keys, args=args)
