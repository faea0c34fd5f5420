"""Message headers (``Message(..., headers={...})``): checked before anything is written, stored
in the message JSON (which Java v1 clients read without error: Jackson skips unknown fields),
and handed back on every message a call returns, through every step of the lifecycle. Both
APIs, every deployment of the contract suite."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynoqueue import InvalidMessageError, Message, QueuePolicy
from dynoqueue.model.message import (
    MAX_HEADERS,
    MAX_HEADERS_BYTES,
    check_headers,
    plain_headers,
)

TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
         "tenant": "acme", "ünï": "cödé"}


@pytest.mark.parametrize("bad", [
    ["a", "b"], {"a": 1}, {1: "a"}, {"": "x"}, {"a": None}, {"a": "\ud800"},
    {f"h{i}": "x" for i in range(MAX_HEADERS + 1)}, {"big": "x" * MAX_HEADERS_BYTES},
])
def test_bad_headers_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidMessageError, match="header"):
        Message("m", "x", headers=bad)


def test_headers_ride_in_the_json_after_the_v1_fields() -> None:
    message = Message("m", "hi", headers=TRACE)
    doc = orjson.loads(message.to_json())
    assert list(doc) == ["id", "payload", "timeout", "priority", "headers"]
    assert doc["headers"] == TRACE
    assert Message.from_json(message.to_json()).headers == TRACE
    assert "headers" not in orjson.loads(Message("m", headers={}).to_json())
    assert Message.from_json(b'{"id":"m","headers":"not a map"}').headers is None


def test_headers_come_back_through_the_whole_lifecycle(make_queues: Any, api: str) -> None:
    queues = make_queues(policy=QueuePolicy(max_deliveries=3))
    q = queues.get("traced")
    q.push([Message("m", "x", headers=TRACE), Message("plain", "y")])
    assert {m.id: m.headers for m in q.unsafe_peek_all_shards(10)} == {"m": TRACE,
                                                                      "plain": None}
    assert q.get("m").headers == TRACE
    assert q.info("m").headers == TRACE
    got = q.unsafe_pop_with_msg_id_all_shards("m")
    assert got is not None and got.headers == TRACE
    assert q.nack("m")  # due again at once: same headers
    again = q.unsafe_pop_with_msg_id_all_shards("m")
    assert again is not None and again.headers == TRACE
    assert q.set_unack_timeout("m", 0)  # the lease ends: the next claim puts it back first
    (third,) = [m for m in q.unsafe_pop_all_shards(10) if m.id == "m"]
    assert third.headers == TRACE and third.deliveries == 3
    assert q.nack("m")  # its last allowed delivery: dead-lettered
    (dead,) = [d for d in q.dead_letters() if d.message.id == "m"]
    assert dead.message.headers == TRACE
    assert q.redrive(["m"]) == 1
    assert q.get("m").headers == TRACE
    assert q.postpone("m", 60_000)
    assert q.get("m").headers == TRACE


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=90), st.text(max_size=90), max_size=10))
def test_plain_headers_are_a_fast_yes_never_a_wrong_one(headers: dict[str, str]) -> None:
    """The constructor's fast path takes plain_headers() as proof of validity: whatever it
    accepts, the full check accepts too (so nothing over a limit slips through)."""
    if plain_headers(headers):
        check_headers("m", headers)  # raises if the fast path was wrong
    longest = {f"h{i}": "\x1f" * 155 for i in range(8)}  # JSON's widest ASCII: 6 bytes each
    assert plain_headers(longest)
    check_headers("m", longest)
