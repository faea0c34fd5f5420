"""Message fields, equality and the dyno-queues compatible JSON codec."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynoqueue import InvalidMessageError, Message
from dynoqueue.model.validate import MAX_MS


def test_defaults_and_equality_by_id() -> None:
    m = Message("x")
    assert (m.payload, m.timeout, m.priority, m.shard) == (None, 0, 0, None)
    assert Message("x", "a", 5, 9) == Message("x", "b")
    assert Message("x") != Message("y")
    assert len({Message("x", "a"), Message("x", "b")}) == 1
    assert Message("x") != "x"


def test_json_matches_what_jackson_writes() -> None:
    assert Message("x001", "Hello World", 20000, 3).to_json() == (
        b'{"id":"x001","payload":"Hello World","timeout":20000,"priority":3}')
    # Jackson NON_EMPTY: no payload key for None or "", zero numbers kept, shard never stored.
    assert Message("x", None).to_json() == b'{"id":"x","timeout":0,"priority":0}'
    assert Message("x", "", shard="a").to_json() == b'{"id":"x","timeout":0,"priority":0}'


def test_decoding_tolerates_java_output() -> None:
    m = Message.from_json('{"id":"j","timeout":null,"priority":4,"unknown":[1]}', shard="c")
    assert (m.id, m.payload, m.timeout, m.priority, m.shard) == ("j", None, 0, 4, "c")
    assert Message.from_json(b'{"id":"k","payload":"\\u00e9"}').payload == "é"


def test_decoding_accepts_what_a_java_client_can_store() -> None:
    """Java's setTimeout takes any long and nothing bounds its priority: pop and get must still
    return such a message, so stored messages are decoded without re-validation."""
    m = Message.from_json('{"id":"j","payload":"p","timeout":-1000,"priority":500}')
    assert (m.id, m.payload, m.timeout, m.priority) == ("j", "p", -1000, 500)


@pytest.mark.parametrize("raw", ["not json", "[1,2]", '{"payload":"no id"}', '{"id":""}',
                                 '{"id":7}', '{"id":"x","timeout":"soon"}'])
def test_decoding_garbage_raises_invalid_message(raw) -> None:
    with pytest.raises(InvalidMessageError):
        Message.from_json(raw)


@given(st.builds(Message, id=st.text(min_size=1), payload=st.none() | st.text(min_size=1),
                 timeout=st.integers(0, MAX_MS), priority=st.integers(0, 99)))
def test_round_trip(message: Message) -> None:
    back = Message.from_json(message.to_json())
    assert (back.id, back.payload, back.timeout, back.priority) == (
        message.id, message.payload, message.timeout, message.priority)
    assert orjson.loads(message.to_json())["id"] == message.id
