"""Recurring messages: a queue's schedules, their ticks, and what one pass over them queues.

A schedule ``S`` of queue ``Q`` fires at ticks ``t`` (epoch ms): every ``every_ms`` from its
start, or at the times of a 5-field cron expression (``@hourly``, ``@daily`` ... too) in an IANA
time zone, DST handled by ``cronsim`` (a local time that a spring change skips fires at the
first minute after it; one that an autumn change repeats fires once, the first time). Each tick
is one message, id ``f"{S}@{t}"``, due at ``t``.

The stored record (``P.SCHED.Q``, field ``S``) holds the definition, the next tick not yet
queued and the last tick queued. At most the next :data:`AHEAD` ticks that have not fallen due
are queued: :func:`plan` tops them up, run by a pass and by the claim of a tick (which thereby
queues the schedule's next tick, so a tick is on time whatever the pass interval); ticks that
fell due stay queued until consumed, as any due message. Ticks that fell due without being
queued (no claim chained them, no pass ran) are "missed" and follow ``catch_up``: ``"skip"``
(none), ``"once"`` (the last one, due now), ``"all"`` (each, the latest
:data:`MAX_CATCH_UP`). This module is I/O-free; :mod:`dynoqueue.core.schedules` runs the
passes and the chaining.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from ..errors import ConfigurationError, InvalidArgumentError
from . import validate
from .message import as_text

#: catch_up="all" queues at most this many missed ticks (the latest).
MAX_CATCH_UP = 1000
#: A schedule keeps at most this many ticks queued that have not fallen due.
AHEAD = 2
CATCH_UP = ("skip", "once", "all")
#: cron's nicknames, as 5 fields.
_NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
              "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
              "@hourly": "0 * * * *"}


@dataclass(frozen=True)
class Schedule:
    """One recurring message of a queue (:meth:`dynoqueue.DynoQueue.schedule`).

    Attributes:
        id: the schedule's name; each tick's message id is ``f"{id}@{tick ms}"``.
        cron: a 5-field cron expression or nickname (``@hourly``), or None.
        every_ms: the interval of an interval schedule, ms, or None.
        timezone: the IANA time zone a cron expression is read in.
        payload: each tick's message payload.
        priority: each tick's message priority, 0..99.
        catch_up: what ticks missed while no factory ran become: ``"skip"``, ``"once"``,
            ``"all"``.
        start_at_ms: the first tick of an interval schedule (epoch ms; None: its creation);
            no tick of a cron schedule comes before it.
        next_due_ms: the next tick, the first after now, epoch ms (in a stored record, read
            with :meth:`from_json`: the next tick not queued yet).
        last_sent_ms: the latest tick that fell due (never in the future), epoch ms, or None
            when none has (in a stored record: the latest tick queued).
        first_ms: the schedule's first tick, epoch ms (None in records of older versions).
    """

    id: str
    cron: str | None
    every_ms: int | None
    timezone: str
    payload: str | None
    priority: int
    catch_up: str
    start_at_ms: int | None
    next_due_ms: int
    last_sent_ms: int | None = None
    first_ms: int | None = None

    def to_json(self) -> str:
        """The stored record (short names)."""
        return orjson.dumps({
            "cron": self.cron, "every": self.every_ms, "tz": self.timezone,
            "payload": self.payload, "prio": self.priority, "catch": self.catch_up,
            "start": self.start_at_ms, "next": self.next_due_ms, "last": self.last_sent_ms,
            "first": self.first_ms,
        }).decode()

    def as_of(self, now_ms: int) -> Schedule:
        """This stored record as a reader sees it at ``now_ms``: ``next_due_ms`` the first
        tick after now, ``last_sent_ms`` the latest queued tick that fell due by now."""
        last = self.last_sent_ms
        if last is not None and last > now_ms:  # queued ahead: the latest tick due by now
            before = tick_at_or_before(self, now_ms)
            first = self.first_ms if self.first_ms is not None else self.start_at_ms
            last = before if before is not None and (first is None or before >= first) \
                else None
        return dataclasses.replace(self, next_due_ms=next(ticks_from(self, now_ms + 1)),
                                   last_sent_ms=last)

    @classmethod
    def from_json(cls, schedule_id: str, raw: bytes | str) -> Schedule:
        """A stored record.

        Raises:
            ConfigurationError: the stored text is not a schedule.
        """
        try:
            doc: dict[str, Any] = orjson.loads(raw)
            return cls(schedule_id, doc["cron"], doc["every"], doc["tz"], doc["payload"],
                       int(doc["prio"]), doc["catch"], doc["start"], int(doc["next"]),
                       doc.get("last"), doc.get("first"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"schedule {schedule_id!r}: the stored record is unreadable: {raw!r:.80}") from exc

    @classmethod
    def all_from(cls, records: Any, *, skip_unreadable: bool = False) -> list[Schedule]:
        """The schedules of a queue's records hash (an HGETALL reply), by id.

        Raises:
            ConfigurationError: a record is unreadable (unless ``skip_unreadable``).
        """
        out = []
        for schedule_id, raw in dict(records or {}).items():
            try:
                out.append(cls.from_json(as_text(schedule_id), raw))
            except ConfigurationError:
                if not skip_unreadable:
                    raise
        return sorted(out, key=lambda s: s.id)

    def message_id(self, tick_ms: int) -> str:
        """The id of tick ``tick_ms``'s message."""
        return f"{self.id}@{tick_ms}"


