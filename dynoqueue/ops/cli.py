"""The argparse side of the ops subcommands: ``dynoqueue stats|schedules|peek|get|dead|redrive|
remove|purge|top|policy|discover|pause|resume|serve|dev`` (added to the ``dynoqueue`` command by
:func:`add_parsers`). Each takes ``--url``, default ``$DYNOQUEUE_URL``.

Exit codes: 0 done; 1 the queue or message does not exist, nothing to redrive, or a
destructive command was not confirmed; 2 bad usage, Redis unreachable or the credentials
refused. Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from ..cli_args import int_at_least, positive_float
from . import commands, dev, pausing, serve
from .session import add_connection_options, run_guarded


def _command(subparsers: Any, name: str, handler: Callable[[argparse.Namespace], int],
             help: str, description: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help,
                                                            description=description)
    add_connection_options(parser)
    parser.set_defaults(handler=functools.partial(run_guarded, name, handler))
    return parser


def add_parsers(subparsers: Any) -> None:
    """Add the ops subcommands to the ``dynoqueue`` command's subparsers."""
    _add_reading(subparsers)
    _add_changing(subparsers)
    _add_top(subparsers)
    _add_configuring(subparsers)
    pausing.add_parsers(subparsers, _command)
    serve.add_parser(subparsers)
    dev.add_parser(subparsers)


def _add_reading(subparsers: Any) -> None:
    """stats, peek, get, dead: they read and change nothing."""
    stats = _command(subparsers, "stats", commands.stats,
                     "per queue and shard: waiting, ready, delayed, leased, dead, oldest age",
                     "Show each queue's counts per shard, read from Redis now. Without "
                     "names, every queue under the prefix (a SCAN).")
    stats.add_argument("queues", nargs="*", metavar="QUEUE", help="queues to show")
    stats.add_argument("--partitions", action="store_true",
                       help="one row per partition and shard of a partitioned queue "
                            "(QueuePolicy.partitions) instead of the sums per shard")

    peek = _command(subparsers, "peek", commands.peek, "due messages of a queue, not leased",
                    "Show due messages of every shard (the local one first) without "
                    "leasing them.")
    peek.add_argument("queue", metavar="QUEUE")
    peek.add_argument("-n", type=int_at_least(1), default=10, metavar="N",
                      help="most messages (default 10)")

    get = _command(subparsers, "get", commands.get, "one message's lifecycle info",
                   "Show where a message is in its lifecycle (state and Camellia's code, "
                   "deliveries, due time, lease expiry, last error).")
    get.add_argument("queue", metavar="QUEUE")
    get.add_argument("id", metavar="ID")

    scheduled = _command(subparsers, "schedules", commands.schedules,
                         "each schedule: cron or interval, next tick, last tick sent",
                         "List the recurring schedules of the queues named (without names, of "
                         "every queue that has one): the definition, the next tick and the "
                         "last tick that fell due, in UTC or --tz.")
    scheduled.add_argument("queues", nargs="*", metavar="QUEUE", help="queues to show")
    scheduled.add_argument("--tz", type=commands.time_zone, default="UTC", metavar="ZONE",
                           help="show times in this IANA time zone (default UTC)")

    dead = _command(subparsers, "dead", commands.dead, "a queue's dead letters with reasons",
                    "List dead letters, oldest first: reason, deliveries, when, last error.")
    dead.add_argument("queue", metavar="QUEUE")
    dead.add_argument("-n", type=int_at_least(1), default=100, metavar="N",
                      help="most dead letters (default 100)")


