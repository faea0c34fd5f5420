"""The ASGI app of ``dynoqueue serve`` (Starlette, on :mod:`dynoqueue.asyncio`).

Routes: Camellia's protocol (:mod:`.camellia`), Youzan's (:mod:`.youzan`), ``/metrics``
(Prometheus), ``/healthz`` (pings Redis), ``/openapi.json`` (:mod:`.openapi`: the server as
configured), and the dashboard (``/`` and ``/api/...``, :mod:`.dashboard`). With a token,
every route but ``GET /`` (the dashboard page, which holds no data) and ``GET /healthz``
(liveness probes send no token) needs ``Authorization: Bearer <token>``, else 401. Bad input
gets a 4xx in the protocol's error shape before anything is written; a Redis failure a 503,
any other failure a 500 with one line, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import AccessDeniedError, DynoQueueError, QueueClosedError, RedisOperationError
from ..metrics import SnapshotCollector
from ..model.stats import ReadCost
from . import camellia, dashboard, youzan
from .context import ServerSettings, ServerState
from .http import JSON, BadRequest
from .openapi import spec

log = logging.getLogger("dynoqueue.server")


def _error(request: Request, status: int, message: str) -> JSON:
    if request.url.path.startswith(youzan.PATH):
        return youzan.answer(False, message, status=status)
    return JSON({"code": status, "msg": message}, status_code=status)


#: (method, path) of the routes served without the token: the dashboard page (it holds no
#: data: its script sends the token to /api) and the liveness probe.
OPEN_ROUTES = frozenset({("GET", "/"), ("GET", "/healthz")})


class _Auth:
    """Bearer-token auth in front of every route but :data:`OPEN_ROUTES` (a plain ASGI
    middleware: it leaves the request stream alone, so a held long poll still sees its client
    go away)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.token is not None and scope["type"] == "http" and (
                scope["method"], scope["path"]) not in OPEN_ROUTES:
            request = Request(scope)
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    given.strip().encode(), self.token.encode()):
                response = _error(request, 401,
                                  "unauthorized: send Authorization: Bearer <token>")
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _bad_request(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, BadRequest):
        return _error(request, 400, str(exc))
    response = _error(request, exc.status, str(exc))
    response.headers.update(exc.headers)
    return response


async def _redis_down(request: Request, exc: Exception) -> Response:
    log.error("%s %s: %s", request.method, request.url.path, exc)
    if isinstance(exc, AccessDeniedError):
        return _error(request, 503, f"Redis refused the server's credentials: {exc}")
    return _error(request, 503, f"Redis unavailable: {exc}")


async def _internal(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed: %r", request.method, request.url.path, exc)
    return _error(request, 500, "internal error")


#: Exception -> handler (the most specific class wins): bad input 4xx, Redis 503, else 500.
HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    BadRequest: _bad_request,
    ValueError: _bad_request,  # the library's bad-input errors are ValueErrors
    DynoQueueError: _bad_request,
    RedisOperationError: _redis_down,
    QueueClosedError: _redis_down,
    Exception: _internal,
}


def create_app(settings: ServerSettings) -> Starlette:
    """The app; its lifespan opens the asyncio factory (and the unack processing of every
    topic served) and closes it.

    Args:
        settings: how to connect, the protocols' defaults and the limits per client.
    """
    state = ServerState(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.open()
        sweeper = asyncio.create_task(state.sweep_loop())
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await state.close()

    async def metrics(request: Request) -> Response:
        cost = ReadCost()
        stats = await state.factory().stats(cost=cost)
        body = generate_latest(state.registry) + generate_latest(
            _snapshot_registry(SnapshotCollector(stats, cost)))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> JSON:
        try:
            rtt = await state.factory().ping()
        except DynoQueueError as exc:
            return JSON({"status": "error", "error": str(exc)}, status_code=503)
        return JSON({"status": "ok", "redis_ms": {k: round(v, 3) for k, v in rtt.items()}})

    async def openapi(request: Request) -> JSON:
        return JSON(spec(settings, state.factory().settings.max_payload_bytes))

    routes = [
        *camellia.routes(state),
        *youzan.routes(state),
        *dashboard.routes(state),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=HANDLERS,
                    middleware=[Middleware(_Auth, token=settings.token)])
    app.state.dynoqueue = state
    return app


def _snapshot_registry(collector: SnapshotCollector) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(collector)
    return registry
