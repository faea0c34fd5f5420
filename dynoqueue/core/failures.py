"""How the core reports what Redis did wrong: redis-py's errors as typed dynoqueue errors.

:func:`guarded` wraps an operation (:mod:`dynoqueue.core.requests`) so that the error a driver
throws in at one of its yields leaves it as an :class:`~dynoqueue.errors.AccessDeniedError`, a
:class:`~dynoqueue.errors.CallTimeoutError`, a :class:`~dynoqueue.errors.ConnectionFailedError`
(naming the endpoint), a :class:`~dynoqueue.errors.DynomiteError` or a
:class:`~dynoqueue.errors.RedisOperationError` naming the operation and its key. Used by the
queue's operations (:mod:`dynoqueue.core.shared` guards each call), the zone registry
(:mod:`dynoqueue.core.zones`) and the factory (:mod:`dynoqueue.core.factory`).
"""

from __future__ import annotations

import errno
import re
import socket
from typing import Any

from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFoundError
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    NoPermissionError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import MasterNotFoundError

from ..errors import (
    AccessDeniedError,
    CallTimeoutError,
    ConnectionFailedError,
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
#: The connections' retry puts the endpoint (credentials masked) on a refused connection's
#: error under this attribute (:mod:`dynoqueue.connect.clients`).
ENDPOINT_ATTRIBUTE = "dynoqueue_endpoint"
#: A refused or unresolvable connection in an error's text (redis.asyncio joins the errors of
#: every address of a host: "Multiple exceptions: [Errno 111] Connect call failed ...").
_REFUSED_TEXT = re.compile(rf"\[Errno ({errno.ECONNREFUSED}|-2|-3|-5)\]|Connection refused"
                           r"|Connect call failed|Name or service not known"
                           r"|nodename nor servname|Temporary failure in name resolution")
#: No sentinel named a primary (either API's error).
_NO_PRIMARY = (MasterNotFoundError, AsyncMasterNotFoundError)
#: The address in redis-py's "Error 111 connecting to host:port." (when no endpoint was put on).
_ADDRESS = re.compile(r"connecting to ([^\s]+?)\.? ")


def dynomite_error(exc: BaseException) -> type[DynomiteError] | None:
    """The typed error for a Dynomite error reply (None for anything else)."""
    found = _DYNOMITE_REPLY.search(str(exc)) if isinstance(exc, ResponseError) else None
    if found is None:
        return None
    return DynomiteQuorumError if found.group(1).startswith("Dynomite") else DynomiteStorageError


def refused(exc: BaseException) -> bool:
    """True if ``exc`` (or what it was raised from) is a refused connection, a host name
    that does not resolve, or no sentinel naming a primary."""
    seen: BaseException | None = exc
    for _ in range(8):  # the chain is short; a cycle must not loop
        if seen is None:
            break
        if isinstance(seen, (ConnectionRefusedError, socket.gaierror, *_NO_PRIMARY)):
            return True
        if _REFUSED_TEXT.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def connection_failed(exc: BaseException, operation: str = "connect",
                      key: str = "") -> ConnectionFailedError | None:
    """The ConnectionFailedError of a refused or unresolvable connection (None for any other
    error), naming the endpoint the connections' retry put on it (else redis-py's address)."""
    if not refused(exc):
        return None
    endpoint = None
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None or endpoint is not None:
            break
        endpoint = getattr(seen, ENDPOINT_ATTRIBUTE, None)
        seen = seen.__cause__ or seen.__context__
    if endpoint is None:
        found = _ADDRESS.search(str(exc))
        endpoint = f"redis://{found.group(1)}" if found else "the configured address"
    # A MasterNotFoundError's text goes on with the repr of every sentinel client.
    detail = str(exc).split(" : <", 1)[0] if isinstance(exc, _NO_PRIMARY) else str(exc)
    return ConnectionFailedError(str(endpoint), detail, operation=operation, key=key)


def guarded(operation: str, key: str, op: Op[Any]) -> Op[Any]:
    """Run ``op``, turning redis-py errors into typed dynoqueue errors.

    Raises:
        AccessDeniedError: wrong password, unknown user, missing ACL permission.
        CallTimeoutError: no reply within the call's deadline (``call_timeout_ms``).
        ConnectionFailedError: the connection was refused or the host does not resolve.
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
        raise (connection_failed(exc, operation, key)
               or RedisOperationError(operation, key, str(exc))) from exc


def timed_out(operation: str, key: str, exc: BaseException) -> CallTimeoutError:
    """The CallTimeoutError of a call whose deadline passed (or whose socket timed out)."""
    why = str(exc) or "the server did not answer"
    return CallTimeoutError(operation, key, f"{why} within the call's deadline "
                                            "(call_timeout_ms); a write's outcome is unknown")
