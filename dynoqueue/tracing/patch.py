"""Instrumenting: the façade methods of both DynoQueue classes replaced by traced ones, and
a Worker handler wrapper, put in place by :func:`dynoqueue.tracing.instrument` and removed by
:func:`dynoqueue.tracing.uninstrument`.

Replacing methods on the classes (not checking a flag inside them) is what makes tracing off
cost nothing: uninstrumented, the classes hold their own functions. Each traced method is
built from the same plan for both APIs: ``begin(queue, args, kwargs)`` starts the span (and may
change the arguments: a push's messages carry their creation context), the original method
runs, ``finish(result, error)`` ends the span.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..asyncio.queue import DynoQueue as AsyncDynoQueue
from ..model.message import Message
from ..queue import DynoQueue as SyncDynoQueue
from ..worker.base import HANDLER_WRAPPERS
from .spans import Finish, Telemetry

#: begin(queue, args, kwargs) -> (finish, args, kwargs)
Begin = Callable[[Any, tuple[Any, ...], dict[str, Any]], tuple[Finish, tuple[Any, ...],
                                                              dict[str, Any]]]

#: The pops: a receive span each.
RECEIVES = ("pop", "bulk_pop", "unsafe_pop_all_shards", "unsafe_bulk_pop", "pop_with_msg_id",
            "unsafe_pop_with_msg_id_all_shards", "pop_msg_with_predicate")
#: The calls that end a delivery or move dead letters back, by the name of their first
#: parameter: a settle span each.
SETTLES = {"ack": "id", "nack": "id", "dead_letter": "id", "ack_many": "ids",
           "nack_many": "ids", "release": "ids", "redrive": "ids"}
#: The pushes, by the name of their first parameter: a send span each.
SENDS = {"push": "messages", "ensure": "message"}


def _first(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    return args[0] if args else kwargs.get(name)


def _with_first(args: tuple[Any, ...], kwargs: dict[str, Any], name: str,
                value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if args:
        return (value, *args[1:]), kwargs
    return args, {**kwargs, name: value}


def plans(telemetry: Telemetry) -> dict[str, Begin]:
    """The begin function of every traced method."""
    out: dict[str, Begin] = {}

    def push(queue: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Finish, tuple[Any, ...], dict[str, Any]]:
        messages = _first(args, kwargs, "messages")
        try:
            batch = list(messages)  # an iterator is read once: the push gets a list
        except TypeError:  # not iterable: push raises its own error
            _, finish = telemetry.send(queue, "push", [messages])
            return finish, args, kwargs
        carried, finish = telemetry.send(queue, "push", batch)
        args, kwargs = _with_first(args, kwargs, "messages", carried)
        return finish, args, kwargs

    def ensure(queue: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Finish, tuple[Any, ...], dict[str, Any]]:
        message = _first(args, kwargs, "message")
        (carried,), finish = telemetry.send(queue, "ensure", [message])
        if carried is not message:
            args, kwargs = _with_first(args, kwargs, "message", carried)
        return finish, args, kwargs

    out["push"], out["ensure"] = push, ensure
    for name in RECEIVES:
        out[name] = functools.partial(_receive, telemetry, name)
    for name, first in SETTLES.items():
        out[name] = functools.partial(_settle, telemetry, name, first)
    return out


def _receive(telemetry: Telemetry, name: str, queue: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Finish, tuple[Any, ...], dict[str, Any]]:
    return telemetry.receive(queue, name), args, kwargs


def _settle(telemetry: Telemetry, name: str, first: str, queue: Any, args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> tuple[Finish, tuple[Any, ...], dict[str, Any]]:
    target = _first(args, kwargs, first)
    if first == "ids" and target is not None and type(target) is not list:
        try:
            target = list(target)  # an iterator is read once: the call gets the list
        except TypeError:  # not iterable: the call raises its own error
            pass
        else:
            args, kwargs = _with_first(args, kwargs, first, target)
    return telemetry.settle(queue, name, target), args, kwargs


def traced_sync(original: Callable[..., Any], begin: Begin) -> Callable[..., Any]:
    """``original`` (a sync façade method) inside a span."""
    @functools.wraps(original)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        finish, args, kwargs = begin(self, args, kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            finish(None, exc)
            raise
        finish(result, None)
        return result
    return traced


def traced_async(original: Callable[..., Any], begin: Begin) -> Callable[..., Any]:
    """``original`` (an asyncio façade coroutine function) inside a span."""
    @functools.wraps(original)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        finish, args, kwargs = begin(self, args, kwargs)
        try:
            result = await original(self, *args, **kwargs)
        except BaseException as exc:  # cancellation included: the span ends
            finish(None, exc)
            raise
        finish(result, None)
        return result
    return traced


def traced_handler(telemetry: Telemetry, worker: Any,
                   handler: Callable[..., Any]) -> Callable[..., Any]:
    """A Worker's handler inside a ``process`` span per call (a HANDLER_WRAPPERS entry)."""
    queue = worker.queue
    if worker.asynchronous:
        async def traced_async_handler(message: Message) -> Any:
            finish = telemetry.process(queue, message)
            try:
                result = await handler(message)
            except BaseException as exc:
                finish(None, exc)
                raise
            finish(result, None)
            return result
        return traced_async_handler

    def traced_sync_handler(message: Message) -> Any:
        finish = telemetry.process(queue, message)
        try:
            result = handler(message)
        except BaseException as exc:
            finish(None, exc)
            raise
        finish(result, None)
        return result
    return traced_sync_handler


class Patches:
    """The methods replaced and the handler wrapper added by one instrument() call."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._originals: list[tuple[type, str, Any]] = []
        self._wrapper = functools.partial(traced_handler, telemetry)
        for cls, wrap in ((SyncDynoQueue, traced_sync), (AsyncDynoQueue, traced_async)):
            for name, begin in plans(telemetry).items():
                original = cls.__dict__[name]
                self._originals.append((cls, name, original))
                setattr(cls, name, wrap(original, begin))
        HANDLER_WRAPPERS.append(self._wrapper)

    def remove(self) -> None:
        """Put the original methods back and drop the handler wrapper (Workers already
        running keep theirs until they stop)."""
        for cls, name, original in reversed(self._originals):
            setattr(cls, name, original)
        self._originals = []
        if self._wrapper in HANDLER_WRAPPERS:
            HANDLER_WRAPPERS.remove(self._wrapper)
