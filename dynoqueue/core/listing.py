"""Every queue under a factory's key prefix, as found in Redis (not only those opened here).

A queue that holds any message, waiting or leased, has its message hash ``P.MESSAGE.Q`` (on a
hash-tagged layout, Redis Cluster's, ``P.MESSAGE.{Q}``), one that holds dead letters its
dead set ``P.DEAD.Q``, and one that is configured its stored policy ``P.POLICY.Q``: a SCAN for
those names finds every queue, including one whose messages are all leased (its waiting sets
are then gone), dead, or gone (a purged queue keeps its policy). On a Cluster the SCAN runs on
every primary. The queues of the registry ``P.QUEUES`` (every queue a process pushed to, until
it is cleared; :mod:`dynoqueue.core.zones`) and those the factory opened are listed too,
empty or not, as Conductor's DAO listed them.

A call-driven operation (queue-level calls, :mod:`dynoqueue.core.calls`), not one of the
drivers' Redis-level requests (:mod:`dynoqueue.core.requests`): it SCANs each Cluster primary
in turn (``target_nodes``), and initialises an asyncio Cluster client first, which no request
can express; the metrics' read counts its SCAN pages. Used by both factories'
``discover_queues``, the Conductor DAO and the metrics.
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    RedisClusterException,
    RedisError,
)

from ..errors import AccessDeniedError, RedisOperationError
from ..model.keys import PrefixKeys
from ..model.message import as_text
from .calls import Call, CallOp

#: Keys asked per SCAN call (a hint to the server, not a limit).
SCAN_COUNT = 1000
_GLOB_SPECIAL = frozenset("*?[]\\")


def queue_names(queues: Any, operation: str) -> CallOp[list[str]]:
    """The names of every queue of ``queues`` (a RedisQueues of either API), sorted.

    Raises:
        AccessDeniedError: the ACL user may not SCAN.
        RedisOperationError: Redis failed (the error names ``operation``).
    """
    tagged = bool(queues.settings.hash_tag)
    prefix = "".join("\\" + c if c in _GLOB_SPECIAL else c for c in f"{queues.key_prefix}.")
    # One SCAN matches P.MESSAGE.*, P.DEAD.* and P.POLICY.* (and a few names that are none
    # of them, dropped below): a queue that holds only dead letters has no message hash, and
    # it is the one an operator most needs to see.
    pattern = prefix + "[MDP][EO][SAL][SDI]*"
    client = queues.quorum_conn
    try:
        if queues.settings.cluster:
            keys = yield from _scan_primaries(client, pattern)
        else:
            keys = yield from _scan(client, pattern)
        registered = yield Call.of(client, "smembers", PrefixKeys(queues.key_prefix).queues)
    except (AuthenticationError, NoPermissionError) as exc:
        raise AccessDeniedError(operation, pattern, str(exc)) from exc
    except (RedisError, RedisClusterException) as exc:
        raise RedisOperationError(operation, pattern, str(exc)) from exc
    names = {queue.name for queue in queues.queues()}
    names.update(as_text(name) for name in registered)
    for key in keys:
        name = _queue_name(key, queues.key_prefix, tagged)
        if name:
            names.add(name)
    return sorted(names)


#: What follows ``P.MESSAGE.`` in a partition's key (dynoqueue.model.keys): ``{tag}{Q}``.
_PARTITION_KEY = re.compile(r"\{[0-9]{1,4}-[0-9a-f]{4}\}\{([^{}]+)\}")


def _queue_name(key: Any, key_prefix: str, tagged: bool) -> str | None:
    """The queue a message hash or dead set key belongs to; None for any other key, or for a
    name this layout cannot hold."""
    try:
        text = key.decode() if isinstance(key, bytes) else str(key)
    except UnicodeDecodeError:  # not a key dynoqueue wrote: names are text
        return None
    for kind in ("MESSAGE", "DEAD", "POLICY"):
        head = f"{key_prefix}.{kind}."
        if text.startswith(head):
            name = text[len(head):]
            break
    else:
        return None
    partition = _PARTITION_KEY.fullmatch(name)
    if partition:  # a partition's key: {tag}{Q}, whatever the deployment
        return partition.group(1)
    if tagged:
        if not (name.startswith("{") and name.endswith("}")):
            return None
        name = name[1:-1]
    return name or None


def _scan_primaries(client: Any, pattern: str) -> CallOp[list[Any]]:
    if not client.get_primaries():  # an asyncio Cluster client learns its nodes when first used
        yield Call.of(client, "initialize")
    keys: list[Any] = []
    for node in client.get_primaries():
        keys += yield from _scan(client, pattern, target_nodes=node)
    return keys


def _scan(client: Any, pattern: str, **route: Any) -> CallOp[list[Any]]:
    keys: list[Any] = []
    cursor: Any = 0
    while True:
        cursor, batch = yield Call.of(client, "scan", cursor, match=pattern, count=SCAN_COUNT,
                                      **route)
        if isinstance(cursor, dict):  # a Cluster client answers {node name: cursor}
            (cursor,) = cursor.values()
        keys += batch
        if int(cursor) == 0:
            return keys
