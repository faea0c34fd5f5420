"""Ordering on every deployment and both APIs: strict priority (``QueuePolicy(strict_priority=
True)``) and ordered message groups (``Message(group=...)``), alone, together, and with the
lifecycle (nack, lease expiry, max deliveries, TTL, dead letters, redrive, remove, postpone).

Time is an injected FakeClock, so every due time and expiry is exact; process_unacks() runs what
the unack reprocessor runs (lease expiry, then the lifecycle sweep).
"""

from __future__ import annotations

import random
import threading
import time
import zlib
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
    StaticShardSupplier,
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


@pytest.mark.one_partition("strict priority holds within a partition")
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
    assert q.ack("x") and q.ack("z")  # else their leases end first: delivered again
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


@pytest.mark.one_partition("gives queues policies of one partition")
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


# ------------------------------------------------------------------ ordered groups


def grouped(group: str, *names: str, **fields: Any) -> list[Message]:
    return [Message(name, f"payload {name}", group=group, **fields) for name in names]


def test_a_group_delivers_one_message_at_a_time_in_push_order(make) -> None:
    q = make()
    q.push(grouped("g", "g1", "g2", "g3") + grouped("h", "h1", "h2") + [Message("free")])
    first = q.pop(10)
    assert sorted(ids(first)) == ["free", "g1", "h1"]
    assert {m.id: m.group for m in first} == {"g1": "g", "h1": "h", "free": None}
    assert q.pop(10) == []  # g and h are locked by their leased messages
    assert q.ack("g1")
    assert ids(q.pop(10)) == ["g2"]
    assert q.ack_many([m for m in first if m.id == "h1"]) == 1
    assert ids(q.pop(10)) == ["h2"]
    q.ack("g2")
    assert ids(q.pop(10)) == ["g3"]


def test_a_group_is_delivered_in_due_order_then_push_order(make, clock) -> None:
    q = make()
    q.push(grouped("g", "later", timeout=100) + grouped("g", "now1", "now2"))
    q.push(grouped("g", "now3", due_at_ms=clock.now_ms - 5000))  # a past due time: due now
    order = []
    for _ in range(3):
        (m,) = q.pop(5)
        order.append(m.id)
        q.ack(m.id)
    assert order == ["now1", "now2", "now3"]
    assert q.pop(5) == [] and q.info("later").state is MessageState.DELAYED
    clock.advance(100)
    assert ids(q.pop(5)) == ["later"]


def test_nack_and_lease_expiry_redeliver_the_same_message_first(make, clock) -> None:
    q = make()
    q.push(grouped("g", "first", "second"))
    (m,) = q.pop(5)
    assert q.nack(m.id, 500, receipt=m.receipt)
    assert q.pop(5) == []  # "second" waits behind "first", due again in 500 ms
    clock.advance(500)
    (again,) = q.pop(5)
    assert (again.id, again.deliveries) == ("first", 2)
    expire_leases(q, clock)
    assert [(m.id, m.deliveries) for m in q.pop(5)] == [("first", 3)]
    q.ack("first")
    assert ids(q.pop(5)) == ["second"]


def test_dead_letters_removes_and_ttl_let_the_next_message_through(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=1, retention_ms=60_000))
    q.push(grouped("g", "poison", "removed-while-waiting", "removed-while-leased", "buried",
                   "short-lived") + grouped("g", "last"))
    q.pop(1)
    expire_leases(q, clock)  # its one delivery ended: dead-lettered
    assert q.state("poison") is MessageState.DEAD
    assert q.remove("removed-while-waiting")
    assert q.state("removed-while-waiting") is MessageState.DELETED
    assert ids(q.pop(5)) == ["removed-while-leased"] and q.remove("removed-while-leased")
    (buried,) = q.pop(5)
    assert q.dead_letter(buried.id, "bad", receipt=buried.receipt)
    q.set_timeout("last", 60_000)
    q.postpone("short-lived", 0)
    assert q.group_info("g")["waiting"] == 2
    assert q.redrive(["poison"]) == 1  # back in its group, behind the others
    (m,) = q.pop(5)
    assert m.id == "short-lived" and q.ack(m.id, receipt=m.receipt)
    assert ids(q.pop(5)) == ["poison"]


def test_a_waiting_group_member_past_its_ttl_expires(make, clock) -> None:
    q = make(QueuePolicy(retention_ms=60_000))
    q.push(grouped("g", "head") + grouped("g", "brief", ttl_ms=100) + grouped("g", "tail"))
    (head,) = q.pop(5)
    clock.advance(100)
    q.process_unacks()
    assert q.state("brief") is MessageState.EXPIRED
    q.ack(head.id, receipt=head.receipt)
    assert ids(q.pop(5)) == ["tail"]


