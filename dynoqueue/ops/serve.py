"""``dynoqueue serve``: run the HTTP API (:mod:`dynoqueue.server`) on uvicorn.

Binds 127.0.0.1 by default. ``--token`` (or ``$DYNOQUEUE_SERVE_TOKEN``) makes every route but
``GET /`` (the dashboard page) and ``GET /healthz`` require ``Authorization: Bearer <token>``;
a bind to an address other than loopback is refused without one. What one client may hold is
capped: ``--max-body-bytes`` (413 beyond), ``--max-long-polls-per-client`` (429 with
Retry-After beyond), ``--max-long-poll-ms`` (400 for a longer hold).

SIGTERM or Ctrl-C stops it: held long polls are answered at once, empty (HTTP 200, no
message), the requests under way finish, and it prints ``dynoqueue serve: stopped``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from ..cli_args import int_at_least
from ..errors import ConfigurationError
from .session import EXIT_ERROR, EXIT_OK, add_connection_options, zones_of

TOKEN_ENV = "DYNOQUEUE_SERVE_TOKEN"  # noqa: S105 (the variable's name, not a secret)
#: --max-body-bytes' default, 4 MiB: ServerSettings.max_body_bytes' (here too, so that the
#: parser is built without the server extra).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 or ::1 addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def add_parser(subparsers: object) -> None:
    """Add ``serve`` to the ``dynoqueue`` command's subparsers."""
    serve: argparse.ArgumentParser = subparsers.add_parser(  # type: ignore[attr-defined]
        "serve", help="HTTP API: Camellia's and Youzan's delay-queue protocols, /metrics, "
                      "a dashboard",
        description="Serve the queues over HTTP (Camellia's delay-queue protocol, Youzan's "
                    "JSON commands, /metrics, /healthz, /openapi.json, a dashboard at /). "
                    "It runs the unack processing of the topics it serves.")
    add_connection_options(serve)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1; others need a token)")
    serve.add_argument("--port", type=int_at_least(0), default=8080, help="default 8080")
    serve.add_argument("--token", default=None,
                       help=f"bearer token every route but GET / and GET /healthz requires "
                            f"(default ${TOKEN_ENV})")
    serve.add_argument("--retention-ms", type=int_at_least(0), default=300_000, metavar="MS",
                       help="how long acked and deleted messages stay queryable with getMsg, "
                            "for topics without a stored policy (default 300000)")
    serve.add_argument("--unack-interval-ms", type=int_at_least(1), default=500, metavar="MS",
                       help="how often expired leases and TTLs are handled (default 500)")
    serve.add_argument("--index-sweep-ms", type=int_at_least(1), default=60_000, metavar="MS",
                       help="how often Youzan's id index drops jobs ended elsewhere "
                            "(default 60000)")
    limits = serve.add_argument_group("limits per client")
    limits.add_argument("--max-body-bytes", type=int_at_least(1),
                        default=DEFAULT_MAX_BODY_BYTES, metavar="BYTES",
                        help=f"largest request body; a larger one gets 413 (default "
                             f"{DEFAULT_MAX_BODY_BYTES}, 4 MiB)")
    limits.add_argument("--max-long-polls-per-client", type=int_at_least(1), default=16,
                        metavar="N",
                        help="held long polls (longPollingMsg, Youzan pop with a timeout) one "
                             "client address may have at once; one more gets 429 with "
                             "Retry-After (default 16)")
    limits.add_argument("--max-long-poll-ms", type=int_at_least(1), default=60_000,
                        metavar="MS",
                        help="longest hold of a long poll; a longer longPollingTimeoutMillis "
                             "or Youzan timeout gets 400 (default 60000)")
    serve.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; return its exit code."""
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(args.host) and token is None:
        print(f"dynoqueue serve: refusing to bind {args.host} without a token: pass --token "
              f"or set ${TOKEN_ENV} (or bind 127.0.0.1)", file=sys.stderr)
        return EXIT_ERROR
    try:
        import uvicorn

        from ..server import ServerSettings, create_app
    except ImportError as exc:
        print(f"dynoqueue serve: {exc.name} is missing; install the server extra: "
              f"pip install 'dynoqueue[server]'", file=sys.stderr)
        return EXIT_ERROR
    zones = zones_of(args.zones)
    try:
        settings = ServerSettings(
            url=args.url, zones=tuple(zones) if zones else None, local_zone=args.local_zone,
            prefix=args.prefix, token=token, retention_ms=args.retention_ms,
            unack_interval_ms=args.unack_interval_ms, index_sweep_ms=args.index_sweep_ms,
            max_body_bytes=args.max_body_bytes,
            max_long_polls_per_client=args.max_long_polls_per_client,
            max_long_poll_ms=args.max_long_poll_ms)
    except ConfigurationError as exc:
        print(f"dynoqueue serve: {exc}", file=sys.stderr)
        return EXIT_ERROR
    app = create_app(settings)
    config = uvicorn.Config(app, host=args.host, port=args.port,
                            log_level="warning" if not args.verbose else "info",
                            lifespan="on", timeout_graceful_shutdown=5, backlog=4096)
    server = _server(uvicorn.Server, config, app.state.dynoqueue.stopping)
    print(f"dynoqueue serve: http://{args.host}:{args.port}/ "
          f"({'token required' if token else 'no token'})", file=sys.stderr, flush=True)
    # uvicorn raises the signal it handled again once stopped: this handler takes a SIGTERM
    # (and the except a Ctrl-C), so the process ends here, with its last line, instead of
    # being killed by the default handler.
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        return EXIT_ERROR
    print("dynoqueue serve: stopped", file=sys.stderr, flush=True)
    return EXIT_OK


def _stopped(signum: int, frame: object) -> None:
    """SIGTERM once the server has stopped: nothing left to do."""


def _server(base: Any, config: Any, stopping: Callable[[], None]) -> Any:
    """A ``uvicorn.Server`` (``base``) that also calls ``stopping()`` when told to exit, so
    held long polls are answered at once (empty) rather than cut at the end of the graceful
    shutdown."""

    class Server(base):  # type: ignore[misc]
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            stopping()

    return Server(config)
