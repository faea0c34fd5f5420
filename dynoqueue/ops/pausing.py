"""``dynoqueue pause QUEUE`` and ``dynoqueue resume QUEUE``: stop and restart a queue's
deliveries (``DynoQueue.pause()`` / ``resume()``) for every consumer of every process at once.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..connect.urls import redact_url
from .commands import _done
from .session import EXIT_NOT_FOUND, EXIT_OK, OpsError, failures, opened, queue_exists


def add_parsers(subparsers: Any, command: Any) -> None:
    """Add ``pause`` and ``resume`` (``command(subparsers, name, handler, help, description)``
    makes a subcommand with the connection options)."""
    pause_parser = command(subparsers, "pause", pause,
                           "stop a queue's deliveries (pushes and acks go on)",
                           "Pause the queue: no pop of any process leases a message until "
                           "'dynoqueue resume'; pushes, acks and reads go on. Stored in Redis, "
                           "so purge and restarts keep it; every partition is paused.")
    pause_parser.add_argument("queue", metavar="QUEUE")
    pause_parser.add_argument("--create", action="store_true",
                              help="pause a queue Redis knows nothing of yet (without it, an "
                                   "unknown queue name is refused: a typo)")
    resume_parser = command(subparsers, "resume", resume,
                            "let a paused queue deliver again",
                            "Resume a paused queue; waiting pops are woken at once.")
    resume_parser.add_argument("queue", metavar="QUEUE")


def pause(args: argparse.Namespace) -> int:
    """``pause QUEUE``: set the queue's pause flag (a queue Redis holds nothing of is refused
    unless --create)."""
    where = redact_url(args.url)
    with opened(args) as queues, failures(where):
        q = queues.get(args.queue)
        if not args.create and not q.is_paused() and not queue_exists(queues, args.queue):
            raise OpsError(f"no queue {args.queue!r} under prefix {queues.key_prefix!r} at "
                           f"{where} (--create pauses it anyway)", EXIT_NOT_FOUND)
        changed = q.pause()
    _done(args, {"queue": args.queue, "paused": True, "changed": changed},
          f"{args.queue}: paused" if changed else f"{args.queue}: was paused already")
    return EXIT_OK


def resume(args: argparse.Namespace) -> int:
    """``resume QUEUE``: delete the queue's pause flag and wake its waiting pops."""
    where = redact_url(args.url)
    with opened(args) as queues, failures(where):
        changed = queues.get(args.queue).resume()
    _done(args, {"queue": args.queue, "paused": False, "changed": changed},
          f"{args.queue}: resumed" if changed else f"{args.queue}: was not paused")
    return EXIT_OK
