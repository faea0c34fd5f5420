"""The sync API (``dynoqueue``) and the asyncio API (``dynoqueue.asyncio``) offer the same calls.

For each pair of classes (``RedisQueues``, ``DynoQueue``, ``Worker``) the public names (no
leading underscore) must be the same on both sides, of the same kind (method, classmethod,
property, plain value), with the same ``inspect.signature``: parameter names, kinds and
defaults, and annotations compared as text after normalising the few names that differ by
design (each API's own driver class; the factory's generic queue type). A call added to one
API and not the other fails here, unless it is listed below with its reason.

Every asyncio method that talks to Redis must be a coroutine function (``async def``); the
asyncio calls that do not (builders that connect lazily, lookups of what the factory already
holds, ``Worker.stop``) are listed, and the list is checked both ways. No sync method is a
coroutine function. No Redis server is needed: only the classes are inspected.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

import dynoqueue
import dynoqueue.asyncio as aio

PAIRS: dict[str, tuple[type, type]] = {
    "RedisQueues": (dynoqueue.RedisQueues, aio.RedisQueues),
    "DynoQueue": (dynoqueue.DynoQueue, aio.DynoQueue),
    "Worker": (dynoqueue.Worker, aio.Worker),
}

# Public names on one side only, by design: (class, name) -> why.
ONLY_SYNC: dict[tuple[str, str], str] = {
    ("RedisQueues", "close"): "the sync factory closes with close(); the asyncio one with "
                              "`await aclose()` (redis.asyncio's name for an awaited close)",
    ("Worker", "run_in_thread"): "starts the thread Worker on a background thread; an asyncio "
                                 "Worker runs as a task (`async with worker` or "
                                 "`create_task(worker.run())`)",
}
ONLY_ASYNC: dict[tuple[str, str], str] = {
    ("RedisQueues", "aclose"): "the asyncio twin of RedisQueues.close (see ONLY_SYNC)",
}

# Context managers: a sync class with __enter__/__exit__ has __aenter__/__aexit__ on the
# asyncio side instead (and neither side has the other's); checked by its own test below.
SYNC_CM = ("__enter__", "__exit__")
ASYNC_CM = ("__aenter__", "__aexit__")

# Class attributes whose values are classes: each API holds its own (redis' sync or asyncio
# RedisCluster, the SyncDriver or AsyncDriver, each API's DynoQueue). Their names must match on
# both sides, but not their constructors' signatures (the sync driver has reply_spin_us: it
# busy-polls replies on a pinned connection, which the asyncio driver has no use for).
CLASS_VALUED = {("RedisQueues", "queue_class"), ("RedisQueues", "cluster_class"),
                ("RedisQueues", "driver_class")}

# Plain class values that differ by design.
DIFFERENT_VALUES: dict[tuple[str, str], str] = {
    ("RedisQueues", "asynchronous"): "False on the sync factory, True on the asyncio one",
    ("Worker", "asynchronous"): "False on the thread Worker, True on the asyncio one",
    ("Worker", "idle_wait_ms"): "an idle pop's longest wait: 1 s on threads (only the pop's "
                                "return ends it, so it bounds how long a stop waits), 5 s on "
                                "asyncio (a stop cancels the wait); see WorkerEngine",
}

# asyncio callables that are plain calls, not coroutine functions: none sends a command.
NOT_COROUTINES: dict[tuple[str, str], str] = {
    ("RedisQueues", "from_url"): "builds the factory; the clients connect lazily",
    ("RedisQueues", "from_sentinel"): "builds the factory; the clients connect lazily",
    ("RedisQueues", "from_cluster"): "builds the factory; the clients connect lazily",
    ("RedisQueues", "get"): "makes (or returns) a queue object; no command is sent",
    ("RedisQueues", "keys_of"): "names a queue's keys; no command is sent",
    ("RedisQueues", "queues"): "the queues this factory made so far, from memory",
    ("RedisQueues", "set_events"): "sets a callback on the factory and its queues",
    ("RedisQueues", "own_connections"): "records clients for aclose() to close",
    ("RedisQueues", "reprocess_tick_ms"): "computed from the settings",
    ("Worker", "stop"): "sets the stop flag and returns at once (safe from other threads)",
}

# Real mismatches (not by design) found by this test: (class, name) -> what differs. Each is
# marked xfail(strict=True), so the test documents it and fails once it is fixed (then remove
# it here). None at the time of writing.
KNOWN_MISMATCHES: dict[tuple[str, str], str] = {}


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def _kind(cls: type, name: str) -> str:
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, property):
        return "property"
    if isinstance(raw, classmethod):
        return "classmethod"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if inspect.isclass(raw):
        return "class"
    if callable(raw):
        return "method"
    return "value"


_ANNOTATION_ALIASES = (
    (r"\b(?:SyncDriver|AsyncDriver)\b", "Driver"),  # each API's own driver
    (r"\bQ\b", "DynoQueue"),  # QueuesBase[Q]'s queue type: each API's DynoQueue
    (r"\btyping\.", ""),
    (r"\s+", " "),
)


def _annotation(annotation: Any) -> str:
    """An annotation as comparable text: each API's own class names made the same, and an
    awaitable form (``Awaitable[X]``, ``Coroutine[Any, Any, X]``) read as ``X``."""
    if annotation is inspect.Parameter.empty:
        return ""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    for pattern, repl in _ANNOTATION_ALIASES:
        text = re.sub(pattern, repl, text)
    text = text.strip()
    for wrapper in (r"^(?:collections\.abc\.)?Awaitable\[(.*)\]$",
                    r"^(?:collections\.abc\.)?Coroutine\[Any, Any, (.*)\]$"):
        text = re.sub(wrapper, r"\1", text)
    return text


def _shape(fn: Any) -> tuple[list[tuple[str, Any, Any, str]], str]:
    sig = inspect.signature(fn)
    params = [(p.name, p.kind, p.default, _annotation(p.annotation))
              for p in sig.parameters.values()]
    return params, _annotation(sig.return_annotation)


def _cases() -> list[Any]:
    out = []
    for cls_name, (sync_cls, async_cls) in PAIRS.items():
        names = (_public(sync_cls) & _public(async_cls)) | {"__init__"}
        for name in sorted(names):
            marks = []
            if (cls_name, name) in KNOWN_MISMATCHES:
                marks.append(pytest.mark.xfail(strict=True,
                                               reason=KNOWN_MISMATCHES[cls_name, name]))
            out.append(pytest.param(cls_name, name, marks=marks, id=f"{cls_name}.{name}"))
    return out


@pytest.mark.parametrize("cls_name", list(PAIRS))
def test_the_same_public_names(cls_name: str) -> None:
    sync_cls, async_cls = PAIRS[cls_name]
    only_sync = {n for n in _public(sync_cls) - _public(async_cls)
                 if (cls_name, n) not in ONLY_SYNC}
    only_async = {n for n in _public(async_cls) - _public(sync_cls)
                  if (cls_name, n) not in ONLY_ASYNC}
    assert not only_sync, f"{cls_name}: only on the sync API: {sorted(only_sync)}"
    assert not only_async, f"{cls_name}: only on the asyncio API: {sorted(only_async)}"


def test_the_allowlists_name_what_exists() -> None:
    """An allowlisted difference that is gone (renamed, added to the other side) is removed
    from the list, so the list never hides a later one."""
    for (cls_name, name), why in ONLY_SYNC.items():
        sync_cls, async_cls = PAIRS[cls_name]
        assert hasattr(sync_cls, name) and not hasattr(async_cls, name), (cls_name, name, why)
    for (cls_name, name), why in ONLY_ASYNC.items():
        sync_cls, async_cls = PAIRS[cls_name]
        assert hasattr(async_cls, name) and not hasattr(sync_cls, name), (cls_name, name, why)
    for cls_name, name in CLASS_VALUED:
        for cls in PAIRS[cls_name]:
            assert inspect.isclass(getattr(cls, name)), (cls_name, name)
    for (cls_name, name), why in DIFFERENT_VALUES.items():
        for cls in PAIRS[cls_name]:
            assert hasattr(cls, name), (cls_name, name, why)


@pytest.mark.parametrize(("cls_name", "name"), _cases())
def test_the_same_kind_and_signature(cls_name: str, name: str) -> None:
    sync_cls, async_cls = PAIRS[cls_name]
    kinds = _kind(sync_cls, name), _kind(async_cls, name)
    if name != "__init__":
        assert kinds[0] == kinds[1], f"{cls_name}.{name}: sync {kinds[0]}, asyncio {kinds[1]}"
    if (cls_name, name) in CLASS_VALUED:
        assert kinds == ("class", "class")
        return
    if kinds[0] == "property":
        return  # a property has no parameters; its presence on both sides is the check
    if kinds[0] == "value":
        if (cls_name, name) not in DIFFERENT_VALUES:
            assert getattr(sync_cls, name) == getattr(async_cls, name), f"{cls_name}.{name}"
        return
    sync_fn, async_fn = getattr(sync_cls, name), getattr(async_cls, name)
    sync_params, sync_ret = _shape(sync_fn)
    async_params, async_ret = _shape(async_fn)
    detail = (f"{cls_name}.{name}:\n  sync    {inspect.signature(sync_fn)}\n"
              f"  asyncio {inspect.signature(async_fn)}")
    # Names, kinds and defaults first (the message says which), then the annotations.
    assert [p[:3] for p in sync_params] == [p[:3] for p in async_params], detail
    assert sync_params == async_params, f"annotations differ: {detail}"
    assert sync_ret == async_ret, f"return annotations differ: {detail}"


def test_each_factory_makes_its_own_api_queues() -> None:
    assert dynoqueue.RedisQueues.queue_class is dynoqueue.DynoQueue
    assert aio.RedisQueues.queue_class is aio.DynoQueue


@pytest.mark.parametrize("cls_name", list(PAIRS))
def test_context_managers_pair_up(cls_name: str) -> None:
    sync_cls, async_cls = PAIRS[cls_name]
    sync_has = [hasattr(sync_cls, n) for n in SYNC_CM]
    async_has = [hasattr(async_cls, n) for n in ASYNC_CM]
    assert sync_has in ([True, True], [False, False]), cls_name
    assert sync_has == async_has, f"{cls_name}: `with` on sync {sync_has}, `async with` {async_has}"
    assert not any(hasattr(async_cls, n) for n in SYNC_CM), f"{cls_name}: sync `with` on asyncio"
    assert not any(hasattr(sync_cls, n) for n in ASYNC_CM), f"{cls_name}: `async with` on sync"
    for n in ASYNC_CM:
        if hasattr(async_cls, n):
            assert inspect.iscoroutinefunction(getattr(async_cls, n)), f"{cls_name}.{n}"


def _callables(cls: type) -> list[str]:
    return sorted(n for n in _public(cls)
                  if _kind(cls, n) in ("method", "classmethod", "staticmethod"))


@pytest.mark.parametrize("cls_name", list(PAIRS))
def test_asyncio_calls_that_talk_to_redis_are_coroutines(cls_name: str) -> None:
    async_cls = PAIRS[cls_name][1]
    plain = [n for n in _callables(async_cls)
             if not inspect.iscoroutinefunction(getattr(async_cls, n))]
    listed = sorted(n for c, n in NOT_COROUTINES if c == cls_name)
    assert plain == listed, (f"{cls_name}: asyncio calls that are not `async def`: {plain}; "
                             f"listed as plain calls: {listed}")


@pytest.mark.parametrize("cls_name", list(PAIRS))
def test_sync_calls_are_not_coroutines(cls_name: str) -> None:
    sync_cls = PAIRS[cls_name][0]
    awaited = [n for n in _callables(sync_cls) + [n for n in SYNC_CM if hasattr(sync_cls, n)]
               if inspect.iscoroutinefunction(getattr(sync_cls, n))]
    assert not awaited, f"{cls_name}: coroutine functions on the sync API: {awaited}"


def test_the_policy_calls_are_on_both_apis() -> None:
    """DynoQueue.stored_policy and set_policy (the newest calls) are on both, awaited on asyncio."""
    for name in ("stored_policy", "set_policy"):
        assert not inspect.iscoroutinefunction(getattr(dynoqueue.DynoQueue, name))
        assert inspect.iscoroutinefunction(getattr(aio.DynoQueue, name))
