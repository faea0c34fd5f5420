"""Ordering on every deployment and both APIs: strict priority (``QueuePolicy(strict_priority=
True)``) and ordered message groups (``Message(group=...)``), alone, together, and with the
lifecycle (nack, lease expiry, max deliveries, TTL, dead letters, redrive, remove, postpone).

Time is an injected FakeClock, so every due time and expiry is exact; process_unacks() runs what
the unack reprocessor runs (lease expiry, then the lifecycle sweep).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dynoqueue import (
    ConfigurationError,
    InvalidArgumentError,
    Message,
    MessageState,
    QueuePolicy,
    SingleShardSupplier,
)

from .apis import API_NAMES
from .conftest import FakeClock, unique

STRICT = QueuePolicy(strict_priority=True)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test of this module runs on both APIs (as the contract modules do)."""
    if "api" in metafunc.fixturenames:
        metafunc.parametrize("api", API_NAMES, indirect=True)


@pytest.fixture
def make(make_queues, clock: FakeClock) -> Callable[..., Any]:
    """A queue on one shard "a" with the injected clock and a 1 s lease."""

    def build(policy: QueuePolicy | None = None, **settings: Any) -> Any:
        queues = make_queues(shard_supplier=SingleShardSupplier("a"), clock=clock,
                             unack_timeout_ms=1000, **settings)
        return queues.get(unique("order"), policy)

    return build


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def expire_leases(q: Any, clock: FakeClock, ms: int = 1001) -> None:
    clock.advance(ms)
    q.process_unacks()


# ------------------------------------------------------------------ strict priority


def test_an_urgent_message_overtakes_a_due_backlog_only_with_strict_priority(make,
                                                                            clock) -> None:
    backlog = [Message(f"low{i}", priority=9) for i in range(5)]
    for policy, first in ((None, "low0"), (STRICT, "urgent")):
        q = make(policy)
        q.push(backlog)
        clock.advance(10)
        q.push([Message("urgent", priority=0)])
        assert q.pop(1)[0].id == first


def test_strict_order_is_priority_then_due_time_and_delays_still_hold(make, clock) -> None:
    q = make(STRICT)
    q.push([Message("p5-late", timeout=200, priority=5), Message("p9", priority=9),
            Message("p0-delayed", timeout=1000, priority=0)])
    clock.advance(100)
    q.push([Message("p5-early", priority=5, timeout=50), Message("p1", priority=1)])
    assert [m.id for m in q.peek(10)] == ["p1", "p9"]
    clock.advance(100)  # p5-late (due +200) and p5-early (due +150) fall due; p0 still waits
    assert ids(q.peek(10)) == ["p1", "p5-early", "p5-late", "p9"]
    assert ids(q.pop(10)) == ["p1", "p5-early", "p5-late", "p9"]
    assert q.state("p0-delayed") is MessageState.DELAYED and q.pop(1) == []
    clock.advance(800)
    assert ids(q.pop(1)) == ["p0-delayed"]


def test_strict_priority_works_with_the_lifecycle(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=2, strict_priority=True))
    q.push([Message("a", priority=3), Message("b", priority=7), Message("c", priority=5)])
    assert q.state("a") is MessageState.READY and q.info("a").due_at_ms == clock.now_ms
    assert q.size() == 3 and q.shard_sizes() == {"a": {"size": 3, "uacked": 0}}
    (a,) = q.pop(1)
    assert a.id == "a" and q.nack("a", 500, receipt=a.receipt)
    assert ids(q.pop(1)) == ["c"]  # a waits for its nack delay, b is less urgent
    expire_leases(q, clock, 1001)  # c's lease expired; a fell due again
    assert ids(q.peek(5)) == ["a", "c", "b"]
    assert [m.deliveries for m in q.pop(3)] == [2, 2, 1]
    expire_leases(q, clock)  # a and c were at their last delivery; b is put back
    assert {d.message.id for d in q.dead_letters()} == {"a", "c"}
    assert q.redrive() == 2
    assert ids(q.pop(5)) == ["a", "c", "b"]  # by priority, whenever each fell due


