"""Wild arguments for every public call, and the snapshot a refused call must leave unchanged.

Used by tests/test_fuzz.py: each public method of DynoQueue and RedisQueues (both APIs) is
called with sane arguments except one or more replaced by a wild value (huge, negative,
non-finite and non-integer numbers, bools, None, lone surrogates, bytes, nested and
non-iterable objects). Only DynoQueueError subclasses may escape, and a call that raises must
not have changed a byte in Redis.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from dynoqueue import DynoQueue, Message, QueuePolicy

#: The documented longest duration (dynoqueue.model.validate.MAX_MS: 100 years).
MAX_MS = 100 * 365 * 24 * 3600 * 1000


class NotIterable:
    """Has ``__iter__`` but iterating raises, as a broken container would."""

    def __iter__(self) -> Any:
        raise TypeError("not iterable after all")


class Unhashable(list):  # type: ignore[type-arg]
    """A list: not hashable, not a str."""


def _broken_message(field: str, value: Any) -> Message:
    message = Message("wild")
    setattr(message, field, value)
    return message


HUGE = [10**400, -(10**400), 2**53, 2**63, 2**64, 10**13, 10**18, 10**30, -1, -(2**63),
        MAX_MS + 1]
scalars = st.one_of(
    st.sampled_from(HUGE),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.5, 1e300]),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.sampled_from(["ok\udc80", "\ud800", "", " ", "{x}", "a b", "\x00"]),
    st.binary(max_size=6),
)
objects = st.one_of(
    st.builds(NotIterable), st.builds(object),
    st.builds(lambda: Unhashable(["a"])),
    st.just(iter(())), st.sampled_from([{}, {"a": 1}, set(), frozenset({1}), (), [[]]]),
    st.builds(lambda: Message("m0")),
)
wild = st.one_of(
    scalars,
    objects,
    st.lists(st.one_of(scalars, objects), max_size=3),
    st.dictionaries(st.text(max_size=3), scalars, max_size=2),
    st.builds(lambda f, v: [_broken_message(f, v)],
              st.sampled_from(["id", "payload", "timeout", "priority", "due_at_ms",
                               "max_deliveries", "ttl_ms", "group", "shard"]), scalars),
)

#: A sane value for each parameter name of the public calls.
SANE: dict[str, Any] = {
    "messages": lambda: [Message("n1", "new")], "message": lambda: Message("n2", "new"),
    "id": "m1", "ids": lambda: ["m1", "m2"], "count": 2, "wait_ms": 0, "lease_ms": 1000,
    "min_count": 1, "timeout_ms": 5000, "delay_ms": 0, "pattern": "m", "local_only": False,
    "reason": "r", "error": "e", "receipt": None, "priority": 3, "group": "g",
    "if_exists": "replace", "queue_name": "fuzzq", "policy": None, "schedule_id": "s1",
}


def sane(name: str) -> Any:
    value = SANE[name]
    return value() if callable(value) else value


def queue_methods() -> list[str]:
    """Every public DynoQueue method that takes an argument (the others have nothing to fuzz);
    ``close`` is left out: it only ends the queue."""
    return sorted(name for name, fn in inspect.getmembers(DynoQueue, inspect.isfunction)
                  if not name.startswith("_") and name != "close"
                  and len(inspect.signature(fn).parameters) > 1)


def parameters(method: str) -> list[inspect.Parameter]:
    return list(inspect.signature(getattr(DynoQueue, method)).parameters.values())[1:]


def tame(name: str, value: Any) -> Any:
    """Keep a valid but long wait from blocking the test: such a wait is not wild."""
    if name == "wait_ms" and isinstance(value, int) and 0 < value <= MAX_MS:
        return 0
    return value


def call_with(target: Any, method: str, wild_args: dict[str, Any]) -> Any:
    """Call ``target.method`` with sane arguments except ``wild_args``."""
    args, kwargs = [], {}
    for param in parameters(method):
        value = tame(param.name, wild_args[param.name]) if param.name in wild_args else (
            sane(param.name) if param.default is inspect.Parameter.empty else param.default)
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[param.name] = value
        else:
            args.append(value)
    return getattr(target, method)(*args, **kwargs)


def snapshot(raw: Any, prefix: str) -> dict[str, Any]:
    """Every key of the test's prefix with its DUMP and TTL: equal snapshots, equal data."""
    return {key: (raw.dump(key), raw.pttl(key)) for key in sorted(raw.scan_iter(f"{prefix}*"))}


OPTION_NAMES = ["unack_timeout_ms", "unack_handler_interval_ms", "sharding_strategy",
                "write_quorum", "write_quorum_timeout_ms", "clock", "max_payload_bytes",
                "poll_interval_ms", "hash_tag", "doorbell", "policy", "eval_scripts",
                "zones", "local_zone", "key_prefix"]
POLICY_FIELDS = ["max_deliveries", "message_ttl_ms", "retention_ms", "dead_letter_retention_ms",
                 "strict_priority"]


def policy_with(field: str, value: Any) -> Callable[[], QueuePolicy]:
    return lambda: QueuePolicy(**{field: value})
