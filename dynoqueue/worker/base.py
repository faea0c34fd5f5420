"""What both Workers share above their drivers: the arguments, the engine, one run per worker,
and what a SIGTERM or SIGINT does (the first stops gracefully, the second at once)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgumentError
from .engine import Phase, WorkerEngine
from .hooks import WorkerHooks
from .outcomes import Backoff
from .settings import DEFAULT_BACKOFF, WorkerSettings

log = logging.getLogger("dynoqueue.worker")

#: The signals a Worker's run() handles when it runs in the main thread.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: Wrappers of a Worker's handler, applied in order when its run starts:
#: ``wrap(worker, handler) -> handler`` of the same kind (sync or async).
#: :func:`dynoqueue.tracing.instrument` adds the one that makes each call a ``process`` span;
#: with none (the default) the handler is called as given, at no cost.
HANDLER_WRAPPERS: list[Callable[[Any, Callable[..., Any]], Callable[..., Any]]] = []


class WorkerBase:
    """A Worker's arguments and engine (see :class:`dynoqueue.Worker` for the arguments)."""

    #: True for the asyncio Worker (async handler, asyncio queue).
    asynchronous = False
    #: Longest wait of one pop when nothing is due, ms (see WorkerEngine).
    idle_wait_ms = 1000

    def __init__(self, queue: Any, handler: Callable[..., Any], *, concurrency: int = 8,
                 lease_ms: int | None = None, heartbeat_ms: int | None = None,
                 backoff: Backoff = DEFAULT_BACKOFF, batch_size: int | None = None,
                 shutdown_grace_ms: int = 30_000, hooks: WorkerHooks | None = None) -> None:
        self.settings = WorkerSettings.build(
            queue, handler, asynchronous=self.asynchronous, concurrency=concurrency,
            lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, backoff=backoff,
            batch_size=batch_size, shutdown_grace_ms=shutdown_grace_ms, hooks=hooks)
        self.queue = queue
        self.handler = handler
        #: What the drivers call per message: the handler, wrapped (see HANDLER_WRAPPERS).
        self._handler = handler
        self._init_driver()
        self._engine = WorkerEngine(self.settings, idle_wait_ms=self.idle_wait_ms,
                                    ring=self._ring)
        self._started = False
        self._start_lock = threading.Lock()
        self._signals = 0
        self._error: BaseException | None = None

    def _init_driver(self) -> None:
        """Make what the driver needs before the engine can wake it."""
        raise NotImplementedError

    def _ring(self, role: str) -> None:
        """Wake the programs waiting as ``role``."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """True from run() until its shutdown is done."""
        return self._started and self._engine.phase is not Phase.STOPPED

    @property
    def stopping(self) -> bool:
        """True once stop() (or a signal) was received."""
        return self._engine.phase is not Phase.RUNNING

    def _begin(self) -> None:
        with self._start_lock:
            if self._started:
                raise InvalidArgumentError("this Worker has run already; make a new one")
            self._started = True
            for wrap in HANDLER_WRAPPERS:
                self._handler = wrap(self, self._handler)

    def _on_signal(self, signum: int, frame: object = None) -> None:
        """A stop signal, counted only: the sync Worker's main thread acts on it (taking a lock
        inside a signal handler could deadlock with the code it interrupted)."""
        self._signals += 1

    def _act_on_signals(self, seen: int) -> int:
        """Stop for the signals received since ``seen`` (the second at once); return the count."""
        count = self._signals
        if count != seen:
            immediate = count > 1
            log.warning("queue %s: stop signal received; %s", self.settings.queue_name,
                        "stopping at once" if immediate else
                        f"finishing running handlers (up to "
                        f"{self.settings.shutdown_grace_ms / 1000:g} s; a second signal stops "
                        f"at once)")
            self._engine.stop(immediate)
        return count

    def _failed(self, error: BaseException) -> None:
        """A program of the worker raised (a bug): keep the first error for run(), stop now."""
        log.error("queue %s: worker program failed: %r", self.settings.queue_name, error)
        if self._error is None:
            self._error = error
        self._engine.stop(immediate=True)

    def __repr__(self) -> str:
        s = self.settings
        return (f"{type(self).__module__}.{type(self).__name__}(queue={s.queue_name!r}, "
                f"concurrency={s.concurrency}, lease_ms={s.lease_ms}, "
                f"phase={self._engine.phase.value})")
