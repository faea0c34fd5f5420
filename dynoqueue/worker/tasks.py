"""The asyncio Worker: the engine's programs as tasks of one event loop."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import threading
from types import TracebackType
from typing import Any

from ..core.calls import Call
from ..core.requests import Step
from ..model.message import Message
from .base import STOP_SIGNALS, WorkerBase
from .engine import Phase
from .program import ROLES, Handle, Pop, Program, Wait

#: A slot task lets the loop run after this many handlers in a row (see Worker._drive), and
#: this many times in a row after the claimer or the finisher was woken.
YIELD_EVERY = 32
NUDGE_TURNS = 3


class Worker(WorkerBase):
    """The asyncio twin of :class:`dynoqueue.Worker`: the same arguments, defaults, outcomes
    (Retry, DeadLetterNow, backoff, max deliveries), heartbeats, hooks and shutdown, with an
    ``async def handler(message)`` run as up to ``concurrency`` tasks on the running loop.

    ``await worker.run()`` consumes until :meth:`stop` or SIGTERM/SIGINT (handled when the loop
    runs in the main thread), then drains and returns. A pop waiting when the worker stops is
    cancelled, which puts back what it had leased at once (without counting a delivery). At the
    shutdown deadline, handler tasks still running are cancelled and their messages stay leased
    (they come back after their lease). Cancelling ``run()`` itself stops at once the same way.
    ``async with Worker(...)`` runs it as a task and stops it (gracefully) on exit.

    Args:
        queue: a queue of :class:`dynoqueue.asyncio.RedisQueues`.
        handler: ``async def handler(message) -> Any``.
        concurrency, lease_ms, heartbeat_ms, backoff, batch_size, shutdown_grace_ms, hooks:
            as for :class:`dynoqueue.Worker`.

    Raises:
        InvalidArgumentError: (a ValueError) a sync queue or a plain handler, or a number out
            of range.
    """

    asynchronous = True
    idle_wait_ms = 5_000

    def _init_driver(self) -> None:
        self._events = {role: asyncio.Event() for role in ROLES}
        self._idle: collections.deque[asyncio.Future[None]] = collections.deque()  # slots
        self._stopping = asyncio.Event()
        self._popping: asyncio.Future[list[Message]] | None = None  # the pop in progress
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._seen = 0
        self._nudge = 0  # loop turns slots still owe a woken program (see _ring)
        self._answers: dict[type, Any] = {Wait: self._wait,
                                          Pop: self._pop, Call: self._call}

    async def run(self) -> None:
        """Consume until :meth:`stop` or SIGTERM/SIGINT, then shut down and return.

        Raises:
            InvalidArgumentError: this Worker has run already.
        """
        self._begin()
        await self._run()

    def stop(self, immediate: bool = False) -> None:
        """Ask the worker to stop; returns at once. Safe from the loop and from other threads.
        ``immediate``: do not wait for running handlers."""
        loop = self._loop
        if loop is not None and _running_loop() is not loop:
            with contextlib.suppress(RuntimeError):  # the loop closed: run() has returned
                loop.call_soon_threadsafe(self._engine.stop, immediate)
        else:
            self._engine.stop(immediate)

    async def __aenter__(self) -> Worker:
        self._begin()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop()
        if self._task is not None:
            await self._task

    # ------------------------------------------------------------------------- the tasks

    async def _run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        installed = self._install_signals(loop)
        programs = [self._engine.slot() for _ in range(self.settings.concurrency)]
        tasks = [loop.create_task(self._drive(p)) for p in [*programs, self._engine.claimer()]]
        try:
            await self._drive(self._engine.finisher())
        finally:
            for task in tasks:  # waiting, or handlers left running at the deadline
                task.cancel()
            await asyncio.wait(tasks, timeout=1.0)
            for sig, previous in installed:
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)
            self._loop = None
        if self._error is not None:
            raise self._error

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[tuple[int, Any]]:
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: list[tuple[int, Any]] = []
        for sig in STOP_SIGNALS:
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self._signalled)
            except (NotImplementedError, RuntimeError, ValueError):  # no signals on this loop
                continue
            installed.append((sig, previous if previous is not None else signal.SIG_DFL))
        return installed

    def _signalled(self) -> None:
        self._on_signal(0)
        self._seen = self._act_on_signals(self._seen)

    async def _drive(self, program: Program) -> None:
        step = Step(program)
        handler, streak = self._handler, 0
        try:
            while step.pending:
                request = step.request
                if type(request) is Handle:
                    try:  # no coroutine of the worker's own per message
                        await handler(request.message)
                    except asyncio.CancelledError as exc:
                        if _cancelling():  # this worker cancels it: the shutdown deadline
                            raise
                        step.send(exc)  # raised by the handler itself: a failure
                    except Exception as exc:
                        step.send(exc)
                    else:
                        step.send(None)
                    # Handlers that never wait would keep this task running message after
                    # message: let the loop run (the claim, the acks, the other tasks) every
                    # few handlers, so a pop goes out while the rest of the batch still runs.
                    streak += 1
                    if self._nudge or streak >= YIELD_EVERY:
                        self._nudge = max(0, self._nudge - 1)
                        streak = 0
                        await asyncio.sleep(0)
                    continue
                streak = 0
                reply, error = await self._answer(request)
                step.send(reply, error)
        except Exception as exc:  # a bug: run() raises it after stopping
            self._failed(exc)

    async def _answer(self, request: Any) -> tuple[Any, Exception | None]:
        try:
            return await self._answers[type(request)](request), None
        except Exception as exc:  # the program decides what it means
            return None, exc

    async def _call(self, request: Call) -> Any:
        return await request.make(self.queue)

    async def _wait(self, request: Wait) -> None:
        if self._engine.epoch(request.role) != request.epoch:
            return
        if request.role == "slots":  # woken one at a time (see _ring)
            # No timer per wait (a slot waits once per batch of messages): a ring always
            # reaches a waiting slot here, and the finisher rings the slots at least every
            # RECHECK_S while messages wait for them (WorkerEngine._finisher_work).
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
            return
        event = self._events[request.role]
        event.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(request.timeout_s):
                await event.wait()

    async def _pop(self, request: Pop) -> list[Message]:
        pop: asyncio.Future[list[Message]] = asyncio.ensure_future(request.make(self.queue))
        if self._stopping.is_set():
            pop.cancel()
        self._popping = pop  # a stop cancels it (see _ring), which puts back its leases
        try:
            return await pop
        except asyncio.CancelledError:
            if _cancelling():  # run() itself is cancelled (awaiting pop cancelled it too)
                raise
            return []  # the worker stops
        finally:
            self._popping = None

    def _ring(self, role: str) -> None:
        if role == "slots":
            # While running, one idle slot takes the message and wakes the next if more
            # wait: not all of them for every message. Stopping wakes them all.
            one = self._engine.phase is Phase.RUNNING
            while self._idle:
                waiter = self._idle.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    if one:
                        return
            return
        event = self._events[role]
        if not event.is_set():
            event.set()
            # The woken program needs a few loop turns to put its pop or acks on the wire
            # (its task, the queue's task, the write): slots running handlers that never wait
            # yield that many times (see _drive).
            self._nudge = NUDGE_TURNS
        if role == "stop":
            self._stopping.set()
            if self._popping is not None:
                self._popping.cancel()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _cancelling() -> bool:
    """Whether the current task is being cancelled (not a CancelledError raised inside it)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0

