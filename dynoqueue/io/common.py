"""What both drivers share that is not I/O: picking a Cluster node, filling a pipeline,
finding a client's slot map, and the registry of doorbells. Nothing here sends a command."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import redis.asyncio.sentinel
import redis.sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import doorbell as bell
from ..core import requests as rq
from ..core.deadline import Deadline, DeadlinePassed
from ..core.queue import QueueCore
from ..errors import DynoQueueError, InvalidArgumentError

B = TypeVar("B")


def answered_here(step: rq.Step[Any], deadline: Deadline, call_timeout_s: float) -> bool:
    """Answer ``step``'s request without I/O when it needs none, and say so: a ``Budget``
    restarts the deadline; past the deadline, DeadlinePassed is thrown in instead of sending."""
    request = step.request
    if type(request) is rq.Budget:
        deadline.renew(request.extra_s + call_timeout_s)
        step.send(None)
    elif deadline.left() <= 0:
        step.send(None, DeadlinePassed("no reply"))
    else:
        return False
    return True


#: What a request's handler raises by design: redis-py's errors, the deadline's, the core's.
_EXPECTED = (RedisError, RedisClusterException, DeadlinePassed, DynoQueueError)


def typed(error: BaseException | None) -> BaseException | None:
    """``error`` as the operation gets it (None, and what is no Exception, such as a
    cancellation, pass as they are): anything else redis-py raised from inside (an
    AttributeError while a Cluster client's slot map changes under it, a TypeError of a
    parser reading a socket that was shut) becomes a RedisError with it as the cause, so the
    caller sees a typed :class:`~dynoqueue.errors.RedisOperationError`, never a raw one; a
    ValueError (an argument it cannot encode, e.g. a lone surrogate) becomes
    :class:`~dynoqueue.errors.InvalidArgumentError`."""
    if error is None or not isinstance(error, Exception) or isinstance(error, _EXPECTED):
        return error
    text = f"redis-py failed: {type(error).__name__}: {error}"
    wrapped: Exception
    if isinstance(error, ValueError):  # an argument it cannot encode slipped past the checks
        wrapped = InvalidArgumentError(f"redis-py cannot send it: {type(error).__name__}: "
                                       f"{error}")
    elif isinstance(error, TimeoutError):
        wrapped = RedisTimeoutError(text)
    elif isinstance(error, OSError):
        wrapped = RedisConnectionError(text)
    else:
        wrapped = RedisError(text)
    wrapped.__cause__ = error
    return wrapped


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


def filled_pipeline(client: Any, commands: Sequence[Sequence[Any]]) -> Any:
    """A non-transactional pipeline of ``client`` holding ``commands``, not yet sent."""
    pipe = client.pipeline(transaction=False)
    for args in commands:
        pipe.execute_command(*args)
    return pipe


def outcomes(results: Sequence[Any]) -> list[tuple[Any, BaseException | None]]:
    """A pipeline's results (run with ``raise_on_error=False``: errors in place) as one
    ``(reply, typed error)`` per command: the answer to a Batch request."""
    return [(None, typed(r)) if isinstance(r, Exception) else (r, None) for r in results]


def slot_map(client: Any) -> Any:
    """The nodes manager of a Cluster client (whose ``initialize`` re-reads the slot map), or
    None for a standalone client."""
    return getattr(client, "nodes_manager", None)


class Doorbells(Generic[B]):
    """One doorbell per queue, made on first use by ``make(conn, channels, enabled)``."""

    def __init__(self, make: Callable[[Any, list[str], bool], B], conn: Any) -> None:
        self._make = make
        self._conn = conn
        self._bells: dict[QueueCore, B] = {}
        self._lock = threading.Lock()

    def get(self, core: QueueCore) -> B:
        """The doorbell of ``core``'s queue (not yet subscribed, when new). A closed queue gets
        one without a listener, kept nowhere: a pop that the close woke asks once more before
        its claim sees the close, and nothing it starts may outlive the close."""
        with self._lock:
            bell = self._bells.get(core)
            if bell is None:
                if core.closed or core.detached:
                    return self._make(self._conn, core.bell_channels, False)
                bell = self._bells[core] = self._make(self._conn, core.bell_channels,
                                                      core.settings.doorbell)
            return bell

    def pop(self, core: QueueCore) -> B | None:
        """Forget ``core``'s doorbell and return it (None if it had none), to be closed."""
        with self._lock:
            return self._bells.pop(core, None)


class Sharded:
    """A doorbell subscription made with SSUBSCRIBE: a Cluster pub/sub holding one
    subscription per node that owns some of the channels. redis-py's ``get_sharded_message``
    waits on each node in turn, the timeout on each, so a ring on the last node waited for the
    others' timeouts (0.2 s measured on 3 nodes): the doorbells read the nodes at once instead
    (the sync one with select(), the asyncio one with a reader task per node, ``readers``)."""

    __slots__ = ("messages", "pubsub", "readers")

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub
        self.readers: list[Any] = []
        self.messages: Any = None

    def node_pubsubs(self) -> list[Any]:
        """The per-node subscriptions."""
        return list(self.pubsub.node_pubsub_mapping.values())


def sharded(conn: Any, pubsub: Any) -> bool:
    """Whether a doorbell on ``conn`` uses sharded pub/sub: a Cluster client whose ``pubsub``
    has SSUBSCRIBE (the scripts then SPUBLISH: see scripts/lib/doorbell.lua)."""
    return slot_map(conn) is not None and hasattr(pubsub, "ssubscribe")


def lacks_sharded(error: Exception) -> bool:
    """Whether ``error`` says the server has no sharded pub/sub (Redis < 7)."""
    return "unknown command" in str(error).lower()


class DoorbellBase:
    """What a doorbell of either API holds: the client it subscribes through, its ring counts,
    and whether it is enabled (False for servers without pub/sub: waiting pops only poll)."""

    def __init__(self, conn: Any, channels: Sequence[str], enabled: bool = True) -> None:
        self.enabled = enabled
        self.rings = bell.Rings(channels)
        self._conn = conn


_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # the hiredis extra: packs commands in C
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is optional
    _hiredis_pack = None


def hiredis_packer(conn: Any) -> Callable[[tuple[Any, ...]], bytes] | None:
    """hiredis's C packer for ``conn`` when it is installed and the connection encodes text as
    strict UTF-8 (what hiredis does), else None (use the connection's own packer)."""
    encoder = conn.encoder
    if _hiredis_pack is not None and encoder.encoding.lower() in ("utf-8", "utf8") \
            and encoder.encoding_errors == "strict":
        return _hiredis_pack
    return None