def _add_changing(subparsers: Any) -> None:
    """redrive, remove, purge: they move or delete messages."""
    redrive = _command(subparsers, "redrive", commands.redrive,
                       "dead letters back to waiting",
                       "Put dead letters back to waiting (their delivery counts start again).")
    redrive.add_argument("queue", metavar="QUEUE")
    redrive.add_argument("ids", nargs="*", metavar="ID", help="the dead letters to redrive")
    redrive.add_argument("--all", action="store_true", help="every dead letter")
    redrive.add_argument("--delay-ms", type=int_at_least(0), default=0, metavar="MS",
                         help="due after this delay (default 0: at once)")

    remove = _command(subparsers, "remove", commands.remove, "delete one message",
                      "Delete one message wherever it is (waiting, leased, dead).")
    remove.add_argument("queue", metavar="QUEUE")
    remove.add_argument("id", metavar="ID")
    remove.add_argument("--yes", action="store_true", help="do not ask")

    purge = _command(subparsers, "purge", commands.purge, "delete every message of a queue",
                     "Delete every message of the queue, waiting, leased and dead, and its "
                     "lifecycle data; its stored policy stays (policy --delete removes it). "
                     "--dead: only its dead letters.")
    purge.add_argument("queue", metavar="QUEUE")
    purge.add_argument("--dead", action="store_true", help="only the dead letters")
    purge.add_argument("--yes", action="store_true", help="do not ask")


def _add_top(subparsers: Any) -> None:
    """top: the live view."""
    top = _command(subparsers, "top", commands.top, "a live view of every queue with rates",
                   "Refresh a table of every queue (or the named ones) with the rate of "
                   "change per second of waiting, leased and dead. Ctrl-C stops it.")
    top.add_argument("queues", nargs="*", metavar="QUEUE", help="queues to show")
    top.add_argument("--interval", type=positive_float, default=2.0, metavar="S",
                     help="seconds between refreshes (default 2)")
    top.add_argument("--iterations", type=int_at_least(0), default=0, metavar="N",
                     help="stop after N refreshes (default 0: until Ctrl-C)")


def _add_configuring(subparsers: Any) -> None:
    """policy, discover: a queue's stored policy, the queue registry."""
    policy = _command(subparsers, "policy", commands.policy,
                      "show or change a queue's stored policy",
                      "Show the queue's stored QueuePolicy, change the fields given "
                      "(atomically; the others keep their stored values), or delete it "
                      "(--delete; purge and clear() keep it). Running processes "
                      "apply it at their next call; see docs/semantics.md, 'Changing a stored "
                      "policy', for what happens to messages already waiting, leased or dead.")
    policy.add_argument("queue", metavar="QUEUE")
    policy.add_argument("--max-deliveries", type=int_at_least(0), metavar="N",
                        help="deliveries before a message is dead-lettered (0: unlimited)")
    policy.add_argument("--message-ttl-ms", type=int_at_least(0), metavar="MS",
                        help="TTL of messages pushed from now on (0: none)")
    policy.add_argument("--retention-ms", type=int_at_least(0), metavar="MS",
                        help="how long ended messages stay queryable (0: not kept)")
    policy.add_argument("--dead-letter-retention-ms", type=int_at_least(1), metavar="MS",
                        help="how long dead letters are kept")
    policy.add_argument("--max-in-flight", type=int_at_least(0), metavar="N",
                        help="most messages leased at once, over every consumer (0: no cap)")
    policy.add_argument("--rate-limit", type=commands.rate_limit, metavar="COUNT/MS",
                        help="most deliveries started in any window of MS milliseconds, e.g. "
                             "50/1000; 'none' removes it")
    policy.add_argument("--create", action="store_true",
                        help="store a policy for a queue Redis knows nothing of yet (without "
                             "it, an unknown queue name is refused: a typo)")
    policy.add_argument("--delete", action="store_true",
                        help="delete the stored policy (its messages stay; asks unless --yes)")
    policy.add_argument("--yes", action="store_true", help="do not ask")

    _command(subparsers, "discover", commands.discover,
             "register every queue found under the prefix (a SCAN) for unack processing",
             "Add every queue found in Redis under the prefix to the queue registry, so "
             "that every zone's unack pass covers it. Once, for queues only Java v1 "
             "clients have written (they do not register queues).")
