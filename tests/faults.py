"""Bookkeeping for the fault tests: who pushed what, what came out, and one summary row each.

A push counts as *acknowledged* when the call returned without an error (with
``write_quorum >= 1``: at least one replica confirmed it). *Lost* = acknowledged but never
delivered. *Duplicated* = deliveries beyond the first of an id. *Early* = delivered before its
due time (taken from the wall clock just before the push, so never a false alarm). *Seconds
unavailable* = the longest stretch in which no push was acknowledged while producers kept
trying. *Stranded* (measured on Dynomite only, ``-`` elsewhere) = ids still stored on any rack
after the queue was drained: left behind where no consumer will ever get or ack them. *Dead*
(``-`` where not measured) = acknowledged ids never delivered but found as dead letters with a
reason (e.g. ``payload-missing`` after an eviction): accounted for, so not counted as lost.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dynoqueue import DynoQueueError, Message

#: Rows of every fault test of this session, printed by conftest's terminal summary hook.
SUMMARY_ROWS: list[str] = []
#: Errors a Ledger keeps of each kind (typed, untyped); the rest are only counted.
MAX_KEPT_ERRORS = 1000
HEADER = (f"{'fault test':<34} {'attempts':>8} {'acked':>7} {'delivered':>9} {'lost':>5} "
          f"{'dup':>5} {'early':>5} {'strand':>6} {'dead':>5} {'unavail s':>9}")


@dataclass
class Ledger:
    """Thread-safe record of one fault run."""

    name: str
    attempts: int = 0
    acknowledged: set[str] = field(default_factory=set)
    due_ms: dict[str, float] = field(default_factory=dict)
    deliveries: Counter[str] = field(default_factory=Counter)
    early: int = 0
    errors: list[BaseException] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    stranded: int | None = None
    #: Ids found as dead letters (None: not measured); never counted as lost.
    dead_lettered: set[str] | None = None
    #: Every failed call (``errors`` keeps only the first of each kind: see failed).
    failures: int = 0
    _kept: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attempt(self, ids: list[str], delay_ms: int) -> None:
        due = time.time() * 1000 + delay_ms
        with self._lock:
            self.attempts += len(ids)
            for message_id in ids:
                self.due_ms.setdefault(message_id, due)

    def acked(self, ids: list[str]) -> None:
        with self._lock:
            self.acknowledged.update(ids)
            self.ack_times.append(time.monotonic())

    def failed(self, exc: BaseException) -> None:
        """Keep ``exc``: up to MAX_KEPT_ERRORS of each kind (typed, untyped), so that a call
        failing in a loop cannot fill the memory with tracebacks; ``failures`` counts all."""
        typed = isinstance(exc, DynoQueueError)
        with self._lock:
            self.failures += 1
            if self._kept[typed] < MAX_KEPT_ERRORS:
                self._kept[typed] += 1
                self.errors.append(exc)

    def delivered(self, ids: list[str]) -> None:
        now_ms = time.time() * 1000
        with self._lock:
            for message_id in ids:
                self.deliveries[message_id] += 1
                if now_ms + 1 < self.due_ms.get(message_id, 0):
                    self.early += 1

    @property
    def lost(self) -> set[str]:
        with self._lock:
            dead = self.dead_lettered or set()
            return {i for i in self.acknowledged if self.deliveries[i] == 0 and i not in dead}

    @property
    def duplicated(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.deliveries.values() if n > 1)

    def seconds_unavailable(self) -> float:
        with self._lock:
            times = sorted(self.ack_times)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def untyped_errors(self) -> list[BaseException]:
        """Errors that are not DynoQueueError subclasses (the contract says: typed)."""
        with self._lock:
            return [e for e in self.errors if not isinstance(e, DynoQueueError)]

    def row(self) -> str:
        """The summary row; also kept in :data:`SUMMARY_ROWS`."""
        stranded = "-" if self.stranded is None else str(self.stranded)
        dead = "-" if self.dead_lettered is None else str(len(self.dead_lettered))
        line = (f"{self.name:<34} {self.attempts:>8} {len(self.acknowledged):>7} "
                f"{len(self.deliveries):>9} {len(self.lost):>5} {self.duplicated:>5} "
                f"{self.early:>5} {stranded:>6} {dead:>5} {self.seconds_unavailable():>9.2f}")
        SUMMARY_ROWS.append(line)
        return line


def push_batches(ledger: Ledger, q: Any, stop: threading.Event, prefix: str) -> None:
    """A producer of the fault tests: batches of 5 messages (delays 0, 0, 50, 200 ms in turn)
    until ``stop``; each outcome goes into ``ledger`` (an error also pauses 20 ms)."""
    batch_no = 0
    while not stop.is_set():
        delay = (0, 0, 50, 200)[batch_no % 4]
        batch = [Message(f"{prefix}{batch_no}-{j}", "x", timeout=delay) for j in range(5)]
        batch_no += 1
        ledger.attempt([m.id for m in batch], delay)
        try:
            ledger.acked(q.push(batch))
        except Exception as exc:  # recorded: the contract says typed errors only
            ledger.failed(exc)
            time.sleep(0.02)
        time.sleep(0.003)


def pop_and_ack(ledger: Ledger, q: Any, stop: threading.Event) -> None:
    """A consumer of the fault tests: waiting pops of up to 20, each batch acked, until
    ``stop``; deliveries and errors go into ``ledger``."""
    while not stop.is_set():
        try:
            got = q.pop(20, wait_ms=100)
            ledger.delivered([m.id for m in got])
            if got:
                q.ack_many(got)
        except Exception as exc:  # recorded, as the producers' errors
            ledger.failed(exc)
            time.sleep(0.02)


def run_under_fault(ledger: Ledger, producers: list[Any], consumers: list[Any],
                    fault: Callable[[], None], *, before_s: float = 1.5, after_s: float = 2.0,
                    drain_s: float = 30.0, drained: Callable[[], bool] | None = None) -> None:
    """Producers (:func:`push_batches`) and consumers (:func:`pop_and_ack`) run; ``fault``
    strikes (and waits for recovery); then the consumers drain until ``drained()`` (default:
    every acknowledged push was delivered) or ``drain_s`` passes."""
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    makers = [threading.Thread(target=push_batches, args=(ledger, q, stop_producing, f"p{n}-"),
                               daemon=True) for n, q in enumerate(producers)]
    takers = [threading.Thread(target=pop_and_ack, args=(ledger, q, stop_consuming), daemon=True)
              for q in consumers]
    for thread in makers + takers:
        thread.start()
    try:
        try:
            time.sleep(before_s)
            fault()
            time.sleep(after_s)
        finally:
            stop_producing.set()
            for thread in makers:
                thread.join(timeout=30)
        deadline = time.monotonic() + drain_s
        while not (drained() if drained else not ledger.lost) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:  # also when the fault failed: no consumer may outlive the test
        stop_consuming.set()
        for thread in takers:
            thread.join(timeout=30)