def test_group_members_report_their_state_and_count_as_waiting(make, clock) -> None:
    q = make()
    q.push(grouped("g", "a", "b") + grouped("g", "c", timeout=300))
    assert [q.state(i) for i in "abc"] == [MessageState.READY, MessageState.READY,
                                           MessageState.DELAYED]
    info = q.info("b")
    assert (info.group, info.shard, info.due_at_ms) == ("g", "a", clock.now_ms)
    assert q.size() == 3 and q.shard_sizes() == {"a": {"size": 3, "uacked": 0}}
    assert ids(q.peek(5)) == ["a"]  # only a group's current message is deliverable
    assert q.group_info("g") == {"waiting": 3, "leased": None, "next_due_ms": clock.now_ms,
                                 "shard": "a"}
    assert ids(q.pop(5)) == ["a"]
    assert q.group_info("g") == {"waiting": 2, "leased": "a", "next_due_ms": clock.now_ms,
                                 "shard": "a"}
    assert q.shard_sizes() == {"a": {"size": 2, "uacked": 1}}
    assert not q.ensure(Message("b", group="g")) and q.contains("b")
    assert q.pop_with_msg_id("b") is None  # not deliverable while "a" is leased
    assert q.get_msg_with_predicate('"payload":"payload b"', local_only=True) == "b"
    q.ack("a")
    assert q.group_info("g")["leased"] is None
    assert q.ack(q.pop(5)[0].id)
    assert q.group_info("g")["next_due_ms"] == clock.now_ms + 300
    clock.advance(300)
    assert q.ack(q.pop(5)[0].id)
    assert q.group_info("g") == {"waiting": 0, "leased": None, "next_due_ms": None,
                                 "shard": "a"}


def test_an_earlier_member_overtakes_a_current_message_never_delivered(make, clock) -> None:
    q = make()
    q.push(grouped("g", "late", timeout=1000))
    q.push(grouped("g", "soon", timeout=10))  # due first: it becomes the current one
    assert q.group_info("g")["next_due_ms"] == clock.now_ms + 10
    clock.advance(10)
    (m,) = q.pop(5)
    assert m.id == "soon" and q.nack(m.id, 5000)
    assert q.set_timeout("late", 0)  # now due before "soon", which was delivered once
    assert q.pop(5) == []  # so "soon" keeps its place, and its nack delay
    clock.advance(5000)
    assert ids(q.pop(5)) == ["soon"]


def test_repushing_and_redriving_keep_one_current_message_per_group(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=1))
    q.push(grouped("g", "a", "b", "c"))
    q.push([Message("b", "moved", group="h")])  # replaced: now in group h
    q.push([Message("a", "again", group="g")])  # replaced: behind c
    assert sorted(ids(q.pop(5))) == ["b", "c"]
    expire_leases(q, clock)  # both dead-lettered (max deliveries 1)
    assert ids(q.pop(5)) == ["a"]
    assert q.redrive() == 2
    q.ack("a")
    assert sorted(ids(q.pop(5))) == ["b", "c"]


def test_groups_and_strict_priority_together(make, clock) -> None:
    q = make(STRICT)
    q.push(grouped("g", "g-low", priority=9) + grouped("g", "g-high", priority=0)
           + [Message("free", priority=5)])
    assert ids(q.pop(1)) == ["free"]  # g-high waits behind g-low: group order comes first
    assert ids(q.pop(1)) == ["g-low"]
    q.ack("g-low")
    q.push([Message("other", priority=3)])
    assert ids(q.pop(5)) == ["g-high", "other"]


def test_a_group_lives_in_one_shard_and_local_pops_elsewhere_never_see_it(
        make_queues, clock) -> None:
    name = unique("zones")
    zone = {s: make_queues(clock=clock, shard_supplier=StaticShardSupplier(["a", "b", "c"], s))
            .get(name) for s in "abc"}
    q = zone["a"]
    q.push(grouped("order-42", *(f"m{i}" for i in range(6))))
    home = q.group_info("order-42")["shard"]
    assert home == "abc"[zlib.crc32(b"order-42") % 3]
    assert q.shard_sizes()[home] == {"size": 6, "uacked": 0}
    for s in "abc":
        if s != home:
            assert zone[s].pop(5) == []
    away = next(s for s in "abc" if s != home)
    (m,) = zone[away].unsafe_pop_all_shards(5)
    assert (m.id, m.shard) == ("m0", home)
    assert zone[home].pop(5) == []
    assert zone[home].ack(m.id)
    assert ids(zone[home].pop(5)) == ["m1"]


