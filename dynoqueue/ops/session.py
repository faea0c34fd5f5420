"""What every ops subcommand shares: the connection options, opening the factory, checking
that a queue exists, and turning failures into one clear line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import RedisQueues, RetryBudget
from ..connect.urls import redact_url
from ..errors import AccessDeniedError, DynoQueueError, RedisOperationError
from ..model.keys import PrefixKeys

DEFAULT_URL = "redis://localhost:6379"
#: The deployment every ops command uses when ``--url`` is absent (``dynoqueue dev`` prints it).
URL_ENV = "DYNOQUEUE_URL"
DEFAULT_PREFIX = "dynoqueue"
EXIT_OK = 0
#: The queue or message asked for does not exist (or a destructive command was refused).
EXIT_NOT_FOUND = 1
#: Bad usage, Redis unreachable, credentials refused.
EXIT_ERROR = 2
#: A CLI call gives up on an unreachable Redis after ~0.3 s instead of riding out a failover.
CLI_RETRY = RetryBudget(retries=2, base_s=0.05, cap_s=0.2)


class OpsError(Exception):
    """A failure the CLI reports as one line and an exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--url --zones --local-zone --prefix --json`` (every ops subcommand takes them)."""
    group = parser.add_argument_group("connection")
    group.add_argument("--url", default=default_url(),
                       help=f"the deployment (default ${URL_ENV}, else {DEFAULT_URL}): "
                            "redis://, rediss://, redis+sentinel://h:p,.../service, "
                            "redis+cluster://h:p,h:p; user:password@ for ACL users")
    group.add_argument("--zones", action="append", metavar="ZONE,ZONE,...",
                       help="every zone (shard), comma-separated (default: one shard)")
    group.add_argument("--local-zone", metavar="ZONE",
                       help="the zone whose shard pops and peeks use (default: the first)")
    group.add_argument("--prefix", default=DEFAULT_PREFIX, metavar="PREFIX",
                       help=f"the queues' key prefix (default {DEFAULT_PREFIX})")
    parser.add_argument("--json", action="store_true",
                        help="print machine-readable JSON instead of a table")


def default_url() -> str:
    """``$DYNOQUEUE_URL`` when set (and not empty), else :data:`DEFAULT_URL`."""
    return os.environ.get(URL_ENV) or DEFAULT_URL


def zones_of(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    return [zone for value in values for zone in value.split(",") if zone]


@contextmanager
def opened(args: argparse.Namespace) -> Iterator[RedisQueues]:
    """The factory the options name, checked with ``ping()``; closed afterwards.

    Raises:
        OpsError: the URL is unusable, Redis cannot be reached or refuses the credentials.
    """
    zones = zones_of(args.zones)
    local = args.local_zone or (zones[0] if zones else None)
    where = redact_url(args.url)
    try:
        queues = RedisQueues.from_url(args.url, zones=zones, local_zone=local,
                                      key_prefix=args.prefix, retry=CLI_RETRY,
                                      unack_handler_interval_ms=0)
    except DynoQueueError as exc:
        raise OpsError(f"cannot use {where}: {exc}") from exc
    try:
        with failures(where):
            queues.ping()
        yield queues
    finally:
        queues.close()


@contextmanager
def failures(where: str) -> Iterator[None]:
    """Turn the library's errors into one-line :class:`OpsError` s."""
    try:
        yield
    except AccessDeniedError as exc:
        raise OpsError(f"Redis at {where} refused the credentials: {_cause(exc)}") from exc
    except RedisOperationError as exc:
        raise OpsError(f"cannot reach Redis at {where}: {_cause(exc)}") from exc
    except DynoQueueError as exc:
        raise OpsError(str(exc)) from exc


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return str(cause) if cause is not None else str(exc)


def queue_exists(queues: RedisQueues, name: str) -> bool:
    """True if Redis holds anything of queue ``name``: messages, dead letters, retained ended
    messages or a stored policy (one EXISTS: every key of a queue shares its hash tag; a
    partitioned queue always has its policy stored there), or the queue registry
    ``P.QUEUES`` names it (a queue some process pushed to, drained since)."""
    keys = queues.keys_of(name)
    probe = [keys.message_hash, keys.dead, keys.ended, keys.policy, *keys.all_queue_shards,
             *keys.all_unack_shards]
    client = queues.quorum_conn
    return bool(client.exists(*probe)) or bool(
        client.sismember(PrefixKeys(queues.key_prefix).queues, name))


def existing_queue(queues: RedisQueues, name: str, where: str) -> Any:
    """``queues.get(name)`` for a queue that exists.

    Raises:
        OpsError: (exit 1) no such queue under this prefix.
    """
    with failures(where):
        queues.get(name)  # checks the name before any I/O
        if not queue_exists(queues, name):
            raise OpsError(f"no queue {name!r} under prefix {queues.key_prefix!r} at {where}",
                           EXIT_NOT_FOUND)
        return queues.get(name)


def run_guarded(command: str, handler: Callable[[argparse.Namespace], int],
                args: argparse.Namespace) -> int:
    """Run ``handler``; print an OpsError (or a library error) as one line on stderr."""
    where = redact_url(getattr(args, "url", None) or default_url())
    # The connection's retry warnings would precede the one line (shown with -v).
    quiet = _DropRetryWarnings() if not getattr(args, "verbose", 0) else None
    connect_log = logging.getLogger("dynoqueue.connect")
    if quiet is not None:
        connect_log.addFilter(quiet)
    try:
        with failures(where):
            return handler(args)
    except OpsError as exc:
        print(f"dynoqueue {command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    finally:
        if quiet is not None:
            connect_log.removeFilter(quiet)


class _DropRetryWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING


def confirm(args: argparse.Namespace, what: str) -> None:
    """Go on if ``--yes`` was given or the user types y at the prompt (only on a terminal).

    Raises:
        OpsError: (exit 1) not confirmed.
    """
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise OpsError(f"refusing to {what} without --yes", EXIT_NOT_FOUND)
    answer = input(f"{what}? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise OpsError("not confirmed; nothing changed", EXIT_NOT_FOUND)
