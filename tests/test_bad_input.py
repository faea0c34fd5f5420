"""Bad input: a clear, typed error before anything is written, and nothing stored is lost."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynoqueue import (
    DynoQueueError,
    InvalidMessageError,
    Message,
    PayloadTooLargeError,
)

from .conftest import unique


def stored_state(raw, queue) -> dict:
    return {key: raw.dump(key) for key in queue.keys.all_keys()}


@pytest.fixture
def queue(make_queues):
    q = make_queues(max_payload_bytes=1024).get(unique())
    q.push([Message("keep-1", "kept"), Message("keep-2", "kept", priority=4)])
    return q


@pytest.mark.parametrize("fields", [
    {"id": ""},
    {"id": None},
    {"id": 42},
    {"id": "x", "payload": b"bytes"},
    {"id": "x", "payload": 12},
    {"id": "x", "priority": 100},
    {"id": "x", "priority": -1},
    {"id": "x", "priority": 1.5},
    {"id": "x", "priority": True},
    {"id": "x", "timeout": -1},
    {"id": "x", "timeout": "10"},
    {"id": "x", "timeout": 2.0},
    {"id": "\ud800"},
    {"id": "x", "payload": "ok \udfff"},
])
def test_invalid_messages_are_rejected_on_construction(fields) -> None:
    with pytest.raises(InvalidMessageError) as info:
        Message(**fields)
    assert isinstance(info.value, ValueError) and isinstance(info.value, DynoQueueError)


def invalid_after_construction() -> list[Message]:
    """Messages made valid, then broken by assignment (dataclasses allow it)."""
    broken = []
    for field, value in [("priority", 500), ("id", ""), ("timeout", -3), ("payload", 5)]:
        m = Message("broken")
        setattr(m, field, value)
        broken.append(m)
    return broken


@pytest.mark.parametrize("bad", invalid_after_construction(), ids=lambda m: repr(m)[:40])
def test_a_bad_message_anywhere_in_a_batch_writes_nothing(queue, raw, bad) -> None:
    before = stored_state(raw, queue)
    batch = [Message("new-1"), Message("keep-1", "replacement"), bad, Message("new-2")]
    with pytest.raises(InvalidMessageError):
        queue.push(batch)
    assert stored_state(raw, queue) == before
    assert queue.get("keep-1").payload == "kept"


@pytest.mark.parametrize("batch", [
    "a string", b"bytes", Message("single"), 42, None, [{"id": "dict"}], ["id-string"],
])
def test_wrong_types_for_push(queue, raw, batch) -> None:
    before = stored_state(raw, queue)
    with pytest.raises(InvalidMessageError, match="Message"):
        queue.push(batch)
    assert stored_state(raw, queue) == before


def test_oversized_payload_is_refused_and_nothing_written(queue, raw) -> None:
    before = stored_state(raw, queue)
    with pytest.raises(PayloadTooLargeError, match="1025 bytes, over the limit of 1024"):
        queue.push([Message("ok", "x"), Message("big", "é" * 512 + "x")])
    assert stored_state(raw, queue) == before
    assert queue.push([Message("fits", "y" * 1024)]) == ["fits"]


def test_default_limit_is_one_mebibyte(make_queues) -> None:
    q = make_queues().get(unique())
    with pytest.raises(PayloadTooLargeError):
        q.push([Message("big", "x" * (1024 * 1024 + 1))])
    assert q.push([Message("max", "x" * (1024 * 1024))]) == ["max"]


def test_ensure_refuses_oversized_payloads(queue, raw) -> None:
    before = stored_state(raw, queue)
    with pytest.raises(PayloadTooLargeError):
        queue.ensure(Message("big", "x" * 2000))
    assert stored_state(raw, queue) == before


valid = st.builds(
    Message,
    id=st.text(min_size=1, max_size=12),
    payload=st.none() | st.text(max_size=30),
    timeout=st.integers(0, 10_000),
    priority=st.integers(0, 99),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(good=st.lists(valid, max_size=8), position=st.integers(0, 8),
       field=st.sampled_from(["priority", "timeout", "id", "payload"]))
def test_any_batch_with_one_bad_message_leaves_the_queue_untouched(
    make_queues, raw, good, position, field
) -> None:
    q = make_queues(max_payload_bytes=64).get(unique())
    q.push([Message("existing", "v")])
    before = stored_state(raw, q)
    bad = Message("bad")
    setattr(bad, field, {"priority": 100, "timeout": -1, "id": "", "payload": "z" * 65}[field])
    batch = [*good]
    batch.insert(min(position, len(batch)), bad)
    with pytest.raises(InvalidMessageError):
        q.push(batch)
    assert stored_state(raw, q) == before
    q.clear()