@pytest.mark.one_partition("writes the one-partition keys")
def test_a_current_message_acked_by_a_java_client_is_repaired_by_the_sweep(make, raw) -> None:
    q = make()
    q.push(grouped("g", "j1", "j2", "j3", "j4"))
    q.pop(1)
    raw.zrem(q.keys.unack_shard("a"), "j1")  # what the Java client's ack does
    raw.hdel(q.keys.message_hash, "j1")
    assert q.pop(5) == []
    q.process_unacks()
    assert ids(q.pop(5)) == ["j2"]
    raw.hdel(q.keys.message_hash, "j3")  # a Java client's remove of one waiting in line
    q.ack("j2")
    assert ids(q.pop(5) or q.pop(5)) == ["j4"]  # the claim drops j3, then j4 is current
    q.ack("j4")
    q.process_unacks()
    for key in (q.keys.group_of, q.keys.group_head, q.keys.group_line("g"), q.keys.group_waiting,
                q.keys.life):
        assert raw.exists(key) == 0


@pytest.mark.one_partition("writes the one-partition keys")
def test_a_current_message_a_java_client_acked_is_no_longer_waiting(make, raw) -> None:
    """A current message that came from its line leaves its member there (the stale mark);
    once a Java client acked it (no payload, no lease), it waits nowhere: ensure() pushes it
    again, behind the group's next one."""
    q = make()
    q.push(grouped("g", "j1", "j2", "j3"))
    assert ids(q.pop(5)) == ["j1"] and q.ack("j1")
    assert ids(q.pop(5)) == ["j2"]  # current, from the line
    raw.zrem(q.keys.unack_shard("a"), "j2")  # what the Java client's ack does
    raw.hdel(q.keys.message_hash, "j2")
    assert q.ensure(Message("j2", "again", group="g"))
    assert ids(q.pop(5)) == ["j3"] and q.ack("j3")
    assert [(m.id, m.payload) for m in q.pop(5)] == [("j2", "again")]


def test_group_must_be_a_non_empty_str() -> None:
    for bad in ("", 5, b"g"):
        with pytest.raises(ValueError):
            Message("m", group=bad)  # type: ignore[arg-type]
    assert Message("m", group="g").to_json() == b'{"id":"m","timeout":0,"priority":0,"group":"g"}'
    assert Message.from_json(b'{"id":"m","group":"g"}').group == "g"