def test_strict_priority_waiting_calls_find_ready_messages(make, clock) -> None:
    q = make(STRICT)
    q.push([Message("x", "px", priority=4), Message("y", "py", priority=2),
            Message("z", "pz", priority=8)])
    assert not q.ensure(Message("x"))  # waiting (in the ready zset): left alone
    assert q.set_timeout("y", 1000)
    assert q.state("y") is MessageState.DELAYED
    assert ids(q.peek(5)) == ["x", "z"]
    assert q.postpone("z", 0, priority=1)
    assert ids(q.peek(5)) == ["z", "x"] and q.info("z").priority == 1
    assert q.pop_with_msg_id("x").id == "x"
    assert q.pop_msg_with_predicate('"payload":"pz"').id == "z"
    assert q.remove("y") and q.size() == 0
    assert q.get_msg_with_predicate('"payload":"px"') == "x"
    clock.advance(1000)
    assert q.pop(5) == []


def test_strict_priority_ttl_ends_ready_messages(make, clock) -> None:
    q = make(QueuePolicy(message_ttl_ms=1000, retention_ms=60_000, strict_priority=True))
    q.push([Message("old", priority=1)])
    clock.advance(1000)
    q.process_unacks()
    assert q.state("old") is MessageState.EXPIRED and q.size() == 0


def test_a_claim_moves_at_most_1000_due_messages_to_the_ready_zset(make, clock, raw) -> None:
    q = make(STRICT)
    q.push([Message(f"d{i:04}", timeout=10, priority=5) for i in range(1200)])
    clock.advance(10)
    assert ids(q.pop(1)) == ["d0000"]
    assert raw.zcard(q.keys.ready_shard("a")) == 999
    assert raw.zcard(q.keys.queue_shard("a")) == 200
    assert q.size() == 1199
    assert len(q.pop(1199)) == 1199  # the next claims move the rest


def test_the_ready_zset_is_never_used_without_strict_priority(make, clock, raw) -> None:
    q = make(QueuePolicy(max_deliveries=3))
    q.push([Message("m", priority=2), Message("n", timeout=5)])
    clock.advance(5)
    q.nack(q.pop(1)[0].id)
    q.remove("n")
    assert raw.exists(q.keys.ready_shard("a")) == 0
    assert raw.exists(q.keys.group_of, q.keys.group_head, q.keys.group_seq) == 0


def test_strict_priority_is_part_of_the_stored_configuration(make_queues, clock) -> None:
    name = unique("strict")
    strict = make_queues(shard_supplier=SingleShardSupplier("a"), clock=clock).get(name, STRICT)
    strict.push([Message("low", priority=9)])
    plain = make_queues(key_prefix=strict.keys.prefix, shard_supplier=SingleShardSupplier("a"),
                        clock=clock).get(name, QueuePolicy())
    with pytest.raises(ConfigurationError, match="strict_priority=True"):
        plain.pop(1)
    adopting = make_queues(key_prefix=strict.keys.prefix,
                           shard_supplier=SingleShardSupplier("a"), clock=clock).get(name)
    clock.advance(5)
    adopting.push([Message("high", priority=0)])
    assert ids(adopting.pop(1)) == ["high"]  # the stored policy applies
    with pytest.raises(ConfigurationError):
        QueuePolicy(strict_priority=1)  # type: ignore[arg-type]


def test_clear_keeps_the_policy_of_the_process_that_cleared(make, clock) -> None:
    q = make(STRICT)
    q.push([Message("a", priority=9)])
    q.clear()
    q.push([Message("b", priority=9)])
    clock.advance(1)
    q.push([Message("c", priority=0)])
    assert ids(q.pop(2)) == ["c", "b"]


def test_strict_priority_over_all_shards_goes_shard_by_shard(make_queues, clock) -> None:
    q = make_queues(clock=clock).get(unique("strict"), STRICT)  # round robin: b, c, a, b, ...
    q.push([Message("b9", priority=9), Message("c1", priority=1), Message("a5", priority=5),
            Message("b0", priority=0)])
    assert ids(q.unsafe_peek_all_shards(10)) == ["a5", "b0", "b9", "c1"]
    assert ids(q.unsafe_pop_all_shards(10)) == ["a5", "b0", "b9", "c1"]
    assert ids(q.pop(1)) == []


def test_group_info_rejects_bad_groups(make) -> None:
    q = make()
    for bad in ("", None, 5):
        with pytest.raises(InvalidArgumentError):
            q.group_info(bad)
