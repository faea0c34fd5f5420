"""The redis-py pieces the builders assemble, for the sync API and the asyncio API.

A :class:`Flavor` names the client classes of one API (``redis`` or ``redis.asyncio``), so the
builders decide *which* clients a deployment needs once, for both. :class:`RetryBudget` bounds
how long a lost connection is retried; authentication failures are never retried, and every
retry of a transient failure is logged with the endpoint (credentials redacted).

Retries respect the deadline of the call in progress (:mod:`dynoqueue.core.deadline`): redis-py
retries at three nested levels (the command, ``connect()``, the health-check ping inside it),
and all of them read the same deadline, so they stop together instead of multiplying. A
retry starts only if one more attempt, taking as long as the last one did, ends before it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.retry
import redis.sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.deadline import CURRENT, RETRY_TIMEOUTS, Deadline
from ..core.failures import ENDPOINT_ATTRIBUTE, refused
from ..errors import ConfigurationError
from .primary import PrimaryWatcher

log = logging.getLogger("dynoqueue.connect")

#: Errors that no retry can cure: fail at once.
_FINAL = (AuthenticationError, AuthenticationWrongNumberOfArgsError)


@dataclass(frozen=True)
class RetryBudget:
    """How long a call keeps retrying a lost connection (a failover, a restart) before it fails.

    Attempts back off exponentially from ``base_s`` up to ``cap_s`` seconds; after ``retries``
    retries the error surfaces as a :class:`~dynoqueue.errors.RedisOperationError`. The
    defaults ride out a Sentinel failover with ``down-after-milliseconds`` up to ~5 s. Whatever
    is left, retrying stops when the call's deadline (``call_timeout_ms``) would pass first: a
    frozen server fails a call with :class:`~dynoqueue.errors.CallTimeoutError` in time. A
    read timeout of a claim is not retried (the claim may have run). A wrong password or
    unknown user is not retried: it raises :class:`~dynoqueue.errors.AccessDeniedError` at
    once. A client that has never reached its server (a wrong port or host, a server that is
    down) retries a refused connection or an unresolvable host only for ``refused_s``, then
    raises :class:`~dynoqueue.errors.ConnectionFailedError`; once it has been answered, a
    refusal (a restart, a failover) is retried within the whole budget.

    Args:
        retries: retries after the first attempt, >= 0.
        base_s: first back-off, seconds, > 0.
        cap_s: longest single back-off, seconds, >= base_s.
        refused_s: how long a call of a client that was never answered retries a refused
            or unresolvable connection, seconds, >= 0.
    """

    retries: int = 12
    base_s: float = 0.05
    cap_s: float = 1.0
    refused_s: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigurationError(f"retries must be an int >= 0, got {self.retries!r}")
        if not self.base_s > 0 or not self.cap_s >= self.base_s:
            raise ConfigurationError("back-off must satisfy 0 < base_s <= cap_s")
        if not isinstance(self.refused_s, (int, float)) or not self.refused_s >= 0:
            raise ConfigurationError(f"refused_s must be a number >= 0, got {self.refused_s!r}")

    @property
    def worst_case_s(self) -> float:
        """Upper bound of the time spent backing off, seconds (socket timeouts not included)."""
        return float(sum(min(self.cap_s, self.base_s * 2**i) for i in range(self.retries)))


class _Retrying:
    """What both APIs' Retry classes decide: whether a failure is retried, and the log line.

    One per client: redis-py deep-copies a client's Retry into each connection, and the copies
    share this (whether the server ever answered is the client's, not one connection's).
    """

    def __init__(self, budget: RetryBudget, endpoint: str, call_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.retries = budget.retries
        self.refused_s = budget.refused_s
        self.call_timeout_s = call_timeout_s
        #: Some attempt succeeded: a refusal now is a restart or a failover, not a wrong address.
        self.reached = False

    def __deepcopy__(self, memo: dict[int, Any]) -> _Retrying:
        return self

    def own_deadline(self) -> Any:
        """Outside any call (a doorbell, a sentinel lookup): a deadline of our own, which the
        nested retries then share. Returns the token to reset, or None."""
        return CURRENT.set(Deadline(self.call_timeout_s)) if CURRENT.get() is None else None

    def again(self, error: Exception, failures: int, backoff_s: float, took_s: float) -> bool:
        """Retry after failure number ``failures`` (the last attempt took ``took_s``)?"""
        if isinstance(error, _FINAL):  # no retry cures these
            return False
        if isinstance(error, RedisTimeoutError) and not RETRY_TIMEOUTS.get():
            return False  # the command may have run: not blindly again
        deadline = CURRENT.get()
        if refused(error):
            setattr(error, ENDPOINT_ATTRIBUTE, self.endpoint)  # ConnectionFailedError names it
            if not self.reached and self._refused_too_long(deadline, backoff_s):
                return False
        if 0 <= self.retries < failures or (
                deadline is not None and deadline.left() < backoff_s + took_s):
            return False
        attempt = f" (failure {failures} of at most {self.retries + 1})"
        # One warning per call (a server that is starting, a failover); its further retries,
        # at every nested level, at debug: a wrong port must not flood stderr.
        first = deadline is None or not deadline.warned
        if deadline is not None:
            deadline.warned = True
        log.log(logging.WARNING if first else logging.DEBUG, "Redis at %s: %s%s; retrying",
                self.endpoint, error, attempt)
        return True

    def _refused_too_long(self, deadline: Deadline | None, backoff_s: float) -> bool:
        """True if another retry of a refused connection would end after ``refused_s`` from
        this call's first refusal (every nested retry level shares the call's deadline)."""
        now = time.monotonic()
        if deadline is None:
            return True
        if deadline.refused_since is None:
            deadline.refused_since = now
        return now - deadline.refused_since + backoff_s > self.refused_s


def _fail(fail: Callable[..., Any], error: Exception, failures: int, with_count: bool) -> Any:
    return fail(error, failures) if with_count else fail(error)


class _SyncRetry(redis.retry.Retry):
    def __init__(self, budget: RetryBudget, endpoint: str, call_timeout_s: float) -> None:
        super().__init__(ExponentialBackoff(cap=budget.cap_s, base=budget.base_s), budget.retries)
        self._rules = _Retrying(budget, endpoint, call_timeout_s)

    def call_with_retry(self, do: Callable[[], Any], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> Any:
        token = self._rules.own_deadline()
        try:
            self._backoff.reset()  # type: ignore[no-untyped-call]
            failures = 0
            while True:
                started = time.monotonic()
                try:
                    reply = do()
                    self._rules.reached = True
                    return reply
                except self._supported_errors as error:
                    if isinstance(error, _FINAL) or (is_retryable and not is_retryable(error)):
                        raise
                    failures += 1
                    _fail(fail, error, failures, with_failure_count)
                    backoff = self._backoff.compute(failures)
                    if not self._rules.again(error, failures, backoff,
                                             time.monotonic() - started):
                        raise
                    if backoff > 0:
                        time.sleep(backoff)
        finally:
            if token is not None:
                CURRENT.reset(token)


class _AsyncRetry(redis.asyncio.retry.Retry):
    def __init__(self, budget: RetryBudget, endpoint: str, call_timeout_s: float) -> None:
        super().__init__(ExponentialBackoff(cap=budget.cap_s, base=budget.base_s), budget.retries)
        self._rules = _Retrying(budget, endpoint, call_timeout_s)

    async def call_with_retry(self, do: Callable[[], Awaitable[Any]], fail: Callable[..., Any],
                              is_retryable: Callable[[Exception], bool] | None = None,
                              with_failure_count: bool = False) -> Any:
        token = self._rules.own_deadline()
        try:
            self._backoff.reset()  # type: ignore[no-untyped-call]
            failures = 0
            while True:
                started = time.monotonic()
                try:
                    reply = await do()
                    self._rules.reached = True
                    return reply
                except self._supported_errors as error:
                    if isinstance(error, _FINAL) or (is_retryable and not is_retryable(error)):
                        raise
                    failures += 1
                    await _fail(fail, error, failures, with_failure_count)
                    backoff = self._backoff.compute(failures)
                    if not self._rules.again(error, failures, backoff,
                                             time.monotonic() - started):
                        raise
                    if backoff > 0:
                        await asyncio.sleep(backoff)
        finally:
            if token is not None:
                CURRENT.reset(token)


def _resolve_first(conn: Any) -> bool:
    """True when a Sentinel-managed connection must look the primary up before connecting:
    it has no socket and is not already inside that lookup (which connects through here)."""
    return not conn.is_connected and not conn._resolving


class _FollowingSentinelConnection(redis.sentinel.SentinelManagedConnection):
    """A Sentinel-managed connection that asks the sentinels again on *every* reconnect.

    redis-py 8.1 reconnects a dropped connection from ``send_packed_command`` through
    ``connect_check_health``, which skips the sentinel lookup that ``connect`` does; after a
    failover such a connection retries the dead primary's address until the retry budget
    runs out. Routing that path through ``connect`` makes every reconnect follow the primary.
    With a ``primary_watcher`` (the quorum connection), it reconnects to the address the
    watcher follows and refuses replies from any other node (:mod:`dynoqueue.connect.primary`).
    """

    _resolving = False

    def __init__(self, *, primary_watcher: PrimaryWatcher | None = None, **kwargs: Any) -> None:
        # The quorum connection gets the watcher (from_sentinel); replica connections do not.
        self.primary_watcher = primary_watcher
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """A reply, only if it came from the node Sentinel names as primary now (any reply,
        an error one too; see :mod:`dynoqueue.connect.primary`): else the connection drops and
        :class:`~dynoqueue.connect.primary.StalePrimaryError` lets the retry go there."""
        try:
            reply = super().read_response(*args, **kwargs)
        except ResponseError:
            self._check_source()
            raise
        self._check_source()
        return reply

    def _check_source(self) -> None:
        watcher = self.primary_watcher
        if watcher is not None and watcher.stale(self.host, self.port):
            self.disconnect()  # type: ignore[no-untyped-call]
            raise watcher.error(self.host, self.port)

    def _connect_retry(self) -> None:
        # Reconnect to the primary the watcher follows (known before redis-py's lookup knows).
        watcher = self.primary_watcher
        if watcher is None or watcher.address is None or self._sock:
            super()._connect_retry()  # type: ignore[no-untyped-call]
            return
        try:
            self.connect_to(watcher.address)  # type: ignore[no-untyped-call]
        except RedisConnectionError:
            watcher.suspect()
            raise

    def connect_check_health(self, check_health: bool = True,
                             retry_socket_connect: bool = True) -> None:
        if not _resolve_first(self):
            super().connect_check_health(check_health, retry_socket_connect)
            return
        self._resolving = True
        try:
            self.connect()  # type: ignore[no-untyped-call]  # retry + sentinel lookup
        finally:
            self._resolving = False


class _FollowingSentinelSSLConnection(_FollowingSentinelConnection,
                                      redis.sentinel.SentinelManagedSSLConnection):
    """The same over TLS."""


class _AsyncFollowingSentinelConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """:class:`_FollowingSentinelConnection` for redis.asyncio, which has the same gap."""

    _resolving = False

    def __init__(self, *, primary_watcher: PrimaryWatcher | None = None, **kwargs: Any) -> None:
        self.primary_watcher = primary_watcher
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """As :meth:`_FollowingSentinelConnection.read_response`."""
        try:
            reply = await super().read_response(*args, **kwargs)
        except ResponseError:
            await self._check_source()
            raise
        await self._check_source()
        return reply

    async def _check_source(self) -> None:
        watcher = self.primary_watcher
        if watcher is not None and watcher.stale(self.host, self.port):
            await self.disconnect()
            raise watcher.error(self.host, self.port)

    async def _connect_retry(self) -> None:
        watcher = self.primary_watcher
        if watcher is None or watcher.address is None or self._reader:
            await super()._connect_retry()  # type: ignore[no-untyped-call]
            return
        try:
            await self.connect_to(watcher.address)  # type: ignore[no-untyped-call]
        except RedisConnectionError:
            watcher.suspect()
            raise

    async def connect_check_health(self, check_health: bool = True,
                                   retry_socket_connect: bool = True) -> None:
        if not _resolve_first(self):
            await super().connect_check_health(check_health, retry_socket_connect)
            return
        self._resolving = True
        try:
            await self.connect()  # type: ignore[no-untyped-call]
        finally:
            self._resolving = False


class _AsyncFollowingSentinelSSLConnection(_AsyncFollowingSentinelConnection,
                                           redis.asyncio.sentinel.SentinelManagedSSLConnection):
    """The same over TLS."""


@dataclass(frozen=True)
class Flavor:
    """The client classes of one API."""

    redis: Any
    sentinel: Any
    cluster: Any
    cluster_node: Any
    retry: Callable[[RetryBudget, str, float], Any]
    following: type
    following_tls: type

    def make_retry(self, budget: RetryBudget, endpoint: str, call_timeout_s: float) -> Any:
        """A redis-py Retry of this API with ``budget``, logging with ``endpoint``, that
        stops at the call's deadline (``call_timeout_s`` outside a call)."""
        return self.retry(budget, endpoint, call_timeout_s)


SYNC = Flavor(redis.Redis, redis.sentinel.Sentinel, redis.cluster.RedisCluster,
              redis.cluster.ClusterNode, _SyncRetry, _FollowingSentinelConnection,
              _FollowingSentinelSSLConnection)
ASYNC = Flavor(redis.asyncio.Redis, redis.asyncio.sentinel.Sentinel,
               redis.asyncio.cluster.RedisCluster, redis.asyncio.cluster.ClusterNode,
               _AsyncRetry, _AsyncFollowingSentinelConnection,
               _AsyncFollowingSentinelSSLConnection)
