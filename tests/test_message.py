"""Message fields, equality and the dyno-queues compatible JSON codec."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynoqueue import InvalidMessageError, Message
from dynoqueue.model.validate import MAX_COUNT, MAX_EPOCH_MS, MAX_MS


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


_ANY_VALUE = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False),
                       st.integers(min_value=-2, max_value=2**44),
                       st.sampled_from([0, 1, MAX_MS, MAX_MS + 1, MAX_COUNT, MAX_COUNT + 1,
                                        MAX_EPOCH_MS, MAX_EPOCH_MS + 1, -1]),
                       st.text(max_size=3), st.sampled_from(["", "a", "é", "\ud800", "g"]))


_VALID = {"id": st.sampled_from(["m", "id-1"]), "payload": st.sampled_from([None, "", "p"]),
          "timeout": st.sampled_from([0, 0, 5]), "priority": st.sampled_from([0, 99]),
          "due_at_ms": st.sampled_from([None, 0, 1_700_000_000_000]),
          "max_deliveries": st.sampled_from([None, 3]), "ttl_ms": st.sampled_from([None, 1]),
          "group": st.sampled_from([None, "g"]), "shard": st.none(), "receipt": st.none()}


# Each field valid most of the time, so both accepted and refused messages come up often.
@settings(max_examples=500)
@given(st.fixed_dictionaries({name: st.integers(0, 7).flatmap(
                                  lambda k, valid=valid: valid if k else _ANY_VALUE)
                              for name, valid in _VALID.items()}),
       st.sampled_from([None, 0, 1, 3]))
def test_validate_fast_path_accepts_exactly_what_the_full_checks_accept(
        fields: dict[str, object], limit: int | None) -> None:
    # Message() validates on construction, so build a valid one and set the fields after.
    message = Message("x")
    for name, value in fields.items():
        setattr(message, name, value)
    try:
        message._check_each_field(limit)
        full_error = None
    except InvalidMessageError as exc:  # PayloadTooLargeError is one too
        full_error = type(exc)
    try:
        message.validate(limit)
        fast_error = None
    except InvalidMessageError as exc:
        fast_error = type(exc)
    assert fast_error is full_error


@pytest.mark.parametrize(("name", "low", "high"), [
    ("timeout", 0, MAX_MS), ("priority", 0, 99), ("due_at_ms", 0, MAX_EPOCH_MS),
    ("max_deliveries", 1, MAX_COUNT), ("ttl_ms", 1, MAX_MS)])
def test_validate_fast_path_keeps_every_range_edge(name: str, low: int, high: int) -> None:
    for value in (low - 1, low, high, high + 1, True, float(low + 1), str(low + 1)):
        message = Message("x")
        setattr(message, name, value)
        try:
            message._check_each_field(None)
        except InvalidMessageError:
            with pytest.raises(InvalidMessageError):
                message.validate()
        else:
            message.validate()
