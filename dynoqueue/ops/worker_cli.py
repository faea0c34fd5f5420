"""``dynoqueue worker pkg.module:handler --url URL --queue NAME``: run a Worker from the shell.

The handler's kind picks the Worker: an ``async def`` runs on :class:`dynoqueue.asyncio.Worker`,
anything else on :class:`dynoqueue.Worker`. The URL takes every form of the builders
(``redis://``, ``rediss://``, ``redis+sentinel://``, ``redis+cluster://``, ``user:password@``).
SIGTERM or Ctrl-C stops it gracefully, a second one at once; it exits 0 once stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..cli_args import int_at_least
from ..errors import InvalidArgumentError
from .session import URL_ENV


def add_parser(commands: Any) -> None:
    """Add the ``worker`` subcommand to the ``dynoqueue`` command's subparsers."""
    worker = commands.add_parser(
        "worker",
        help="consume a queue, running pkg.module:handler on each message",
        description="Consume a queue with a Worker: pop, run the handler, ack; lease heartbeats, "
                    "retries with backoff, dead letters. An async def handler runs on the "
                    "asyncio Worker. SIGTERM or Ctrl-C stops it after the running handlers "
                    "finish (a second one stops at once).",
    )
    worker.add_argument("target", metavar="MODULE:HANDLER",
                        help="the handler, e.g. myapp.tasks:send_reminder (the current "
                             "directory is importable)")
    url = os.environ.get(URL_ENV) or None
    worker.add_argument("--url", required=url is None, default=url,
                        help=f"the deployment (default ${URL_ENV}): redis://, rediss://, "
                             "redis+sentinel://h:p,.../service or redis+cluster://h:p,h:p")
    worker.add_argument("--queue", required=True, metavar="NAME", help="the queue to consume")
    worker.add_argument("--zones", action="append", metavar="ZONE,ZONE,...",
                        help="every zone (shard), comma-separated (or the option repeated)")
    worker.add_argument("--local-zone", metavar="ZONE",
                        help="this worker's zone: it pops that zone's shard")
    worker.add_argument("--key-prefix", default="dynoqueue", metavar="PREFIX",
                        help="the queues' key prefix (default dynoqueue)")
    worker.add_argument("--concurrency", type=int_at_least(1), default=8, metavar="N",
                        help="handlers at once (default 8)")
    worker.add_argument("--lease-ms", type=int_at_least(1), metavar="MS",
                        help="each lease (default: the factory's unack timeout, 60000)")
    worker.add_argument("--heartbeat-ms", type=int_at_least(1), metavar="MS",
                        help="ms between lease extensions (default: a third of the lease)")
    worker.add_argument("--batch-size", type=int_at_least(1), metavar="N",
                        help="most messages one pop claims (default: chosen by the worker)")
    worker.add_argument("--shutdown-grace-ms", type=int_at_least(0), default=30_000,
                        metavar="MS", help="how long a stop waits for running handlers "
                                           "(default 30000)")
    worker.set_defaults(handler=run)


def load_handler(target: str) -> Callable[..., Any]:
    """Import ``module:attribute`` (the attribute may be dotted) with the current directory
    importable, as ``python -m`` does.

    Raises:
        InvalidArgumentError: not of that form, the module cannot be imported, or the
            attribute is missing or not callable.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise InvalidArgumentError(f"handler must be MODULE:HANDLER, e.g. myapp.tasks:send, "
                                   f"got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgumentError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise InvalidArgumentError(f"{module_name!r} has no {attribute!r}") from None
    if not callable(found):
        raise InvalidArgumentError(f"{target} is not callable")
    handler: Callable[..., Any] = found
    return handler


def _zones(values: Sequence[str] | None) -> list[str] | None:
    if not values:
        return None
    return [zone for value in values for zone in value.split(",") if zone]


def run(args: argparse.Namespace) -> int:
    """Run the ``worker`` subcommand until it is stopped; return its exit code (0)."""
    handler = load_handler(args.target)
    factory = {"zones": _zones(args.zones), "local_zone": args.local_zone,
               "key_prefix": args.key_prefix}
    settings = {"concurrency": args.concurrency, "lease_ms": args.lease_ms,
                "heartbeat_ms": args.heartbeat_ms, "batch_size": args.batch_size,
                "shutdown_grace_ms": args.shutdown_grace_ms}
    kind = "asyncio" if inspect.iscoroutinefunction(handler) else "threads"
    print(f"dynoqueue worker: queue {args.queue!r}, handler {args.target} on {kind}, "
          f"concurrency {args.concurrency}; SIGTERM or Ctrl-C stops it", file=sys.stderr)
    if kind == "asyncio":
        asyncio.run(_consume_async(args.url, args.queue, handler, factory, settings))
    else:
        _consume(args.url, args.queue, handler, factory, settings)
    print("dynoqueue worker: stopped", file=sys.stderr)
    return 0


def _consume(url: str, name: str, handler: Callable[..., Any], factory: dict[str, Any],
             settings: dict[str, Any]) -> None:
    from .. import RedisQueues
    from ..worker.threads import Worker

    with RedisQueues.from_url(url, **factory) as queues:
        queues.ping()  # the builders connect lazily: fail now on a bad URL or password
        Worker(queues.get(name), handler, **settings).run()


async def _consume_async(url: str, name: str, handler: Callable[..., Any],
                         factory: dict[str, Any], settings: dict[str, Any]) -> None:
    from ..asyncio import RedisQueues
    from ..worker.tasks import Worker

    async with RedisQueues.from_url(url, **factory) as queues:
        await queues.ping()
        await Worker(queues.get(name), handler, **settings).run()
