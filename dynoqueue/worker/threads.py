"""The sync Worker: the engine's programs on threads (a claimer, a finisher, one per handler;
with one handler, the claimer's thread runs it)."""

from __future__ import annotations

import signal
import threading
import time
from types import TracebackType
from typing import Any

from ..core.requests import Step
from ..model.message import Message
from .base import STOP_SIGNALS, WorkerBase
from .program import ROLES, Handle, Program, Wait

#: How often run() looks at the stop signals received, seconds.
SIGNAL_POLL_S = 0.1


class Worker(WorkerBase):
    """Consume a queue: pop, call ``handler(message)`` on threads, ack, and get the hard parts
    right (lease heartbeats, retries with backoff, dead letters, graceful shutdown).

    - ``handler(message)`` returning normally acks the message. Raising :class:`~dynoqueue.Retry`
      nacks it with that delay; :class:`~dynoqueue.DeadLetterNow` dead-letters it at once; any
      other exception nacks it with the ``backoff`` delay for its delivery count and records the
      error as its ``last_error``. At the queue policy's ``max_deliveries`` (or the message's
      own) that nack dead-letters the message instead. One log line per failure (logger
      ``dynoqueue.worker``) names the id, the delivery count and the error.
    - Heartbeats: every ``heartbeat_ms`` one round trip (``set_unack_timeout_many``) extends the
      lease of every message in hand, so a long handler is never delivered twice while its worker
      lives. The worker also puts back expired leases of its local shard (``process_unacks``) as
      often, so the messages of a worker that died come back within about a lease. Every ack,
      nack, dead letter and extension carries the message's lease receipt: a worker that lost a
      lease never touches the lease of whoever holds the message now.
    - Claims: it pops only what its free handlers can start, in one pop, and returns from a
      waiting pop as soon as one message is due (``pop(..., min_count=1)``: a few ms after it
      falls due). While the queue stays busy and handlers are fast, it also holds what they
      will start within 100 ms (at most 500 more, heartbeats keep their leases).
    - Acks go in batches (``ack_many``): while handlers still have claimed messages to start,
      up to 100 outcomes or 20 ms; at once when all claimed messages have started.
    - Shutdown, on :meth:`stop` or SIGTERM/SIGINT (handled only when :meth:`run` runs in the
      main thread): no new pops; messages leased but not started are given back at once
      (``release``: due at once, the delivery not counted); running handlers get
      ``shutdown_grace_ms`` to finish and are acked or nacked as usual; after that, what still
      runs is left leased and comes back after its lease. A second signal (or
      ``stop(immediate=True)``) stops at once. Nothing is lost on any of these paths.

    The sync Worker does not close the queue: a pop in progress when it stops may wait up to
    1 s more, and what it returns is given back. Use one Worker per queue and process (or
    per thread pool you want); a Worker runs once.

    Args:
        queue: a queue of :class:`dynoqueue.RedisQueues` (``queues.get(name)``).
        handler: ``handler(message) -> Any``, called on a worker thread; not a coroutine
            function (use :class:`dynoqueue.asyncio.Worker` for those).
        concurrency: handlers at once (threads), 1..1000.
        lease_ms: each lease, ms, >= 1; None: the factory's ``unack_timeout_ms``.
        heartbeat_ms: ms between lease extensions, 1 .. lease - 1; None: a third of the lease.
        backoff: the delays of failed messages (:class:`~dynoqueue.Backoff`).
        batch_size: most messages one pop claims, 1..1000; when larger than ``concurrency``, the
            worker holds up to that many (the extra ones wait for a free handler, their leases
            kept alive). None: chosen by the worker as described above.
        shutdown_grace_ms: how long a stop waits for running handlers, ms, >= 0.
        hooks: a :class:`~dynoqueue.worker.WorkerHooks` for metrics, or None.

    Raises:
        InvalidArgumentError: (a ValueError) an asyncio queue or a coroutine handler, or a
            number out of range.

    Example::

        def send(message: Message) -> None:
            if not gateway.send(message.payload):
                raise Retry(60_000, "gateway busy")

        with RedisQueues.from_url(url) as queues:
            Worker(queues.get("reminders"), send, concurrency=8).run()  # until SIGTERM
    """

    def _init_driver(self) -> None:
        self._bells = {role: threading.Condition() for role in ROLES}
        if self.settings.concurrency == 1:  # one thread waits as the slot and the claimer
            pair = threading.Condition()
            self._bells.update(slots=pair, claimer=pair, stop=pair)
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Consume until :meth:`stop` or SIGTERM/SIGINT, then shut down as described above and
        return. Handles those signals only in the main thread (restoring the previous handlers
        on return).

        Raises:
            InvalidArgumentError: this Worker has run already.
        """
        self._begin()
        self._run()

    def run_in_thread(self, name: str | None = None) -> threading.Thread:
        """Start :meth:`run` on a daemon thread (no signal handling there) and return it; stop
        it with :meth:`stop`, then join the thread.

        Raises:
            InvalidArgumentError: this Worker has run already.
        """
        self._begin()
        self._thread = threading.Thread(
            target=self._run, name=name or f"dynoqueue-worker-{self.settings.queue_name}",
            daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, immediate: bool = False) -> None:
        """Ask the worker to stop (thread-safe; returns at once). ``immediate``: do not wait for
        running handlers (their messages stay leased and come back after their lease)."""
        self._engine.stop(immediate)

    def __enter__(self) -> Worker:
        self.run_in_thread()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join()

    # ------------------------------------------------------------------------- the threads

    def _run(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS} if main \
            else {}
        try:
            engine = self._engine
            if self.settings.concurrency == 1:
                # One handler: the claimer's thread runs it (no hand-over between threads per
                # message; while it runs there is nothing to claim but a prefetch).
                claimer = threading.Thread(
                    target=self._drive_pair, args=(engine.slot(), engine.claimer()),
                    daemon=True, name=f"dynoqueue-worker-{self.settings.queue_name}-claimer")
                claimer.start()
            else:
                for i in range(self.settings.concurrency):
                    self._spawn(engine.slot(), f"slot-{i}")
                claimer = self._spawn(engine.claimer(), "claimer")
            finisher = self._spawn(engine.finisher(), "finisher")
            seen = 0
            while finisher.is_alive():
                finisher.join(SIGNAL_POLL_S)
                seen = self._act_on_signals(seen)
            claimer.join(self.idle_wait_ms / 1000 + 1.0)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self._error is not None:
            raise self._error

    def _spawn(self, program: Program, role: str) -> threading.Thread:
        thread = threading.Thread(target=self._drive, args=(program,), daemon=True,
                                  name=f"dynoqueue-worker-{self.settings.queue_name}-{role}")
        thread.start()
        return thread

    def _drive(self, program: Program) -> None:
        try:
            step = Step(program)
            while step.pending:
                step.send(*self._answer(step.request))
        except BaseException as exc:  # a bug: run() raises it after stopping
            self._failed(exc)

    def _drive_pair(self, slot: Program, claimer: Program) -> None:
        """Run the only slot and the claimer on this thread: the slot whenever it can (what
        is in hand runs before the next pop), the claimer when the slot waits for messages."""
        try:
            engine = self._engine
            steps = [Step(slot), Step(claimer)]
            until: dict[int, tuple[Wait, float]] = {}  # step -> its Wait and that wait's end
            while steps[0].pending or steps[1].pending:
                waits: list[tuple[Wait, float]] = []
                for i, step in enumerate(steps):
                    if not step.pending:
                        continue
                    request = step.request
                    if type(request) is not Wait:
                        step.send(*self._answer(request))
                        break
                    if until.get(i, (None,))[0] is not request:
                        until[i] = (request, time.monotonic() + request.timeout_s)
                    end = until[i][1]
                    if engine.epoch(request.role) != request.epoch or time.monotonic() >= end:
                        step.send(None)
                        break
                    waits.append((request, end))
                else:  # both wait: until either is woken or the first wait ends
                    bell = self._bells["claimer"]  # the pair's roles share it (_init_driver)
                    with bell:
                        bell.wait_for(lambda waits=waits: any(  # type: ignore[misc]
                            engine.epoch(w.role) != w.epoch for w, _ in waits),
                                      min(end for _, end in waits) - time.monotonic())
        except BaseException as exc:  # a bug: run() raises it after stopping
            self._failed(exc)

    def _answer(self, request: Any) -> tuple[Any, Exception | None]:
        if type(request) is Handle:
            return self._handle(request.message), None
        try:
            if type(request) is Wait:
                self._wait(request)
                return None, None
            return request.make(self.queue), None
        except Exception as exc:  # the program decides what it means
            return None, exc

    def _handle(self, message: Message) -> BaseException | None:
        try:
            self._handler(message)
        except BaseException as exc:  # a handler failure of any kind nacks its message
            return exc
        return None

    def _wait(self, request: Wait) -> None:
        engine, role = self._engine, request.role
        with self._bells[role]:
            self._bells[role].wait_for(lambda: engine.epoch(role) != request.epoch,
                                       request.timeout_s)

    def _ring(self, role: str) -> None:
        # Every waiter: a bell may be shared by several roles (see _init_driver), so waking
        # one could wake the wrong one and leave a claimed message unstarted until the next
        # pop returns. Threads that find nothing to do go back to waiting.
        with self._bells[role]:
            self._bells[role].notify_all()
