"""``dynoqueue dev [single|ring|sentinel|cluster]``: a local Redis topology in the foreground.

Starts real ``redis-server`` processes (:mod:`dynoqueue.embedded`) on 127.0.0.1, prints the URL
the builders and every ops command take (and ``export DYNOQUEUE_URL=...``, which the ops
commands read when ``--url`` is absent), and runs until Ctrl-C or SIGTERM, then stops every
process it started and removes their directories. The quickest way to try a partitioned queue
on a Redis Cluster::

    dynoqueue dev cluster            # 3 primaries, 1 replica each
    export DYNOQUEUE_URL=redis+cluster://127.0.0.1:...
    dynoqueue stats --partitions
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..cli_args import int_at_least
from .session import EXIT_ERROR, EXIT_OK, URL_ENV

KINDS = ("single", "ring", "sentinel", "cluster")
#: The zones a ring or Sentinel ring names, in order (the first holds the primary).
ZONE_NAMES = tuple(f"zone-{letter}" for letter in "abcdefghij")


def add_parser(subparsers: Any) -> None:
    """Add ``dev`` to the ``dynoqueue`` command's subparsers."""
    dev: argparse.ArgumentParser = subparsers.add_parser(
        "dev", help="run a local Redis topology (single, ring, sentinel, cluster) until Ctrl-C",
        description="Start a local Redis topology of real redis-server processes on "
                    "127.0.0.1, print its URL (and the export line of $DYNOQUEUE_URL, which "
                    "every ops command reads when --url is absent), and keep it running "
                    "until Ctrl-C or SIGTERM, which stop every process it started.")
    dev.add_argument("kind", nargs="?", choices=KINDS, default="single",
                     help="single (default): one server; ring: a primary and a replica per "
                          "other zone; sentinel: a ring watched by 3 sentinels; cluster: a "
                          "Redis Cluster")
    dev.add_argument("--primaries", type=int_at_least(1), metavar="N",
                     help="a cluster's primaries (default 3)")
    dev.add_argument("--replicas", type=int_at_least(0), metavar="N",
                     help="a cluster's replicas per primary (default 1), or a ring's replicas, "
                          f"one per zone (default 2, at most {len(ZONE_NAMES) - 1})")
    dev.add_argument("--port", type=int_at_least(1), metavar="P",
                     help="the first server's port (single: the server; ring, sentinel: the "
                          "primary; cluster: the first primary, at most 55535); default: a "
                          "free one")
    dev.set_defaults(handler=run)


def _refusal(args: argparse.Namespace) -> str | None:
    """What is wrong with the options for the chosen kind, or None."""
    if args.primaries is not None and args.kind != "cluster":
        return "--primaries is for a cluster"
    if args.replicas is not None and args.kind == "single":
        return "a single server has no replicas (try ring, sentinel or cluster)"
    if args.kind in ("ring", "sentinel") and (args.replicas or 0) >= len(ZONE_NAMES):
        return f"a ring has at most {len(ZONE_NAMES) - 1} replicas"
    if args.port is not None and args.port > 65535:
        return f"--port must be in 1..65535, got {args.port}"
    return None


def topology_of(args: argparse.Namespace) -> tuple[Any, str, str]:
    """The (not started) topology the options name, its URL-to-be's kind and a description."""
    from .. import embedded

    if args.kind == "single":
        return embedded.RedisServer(port=args.port), "single", "one redis-server"
    if args.kind == "cluster":
        primaries = 3 if args.primaries is None else args.primaries
        replicas = 1 if args.replicas is None else args.replicas
        topology = embedded.ClusterTopology(primaries, replicas, port=args.port)
        return topology, "cluster", (f"a Redis Cluster of {primaries} primaries with "
                                     f"{replicas} replicas each")
    zones = list(ZONE_NAMES[:1 + (2 if args.replicas is None else args.replicas)])
    if args.kind == "ring":
        return (embedded.ZoneRing(zones, port=args.port), "ring",
                f"a zone ring over {', '.join(zones)} (primary in {zones[0]})")
    return (embedded.SentinelRing(zones, port=args.port), "sentinel",
            f"a zone ring over {', '.join(zones)} watched by 3 sentinels")


def url_of(topology: Any, kind: str) -> str:
    """The URL the builders take for a started topology."""
    return str(topology.url if kind in ("single", "sentinel", "cluster")
               else topology.primary.url)


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    """Run the topology until SIGINT/SIGTERM (or ``stop`` is set); return the exit code."""
    refused = _refusal(args)
    if refused is not None:
        print(f"dynoqueue dev: {refused}", file=sys.stderr)
        return EXIT_ERROR
    topology, kind, what = topology_of(args)
    stop = stop or threading.Event()
    restore = _on_signals(lambda: stop.set())
    try:
        print(f"dynoqueue dev: starting {what}...", file=sys.stderr, flush=True)
        with topology:
            url = url_of(topology, kind)
            print(url)
            print(f"export {URL_ENV}={shlex.quote(url)}")
            if kind == "ring":
                for zone, replica in topology.replicas.items():
                    print(f"# replica of zone {zone}: {replica.url}")
            sys.stdout.flush()
            print("dynoqueue dev: running; Ctrl-C or SIGTERM stops it", file=sys.stderr,
                  flush=True)
            while not stop.wait(0.5):
                pass
            print("dynoqueue dev: stopping", file=sys.stderr, flush=True)
    finally:
        restore()
    print("dynoqueue dev: stopped", file=sys.stderr, flush=True)
    return EXIT_OK


def _on_signals(handler: Callable[[], None]) -> Callable[[], None]:
    """Call ``handler`` on SIGINT and SIGTERM (in the main thread only); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in before:
        signal.signal(sig, lambda signum, frame: handler())

    def restore() -> None:
        for sig, old in before.items():
            signal.signal(sig, old)

    return restore
