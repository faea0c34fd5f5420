"""A Worker's settings, checked once for both Workers before anything runs."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError
from ..model.validate import int_at_least, ms
from .hooks import WorkerHooks
from .outcomes import Backoff

#: The most handlers one worker runs at once, and the most messages one pop of it claims.
MAX_CONCURRENCY = 1_000
MAX_BATCH = 1_000
DEFAULT_BACKOFF = Backoff()

_QUEUE_CALLS = ("pop", "ack_many", "nack", "nack_many", "release", "dead_letter", "state",
                "set_unack_timeout_many", "process_unacks")


@dataclass(frozen=True)
class WorkerSettings:
    """The checked arguments of a Worker (see :class:`dynoqueue.Worker` for their meaning).

    Attributes:
        queue_name: the queue's name, for log lines.
        concurrency: handlers at once.
        lease_ms: every lease's length, ms (the pop's, and each heartbeat's extension).
        pop_lease_ms: what pops pass as ``lease_ms`` (None: the queue's own default).
        heartbeat_ms: ms between lease extensions.
        backoff: delays of failed messages.
        batch_size: most messages a pop claims (None: chosen by the worker).
        shutdown_grace_ms: how long a stop waits for running handlers, ms.
        hooks: the metrics callbacks, or None.
    """

    queue_name: str
    concurrency: int
    lease_ms: int
    pop_lease_ms: int | None
    heartbeat_ms: int
    backoff: Backoff
    batch_size: int | None
    shutdown_grace_ms: int
    hooks: WorkerHooks | None

    @classmethod
    def build(cls, queue: Any, handler: Callable[..., Any], *, asynchronous: bool,
              concurrency: int, lease_ms: int | None, heartbeat_ms: int | None,
              backoff: Backoff, batch_size: int | None, shutdown_grace_ms: int,
              hooks: WorkerHooks | None) -> WorkerSettings:
        """Check every argument.

        Raises:
            InvalidArgumentError: a queue of the other API (or no queue), a handler of the
                other kind (a coroutine function for the sync Worker, a plain one for the
                asyncio Worker), or a number out of range.
        """
        _check_queue(queue, asynchronous)
        _check_handler(handler, asynchronous)
        int_at_least("concurrency", concurrency, 1)
        if concurrency > MAX_CONCURRENCY:
            raise InvalidArgumentError(f"concurrency must be at most {MAX_CONCURRENCY}, "
                                       f"got {concurrency}")
        if lease_ms is not None:
            ms("lease_ms", lease_ms, low=1)
        lease = lease_ms if lease_ms is not None else int(queue.unack_timeout_ms)
        if heartbeat_ms is None:
            heartbeat = max(1, lease // 3)
        else:
            heartbeat = ms("heartbeat_ms", heartbeat_ms, low=1)
            if heartbeat >= lease:
                raise InvalidArgumentError(
                    f"heartbeat_ms ({heartbeat}) must be shorter than the lease ({lease} ms), "
                    f"or leases run out between heartbeats")
        if not isinstance(backoff, Backoff):
            raise InvalidArgumentError(f"backoff must be a Backoff, got {backoff!r:.80}")
        if batch_size is not None:
            int_at_least("batch_size", batch_size, 1)
            if batch_size > MAX_BATCH:
                raise InvalidArgumentError(f"batch_size must be at most {MAX_BATCH}, "
                                           f"got {batch_size}")
        ms("shutdown_grace_ms", shutdown_grace_ms)
        if hooks is not None and not isinstance(hooks, WorkerHooks):
            raise InvalidArgumentError(
                f"hooks must be a dynoqueue.worker.WorkerHooks, got {type(hooks).__name__}")
        return cls(queue_name=str(queue.name), concurrency=concurrency, lease_ms=lease,
                   pop_lease_ms=lease_ms, heartbeat_ms=heartbeat, backoff=backoff,
                   batch_size=batch_size, shutdown_grace_ms=shutdown_grace_ms, hooks=hooks)


def _check_queue(queue: Any, asynchronous: bool) -> None:
    missing = [name for name in _QUEUE_CALLS if not callable(getattr(queue, name, None))]
    if missing or not hasattr(queue, "unack_timeout_ms"):
        raise InvalidArgumentError(f"queue must be a DynoQueue (from queues.get(name)), "
                                   f"got {type(queue).__name__}")
    if inspect.iscoroutinefunction(queue.pop) != asynchronous:
        raise InvalidArgumentError(
            "dynoqueue.asyncio.Worker takes a queue of dynoqueue.asyncio.RedisQueues"
            if asynchronous else
            "dynoqueue.Worker takes a sync queue; use dynoqueue.asyncio.Worker for this one")


def _check_handler(handler: Callable[..., Any], asynchronous: bool) -> None:
    if not callable(handler):
        raise InvalidArgumentError(f"handler must be callable, got {handler!r:.80}")
    is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None))  # noqa: B004 - an object whose __call__ is async
    if is_async and not asynchronous:
        raise InvalidArgumentError(
            f"handler {_name(handler)} is a coroutine function: run it with "
            f"dynoqueue.asyncio.Worker")
    if asynchronous and not is_async:
        raise InvalidArgumentError(
            f"dynoqueue.asyncio.Worker needs an async handler (async def); {_name(handler)} "
            f"is a plain function: run it with dynoqueue.Worker")


def _name(handler: Callable[..., Any]) -> str:
    return str(getattr(handler, "__qualname__", None) or type(handler).__name__)
