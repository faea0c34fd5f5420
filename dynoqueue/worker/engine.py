"""The Worker's logic, once and without I/O, in the sans-IO style of :mod:`dynoqueue.core`.

Three kinds of programs (generators) make a worker:

* the **claimer** pops messages when handlers can start them (:meth:`WorkerEngine.claimer`);
* each **slot** runs handlers one after another (:meth:`WorkerEngine.slot`);
* the **finisher** sends acks, nacks and dead letters, extends the leases of every message in
  hand (one round trip per heartbeat), puts back expired leases of the local shard, and ends
  the worker when its shutdown is done (:meth:`WorkerEngine.finisher`).

They yield requests (queue-level calls, :class:`Wait`, :class:`Handle`: see
:mod:`dynoqueue.worker.program`) that a driver answers: threads in
:mod:`dynoqueue.worker.threads`, asyncio tasks in :mod:`dynoqueue.worker.tasks`. What they
decide (how many to claim, backoff, retry or dead letter, when to beat, the shutdown phases) is
here, under one lock, so both Workers behave alike; what the finisher's calls send and what
their replies mean is in :mod:`dynoqueue.worker.sends`.

Shutdown phases: RUNNING -> (stop) DRAINING: no new claims, messages leased but not started are
given back uncounted (release), running handlers finish and are acked, heartbeats go on ->
(all done, the grace deadline, or a second stop) FINAL: handlers still running are left leased
(their messages come back after their lease); what is left to send is sent -> STOPPED.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable

from ..errors import QueueClosedError
from ..model.message import Message
from .outcomes import ACK, Decision, decide, describe
from .program import ROLES, Handle, Pop, Program, Wait
from .sends import Sender
from .settings import MAX_BATCH, WorkerSettings

log = logging.getLogger("dynoqueue.worker")

#: With the queue busy and handlers fast, prefetch what the handlers should start within this
#: long (seconds; at most a tenth of the lease), and at most this many messages. The window is
#: the rule (a prefetched message starts within ~100 ms at the handlers' recent pace; its lease
#: is extended by the heartbeats meanwhile and given back uncounted at a stop); the cap only
#: bounds a wrong estimate, e.g. handlers that turn slow. 500 lets a worker with fast handlers
#: claim ~250 messages per pop (it claims when half its room is free) instead of ~60: one
#: asyncio call costs ~150 us of client CPU (measured: ~320 us per pop(1) + ack_many pair), so
#: claims and acks of ~60 messages cost the asyncio Worker ~5 us per message.
PREFETCH_WINDOW_S = 0.1
MAX_PREFETCH = 500
#: While handlers still have messages in hand to start, their acks wait for this many results
#: and go out in one ack_many (sooner when the messages in hand have all started).
ACK_BATCH = 100
#: ... and the first of them waits at most this long, seconds.
ACK_DELAY_S = 0.02
#: A waiting slot or claimer re-checks at least this often, seconds (wake-ups cut it short).
RECHECK_S = 1.0
#: Pause after a failed pop, doubling up to the longest, seconds.
POP_RETRY_S = (0.1, 5.0)
#: After a failed heartbeat, the next one comes this soon, seconds.
HEARTBEAT_RETRY_S = 0.25


class Phase(enum.Enum):
    """Where a worker is in its life (see the module docstring)."""

    RUNNING = "running"
    DRAINING = "draining"
    FINAL = "final"
    STOPPED = "stopped"


_Lease = tuple[str, str | None]


def _lease(message: Message) -> _Lease:
    return message.id, message.receipt


class _Work:
    """What the finisher has to do now (taken under the lock, done outside it)."""

    __slots__ = ("acks", "done", "epoch", "failures", "heartbeat", "releases", "sweep",
                 "wait_s")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.acks: list[Message] = []
        self.failures: list[tuple[Message, Decision]] = []
        self.releases: list[Message] = []
        self.heartbeat: list[Message] = []
        self.sweep = False
        self.done = False
        self.wait_s: float | None = None

    def busy(self) -> bool:
        return bool(self.acks or self.failures or self.releases or self.heartbeat or self.sweep)


class WorkerEngine:
    """The state of one worker and its programs.

    Args:
        settings: the checked settings.
        idle_wait_ms: how long one pop may wait when nothing is due, ms (the thread driver keeps
            it short, since only the pop's return ends the wait; the asyncio one cancels it).
        ring: called with a role after the engine moved that role's epoch; wakes its waiters
            (for "slots" while running, one waiter is enough: a slot that takes a message
            rings again while messages remain and other slots wait).
        clock: monotonic seconds. rand: numbers in [0, 1) for the backoff's jitter.
    """

    def __init__(self, settings: WorkerSettings, *, idle_wait_ms: int,
                 ring: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self._idle_wait_ms = idle_wait_ms
        self._ring = ring
        self._clock = clock
        self._rand = rand
        self._lock = threading.Lock()  # the sync driver's threads share the engine
        self.phase = Phase.RUNNING
        self._epochs = dict.fromkeys(ROLES, 0)
        self._backlog: deque[Message] = deque()  # leased, not started
        # By lease (id, receipt): a message delivered again while an older delivery of it
        # still runs here (its lease was lost) is another entry.
        self._running: dict[_Lease, Message] = {}  # handlers running
        self._in_hand: dict[_Lease, Message] = {}  # every lease this worker keeps alive
        self._results: list[tuple[Message, Decision]] = []  # finished, not sent yet
        self._releases: list[Message] = []  # to give back unstarted (release: uncounted)
        self._popping = False
        self._idle_slots = 0  # slots waiting for a message
        self._slot_rung = False  # a slot was woken and has not taken its turn yet
        self._finisher_rung = False  # the finisher was woken for results, has not taken them
        self._claimer_rung = False  # the claimer was woken to claim, has not looked yet
        self._results_since = 0.0  # when the first result not sent yet came
        self._asked = 0
        self._busy = False  # the last pop came back full: more is probably due
        self._mean_s: float | None = None  # recent handler duration
        self._heartbeat_s = settings.heartbeat_ms / 1000
        self._prefetch_window_s = min(PREFETCH_WINDOW_S, settings.lease_ms / 10_000)
        now = clock()
        self._next_heartbeat = now + self._heartbeat_s
        self._next_sweep = now + self._heartbeat_s
        self._deadline = 0.0
        #: Handlers still running when the worker gave up waiting for them.
        self.left_running = 0
        self._send = Sender(settings, self._heartbeat_failed)

    # ------------------------------------------------------------------------- state

    def epoch(self, role: str) -> int:
        """How often ``role`` was woken (a waiter whose epoch is older wakes)."""
        return self._epochs[role]

    def _bump(self, *roles: str) -> tuple[str, ...]:
        for role in roles:
            self._epochs[role] += 1
        return roles

    def _ring_all(self, roles: tuple[str, ...]) -> None:
        for role in roles:
            self._ring(role)

    def stop(self, immediate: bool = False) -> None:
        """Stop claiming now; let running handlers finish within the grace (``immediate``: do
        not wait for them). Idempotent; a later call may make a graceful stop immediate."""
        with self._lock:
            now = self._clock()
            if self.phase is Phase.RUNNING:
                self.phase = Phase.DRAINING
                self._deadline = now + self.settings.shutdown_grace_ms / 1000
                self._releases.extend(self._backlog)
                self._backlog.clear()
                log.info("queue %s: worker stopping; %d handlers running, waiting up to %.1f s",
                         self.settings.queue_name, len(self._running),
                         self.settings.shutdown_grace_ms / 1000)
            if immediate and self.phase is Phase.DRAINING:
                self._enter_final()
            roles = self._bump(*ROLES)
        self._ring_all(roles)

    def _enter_final(self) -> None:
        """(Lock held.) Stop waiting for running handlers: their messages stay leased."""
        if self._running:
            self.left_running = len(self._running)
            for lease in self._running:
                self._in_hand.pop(lease, None)
            log.warning("queue %s: %d handlers still running as the worker stops; their "
                        "messages stay leased and are delivered again after their lease",
                        self.settings.queue_name, len(self._running))
        self._releases.extend(self._backlog)
        self._backlog.clear()
        self.phase = Phase.FINAL

    # ------------------------------------------------------------------------- the claimer

    def claimer(self) -> Program:
        """Pop when handlers can start what is popped, until the worker stops."""
        pause_s = 0.0
        while True:
            with self._lock:
                if self.phase is not Phase.RUNNING:
                    return
                self._claimer_rung = False
                count = self._claim_count()
                self._popping = count > 0
                self._asked = count
                epoch = self._epochs["claimer"]
            if count == 0:
                yield Wait("claimer", epoch, RECHECK_S)
                continue
            try:
                messages = yield Pop(count, self._idle_wait_ms, self.settings.pop_lease_ms)
            except QueueClosedError:
                log.info("queue %s was closed: the worker stops", self.settings.queue_name)
                self._claimed([])
                self.stop()
                return
            except Exception as exc:  # Redis failed: try again after a pause
                self._claimed([])
                pause_s = min(max(pause_s * 2, POP_RETRY_S[0]), POP_RETRY_S[1])
                log.warning("queue %s: pop failed (%s); the worker tries again in %.1f s",
                            self.settings.queue_name, describe(exc), pause_s)
                yield Wait("stop", self._epochs["stop"], pause_s)
                continue
            pause_s = 0.0
            self._claimed(messages)

    def _claim_count(self) -> int:
        """(Lock held.) How many to pop now: none while handlers are busy enough.

        Without a batch_size the worker holds what its free handlers can start, plus, while the
        queue is busy and handlers are fast, what they should start within the prefetch window
        (those wait in hand, their leases kept alive by the heartbeats like the others).
        """
        s = self.settings
        running, waiting = len(self._running), len(self._backlog)
        if s.batch_size is None:
            capacity = s.concurrency + self._prefetch()
            per_pop = capacity
        else:
            capacity = max(s.concurrency, s.batch_size)
            per_pop = s.batch_size
        room = capacity - running - waiting
        if room <= 0:
            return 0
        # Pop when a handler is idle for want of work, or when half the room is free: a busy
        # worker then claims in batches instead of one message per finished handler.
        if (waiting == 0 and running < s.concurrency) or room >= max(1, capacity // 2):
            return min(room, per_pop, MAX_BATCH)
        return 0

    def _prefetch(self) -> int:
        if not self._busy or self._mean_s is None:
            return 0
        expected = self.settings.concurrency * self._prefetch_window_s / max(self._mean_s, 1e-6)
        return max(0, min(int(expected), MAX_PREFETCH))

    def _claimed(self, messages: list[Message]) -> None:
        with self._lock:
            self._popping = False
            self._busy = bool(messages) and len(messages) >= self._asked
            if messages and not self._in_hand:
                self._next_heartbeat = self._clock() + self._heartbeat_s
            for message in messages:
                self._in_hand[_lease(message)] = message
            if self.phase is Phase.RUNNING:
                self._backlog.extend(messages)
            else:  # stopped while the pop ran: give them back
                self._releases.extend(messages)
            # Wake one idle slot; each slot that takes a message wakes the next while some
            # remain (a driver may wake only one waiter per ring: see WorkerEngine).
            if messages and self._idle_slots and not self._slot_rung:
                self._slot_rung = True
                roles = self._bump("slots", "finisher")
            else:
                roles = self._bump("finisher")
        self._ring_all(roles)
        if self.settings.hooks is not None:
            for message in messages:
                self._send.hook("on_delivered", message)

    # ------------------------------------------------------------------------- a slot

    def slot(self) -> Program:
        """Run handlers on messages in hand, one at a time, until the worker stops."""
        waited = False
        ended: tuple[Message, BaseException | None, float, float] | None = None
        while True:
            roles: tuple[str, ...] = ()
            with self._lock:  # one turn of the lock per message: record its end, take the next
                if ended is not None:
                    roles, late = self._record(*ended)
                if waited:
                    self._idle_slots -= 1
                    self._slot_rung = False
                message = self._backlog.popleft() if self._backlog else None
                if message is not None:
                    self._running[message.id, message.receipt] = message
                    # Wake the next idle slot, unless one woken already has yet to come here
                    # (it takes a message and wakes the next in turn): one ring per hand-over,
                    # not one per message taken while the woken slot has not run yet.
                    if self._backlog and self._idle_slots and not self._slot_rung:
                        self._slot_rung = True
                        roles += self._bump("slots")
                stopping = self.phase is not Phase.RUNNING
                epoch = self._epochs["slots"]
                waited = message is None and not stopping
                if waited:
                    self._idle_slots += 1
            self._ring_all(roles)
            if ended is not None:
                self._after(ended, late)
                ended = None
            if message is None:
                if stopping:
                    return
                yield Wait("slots", epoch, RECHECK_S)
                continue
            started = self._clock()
            error = yield Handle(message)
            ended = message, error, started, self._clock()

    def _results_due(self, now: float) -> bool:
        """(Lock held.) Whether the finisher should send the results now: a batch is ready,
        the messages in hand have all started (nothing more joins the batch soon), the first
        waited ACK_DELAY_S, or the worker stops."""
        return bool(self._results) and (
            len(self._results) >= ACK_BATCH or not self._backlog
            or now >= self._results_since + ACK_DELAY_S or self.phase is not Phase.RUNNING)

    def _record(self, message: Message, error: BaseException | None, started: float,
                ended: float) -> tuple[tuple[str, ...], bool]:
        """(Lock held.) A handler ended: keep its outcome for the finisher. Returns the roles
        to wake and whether it ended after the worker stopped waiting for it."""
        decision = ACK if error is None else decide(message, error, self.settings.backoff,
                                                    self._rand())
        lease = message.id, message.receipt
        self._running.pop(lease, None)
        seconds, mean = ended - started, self._mean_s
        self._mean_s = seconds if mean is None else 0.8 * mean + 0.2 * seconds
        late = lease not in self._in_hand
        running = self.phase is Phase.RUNNING
        if not late:
            if not self._results:
                self._results_since = ended
            self._results.append((message, decision))
        # Wake the finisher (once: it takes every result at once) to set its timer for the
        # first result, and when the results are due (see _results_due); the claimer only
        # when it would claim now: not two wake-ups per message.
        wake_finisher = not running or (not self._finisher_rung and (
            len(self._results) == 1 or self._results_due(ended)))
        self._finisher_rung |= wake_finisher
        wake_claimer = (running and not self._popping and not self._claimer_rung
                        and self._claim_count() > 0)
        self._claimer_rung |= wake_claimer
        if not (wake_finisher or wake_claimer):
            return (), late
        return self._bump(*(("finisher",) if wake_finisher else ()),
                          *(("claimer",) if wake_claimer else ())), late

    def _after(self, ended: tuple[Message, BaseException | None, float, float],
               late: bool) -> None:
        """What follows a handler's end outside the lock: the log line of a late end, the
        duration hook."""
        message, _, started, end = ended
        if late:
            log.warning("queue %s: message %s finished after the worker stopped waiting; it "
                        "stays leased and is delivered again", self.settings.queue_name,
                        message.id)
        if self.settings.hooks is not None:
            self._send.hook("on_handler_duration", message, end - started)

    # ------------------------------------------------------------------------- the finisher

    def finisher(self) -> Program:
        """Send results, heartbeats and sweeps; return once the worker has stopped."""
        while True:
            work = self._finisher_work()
            send = self._send
            if work.acks:
                yield from send.acks(work.acks)
            for message, decision in work.failures:
                yield from send.decision(message, decision)
            if work.releases:
                yield from send.releases(work.releases)
            if work.heartbeat:
                yield from send.heartbeat(work.heartbeat)
            if work.sweep:
                yield from send.sweep()
            if work.done:
                return
            if work.wait_s is not None:
                yield Wait("finisher", work.epoch, work.wait_s)

    def _finisher_work(self) -> _Work:
        roles: tuple[str, ...] = ()
        with self._lock:
            now = self._clock()
            work = _Work(self._epochs["finisher"])
            self._finisher_rung = False
            if self.phase is Phase.DRAINING and (not self._running or now >= self._deadline):
                self._enter_final()
                roles = self._bump(*ROLES)
            elif self._backlog and self._idle_slots:  # a safety net: slots wait without a timer
                roles = self._bump("slots")
            if self._results_due(now):
                for message, decision in self._results:
                    self._in_hand.pop(_lease(message), None)  # no heartbeat for what is ending
                    if decision.action == "ack":
                        work.acks.append(message)
                    else:
                        work.failures.append((message, decision))
                self._results = []
            work.releases, self._releases = self._releases, []
            for message in work.releases:
                self._in_hand.pop(_lease(message), None)
            live = self.phase in (Phase.RUNNING, Phase.DRAINING)
            if live and self._in_hand and now >= self._next_heartbeat:
                work.heartbeat = list(self._in_hand.values())
                self._next_heartbeat = now + self._heartbeat_s
            if self.phase is Phase.RUNNING and now >= self._next_sweep:
                work.sweep = True
                self._next_sweep = now + self._heartbeat_s
            if self.phase is Phase.FINAL and not work.busy() and not self._popping:
                self.phase = Phase.STOPPED
                work.done = True
                roles = self._bump(*ROLES)
            elif not work.busy():
                work.wait_s = self._finisher_wait(now)
        self._ring_all(roles)
        return work

    def _finisher_wait(self, now: float) -> float:
        """(Lock held.) Seconds until the finisher has something to do unless woken."""
        due = [now + RECHECK_S]
        if self._results:  # not due yet (see _results_due)
            due.append(self._results_since + ACK_DELAY_S)
        if self.phase is Phase.RUNNING:
            due.append(self._next_sweep)
        if self._in_hand:
            due.append(self._next_heartbeat)
        if self.phase is Phase.DRAINING:
            due.append(self._deadline)
        return max(0.0, min(due) - now)

    def _heartbeat_failed(self) -> None:
        """The next heartbeat comes soon (HEARTBEAT_RETRY_S)."""
        with self._lock:
            self._next_heartbeat = min(self._next_heartbeat, self._clock() + HEARTBEAT_RETRY_S)
