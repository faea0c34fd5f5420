"""``dynoqueue serve``: an HTTP API over dynoqueue queues (extra ``server``: Starlette on
uvicorn), built on :mod:`dynoqueue.asyncio`.

* Camellia's delay-queue protocol (``/camellia/delayQueue/...``), so its SDKs work unchanged;
* Youzan's JSON command protocol (``POST /youzan/delayQueue``);
* ``/metrics`` (Prometheus), ``/healthz``, ``/openapi.json``, and a dashboard at ``/``.

:func:`create_app` makes the ASGI app; ``dynoqueue serve`` (:mod:`.cli`) runs it on uvicorn.
"""

from .app import create_app
from .context import ServerSettings

__all__ = ["ServerSettings", "create_app"]