def test_8_consumers_in_3_zones_never_hold_two_messages_of_one_group(make_queues) -> None:
    """Zone-local pops and unsafe_pop_all_shards race over 24 groups of 10 messages; some
    deliveries are nacked. Each consumer marks a group as held when a pop returns one of its
    messages and unmarks it just before the ack or nack (until then the group stays locked in
    Redis): a second holder at any time is a violation. Acks must come in push order."""
    name = unique("race")
    zones = {z: make_queues(shard_supplier=StaticShardSupplier(["a", "b", "c"], z),
                            unack_timeout_ms=30_000).get(name) for z in "abc"}
    groups = [f"group-{n}" for n in range(24)]
    zones["a"].push([Message(f"{g}/{i}", group=g) for i in range(10) for g in groups])
    total = 10 * len(groups)
    lock = threading.Lock()
    holding: dict[str, str] = {}
    violations: list[str] = []
    acked: dict[str, list[str]] = {g: [] for g in groups}
    done = threading.Event()

    def consume(n: int) -> None:
        q = zones["abc"[n % 3]]
        rng = random.Random(n)
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            batch = (q.pop(4, wait_ms=20, min_count=1) if n % 2 else
                     q.unsafe_pop_all_shards(4, wait_ms=20, min_count=1))
            with lock:
                for m in batch:
                    if m.group in holding:
                        violations.append(f"{m.id} while {holding[m.group]} is held")
                    holding[str(m.group)] = m.id
            for m in batch:
                time.sleep(rng.random() / 1000)
                nack = rng.random() < 0.1 and m.deliveries < 3
                with lock:
                    del holding[str(m.group)]
                    if not nack:
                        acked[str(m.group)].append(m.id)
                        if sum(map(len, acked.values())) == total:
                            done.set()
                if nack:
                    assert q.nack(m.id, receipt=m.receipt)
                else:
                    assert q.ack(m.id, receipt=m.receipt)

    threads = [threading.Thread(target=consume, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert violations == []
    assert acked == {g: [f"{g}/{i}" for i in range(10)] for g in groups}
    assert zones["b"].size() == 0 and zones["c"].group_info("group-0")["waiting"] == 0


#: Group names whose lines' key names need care: braces (Cluster hash tags), dots (the key
#: separator), colons, "%" (the escape itself: "%41" and "A" must not share a line), spaces and
#: control characters, non-ASCII text.
ODD_GROUPS = ("g", "{x}", "{x", "x}", "a.b", "a:b", "%41", "A", "a b\n\x00", "grüppe:7", "組")


def _in_line(raw: Any, q: Any, group: str) -> int:
    """Messages waiting in ``group``'s line: its members after the stale mark (the line member
    of the current message, when it is there: sequence, priority, id; its record starts with
    due (16), sequence (16), shard (3), priority (2)), as the scripts count them. Read in Lua:
    records hold byte 255, no UTF-8, and ``raw`` decodes replies."""
    return int(raw.eval("""
        local head = redis.call('HGET', KEYS[1], ARGV[1])
        local rec = head and redis.call('HGET', KEYS[2], head)
        local rank = rec and redis.call('ZRANK', KEYS[3],
                                        string.sub(rec, 17, 32) .. string.sub(rec, 36, 37) .. head)
        return redis.call('ZCARD', KEYS[3]) - (rank and rank + 1 or 0)""",
        3, q.keys.group_head, q.keys.group_of, q.keys.group_line(group), group))


def _group_keys(q: Any, groups: tuple[str, ...]) -> list[str]:
    return [q.keys.group_of, q.keys.group_head, q.keys.group_waiting,
            *(q.keys.group_line(g) for g in groups)]


@pytest.mark.one_partition("reads the one-partition keys")
def test_each_group_has_its_own_line_and_no_key_outlives_its_messages(make, raw) -> None:
    q = make()
    for n in range(3):
        q.push([Message(f"{i}-{n}", group=g) for i, g in enumerate(ODD_GROUPS)])
    lines = {q.keys.group_line(g) for g in ODD_GROUPS}
    assert len(lines) == len(ODD_GROUPS)
    assert all("{" not in key.split("}", 1)[-1] for key in lines)  # the queue's tag comes first
    for g in ODD_GROUPS:  # the scripts' key names are the ones QueueKeys.group_line() gives
        assert raw.zcard(q.keys.group_line(g)) == 2, g
        assert q.group_info(g)["waiting"] == 3, g
    assert q.shard_sizes() == {"a": {"size": 3 * len(ODD_GROUPS), "uacked": 0}}
    delivered: dict[str, list[str]] = {}
    while q.size():
        got = q.pop(100)
        for m in got:
            delivered.setdefault(m.id.split("-")[0], []).append(m.id)
        q.ack_many(got)
    assert all(order == [f"{i}-0", f"{i}-1", f"{i}-2"] for i, order in delivered.items())
    assert len(delivered) == len(ODD_GROUPS)
    for key in _group_keys(q, ODD_GROUPS):
        assert raw.exists(key) == 0, key


def test_lines_go_when_their_messages_leave_by_any_way(make, clock, raw) -> None:
    q = make(QueuePolicy(max_deliveries=1))
    q.push(grouped("{x}", "a", "b", "c", "d") + grouped("a.b", "e", "f"))
    q.remove("b")  # waiting in line
    q.remove("e")  # current: "f" moves up
    assert _in_line(raw, q, "{x}") == 2 and _in_line(raw, q, "a.b") == 0
    assert q.shard_sizes()["a"]["size"] == 4
    assert q.set_timeout("d", 500)  # still in line, at its new due time
    assert sorted(ids(q.pop(5))) == ["a", "f"]
    assert q.nack("a")  # dead at max deliveries 1: "c" moves up
    expire_leases(q, clock)  # "f"'s lease runs out: dead too
    assert ids(q.pop(5)) == ["c"]
    assert q.ack("c")
    assert ids(q.pop(5)) == ["d"]  # due: its 500 ms passed with the lease expiry
    q.ack("d")
    for key in _group_keys(q, ("{x}", "a.b")):
        assert raw.exists(key) == 0, key
    assert q.size() == 0 and len(q.dead_letters()) == 2


@pytest.mark.one_partition("reads the one-partition keys")
def test_acks_leave_the_line_alone_and_the_next_push_cuts_what_they_left(make, raw) -> None:
    """An ack moves its group on to the successor its group record names: the promoted
    message's line member stays where it is (the stale mark), so no ack touches the line;
    pushes cut the stale members off (every 16th by push sequence), and the group's last ack
    deletes the line."""
    q = make()
    q.push(grouped("g", *(f"m{i}" for i in range(6))))
    line = q.keys.group_line("g")
    assert raw.zcard(line) == 5 == _in_line(raw, q, "g")  # m0 is current, in no line
    for i in range(3):
        assert ids(q.pop(5)) == [f"m{i}"]
        assert q.ack(f"m{i}")
    assert raw.zcard(line) == 5  # m1, m2 (acked) and m3 (current) stay, stale
    assert _in_line(raw, q, "g") == 2 and q.group_info("g")["waiting"] == 3
    assert q.shard_sizes()["a"]["size"] == 3
    q.push(grouped("g", "m6"))  # goes last: may leave them (every 16th push cuts)
    assert _in_line(raw, q, "g") == 3
    q.push(grouped("g", *(f"n{i}" for i in range(16))))  # push sequences 8..23: 16 cuts
    assert raw.zcard(line) == 19 == _in_line(raw, q, "g")  # m4 .. m6, n0 .. n15
    delivered = []
    while got := q.pop(5):
        delivered += ids(got)
        q.ack_many(got)
    assert delivered == ["m3", "m4", "m5", "m6", *(f"n{i}" for i in range(16))]
    for key in _group_keys(q, ("g",)):
        assert raw.exists(key) == 0, key


@pytest.mark.one_partition("reads the one-partition keys")
def test_clear_deletes_every_group_line(make, raw) -> None:
    q = make()
    q.push([Message(f"{i}-{n}", group=g) for n in range(3) for i, g in enumerate(ODD_GROUPS)])
    q.pop(2)
    keys = [*q.keys.every_key(), *(q.keys.group_line(g) for g in ODD_GROUPS)]
    assert raw.exists(q.keys.group_line("{x}")) == 1
    q.clear()
    for key in keys:
        assert raw.exists(key) == 0, key
    assert q.size() == 0
    q.push(grouped("{x}", "again", "and"))  # the queue works as new
    assert ids(q.pop(5)) == ["again"] and q.group_info("{x}")["waiting"] == 1


def test_line_counts_stay_exact_through_every_change(make, clock, raw) -> None:
    """size() counts the messages in lines from P.GWAIT.Q: it must match the lines themselves
    after batched pushes, re-pushes, removes, reschedules, acks with retention and redrives."""
    q = make(QueuePolicy(max_deliveries=1, retention_ms=60_000))
    groups = ("g", "{x}", "a.b")

    def check() -> None:
        lines = sum(_in_line(raw, q, g) for g in groups)
        current = sum(1 for g in groups if q.group_info(g)["leased"] is None
                      and q.group_info(g)["next_due_ms"] is not None)
        assert q.shard_sizes()["a"]["size"] == lines + current

    q.push([Message(f"{g}{n}", group=g) for n in range(6) for g in groups])
    check()
    q.push([Message("g2", "again", group="g"), Message("{x}3", "moved", group="a.b")])
    q.remove("a.b4")
    assert q.set_timeout("g4", 100)
    check()
    q.ack_many(q.pop(10))
    check()
    for m in q.pop(10):
        q.nack(m.id)  # dead letters (max deliveries 1)
    check()
    q.redrive()
    clock.advance(100)
    check()
    while q.size():
        q.ack_many(q.pop(10))
        check()
    assert raw.exists(q.keys.group_waiting) == 0


def test_a_member_rescheduled_before_a_leased_current_one_comes_next(make, clock) -> None:
    """Found by the state machine: 'a' (pushed first) is rescheduled behind 'm2', 'm2' is
    leased, then 'a' is rescheduled to now: it sorts before the leased current one's stale
    mark in the line, and cutting the stale members took it too (the script failed)."""
    q = make()
    q.push([Message("a", "a", group="x"), Message("m2", "m2", group="x")])
    assert q.set_timeout("a", 1)
    assert ids(q.pop(1)) == ["m2"]
    assert q.set_timeout("a", 0)
    assert q.group_info("x")["waiting"] == 1 and q.pop(1) == []  # m2 still holds the group
    assert q.ack("m2")
    clock.advance(1)
    assert ids(q.pop(5)) == ["a"]
