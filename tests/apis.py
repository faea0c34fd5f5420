"""Both APIs behind one interface, so one contract test body runs on sync and on asyncio.

``async`` factories are driven through :class:`Bridge`: one event loop in a daemon thread for
the whole session, and views that turn each coroutine method into a blocking call run on that
loop. Everything else (attributes, plain methods such as ``get``) passes through, so the test
bodies read exactly as for the sync API; what they assert is the asyncio API's behaviour.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

API_NAMES = ("sync", "async")


class Bridge:
    """An event loop running in its own thread, and blocking calls into it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-asyncio-loop",
                                        daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def wrap_factory(self, queues: Any) -> FactoryView:
        self.call(queues.__aenter__())  # starts the reprocessor task, as `async with` does
        return FactoryView(queues, self)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


class _View:
    def __init__(self, target: Any, bridge: Bridge) -> None:
        self._target = target
        self._bridge = bridge

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: self._bridge.call(attr(*args, **kwargs))
        return attr

    def __repr__(self) -> str:
        return f"<sync view of {self._target!r}>"


class QueueView(_View):
    """A dynoqueue.asyncio.DynoQueue with blocking methods."""


class FactoryView(_View):
    """A dynoqueue.asyncio.RedisQueues with blocking methods; ``close`` is ``aclose``."""

    def __init__(self, target: Any, bridge: Bridge) -> None:
        super().__init__(target, bridge)
        self._views: dict[int, QueueView] = {}

    def _view(self, queue: Any) -> QueueView:
        return self._views.setdefault(id(queue), QueueView(queue, self._bridge))

    def get(self, name: str, policy: Any = None) -> QueueView:
        return self._view(self._target.get(name, policy))

    def queues(self) -> list[QueueView]:
        return [self._view(q) for q in self._target.queues()]

    def close(self) -> None:
        self._bridge.call(self._target.aclose())

    def __enter__(self) -> FactoryView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
