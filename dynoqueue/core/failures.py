"""How the core reports what Redis did wrong: redis-py's errors as typed dynoqueue errors.

:func:`guarded` wraps an operation (:mod:`dynoqueue.core.requests`) so that the error a driver
throws in at one of its yields leaves it as an :class:`~dynoqueue.errors.AccessDeniedError`, a
:class:`~dynoqueue.errors.CallTimeoutError`, a :class:`~dynoqueue.errors.DynomiteError` or a
:class:`~dynoqueue.errors.RedisOperationError` naming the operation and its key. Used by the
queue's operations (:mod:`dynoqueue.core.state` guards each call), the zone registry
(:mod:`dynoqueue.core.zones`) and the factory (:mod:`dynoqueue.core.factory`).
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import (
    AccessDeniedError,
    CallTimeoutError,
    DynomiteError,
    DynomiteQuorumError,
    DynomiteStorageError,
    RedisOperationError,
)
from .deadline import DeadlinePassed
from .requests import Op

#: redis-py's errors for a wrong password, an unknown user or a missing ACL permission.
ACCESS_DENIED = (AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError)
#: Dynomite's own error replies (not a rack's redis'), alone or in redis-py's pipeline message
#: ("... of pipeline caused error: <reply>"; redis.asyncio quotes it as a tuple: "('<reply>',)").
_DYNOMITE_REPLY = re.compile(r"(?:^|caused error: [(\"']*)(Dynomite: Failed to achieve Quorum"
                             r"|Storage: |Peer: )")


def dynomite_error(exc: BaseException) -> type[DynomiteError] | None:
    """The typed error for a Dynomite error reply (None for anything else)."""
    found = _DYNOMITE_REPLY.search(str(exc)) if isinstance(exc, ResponseError) else None
    if found is None:
        return None
    return DynomiteQuorumError if found.group(1).startswith("Dynomite") else DynomiteStorageError


def guarded(operation: str, key: str, op: Op[Any]) -> Op[Any]:
    """Run ``op``, turning redis-py errors into typed dynoqueue errors.

    Raises:
        AccessDeniedError: wrong password, unknown user, missing ACL permission.
        CallTimeoutError: no reply within the call's deadline (``call_timeout_ms``).
        DynomiteError: Dynomite's own error reply (no quorum, storage or peer unreachable).
        RedisOperationError: any other Redis failure, naming ``operation`` and ``key``.
    """
    try:
        return (yield from op)
    except ACCESS_DENIED as exc:
        raise AccessDeniedError(operation, key, str(exc)) from exc
    except (DeadlinePassed, RedisTimeoutError) as exc:
        raise timed_out(operation, key, exc) from exc
    except ResponseError as exc:
        raise (dynomite_error(exc) or RedisOperationError)(operation, key, str(exc)) from exc
    except (RedisError, RedisClusterException) as exc:
        raise RedisOperationError(operation, key, str(exc)) from exc


def timed_out(operation: str, key: str, exc: BaseException) -> CallTimeoutError:
    """The CallTimeoutError of a call whose deadline passed (or whose socket timed out)."""
    why = str(exc) or "the server did not answer"
    return CallTimeoutError(operation, key, f"{why} within the call's deadline "
                                            "(call_timeout_ms); a write's outcome is unknown")
