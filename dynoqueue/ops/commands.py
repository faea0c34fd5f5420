"""The ops subcommands, each ``handler(args) -> exit code`` (see :mod:`dynoqueue.ops.cli`)."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..connect.urls import redact_url
from ..errors import ConfigurationError
from ..metrics.placement import Placement, placements
from ..model.keys import scheduled_queues
from ..model.message import as_text
from ..model.policy import QueuePolicy, RateLimit
from ..model.schedules import schedule_fields
from ..model.states import MessageInfo
from ..model.stats import QueueStats
from . import render
from .session import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    OpsError,
    confirm,
    existing_queue,
    opened,
    queue_exists,
)

#: The keys of one ``stats --json`` object, in order (``partition`` only with --partitions).
STATS_FIELDS = ("queue", "shard", "waiting", "ready", "delayed", "leased", "dead",
                "oldest_ready_age_ms")
#: ``stats --partitions``' keys: each row also says where its partition lives.
PARTITION_FIELDS = ("queue", "partition", "node", "slot", *STATS_FIELDS[1:])


def stats_rows(stats: Sequence[QueueStats], partitions: bool = False,
               homes: Mapping[str, Sequence[Placement]] | None = None) -> list[dict[str, Any]]:
    """One object per queue and shard (``dead`` is the queue's: dead letters are kept per
    queue, so it repeats on each of its shards' rows); with ``partitions``, one per queue,
    partition and shard, with the partition's own dead letters (0 for a queue of one) and,
    from ``homes`` (queue -> each partition's :class:`Placement`), its node and slot."""
    rows = []
    for q in stats:
        for part in (q.partitions or [q]) if partitions else [q]:
            index = part.partition or 0
            home = (homes or {}).get(q.queue)
            where = home[index] if home and index < len(home) else Placement(None, None)
            for s in part.shards:
                row: dict[str, Any] = {"queue": q.queue}
                if partitions:
                    row.update(partition=index, node=where.node, slot=where.slot)
                row.update(shard=s.shard, waiting=s.waiting, ready=s.ready, delayed=s.delayed,
                           leased=s.leased, dead=part.dead,
                           oldest_ready_age_ms=s.oldest_ready_age_ms)
                rows.append(row)
    return rows


def stats(args: argparse.Namespace) -> int:
    """``stats [QUEUE...] [--partitions]``: per queue (and partition) and shard,
    waiting/ready/delayed/leased/dead/age."""
    where = redact_url(args.url)
    with opened(args) as queues:
        names = list(args.queues) or None
        for name in names or []:
            existing_queue(queues, name, where)
        found = queues.stats(names)
        homes = {q.queue: placements(queues, q.queue, q.policy) for q in found
                 } if args.partitions else None
    rows = stats_rows(found, args.partitions, homes)
    fields = PARTITION_FIELDS if args.partitions else STATS_FIELDS
    if args.json:
        render.emit_json(rows)
    elif not found:
        print(f"no queues under prefix {args.prefix!r} at {where}")
    else:
        render.show(render.table(f"dynoqueue queues at {where} (prefix {args.prefix})",
                                 fields, [[r[f] for f in fields] for r in rows]))
    return EXIT_OK


#: The keys of one ``schedules --json`` object, in order.
SCHEDULE_FIELDS = ("queue", "schedule", "cron", "every_ms", "timezone", "next_due_ms",
                   "last_sent_ms", "catch_up", "priority")


def schedules(args: argparse.Namespace) -> int:
    """``schedules [QUEUE...]``: each schedule's definition, next tick and last tick sent (every
    queue with schedules without names)."""
    where = redact_url(args.url)
    with opened(args) as queues:
        names = list(args.queues)
        for name in names:
            existing_queue(queues, name, where)
        if not names:
            raw = queues.quorum_conn.smembers(scheduled_queues(queues.key_prefix))
            names = sorted(as_text(n) for n in raw)
        rows = [{"queue": name, **schedule_fields(s)}
                for name in names for s in queues.get(name).schedules()]
    if args.json:
        render.emit_json(rows)
    else:
        shown = ("queue", "schedule", "when", "timezone", "next tick", "last sent", "catch_up")
        render.show(render.table(
            f"dynoqueue schedules at {where} (prefix {args.prefix})", shown,
            [[r["queue"], r["schedule"], r["cron"] or f"every {r['every_ms']} ms",
              r["timezone"], _when_in(r["next_due_ms"], args.tz),
              _when_in(r["last_sent_ms"], args.tz),
              r["catch_up"]] for r in rows]))
    return EXIT_OK


def peek(args: argparse.Namespace) -> int:
    """``peek QUEUE [-n N]``: due messages of every shard (local first), without leasing."""
    where = redact_url(args.url)
    with opened(args) as queues:
        q = existing_queue(queues, args.queue, where)
        messages = q.unsafe_peek_all_shards(args.n)
    rows = [{"id": m.id, "shard": m.shard, "priority": m.priority, "timeout": m.timeout,
             "payload": m.payload} for m in messages]
    if args.json:
        render.emit_json(rows)
    else:
        render.show(render.table(f"{args.queue}: {len(rows)} due messages (not leased)",
                                 ["id", "shard", "priority", "payload"],
                                 [[r["id"], r["shard"], r["priority"], r["payload"]]
                                  for r in rows]))
    return EXIT_OK


def info_fields(info: MessageInfo) -> dict[str, Any]:
    """The lifecycle's ``info`` as JSON-ready fields (state by name, plus Camellia's code)."""
    return {"id": info.id, "state": info.state.name, "code": info.state.code,
            "shard": info.shard, "priority": info.priority, "payload": info.payload,
            "deliveries": info.deliveries, "max_deliveries": info.max_deliveries,
            "enqueued_at_ms": info.enqueued_at_ms, "due_at_ms": info.due_at_ms,
            "lease_expires_at_ms": info.lease_expires_at_ms,
            "expires_at_ms": info.expires_at_ms, "ended_at_ms": info.ended_at_ms,
            "last_error": info.last_error}


def get(args: argparse.Namespace) -> int:
    """``get QUEUE ID``: the message's lifecycle info."""
    where = redact_url(args.url)
    with opened(args) as queues:
        q = existing_queue(queues, args.queue, where)
        info = q.info(args.id)
    if info is None:
        raise OpsError(f"no message {args.id!r} in queue {args.queue!r}", EXIT_NOT_FOUND)
    fields = info_fields(info)
    if args.json:
        render.emit_json(fields)
    else:
        render.show(render.pairs(f"{args.queue} / {args.id}", fields))
    return EXIT_OK


def dead(args: argparse.Namespace) -> int:
    """``dead QUEUE [-n N]``: dead letters, oldest first, with their reasons."""
    where = redact_url(args.url)
    with opened(args) as queues:
        q = existing_queue(queues, args.queue, where)
        letters = q.dead_letters(args.n)
        total = q.dead_size()
    rows = [{"id": d.message.id, "reason": d.reason, "deliveries": d.deliveries,
             "died_at_ms": d.died_at_ms, "last_error": d.last_error,
             "payload": d.message.payload} for d in letters]
    if args.json:
        render.emit_json(rows)
    else:
        render.show(render.table(
            f"{args.queue}: {total} dead letters" + (f" (first {len(rows)})"
                                                      if total > len(rows) else ""),
            ["id", "reason", "deliveries", "died_at", "last_error", "payload"],
            [[r["id"], r["reason"], r["deliveries"], _when(r["died_at_ms"]), r["last_error"],
              r["payload"]] for r in rows]))
    return EXIT_OK


def redrive(args: argparse.Namespace) -> int:
    """``redrive QUEUE [ID...|--all]``: dead letters back to waiting."""
    if bool(args.ids) == bool(args.all):
        raise OpsError("give the dead letters' ids or --all (not both)")
    where = redact_url(args.url)
    with opened(args) as queues:
        q = existing_queue(queues, args.queue, where)
        moved = q.redrive(None if args.all else list(args.ids), delay_ms=args.delay_ms)
    _done(args, {"queue": args.queue, "redriven": moved},
          f"{args.queue}: {moved} dead letters back to waiting")
    return EXIT_OK if moved or args.all else EXIT_NOT_FOUND


def remove(args: argparse.Namespace) -> int:
    """``remove QUEUE ID``: delete one message wherever it is (asks unless --yes)."""
    where = redact_url(args.url)
    with opened(args) as queues:
        q = existing_queue(queues, args.queue, where)
        confirm(args, f"remove message {args.id!r} from queue {args.queue!r}")
        removed = q.remove(args.id)
    if not removed:
        raise OpsError(f"no message {args.id!r} in queue {args.queue!r}", EXIT_NOT_FOUND)
    _done(args, {"queue": args.queue, "removed": args.id}, f"{args.queue}: removed {args.id}")
    return EXIT_OK


def purge(args: argparse.Namespace) -> int:
    """``purge QUEUE``: delete every message of the queue, or with ``--dead`` only its dead
    letters (asks unless --yes)."""
    where = redact_url(args.url)
    with opened(args) as queues:
        q = existing_queue(queues, args.queue, where)
        if args.dead:
            confirm(args, f"delete every dead letter of queue {args.queue!r}")
            count = q.purge_dead()
            _done(args, {"queue": args.queue, "dead_purged": count},
                  f"{args.queue}: {count} dead letters deleted")
            return EXIT_OK
        (before,) = queues.stats([args.queue])
        confirm(args, f"delete queue {args.queue!r} ({before.total('waiting')} waiting, "
                      f"{before.total('leased')} leased, {before.dead} dead)")
        q.clear()
        kept = q.stored_policy() is not None
    _done(args, {"queue": args.queue, "waiting": before.total("waiting"),
                 "leased": before.total("leased"), "dead": before.dead, "purged": True,
                 "policy_kept": kept},
          f"{args.queue}: purged ({before.total('waiting')} waiting, "
          f"{before.total('leased')} leased, {before.dead} dead letters deleted)"
          + ("; its stored policy stays (dynoqueue policy QUEUE --delete removes it)"
             if kept else ""))
    return EXIT_OK


def discover(args: argparse.Namespace) -> int:
    """``discover``: add every queue found under the prefix (a SCAN) to the queue registry, so
    every zone's unack pass covers it (for queues only Java v1 clients have written)."""
    with opened(args) as queues:
        names = queues.discover_queues()
    _done(args, {"registered": names},
          f"{len(names)} queues in the registry: {', '.join(names) or '-'}")
    return EXIT_OK


def top(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    """``top``: a live table of every queue, refreshed every ``--interval`` s, with the rate
    of change of each count per second; ``--iterations`` stops it (0: until Ctrl-C)."""
    where = redact_url(args.url)
    previous: dict[str, tuple[float, QueueStats]] = {}
    with opened(args) as queues:
        live = _live(args)
        try:
            count = 0
            while True:
                found = queues.stats(list(args.queues) or None)
                now = time.monotonic()
                rows = [_top_row(s, previous.get(s.queue), now) for s in found]
                previous = {s.queue: (now, s) for s in found}
                if args.json:
                    render.emit_json(rows)
                elif not rows:
                    _show_live(live, f"dynoqueue top: no queues under prefix {args.prefix!r} "
                                     f"at {where}")
                else:
                    view = render.table(
                        f"dynoqueue top: {where} (prefix {args.prefix}), every "
                        f"{args.interval:g} s; rates per second",
                        ["queue", "waiting", "ready", "leased", "dead", "oldest_ready_ms",
                         "waiting/s", "leased/s", "dead/s"],
                        [[r["queue"], r["waiting"], r["ready"], r["leased"], r["dead"],
                          r["oldest_ready_age_ms"], _rate(r["waiting_per_s"]),
                          _rate(r["leased_per_s"]), _rate(r["dead_per_s"])] for r in rows])
                    _show_live(live, view)
                count += 1
                if args.iterations and count >= args.iterations:
                    return EXIT_OK
                sleep(args.interval)
        finally:
            if live is not None:
                live.stop()


def _show_live(live: Any, view: Any) -> None:
    """One refresh of ``top``: in place on a terminal, else printed."""
    if live is not None:
        live.update(view, refresh=True)
    else:
        render.show(view)


def _live(args: argparse.Namespace) -> Any:
    if args.json:
        return None
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        return None
    console = Console()
    if not console.is_terminal:
        return None  # a pipe: one table per refresh
    live = Live(console=console, auto_refresh=False, transient=False)
    live.start()
    return live


def _top_row(stats: QueueStats, before: tuple[float, QueueStats] | None,
             now: float) -> dict[str, Any]:
    row: dict[str, Any] = {"queue": stats.queue, "waiting": stats.total("waiting"),
                           "ready": stats.total("ready"), "leased": stats.total("leased"),
                           "dead": stats.dead, "oldest_ready_age_ms": stats.oldest_ready_age_ms}
    for name in ("waiting", "leased", "dead"):
        rate = None
        if before is not None and now > before[0]:
            then = before[1].dead if name == "dead" else before[1].total(name)
            rate = round((row[name] - then) / (now - before[0]), 2)
        row[f"{name}_per_s"] = rate
    return row


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def _when_in(ms: int | None, zone: str) -> str:
    """Epoch ms as a time in IANA zone ``zone``, with the zone's abbreviation."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")


def time_zone(text: str) -> str:
    """argparse type of ``--tz``: an IANA time zone name."""
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise argparse.ArgumentTypeError(f"{text!r} is no IANA time zone") from None
    return text


#: QueuePolicy fields the ``policy`` command changes (option name = field name).
POLICY_FIELDS = ("max_deliveries", "message_ttl_ms", "retention_ms", "dead_letter_retention_ms",
                 "max_in_flight", "rate_limit")
#: ``--rate-limit none``: remove the stored rate limit.
NO_RATE_LIMIT = "none"


def rate_limit(text: str) -> RateLimit | str:
    """``COUNT/MS`` (e.g. ``50/1000``) as a RateLimit, or ``none`` (argparse type)."""
    if text.strip().lower() == NO_RATE_LIMIT:
        return NO_RATE_LIMIT
    count, _, per_ms = text.partition("/")
    try:
        return RateLimit(int(count), int(per_ms))
    except ValueError as exc:  # not two integers, or ConfigurationError: out of range
        raise argparse.ArgumentTypeError(
            f"expected COUNT/MS (e.g. 50/1000) or 'none', got {text!r}"
            + (f": {exc}" if isinstance(exc, ConfigurationError) else "")) from None


def policy(args: argparse.Namespace) -> int:
    """``policy QUEUE [--max-deliveries N ...] [--create] | --delete [--yes]``: show the stored
    policy, change the given fields of it atomically (the others keep their stored values),
    or delete it. A queue Redis knows nothing of (no message, policy or registry entry) is
    refused unless ``--create``: a typo must not configure a new queue."""
    changes = {f: getattr(args, f) for f in POLICY_FIELDS if getattr(args, f) is not None}
    if changes.get("rate_limit") == NO_RATE_LIMIT:
        changes["rate_limit"] = None
    if args.delete and (changes or args.create):
        raise OpsError("--delete takes no policy fields and no --create")
    where = redact_url(args.url)
    with opened(args) as queues:
        q = queues.get(args.queue)
        if not args.create and not queue_exists(queues, args.queue):
            raise OpsError(f"no queue {args.queue!r} under prefix {queues.key_prefix!r} at "
                           f"{where} (no messages, no stored policy, not registered); pass "
                           "--create to configure a new queue")
        before = q.stored_policy()
        if args.delete:
            return _delete_policy(args, q, before)
        after = before
        if changes:
            try:
                wanted = dataclasses.replace(before or QueuePolicy(), **changes)
            except ValueError as exc:  # ConfigurationError: a value out of range
                raise OpsError(str(exc)) from None
            q.set_policy(wanted)
            after = q.stored_policy()
    doc = {"queue": args.queue, "before": _policy_doc(before), "policy": _policy_doc(after)}
    _done(args, doc, f"{args.queue}: {'changed to ' if changes else ''}"
                     f"{render.policy_text(after)}")
    return EXIT_OK


def _delete_policy(args: argparse.Namespace, q: Any, before: QueuePolicy | None) -> int:
    """``policy QUEUE --delete``: delete the stored policy (asks unless --yes)."""
    if before is None:
        raise OpsError(f"queue {args.queue!r} has no stored policy", EXIT_NOT_FOUND)
    confirm(args, f"delete the stored policy of queue {args.queue!r} "
                  f"({render.policy_text(before)})")
    deleted = q.delete_policy()
    _done(args, {"queue": args.queue, "before": _policy_doc(before), "deleted": deleted},
          f"{args.queue}: stored policy deleted (was {render.policy_text(before)})")
    return EXIT_OK


def _policy_doc(p: QueuePolicy | None) -> dict[str, Any] | None:
    return None if p is None else dataclasses.asdict(p)


def _done(args: argparse.Namespace, doc: dict[str, Any], line: str) -> None:
    if args.json:
        render.emit_json(doc)
    else:
        print(line)
