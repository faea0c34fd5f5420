"""The message lifecycle on every deployment and both APIs: delivery counts and receipts, nack,
max deliveries and dead letters, redrive, TTL, retention, states, dedup, fixed due times,
per-pop leases, undecodable messages, Java-written messages and the stored policy.

Time is an injected FakeClock, so every expiry is exact; process_unacks() runs what the unack
reprocessor runs (lease expiry, then the lifecycle sweep).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis.cluster import RedisCluster

from dynoqueue import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    MessageState,
    QueuePolicy,
    SingleShardSupplier,
)

from .conftest import FakeClock, unique


@pytest.fixture
def make(make_queues, clock: FakeClock) -> Callable[..., Any]:
    """A queue on one shard "a" with the injected clock and a 1 s lease."""

    def build(policy: QueuePolicy | None = None, **settings: Any) -> Any:
        queues = make_queues(shard_supplier=SingleShardSupplier("a"), clock=clock,
                             unack_timeout_ms=1000, **settings)
        return queues.get(unique("life"), policy)

    return build


def as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def expire_leases(q: Any, clock: FakeClock, ms: int = 1001) -> None:
    clock.advance(ms)
    q.process_unacks()


# ------------------------------------------------------------------ lease expiry


def test_an_ended_lease_is_delivered_again_by_the_next_pop(make, clock) -> None:
    """SQS's visibility timeout: when a lease ends the message is due again, and the next pop
    of its shard delivers it (counting the delivery) without waiting for an unack pass."""
    q = make()
    q.push([Message("m", "p"), Message("later", timeout=5000)])
    (first,) = q.pop(5)
    assert q.state("m") is MessageState.LEASED
    clock.advance(999)
    assert q.state("m") is MessageState.LEASED and q.pop(5) == []
    clock.advance(1)
    info = q.info("m")
    assert (info.state, info.due_at_ms, info.lease_expires_at_ms) == (
        MessageState.READY, clock.now_ms, None)
    (again,) = q.pop(5)  # no process_unacks in between
    assert (again.id, again.payload, again.deliveries) == ("m", "p", 2)
    assert again.receipt != first.receipt
    assert not q.ack("m", receipt=first.receipt)  # the first holder's lease is over
    assert q.ack("m", receipt=again.receipt)
    assert q.process_unacks() == 0 and q.shard_sizes()["a"] == {"size": 1, "uacked": 0}


def test_an_ended_lease_at_its_last_delivery_dies_at_the_next_pop(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=1))
    q.push([Message("once")])
    assert [m.id for m in q.pop(1)] == ["once"]
    clock.advance(1000)
    assert q.pop(1) == []
    assert q.state("once") is MessageState.DEAD
    (dead,) = q.dead_letters()
    assert (dead.message.id, dead.reason, dead.deliveries) == ("once", "max_deliveries", 1)


def test_a_waiting_pop_wakes_when_a_lease_ends(make_queues) -> None:
    """No write rings the doorbell when a lease ends: the claim tells the waiting pop when the
    next lease of its shard ends, so it claims again then (not at its next poll)."""
    q = make_queues(shard_supplier=SingleShardSupplier("a"), unack_timeout_ms=400,
                    poll_interval_ms=10_000).get(unique("wake"))
    q.push([Message("m")])
    assert [m.id for m in q.pop(1)] == ["m"]
    started = time.monotonic()
    (again,) = q.pop(1, wait_ms=8000)
    took = time.monotonic() - started
    assert again.id == "m" and again.deliveries == 2
    assert 0.3 <= took < 3.0, took  # the lease's 0.4 s, with a generous bound


# ------------------------------------------------------------------ changing the stored policy


def test_a_stored_policy_changes_on_a_live_queue(make, make_queues, clock) -> None:
    q = make(QueuePolicy(max_deliveries=2))
    q.push([Message("m")])
    q.pop(1)
    clock.advance(1000)
    assert [m.deliveries for m in q.pop(1)] == [2]  # its last allowed delivery
    # Raised while it is leased: its lease's end counts against the new limit.
    raised = QueuePolicy(max_deliveries=5, retention_ms=60_000)
    assert q.set_policy(raised) == QueuePolicy(max_deliveries=2)
    assert q.stored_policy() == raised
    clock.advance(1000)
    assert [m.deliveries for m in q.pop(1)] == [3]  # not dead-lettered at 2
    assert q.ack("m") and q.state("m") is MessageState.ACKED  # the new retention keeps it
    # Another process: the new policy (or none) works, the old one is refused.
    other = make_queues(shard_supplier=SingleShardSupplier("a"), clock=clock)
    assert other.get(q.name, raised).size() == 0
    stale = make_queues(shard_supplier=SingleShardSupplier("a"), clock=clock)
    with pytest.raises(ConfigurationError, match="configure every process alike"):
        stale.get(q.name, QueuePolicy(max_deliveries=2)).size()
    # The ordering mode cannot change on a live queue: refused, nothing changed.
    with pytest.raises(ConfigurationError, match="strict_priority cannot change"):
        q.set_policy(QueuePolicy(max_deliveries=5, strict_priority=True))
    assert q.stored_policy() == raised
    with pytest.raises(InvalidArgumentError):
        q.set_policy({"max_deliveries": 3})


@pytest.mark.one_partition("sets a policy of one partition")
def test_a_queue_without_a_stored_policy_gets_one(make) -> None:
    q = make()
    assert q.stored_policy() is None
    assert q.set_policy(QueuePolicy(max_deliveries=3)) is None
    assert q.stored_policy() == QueuePolicy(max_deliveries=3)
    q.push([Message("x")])
    assert q.info("x").max_deliveries == 3


# ------------------------------------------------------------------ deliveries and receipts


def test_each_delivery_is_counted_and_gets_a_new_receipt(make, clock) -> None:
    q = make()
    q.push([Message("m")])
    (first,) = q.pop(1)
    assert (first.deliveries, first.shard) == (1, "a") and first.receipt
    expire_leases(q, clock)
    (second,) = q.pop(1)
    assert second.deliveries == 2 and second.receipt != first.receipt
    assert not q.ack("m", receipt=first.receipt)  # a late consumer cannot end the new lease
    assert not q.set_unack_timeout("m", 60_000, receipt=first.receipt)
    assert q.set_unack_timeout("m", 60_000, receipt=second.receipt)
    assert q.ack("m", receipt=second.receipt)
    assert q.state("m") is None


def test_ack_many_with_messages_acks_only_their_own_leases(make, clock) -> None:
    q = make()
    q.push([Message("a"), Message("b")])
    stale = q.pop(2)
    expire_leases(q, clock)
    fresh = q.pop(2)
    assert q.ack_many(stale) == 0
    assert q.ack_many(fresh) == 2


def test_ack_many_checks_every_receipt_of_a_mixed_batch(make, clock) -> None:
    # One call with a stale and a fresh receipt of one id, a repeat, a record in JSON form (own
    # max deliveries), a plain id and an unknown one: each lease is ended once, by its own.
    q = make()
    q.push([Message("a"), Message("b", max_deliveries=3), Message("c"), Message("d")])
    stale = q.pop(4)
    expire_leases(q, clock)
    fresh = {m.id: m for m in q.pop(4)}
    batch = [*stale, fresh["a"], fresh["a"], fresh["b"], "c", "nope"]
    assert q.ack_many(batch) == 3
    assert [q.state(i) for i in "abc"] == [None, None, None]
    assert q.state("d") is MessageState.LEASED
    assert not q.ack("d", receipt=next(m for m in stale if m.id == "d").receipt)
    assert q.ack("d", receipt=fresh["d"].receipt)


@pytest.mark.one_partition("reads the one-partition keys")
def test_waiting_messages_cost_no_lifecycle_record_by_default(make, raw) -> None:
    q = make()
    q.push([Message(f"m{i}") for i in range(20)])
    assert raw.hlen(q.keys.life) == 0  # made at the first delivery only
    popped = q.pop(5)
    assert raw.hlen(q.keys.life) == 5
    assert q.ack_many(popped) == 5
    assert raw.hlen(q.keys.life) == 0


@pytest.mark.one_partition("reads the one-partition keys")
def test_a_large_claim_keeps_its_records_in_a_hash_table_and_no_key_outlives_them(
        make, raw, deployment) -> None:
    # Records written by one claim of many messages go to a hash table at once (a listpack
    # scans every field per insert and lookup); the pad that does it is no record: the sweep
    # does not count it, and the key goes with the last record.
    q = make()
    q.push([Message(f"m{i}") for i in range(200)])
    popped = q.pop(200)
    if deployment.name != "dynomite":  # Dynomite has no OBJECT command
        assert as_str(raw.object("encoding", q.keys.life)) == "hashtable"
    assert q.process_unacks() == 0 and raw.hlen(q.keys.life) == 201
    assert [q.info(m.id).deliveries for m in popped[:3]] == [1, 1, 1]
    assert q.ack_many(popped) == 200
    assert raw.exists(q.keys.life) == 0


def test_records_with_limits_are_text_and_keep_every_field_through_claims(make, raw,
                                                                           clock) -> None:
    # The push-time fields (enqueued at, own max deliveries and TTL) are a born entry
    # ("e:m:t"); the record holds the deliveries, receipt and error text ("d:c" or
    # "d:c:::" + ":l"), made at the first claim. Claims and acks read it with string.match.
    q = make(QueuePolicy(message_ttl_ms=60_000))
    q.push([Message("m", max_deliveries=4, ttl_ms=30_000), Message("p")])
    pushed_at = clock.now_ms
    assert as_str(raw.hget(q.keys.born, "m")) == f"{pushed_at}:4:30000"
    assert as_str(raw.hget(q.keys.born, "p")) == f"{pushed_at}::"
    assert raw.exists(q.keys.life) == 0
    (first,) = q.pop(1)
    assert as_str(raw.hget(q.keys.life, first.id)) == first.receipt
    assert q.nack(first.id, receipt=first.receipt, error="boom: 1:2\nx") is True
    (second,) = q.pop(1)
    assert as_str(raw.hget(q.keys.life, "m")) == f"{second.receipt}::::boom: 1:2\nx"
    info = q.info("m")
    assert (info.deliveries, info.max_deliveries, info.enqueued_at_ms, info.last_error) == (
        2, 4, pushed_at, "boom: 1:2\nx")
    assert not q.ack("m", receipt=first.receipt) and q.ack("m", receipt=second.receipt)
    assert not raw.hexists(q.keys.born, "m") and not raw.hexists(q.keys.life, "m")
    q.remove("p")
    assert raw.exists(q.keys.born) == 0 and raw.exists(q.keys.life) == 0


# ------------------------------------------------------------------ nack, max deliveries, dead


def test_nack_makes_the_message_due_after_the_delay_and_records_the_error(make, clock) -> None:
    q = make()
    q.push([Message("m", priority=7)])
    (m,) = q.pop(1)
    assert q.nack("m", 5000, error="boom", receipt=m.receipt)
    assert not q.nack("m")  # no longer leased
    info = q.info("m")
    assert info.state is MessageState.DELAYED and info.last_error == "boom"
    assert info.due_at_ms == clock.now_ms + 5000 and info.priority == 7
    clock.advance(4999)
    assert q.pop(1) == []
    clock.advance(1)
    assert [x.deliveries for x in q.pop(1)] == [2]


def test_a_consumer_dying_5_times_with_max_deliveries_3_ends_dead_after_3(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=3))
    q.push([Message("poison", "p")])
    deliveries = []
    for _ in range(5):
        deliveries += [m.deliveries for m in q.pop(1)]
        expire_leases(q, clock)  # the consumer died: its lease runs out
    assert deliveries == [1, 2, 3]
    assert q.state("poison") is MessageState.DEAD and q.size() == 0 and q.dead_size() == 1
    (dead,) = q.dead_letters()
    assert (dead.reason, dead.deliveries, dead.message.id, dead.message.payload) == (
        "max_deliveries", 3, "poison", "p")
    assert dead.died_at_ms == clock.now_ms - 2 * 1001  # at the end of the third lease


def test_nack_at_the_last_delivery_dead_letters_with_the_error(make) -> None:
    q = make()
    q.push([Message("m", max_deliveries=2)])
    q.pop(1)
    assert q.nack("m", error="first")
    q.pop(1)
    assert q.nack("m", error="second")
    (dead,) = q.dead_letters()
    assert (dead.reason, dead.deliveries, dead.last_error) == ("max_deliveries", 2, "second")
    assert q.info("m").state is MessageState.DEAD


def test_redrive_puts_dead_letters_back_with_counts_reset(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=1))
    q.push([Message("x"), Message("y"), Message("z")])
    for m in q.pop(3):
        q.nack(m.id)
    assert q.dead_size() == 3
    assert q.redrive(["x", "unknown"], delay_ms=100) == 1
    assert q.state("x") is MessageState.DELAYED
    clock.advance(100)
    (x,) = q.pop(1)
    assert (x.id, x.deliveries) == ("x", 1)
    assert q.redrive() == 2 and q.dead_size() == 0
    assert q.purge_dead() == 0
    for m in q.pop(2):
        q.nack(m.id)
    assert q.purge_dead() == 2 and q.dead_letters() == []


# ------------------------------------------------------------------ TTL and retention


def test_ttl_expires_undelivered_messages_and_dead_letters_delivered_ones(make, clock) -> None:
    q = make(QueuePolicy(message_ttl_ms=10_000, retention_ms=60_000))
    q.push([Message("never"), Message("tried")])
    tried = q.pop_with_msg_id("tried")
    assert tried is not None and tried.deliveries == 1
    assert q.info("never").expires_at_ms == clock.now_ms + 10_000
    clock.advance(10_000)
    q.process_unacks()
    assert q.state("never") is MessageState.EXPIRED
    assert q.state("tried") is MessageState.DEAD
    assert [d.reason for d in q.dead_letters()] == ["ttl"]
    assert q.pop(5) == []


def test_a_message_past_its_ttl_is_never_delivered_even_before_the_sweep(make, clock) -> None:
    q = make()
    q.push([Message("short", ttl_ms=1000), Message("long")])
    clock.advance(1000)
    assert [m.id for m in q.pop(5)] == ["long"]
    assert q.state("short") is None  # expired, no retention


def test_retention_keeps_ended_messages_queryable_until_it_ends(make, clock) -> None:
    q = make(QueuePolicy(retention_ms=5000))
    q.push([Message("acked", "payload"), Message("removed")])
    q.pop_with_msg_id("acked")
    assert q.ack("acked")
    assert q.remove("removed")
    info = q.info("acked")
    assert (info.state, info.payload, info.deliveries, info.ended_at_ms) == (
        MessageState.ACKED, "payload", 1, clock.now_ms)
    assert q.state("removed") is MessageState.DELETED
    assert q.get("acked") is None and q.size() == 0  # gone from the queue itself
    clock.advance(5001)
    q.process_unacks()
    assert q.state("acked") is None and q.state("removed") is None


# ------------------------------------------------------------------ states and info


def test_states_follow_the_message(make, clock) -> None:
    q = make()
    q.push([Message("m", "p", timeout=500, priority=3)])
    assert q.state("m") is MessageState.DELAYED and MessageState.DELAYED.code == 1
    clock.advance(500)
    assert q.state("m") is MessageState.READY
    (m,) = q.pop(1, lease_ms=7000)
    info = q.info("m")
    assert (info.state, info.shard, info.priority, info.payload, info.deliveries) == (
        MessageState.LEASED, "a", 3, "p", 1)
    assert info.lease_expires_at_ms == clock.now_ms + 7000
    assert q.ack("m", receipt=m.receipt)
    assert q.state("m") is None and q.info("unknown") is None


# ------------------------------------------------------------------ push options


def test_keep_mode_lets_the_first_push_win(make) -> None:
    q = make()
    assert q.push([Message("d", "first")], if_exists="keep") == ["d"]
    assert q.push([Message("d", "second"), Message("e")], if_exists="keep") == ["e"]
    assert q.get("d").payload == "first"
    assert q.push([Message("d", "third")]) == ["d"]  # replace, dyno-queues' default
    assert q.get("d").payload == "third"
    with pytest.raises(InvalidArgumentError):
        q.push([Message("f")], if_exists="merge")


def test_keep_mode_racing_8_producers_on_one_id_yields_one_message(make) -> None:
    q = make()
    # Connect first, as test_conductor's race does: a Cluster client still reading its slot map
    # may repeat a call that ran, and a repeated keep-mode push answers [] (already there).
    assert q.push([Message("warm-up")]) == ["warm-up"] and q.remove("warm-up")
    won: list[list[str]] = []
    start = threading.Barrier(8)

    def produce(n: int) -> None:
        start.wait()
        won.append(q.push([Message("once", f"producer {n}")], if_exists="keep"))

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won, key=len) == [[]] * 7 + [["once"]]
    assert q.size() == 1


def test_fixed_due_times(make, clock) -> None:
    q = make()
    q.push([Message("later", due_at_ms=clock.now_ms + 3000),
            Message("past", due_at_ms=clock.now_ms - 60_000)])
    assert [m.id for m in q.pop(5)] == ["past"]
    assert q.ack("past")  # else its 1 s lease ends first, and it is delivered again
    assert q.info("later").due_at_ms == clock.now_ms + 3000
    clock.advance(3000)
    assert [m.id for m in q.pop(5)] == ["later"]
    with pytest.raises(InvalidMessageError):
        Message("both", timeout=5, due_at_ms=1)


def test_min_count_returns_as_soon_as_enough_are_leased(make_queues) -> None:
    q = make_queues(shard_supplier=SingleShardSupplier("a")).get(unique())
    q.push([Message("one")])
    assert [m.id for m in q.pop(10, wait_ms=5000, min_count=1)] == ["one"]
    with pytest.raises(InvalidArgumentError):
        q.pop(10, min_count=0)
    with pytest.raises(InvalidArgumentError):
        q.pop(10, lease_ms=0)
    q.push([Message("two")])
    for pop in (q.pop, q.unsafe_pop_all_shards):  # more than a pop can return: refused
        with pytest.raises(InvalidArgumentError, match="min_count must be at most count"):
            pop(1, wait_ms=5000, min_count=5)
    assert q.state("two") is MessageState.READY  # nothing was leased


# ------------------------------------------------------------------ robustness


@pytest.mark.parametrize("stored", ["{not json", b"\xff\xfe not json at all"],
                         ids=["bad-json", "not-utf8"])
@pytest.mark.one_partition("writes the one-partition keys")
def test_a_poison_message_among_50_valid_ones_is_dead_lettered_and_the_rest_delivered(
        make, raw, clock, stored) -> None:
    q = make()
    q.push([Message(f"ok{i}") for i in range(50)])
    raw.hset(q.keys.message_hash, "bad", stored)  # another client wrote it
    raw.zadd(q.keys.queue_shard("a"), {"bad": clock.now_ms - 1})
    got = q.pop(60)
    assert sorted(m.id for m in got) == sorted(f"ok{i}" for i in range(50))
    (dead,) = q.dead_letters()
    assert (dead.message.id, dead.reason) == ("bad", "undecodable")
    assert q.shard_sizes()["a"] == {"size": 0, "uacked": 50}
    assert q.state("bad") is MessageState.DEAD
    info = q.info("bad")
    assert (info.state, info.shard, info.deliveries, info.payload) == (
        MessageState.DEAD, "a", 1, None)


def test_a_java_written_message_without_lifecycle_data_is_counted_from_its_first_pop(
        make, raw, clock) -> None:
    q = make(QueuePolicy(max_deliveries=2))
    raw.hset(q.keys.message_hash, "java", '{"id":"java","payload":"j","timeout":0,"priority":0}')
    raw.zadd(q.keys.queue_shard("a"), {"java": clock.now_ms})
    q.pop(1)  # the policy is checked (and stored) at this first call
    assert q.info("java").deliveries == 1
    expire_leases(q, clock)
    assert [x.deliveries for x in q.pop(1)] == [2]
    expire_leases(q, clock)
    assert q.state("java") is MessageState.DEAD


@pytest.mark.one_partition("reads the one-partition keys")
def test_lifecycle_data_never_outlives_a_message_a_java_client_acked(make, raw) -> None:
    q = make()
    q.push([Message("j")])
    q.pop(1)
    assert raw.hexists(q.keys.life, "j")
    raw.zrem(q.keys.unack_shard("a"), "j")  # what the Java client's ack does
    raw.hdel(q.keys.message_hash, "j")
    q.process_unacks()
    assert not raw.hexists(q.keys.life, "j")


def _reset_stats(raw: Any) -> None:
    if isinstance(raw, RedisCluster):
        raw.config_resetstat(target_nodes=RedisCluster.ALL_NODES)
    else:
        raw.config_resetstat()


def _calls(raw: Any, command: str) -> int:
    """Calls of ``command`` since _reset_stats, over the primaries of a Cluster client (its
    replicas count the replicated commands again)."""
    if isinstance(raw, RedisCluster):
        per_node = list(raw.info("commandstats", target_nodes=RedisCluster.PRIMARIES).values())
    else:
        per_node = [raw.info("commandstats")]
    return sum(int(node.get(f"cmdstat_{command}", {}).get("calls", 0)) for node in per_node)


@pytest.mark.one_partition("reads the one-partition keys")
def test_a_pushed_id_counts_from_zero_while_other_messages_are_leased(make, raw) -> None:
    """A producer's usual push (one plain message, or a batch) into a queue whose consumers
    hold leases (delivery records exist) takes the short path of push.lua (HSETNX), and still
    drops a leftover record of an earlier message with a pushed id (a Java client acked it)."""
    q = make()
    q.push([Message(i) for i in ("j", "k", "held")])
    assert len(q.pop(3)) == 3
    for gone in ("j", "k"):  # what the Java client's ack does; their records stay for now
        raw.zrem(q.keys.unack_shard("a"), gone)
        raw.hdel(q.keys.message_hash, gone)
        assert raw.hexists(q.keys.life, gone)
    _reset_stats(raw)
    assert q.push([Message("j", "again")]) == ["j"]
    assert q.push([Message("k", "again"), Message("new")]) == ["k", "new"]
    assert _calls(raw, "hsetnx") == 3 and _calls(raw, "hset") == 0  # the short path
    assert not raw.hexists(q.keys.life, "j") and not raw.hexists(q.keys.life, "k")
    assert raw.hexists(q.keys.life, "held")  # the lease that still holds keeps its record
    again = {m.id: m for m in q.pop(3)}
    assert sorted(again) == ["j", "k", "new"]
    assert {m.deliveries for m in again.values()} == {1}
    assert again["j"].payload == "again"


def test_born_entries_never_outlive_a_message_a_java_client_removed(make, raw) -> None:
    # Waiting messages with a TTL have a born entry and no record: the sweep drops the born
    # entries (and TTL entries) of the ones a Java client removed, and only those.
    q = make(QueuePolicy(message_ttl_ms=3_600_000))
    q.push([Message(f"j{i}") for i in range(5)])
    assert raw.hlen(q.keys.born) == 5 and raw.exists(q.keys.life) == 0
    for i in range(3):  # what the Java client's remove does
        raw.zrem(q.keys.queue_shard("a"), f"j{i}")
        raw.hdel(q.keys.message_hash, f"j{i}")
    q.process_unacks()
    assert sorted(as_str(k) for k in raw.hkeys(q.keys.born)) == ["j3", "j4"]
    assert raw.zcard(q.keys.expiry) == 2
    assert q.info("j4").expires_at_ms is not None


@pytest.mark.one_partition("gives queues policies of one partition")
def test_the_stored_policy_must_match_every_process(make_queues, clock) -> None:
    name = unique("policy")
    first = make_queues(shard_supplier=SingleShardSupplier("a")).get(
        name, QueuePolicy(max_deliveries=3))
    first.push([Message("m")])
    other = make_queues(key_prefix=first.keys.prefix,
                        shard_supplier=SingleShardSupplier("a")).get(
        name, QueuePolicy(max_deliveries=5))
    with pytest.raises(ConfigurationError, match="max_deliveries=3"):
        other.size()
    adopting = make_queues(key_prefix=first.keys.prefix,
                           shard_supplier=SingleShardSupplier("a")).get(name)
    adopting.pop(1)
    adopting.nack("m")
    adopting.pop(1)
    adopting.nack("m")
    adopting.pop(1)
    adopting.nack("m")  # the third delivery was the last: the stored policy applies
    assert adopting.state("m") is MessageState.DEAD


def test_nack_many_ends_many_leases_in_one_call(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=2))
    q.push([Message(f"m{i}") for i in range(6)])
    first = q.pop(6)
    assert q.nack_many(first[:3], 1000, error="busy") == 3
    assert q.nack_many([m.id for m in first[3:]] + ["not-leased"]) == 3
    clock.advance(1000)
    second = q.pop(6)
    assert sorted(m.deliveries for m in second) == [2] * 6
    assert q.nack_many(second) == 6  # the second delivery was the last
    assert q.dead_size() == 6 and q.size() == 0
    assert {d.last_error for d in q.dead_letters()} == {"busy", None}
    with pytest.raises(InvalidArgumentError):
        q.nack_many("m1")


def test_one_nack_many_call_mixes_due_again_dead_stale_and_repeated_ids(make, clock) -> None:
    # nack.lua handles the whole batch with variadic commands: each id still counts once, by
    # its own receipt, keeps its priority and group, and dies at its own max_deliveries.
    q = make()
    q.push([Message("hi", "h", priority=1), Message("lo", "l", priority=90),
            Message("once", "o", max_deliveries=1), Message("g", "g", group="grp"),
            Message("stale", "s")])
    got = {m.id: m for m in q.pop(5)}
    stale = got["stale"]
    assert q.nack_many([stale]) == 1
    clock.advance(1)
    again = q.pop(1)
    assert [m.id for m in again] == ["stale"] and again[0].deliveries == 2
    assert q.nack_many([got["lo"], got["hi"], got["lo"], got["once"], got["g"], stale,
                        "unknown", "hi"], 500, error="e:1") == 4
    assert q.state("once") is MessageState.DEAD
    assert q.info("stale").state is MessageState.LEASED  # its old receipt ended nothing
    info = q.info("hi")
    assert (info.state, info.priority, info.due_at_ms, info.last_error) == (
        MessageState.DELAYED, 1, clock.now_ms + 500, "e:1")
    assert q.info("g").due_at_ms == clock.now_ms + 500
    clock.advance(500)
    assert [m.id for m in q.pop(5)] == ["g", "hi", "lo"]  # priority 0 first


def test_dead_letter_now_and_batched_lease_extension(make, clock) -> None:
    q = make()
    q.push([Message("a"), Message("b"), Message("c")])
    a, b, _c = sorted(q.pop(3), key=lambda m: m.id)
    assert q.set_unack_timeout_many([a, b, "c"], 10_000) == 3
    assert q.info("a").lease_expires_at_ms == clock.now_ms + 10_000
    assert q.dead_letter("a", "bad input", error="ValueError: x", receipt=a.receipt)
    assert not q.dead_letter("a", "again")  # no longer leased
    (dead,) = q.dead_letters()
    assert (dead.message.id, dead.reason, dead.last_error) == ("a", "bad input", "ValueError: x")
    clock.advance(1001)
    q.process_unacks()  # extended: nothing comes back yet
    assert q.size() == 0 and q.shard_sizes()["a"]["uacked"] == 2


def test_postpone_moves_a_waiting_or_leased_message_atomically(make, clock) -> None:
    q = make()
    q.push([Message("w", "x", priority=5), Message("l", "y", priority=5)])
    q.pop_with_msg_id("l")
    assert q.postpone("l", 2000, priority=1) and q.postpone("w", 500)
    assert not q.postpone("unknown", 0)
    info = q.info("l")
    assert (info.state, info.priority, info.due_at_ms, info.deliveries) == (
        MessageState.DELAYED, 1, clock.now_ms + 2000, 1)
    assert q.info("w").priority == 5
    clock.advance(2000)
    assert [m.id for m in q.pop(2)] == ["w", "l"]


@pytest.mark.one_partition("gives queues policies of one partition")
def test_info_reports_the_stored_policys_max_deliveries_to_every_process(make_queues) -> None:
    name = unique("stored")
    configured = make_queues(shard_supplier=SingleShardSupplier("a")).get(
        name, QueuePolicy(max_deliveries=4))
    configured.push([Message("m")])
    plain = make_queues(key_prefix=configured.keys.prefix,
                        shard_supplier=SingleShardSupplier("a")).get(name)
    assert plain.info("m").max_deliveries == 4


def test_release_gives_leases_back_uncounted(make, clock) -> None:
    q = make(QueuePolicy(max_deliveries=1))
    q.push([Message("a"), Message("b")])
    a, _b = sorted(q.pop(2), key=lambda m: m.id)
    assert q.release([a, "b", "unknown"]) == 2
    assert q.release([a]) == 0  # no longer leased
    again = q.pop(2)
    assert sorted((m.id, m.deliveries) for m in again) == [("a", 1), ("b", 1)]
    assert q.nack_many(again) == 2 and q.dead_size() == 2  # max_deliveries=1 still holds
