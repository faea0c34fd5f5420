"""A queue's schedules (recurring messages): upsert, list, remove, the pass that queues their
ticks, and the chaining of a claimed tick, as operations of the core (the same for both APIs
and every layout).

A schedule keeps at most its next two ticks that have not fallen due queued. A pop that
claims ticks queues each one's schedule's next tick in the same call, right after the claim
script (:func:`chain_ticks`: on a partitioned queue the next tick's partition, and the records,
may live in other slots than the claim's), so ticks are on time whatever the reprocessor's
interval. Passes queue a schedule's first ticks, the ticks after those that fell due without
a claim to chain them (a lost chain is repaired so), and the missed ones as ``catch_up`` says.

Each tick is sent once, by any number of factories and consumers in any zones, started and
killed at any time:

1. a pass (or a chain) reads a schedule's record and plans its ticks
   (:func:`~dynoqueue.model.schedules.plan`);
2. it pushes them with the ``tick`` script, in the partition of each tick's message id: a tick
   whose id that partition's tick log (``P.TICKS.Q``) holds is left out, the others are logged
   and pushed in the same script;
3. it moves the record on with ``sched_cas`` (compare and set on the text it read).

Two passes at once push each tick once (the log) and one of them moves the record; a pass
killed between 2 and 3 leaves the record where it was, and the next pass finds its ticks in
the log. The log forgets a tick once its schedule moved past it and :data:`TICK_LOG_KEEP_MS`
passed; a pass that took half that long between reading a record and pushing gives up on it
(the next pass does it), so no pass pushes from a record older than the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgumentError
from ..model.keys import scheduled_queues
from ..model.message import Message, as_text
from ..model.schedules import Schedule, new_schedule, plan, ticks_from
from .requests import QUORUM, Op
from .shared import SCRIPT_BATCH, QueueState

log = logging.getLogger("dynoqueue.queue")

#: How long a partition's tick log keeps a tick after its schedule moved past it, ms.
TICK_LOG_KEEP_MS = 600_000


#: Where a tick's message goes: the core of its partition (a one-partition queue: itself).
Route = Callable[[str], "Scheduling"]


class Scheduling(QueueState):
    """What a one-partition core (or one partition) does for the schedules: push tick messages
    through its tick log. The calls are the functions below, given the core that keeps the
    records (a partitioned queue's base) and the route of each tick."""

    def _push_ticks(self, messages: list[Message], forget_below: int) -> Op[int]:
        """Push tick messages into this partition through its tick log (the ``tick`` script,
        keep mode). Returns how many were new."""
        if self.zones is not None and not self.zones.registered(self.name):
            yield from self.guard("run_schedules", self.keys.message_hash,
                                   self.zones.register([self.name]))
        keys = [self.keys.ticks, *self._life_keys]
        pushed = 0
        for i in range(0, len(messages), SCRIPT_BATCH):
            args = self.push_args("keep", messages[i:i + SCRIPT_BATCH])  # type: ignore[attr-defined]
            reply = yield from self._script("run_schedules", self.keys.ticks, "tick", keys,
                                            [forget_below, *args])
            pushed += sum(int(flag) for flag in reply[1:])
        if pushed:
            self.events(self.name, "pushed", pushed)
        return pushed

    # The calls on a one-partition queue: it keeps its records and pushes its ticks itself.

    def schedule(self, schedule_id: str, **definition: Any) -> Op[Schedule]:
        """:func:`upsert` (DynoQueue.schedule's keywords)."""
        return upsert(self, self._itself, schedule_id, **definition)

    def schedules(self) -> Op[list[Schedule]]:
        return listed(self)

    def unschedule(self, schedule_id: str) -> Op[bool]:
        return remove(self, self._itself, schedule_id)

    def run_schedules(self) -> Op[int]:
        return run_pass(self, self._itself)

    def _itself(self, message_id: str) -> Scheduling:
        return self

    def _forget_tick(self, message_id: str) -> Op[None]:
        """Remove a tick's message (if it still waits or is leased) and its log entry."""
        yield from self.remove(message_id)  # type: ignore[attr-defined]
        yield from self._command("schedule", self.keys.ticks, QUORUM, "ZREM", self.keys.ticks,
                                 message_id)


def upsert(base: Scheduling, route: Route, schedule_id: str, *, payload: str | None,
           cron: str | None, every_ms: int | None, timezone: str, priority: int,
           catch_up: str, start_at_ms: int | None) -> Op[Schedule]:
    """Create or replace schedule ``schedule_id`` of ``base``'s queue and queue its first
    ticks (DynoQueue.schedule). Everything is checked before anything is written; the old
    definition's ticks not yet due go."""
    def make(now_ms: int) -> Schedule:
        return new_schedule(schedule_id, payload=payload, cron=cron, every_ms=every_ms,
                            timezone=timezone, priority=priority, catch_up=catch_up,
                            start_at_ms=start_at_ms, now_ms=now_ms)

    make(start_at_ms or 0)  # bad input raises here, before any I/O
    return _upsert(base, route, make)


def _upsert(base: Scheduling, route: Route, make: Callable[[int], Schedule]) -> Op[Schedule]:
    key = base.keys.schedules
    now = yield from _now(base)
    schedule = make(now)
    record = schedule.to_json()
    old = yield from base._command("schedule", key, QUORUM, "HGET", key, schedule.id)
    yield from base._command("schedule", key, QUORUM, "HSET", key, schedule.id, record)
    registry = scheduled_queues(base.settings.key_prefix)
    yield from base._command("schedule", registry, QUORUM, "SADD", registry, base.name)
    if old is not None:
        yield from _drop_queued(route, Schedule.from_json(schedule.id, old), now)
    yield from _pass_one(base, route, schedule.id, record, now)
    raw = yield from base._command("schedule", key, QUORUM, "HGET", key, schedule.id)
    return (Schedule.from_json(schedule.id, raw) if raw is not None else schedule).as_of(now)


def listed(base: Scheduling) -> Op[list[Schedule]]:
    """Every schedule of ``base``'s queue, by id, as of now (DynoQueue.schedules)."""
    key = base.keys.schedules
    raws = yield from base._command("schedules", key, QUORUM, "HGETALL", key)
    if not raws:
        return []
    now = yield from _now(base)
    return [s.as_of(now) for s in Schedule.all_from(raws)]


def remove(base: Scheduling, route: Route, schedule_id: str) -> Op[bool]:
    """Remove schedule ``schedule_id`` and the ticks it queued that are not due yet; False
    if there was none (DynoQueue.unschedule)."""
    if not isinstance(schedule_id, str) or not schedule_id:
        raise InvalidArgumentError(f"schedule id must be a non-empty str, got "
                                   f"{schedule_id!r:.80}")
    return _remove(base, route, schedule_id)


def _remove(base: Scheduling, route: Route, schedule_id: str) -> Op[bool]:
    key = base.keys.schedules
    old = yield from base._command("unschedule", key, QUORUM, "HGET", key, schedule_id)
    if old is None:
        return False
    yield from base._command("unschedule", key, QUORUM, "HDEL", key, schedule_id)
    now = yield from _now(base)
    yield from _drop_queued(route, Schedule.from_json(schedule_id, old), now)
    return True


def run_pass(base: Scheduling, route: Route) -> Op[int]:
    """One pass over every schedule of ``base``'s queue: queue each one's ticks (see the
    module docstring). Returns how many ticks it queued."""
    key = base.keys.schedules
    raws = yield from base._command("run_schedules", key, QUORUM, "HGETALL", key)
    if not raws:
        return 0
    now = yield from _now(base)
    queued = 0
    for sid, raw in dict(raws).items():
        queued += yield from _pass_one(base, route, as_text(sid), raw, now)
    return queued


def chain_ticks(base: Scheduling, route: Route, messages: list[Message]) -> Op[list[Message]]:
    """After a pop leased ``messages``: queue the next tick of each schedule whose tick is
    among them (its pass at this moment, so the tick log and the record's compare-and-set
    keep every tick sent once). Returns ``messages``. No I/O when none is a tick (no id holds
    ``@``); a failure is logged, not raised: the messages are leased, and the next pass
    queues what this chain did not."""
    claimed: dict[str, int] = {}  # schedule id -> its latest tick claimed
    for m in messages:
        sid, _, tick = m.id.rpartition("@")
        if sid and tick.isdigit():
            claimed[sid] = max(claimed.get(sid, 0), int(tick))
    if not claimed:
        return messages
    sids = sorted(claimed)
    key = base.keys.schedules
    try:
        raws = yield from base._command("pop", key, QUORUM, "HMGET", key, *sids)
        found = [(sid, raw) for sid, raw in zip(sids, raws, strict=True) if raw is not None]
        if found:
            now = yield from _now(base)
            for sid, raw in found:  # a claimed tick no longer counts as one to come
                yield from _pass_one(base, route, sid, raw, max(now, claimed[sid] + 1))
    except Exception as exc:  # leased already: hand them over; a pass queues the next tick
        log.warning("queue %s: could not queue the next ticks of %s (the next schedule pass "
                    "will): %s", base.name, ", ".join(sids), exc)
    return messages


def _now(base: Scheduling) -> Op[int]:
    """Now, epoch ms: the injected clock, else the server's TIME (ticks are due by it)."""
    if base.settings.clock is not None:
        return int(base.settings.clock())
    seconds, micros = yield from base._command("schedule", base.keys.schedules, QUORUM, "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


def _pass_one(base: Scheduling, route: Route, schedule_id: str, raw: Any,
              now: int) -> Op[int]:
    """Queue one schedule's ticks and move its record on (see the module docstring).
    Returns the ticks pushed (0 when another pass had queued them)."""
    read_at = time.monotonic()
    schedule = Schedule.from_json(schedule_id, raw)
    planned = plan(schedule, now)
    if not planned.ticks and planned.after == schedule:
        return 0  # nothing to queue, nothing to move on
    shares: dict[int, tuple[Scheduling, list[Message]]] = {}
    for tick in planned.ticks:
        message_id = schedule.message_id(tick)
        core = route(message_id)
        shares.setdefault(id(core), (core, []))[1].append(Message(
            message_id, schedule.payload, priority=schedule.priority, due_at_ms=tick))
    forget_below = min(schedule.next_due_ms, now - TICK_LOG_KEEP_MS)
    pushed = 0
    for core, messages in shares.values():
        if time.monotonic() - read_at > TICK_LOG_KEEP_MS / 2000:
            return pushed  # a stalled pass: the next one does it from a fresh read
        pushed += yield from core._push_ticks(messages, forget_below)
    key = base.keys.schedules
    yield from base._script("run_schedules", key, "sched_cas", [key],
                            [schedule_id, as_text(raw), planned.after.to_json()])
    return pushed


def _drop_queued(route: Route, old: Schedule, now: int) -> Op[None]:
    """Remove the ticks ``old`` queued that are not due yet, and their log entries (a
    replacement's ticks may have the same ids)."""
    if old.last_sent_ms is None or old.last_sent_ms < now:
        return
    for tick in ticks_from(old, now):
        if tick > old.last_sent_ms:
            break
        message_id = old.message_id(tick)
        yield from route(message_id)._forget_tick(message_id)

