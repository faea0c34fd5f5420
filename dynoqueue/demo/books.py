"""The demo's own books of every message and call, kept next to Redis by every thread of the
run; :mod:`dynoqueue.demo.report` turns them into the report."""

from __future__ import annotations

import logging
import threading
import zlib
from collections import Counter
from collections.abc import Sequence

from .. import Message, RoundRobinStrategy
from .flights import Reminder

log = logging.getLogger("dynoqueue.demo")


class Tracker:
    """The demo's bookkeeping of every message and call, shared by every thread of the run.

    A delivery is booked by its number (``message.deliveries``, counted by Redis), so one the
    books never saw (the killed Worker's pop returned it but its handler had not reported it
    yet) is still counted, in the killed Worker's zone, when the next delivery shows the gap.
    """

    def __init__(self, reminders: Sequence[Reminder], crash_zone: str) -> None:
        self.lock = threading.Lock()
        self.scheduled = len(reminders)
        self.crash_zone = crash_zone
        self.due_ms: dict[str, int] = {}
        self.not_before: dict[str, int] = {}  # id -> no delivery may come before (ms)
        self.shard_of: dict[str, str] = {}  # id -> the shard its push put it in
        self.booked: dict[str, int] = {}  # id -> highest delivery number booked
        self.popped: Counter[str] = Counter()  # zone -> deliveries there
        self.redelivered: Counter[str] = Counter()  # zone -> repeat deliveries there
        self.early_in: Counter[str] = Counter()  # zone -> early deliveries there
        self.early: list[tuple[str, int]] = []  # (id, ms early)
        self.first_lateness: dict[str, tuple[str, int]] = {}  # id -> (zone, ms late)
        self.last_live: dict[str, tuple[str, int]] = {}  # id -> (zone, epoch ms)
        self.crashed: dict[str, int] = {}  # id -> epoch ms the killed Worker got it
        self.killed_at_ms = 0
        self.acked: dict[str, str] = {}  # id -> the zone that acked it
        self.dead: dict[str, str] = {}  # id -> the zone that dead-lettered it
        self.dead_reasons: dict[str, str] = {}  # id -> reason, as the queue's dead letters say
        self.handled: Counter[str] = Counter()  # zone -> live handler calls
        self.postponed: Counter[str] = Counter()  # zone -> Retry raised
        self.retried: Counter[str] = Counter()  # zone -> failed sends
        self.sends: Counter[str] = Counter()  # id -> send attempts
        self.failed_at: dict[str, int] = {}  # id -> when its send failed (ms), until its nack
        self.unexpected = 0
        self.calls: Counter[str] = Counter()  # API call -> times called (or messages moved)
        self.errors: list[str] = []
        self.error_count = 0
        self.done = threading.Event()
        self.stop = threading.Event()

    def count(self, call: str, n: int = 1) -> None:
        with self.lock:
            self.calls[call] += n

    def pushed_to(self, message_id: str, shard: str) -> None:
        with self.lock:
            self.shard_of[message_id] = shard

    def scheduled_at(self, message_id: str, due_ms: int) -> None:
        with self.lock:
            self.due_ms[message_id] = due_ms
            self.not_before[message_id] = due_ms

    def delivered(self, zone: str, message: Message, at_ms: int, *, live: bool) -> None:
        with self.lock:
            mid, number = message.id, message.deliveries
            due = self.due_ms.get(mid)
            if due is None:
                self.unexpected += 1
                log.error("delivered a message that was never scheduled: %r", mid)
                return
            booked = self.booked.get(mid, 0)
            if number <= booked:  # the killed Worker's report of a delivery booked as unseen
                return
            if live and number - 1 > booked:  # deliveries the books never saw: the killed
                unseen = number - 1 - booked  # Worker's, popped but not reported
                self.popped[self.crash_zone] += unseen
                self.redelivered[self.crash_zone] += unseen - (1 if booked == 0 else 0)
                self.crashed.setdefault(mid, self.killed_at_ms or at_ms)
            self.booked[mid] = number
            self.popped[zone] += 1
            if number > 1:
                self.redelivered[zone] += 1
            if at_ms < self.not_before[mid]:
                self.early.append((mid, self.not_before[mid] - at_ms))
                self.early_in[zone] += 1
                log.error("message %s delivered %d ms early", mid, self.not_before[mid] - at_ms)
            if number == 1 and live:
                self.first_lateness[mid] = (zone, at_ms - due)
            if live:
                self.handled[zone] += 1
                self.last_live[mid] = (zone, at_ms)
            else:
                self.crashed[mid] = at_ms

    def postpone(self, zone: str, message_id: str, until_ms: int) -> None:
        with self.lock:
            self.postponed[zone] += 1
            self.not_before[message_id] = until_ms

    def first_send_fails(self, zone: str, message_id: str, at_ms: int, every: int) -> bool:
        """Whether this send attempt fails: the first attempt of about one id in ``every``."""
        with self.lock:
            self.sends[message_id] += 1
            if not every or self.sends[message_id] > 1 or zlib.crc32(message_id.encode()) % every:
                return False
            self.retried[zone] += 1
            self.failed_at[message_id] = at_ms
            return True

    def nacked(self, message_id: str, delay_ms: int) -> None:
        """The Worker nacked a failed send: no delivery before the failure + the backoff."""
        with self.lock:
            failed = self.failed_at.pop(message_id, None)
            if failed is not None:
                self.not_before[message_id] = max(self.not_before[message_id], failed + delay_ms)

    def acked_ids(self, zone: str, ids: Sequence[str]) -> None:
        with self.lock:
            for message_id in ids:
                if message_id in self.due_ms:
                    self.acked.setdefault(message_id, zone)
            self._check_done()

    def dead_lettered(self, zone: str, message_id: str) -> None:
        with self.lock:
            if message_id in self.due_ms:
                self.dead.setdefault(message_id, zone)
            self._check_done()

    def _check_done(self) -> None:
        if len(self.acked) + len(self.dead) >= self.scheduled:
            self.done.set()

    def crash_held(self) -> int:
        with self.lock:
            return len(self.crashed)

    def error(self, text: str) -> None:
        with self.lock:
            self.error_count += 1
            if len(self.errors) < 20:
                self.errors.append(text)
        log.warning("%s", text)

    def ended_count(self) -> int:
        with self.lock:
            return len(self.acked) + len(self.dead)


class RecordingRoundRobin(RoundRobinStrategy):
    """The default round robin, telling the books which shard each push put each reminder in."""

    def __init__(self, tracker: Tracker) -> None:
        super().__init__()
        self._tracker = tracker

    def get_next_shard(self, all_shards: list[str], message: Message) -> str:
        shard = super().get_next_shard(all_shards, message)
        self._tracker.pushed_to(message.id, shard)
        return shard