def cron_fields(cron: str) -> str:
    """``cron`` as 5 fields (a nickname expanded).

    Raises:
        InvalidArgumentError: not a 5-field expression cronsim accepts, nor a nickname.
    """
    from cronsim import CronSim, CronSimError

    text = _NICKNAMES.get(cron.strip().lower(), cron.strip())
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidArgumentError(f"cron {cron!r} is not a 5-field cron expression: {exc}") \
            from None
    if len(text.split()) != 5:
        raise InvalidArgumentError(f"cron {cron!r} must have 5 fields (minute hour day "
                                   "month weekday) or be a nickname such as @hourly")
    return text


def new_schedule(schedule_id: str, *, payload: str | None, cron: str | None,
                 every_ms: int | None, timezone: str, priority: int, catch_up: str,
                 start_at_ms: int | None, now_ms: int) -> Schedule:
    """A schedule checked and with its first tick (at or after ``start_at_ms``, else
    ``now_ms``), before anything is written.

    Raises:
        InvalidArgumentError: an id that is not a message id or holds ``@``; not exactly one
            of cron and every_ms; a bad cron expression, time zone, interval, priority,
            catch_up or start.
    """
    validate.message_id(schedule_id)
    if "@" in schedule_id:
        raise InvalidArgumentError(f"schedule id {schedule_id!r} must not hold '@' (a tick's "
                                   "message id is id@tick)")
    if (cron is None) == (every_ms is None):
        raise InvalidArgumentError("give exactly one of cron and every_ms")
    if payload is not None and not isinstance(payload, str):
        raise InvalidArgumentError(f"payload must be a str or None, got {payload!r:.80}")
    validate.int_at_least("priority", priority, 0, high=99)
    if catch_up not in CATCH_UP:
        raise InvalidArgumentError(f"catch_up must be one of {CATCH_UP}, got {catch_up!r}")
    if start_at_ms is not None:
        validate.int_at_least("start_at_ms", start_at_ms, 0, high=validate.MAX_EPOCH_MS)
    if not isinstance(timezone, str):
        raise InvalidArgumentError(f"timezone must be an IANA name, got {timezone!r:.80}")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: e.g. a name too long
        raise InvalidArgumentError(f"timezone {timezone!r:.80} is no IANA time zone") from None
    if cron is not None:
        if not isinstance(cron, str):
            raise InvalidArgumentError(f"cron must be a str, got {cron!r:.80}")
        cron = cron_fields(cron)
    else:
        validate.ms("every_ms", every_ms, low=1)
    start = now_ms if start_at_ms is None else start_at_ms
    draft = Schedule(schedule_id, cron, every_ms, timezone, payload, priority, catch_up,
                     start if every_ms is not None else start_at_ms, start)
    first = next(ticks_from(draft, start))
    return Schedule(schedule_id, cron, every_ms, timezone, payload, priority, catch_up,
                    draft.start_at_ms, first, None, first)


