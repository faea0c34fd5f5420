"""What both drivers share that is not I/O: answering a request that needs none, typing
redis-py's errors, filling a pipeline and reading its outcomes, hiredis's packer. Nothing here
sends a command (Cluster node picking: cluster.py; the doorbells' registry: doorbells.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core import requests as rq
from ..core.deadline import Deadline, DeadlinePassed
from ..errors import DynoQueueError, InvalidArgumentError


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