def ticks_from(schedule: Schedule, from_ms: int) -> Iterator[int]:
    """The schedule's ticks at or after ``from_ms`` (epoch ms), in order (endless)."""
    if schedule.every_ms is not None:
        anchor = schedule.start_at_ms if schedule.start_at_ms is not None else from_ms
        every = schedule.every_ms
        k = max(0, math.ceil((from_ms - anchor) / every))
        while True:
            yield anchor + k * every
            k += 1
    from cronsim import CronSim

    assert schedule.cron is not None
    if schedule.start_at_ms is not None:
        from_ms = max(from_ms, schedule.start_at_ms)
    zone = ZoneInfo(schedule.timezone)
    # cronsim yields the matches after its start, to the minute: start a minute early.
    start = datetime.fromtimestamp((from_ms - 60_000) / 1000, zone).replace(second=0,
                                                                             microsecond=0)
    for when in CronSim(schedule.cron, start):
        tick = int(when.timestamp() * 1000)
        if tick >= from_ms:
            yield tick


def tick_at_or_before(schedule: Schedule, ms: int) -> int | None:
    """The schedule's latest tick at or before ``ms`` (epoch ms), or None (none before it)."""
    if schedule.every_ms is not None:
        anchor = schedule.start_at_ms if schedule.start_at_ms is not None else ms
        if ms < anchor:
            return None
        return anchor + (ms - anchor) // schedule.every_ms * schedule.every_ms
    from cronsim import CronSim

    assert schedule.cron is not None
    zone = ZoneInfo(schedule.timezone)
    # cronsim yields the matches before its start, to the minute: start a minute late.
    start = datetime.fromtimestamp((ms + 60_000) / 1000, zone).replace(second=0,
                                                                        microsecond=0)
    for when in CronSim(schedule.cron, start, reverse=True):
        tick = int(when.timestamp() * 1000)
        if schedule.start_at_ms is not None and tick < schedule.start_at_ms:
            return None
        if tick <= ms:
            return tick
    return None


@dataclass(frozen=True)
class Pass:
    """What one pass queues of one schedule: the ticks (epoch ms, in order; a caught-up tick
    is due at once) and the record after them."""

    ticks: list[int]
    after: Schedule


def plan(schedule: Schedule, now_ms: int) -> Pass:
    """The ticks to queue at ``now_ms`` (a pass, or the claim of a tick) for the stored record
    ``schedule``: the missed ones as ``catch_up`` says, then the next ones until :data:`AHEAD`
    ticks not due before ``now_ms`` are queued (a tick due at ``now_ms`` counts)."""
    ticks: list[int] = []
    nxt = schedule.next_due_ms
    if nxt < now_ms:  # fell due without being queued
        missed: list[int] = []
        if schedule.every_ms is not None:  # on the grid: no walk over a long gap
            future = next(ticks_from(schedule, now_ms))
            every = schedule.every_ms
            behind = min((future - nxt) // every, MAX_CATCH_UP)
            missed = [future - every * i for i in range(behind, 0, -1)]
            nxt = future
        else:
            for tick in ticks_from(schedule, nxt):
                if tick >= now_ms:
                    nxt = tick
                    break
                missed.append(tick)
                if len(missed) > MAX_CATCH_UP:
                    missed.pop(0)
        if schedule.catch_up == "all":
            ticks += missed
        elif schedule.catch_up == "once" and missed:
            ticks.append(missed[-1])
    # Queued already and not due before now: the ticks from now up to the next one not queued.
    ahead = 0
    for tick in ticks_from(schedule, now_ms):
        if tick >= nxt or ahead >= AHEAD:
            break
        ahead += 1
    for tick in ticks_from(schedule, nxt):
        if ahead >= AHEAD:
            nxt = tick
            break
        ticks.append(tick)
        ahead += tick >= now_ms
    last = ticks[-1] if ticks else schedule.last_sent_ms
    return Pass(ticks, dataclasses.replace(schedule, next_due_ms=nxt, last_sent_ms=last))


def schedule_fields(schedule: Schedule) -> dict[str, Any]:
    """One schedule as ``dynoqueue schedules --json`` and the dashboard show it."""
    return {"schedule": schedule.id, "cron": schedule.cron, "every_ms": schedule.every_ms,
            "timezone": schedule.timezone, "next_due_ms": schedule.next_due_ms,
            "last_sent_ms": schedule.last_sent_ms, "catch_up": schedule.catch_up,
            "priority": schedule.priority}
