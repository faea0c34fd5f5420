"""Every public DynoQueue / RedisQueues call on a real redis-server, with its error cases."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.cluster import RedisCluster

from dynoqueue import (
    DynoQueue,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidPatternError,
    LocalOnlyStrategy,
    Message,
    QueueClosedError,
    RedisOperationError,
    RedisQueues,
    SingleShardSupplier,
)
from dynoqueue.model.keys import QueueKeys

from .conftest import FakeClock, eventually, unique


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


@pytest.fixture
def queue(make_queues, decode, clock: FakeClock) -> DynoQueue:
    """A queue on shards a, b, c (local a) with an injected clock, bytes or decoded client."""
    return make_queues(decode=decode, clock=clock, unack_timeout_ms=1000).get(unique())


def local(n: int, prefix: str = "m", **fields) -> list[Message]:
    """n messages that all land on the local shard a under round robin (b, c, a, b, c, a...)."""
    return [Message(f"{prefix}{i}", f"payload {i}", **fields) for i in range(n)]


# ------------------------------------------------------------------ factory


def test_get_returns_the_same_object_per_name(make_queues) -> None:
    queues = make_queues()
    first = queues.get("orders")
    assert queues.get("orders") is first
    assert queues.get("other") is not first
    assert {q.name for q in queues.queues()} == {"orders", "other"}
    assert first.unack_timeout_ms == 60_000


def test_a_queue_closed_on_its_own_is_replaced_and_skipped(make_queues, caplog) -> None:
    queues = make_queues()
    first = queues.get("solo")
    first.close()
    assert first.closed
    with pytest.raises(QueueClosedError):
        first.pop(1)
    assert queues.process_unacks() == 0
    assert "failed" not in caplog.text
    second = queues.get("solo")
    assert second is not first and not second.closed


def test_context_manager_closes_queues(redis_server, prefix) -> None:
    client = redis_server.client()
    with RedisQueues(client, client, key_prefix=prefix,
                     shard_supplier=SingleShardSupplier("a")) as queues:
        q = queues.get("x")
        q.push([Message("1")])
    with pytest.raises(QueueClosedError):
        q.push([Message("2")])
    with pytest.raises(QueueClosedError):
        queues.get("y")
    queues.close()  # idempotent


@pytest.mark.parametrize("bad", [
    {"key_prefix": ""},
    {"key_prefix": "has space"},
    {"key_prefix": "{tag}"},
    {"unack_timeout_ms": 0},
    {"unack_timeout_ms": "60"},
    {"unack_handler_interval_ms": -1},
    {"write_quorum": -1},
    {"write_quorum_timeout_ms": 0},
    {"max_payload_bytes": 0},
    {"poll_interval_ms": 0},
    {"clock": 5},
    {"sharding_strategy": object()},
    {"shard_supplier": object()},
])
def test_bad_factory_arguments_raise_configuration_error(make_queues, bad) -> None:
    from dynoqueue import ConfigurationError
    with pytest.raises(ConfigurationError) as info:
        make_queues(**bad)
    assert isinstance(info.value, ValueError)


def test_connections_must_be_redis_clients(prefix) -> None:
    from dynoqueue import ConfigurationError
    with pytest.raises(ConfigurationError, match="redis-py client"):
        RedisQueues("redis://localhost", None, key_prefix=prefix,
                    shard_supplier=SingleShardSupplier("a"))


@pytest.mark.parametrize("name", ["", "a b", "{x}", 7])
def test_bad_queue_names(make_queues, name) -> None:
    from dynoqueue import ConfigurationError
    with pytest.raises(ConfigurationError):
        make_queues().get(name)


# ------------------------------------------------------------------ storage layout


@pytest.mark.deployments("single", "ring", "sentinel", "dynomite")  # Cluster: hash tags
def test_storage_is_the_dyno_queues_v1_layout(make_queues, raw, prefix, clock) -> None:
    q = make_queues(clock=clock).get("layout")
    q.push([Message("x001", "Hello World", timeout=20_000, priority=3)])
    # Round robin increments first: the first push goes to shard b.
    assert raw.hget(f"{prefix}.MESSAGE.layout", "x001") == (
        '{"id":"x001","payload":"Hello World","timeout":20000,"priority":3}'
    )
    assert raw.zscore(f"{prefix}.QUEUE.layout.b", "x001") == pytest.approx(
        clock.now_ms + 20_000 + 0.03, abs=1e-6)
    # Beside the v1 keys, the prefix's queue registry (docs/semantics.md, "Zone loss").
    assert sorted(raw.keys(f"{prefix}.*")) == [f"{prefix}.MESSAGE.layout",
                                               f"{prefix}.QUEUE.layout.b",
                                               f"{prefix}.QUEUES"]
    assert raw.smembers(f"{prefix}.QUEUES") == {"layout"}


@pytest.mark.deployments("single", "ring", "sentinel", "dynomite")  # Java: no hash tags
def test_a_message_written_like_the_java_client_pops(make_queues, raw, prefix) -> None:
    """Jackson's JSON (payload omitted when empty, unknown fields) stored with a client clock."""
    q = make_queues().get("java")
    now_ms = int(raw.time()[0]) * 1000
    raw.hset(f"{prefix}.MESSAGE.java", "j1", '{"id":"j1","timeout":0,"priority":7,"extra":1}')
    raw.zadd(f"{prefix}.QUEUE.java.a", {"j1": now_ms - 5 + 0.07})
    [message] = q.pop(1)
    assert (message.id, message.payload, message.priority, message.shard) == ("j1", None, 7, "a")
    assert raw.zscore(f"{prefix}.UNACK.java.a", "j1") is not None
    assert q.ack("j1") is True
    assert raw.exists(f"{prefix}.MESSAGE.java") == 0


def test_keys_with_cluster_hash_tag() -> None:
    keys = QueueKeys("p", "q", ("a", "b"), hash_tag=True)
    assert keys.message_hash == "p.MESSAGE.{q}"
    assert keys.queue_shard("a") == "p.QUEUE.{q}.a"
    assert keys.unack_shard("b") == "p.UNACK.{q}.b"
    assert keys.all_keys() == ["p.MESSAGE.{q}", "p.QUEUE.{q}.a", "p.QUEUE.{q}.b",
                               "p.UNACK.{q}.a", "p.UNACK.{q}.b"]


# ------------------------------------------------------------------ push / pop / ack


def test_push_returns_ids_in_order_and_spreads_round_robin(queue) -> None:
    assert queue.push(local(7)) == [f"m{i}" for i in range(7)]
    assert queue.shard_sizes() == {"a": {"size": 2, "uacked": 0},
                                   "b": {"size": 3, "uacked": 0},
                                   "c": {"size": 2, "uacked": 0}}
    assert queue.size() == 7
    assert queue.push([]) == []


@pytest.mark.one_partition("due order holds within a partition")
def test_pop_returns_local_due_messages_in_visibility_then_priority_order(queue, clock) -> None:
    # Ids 2, 5, 8 land on the local shard a.
    queue.push([Message(f"m{i}", priority=p) for i, p in enumerate([0, 0, 50, 0, 0, 9, 0, 0, 1])])
    assert ids(queue.pop(10)) == ["m8", "m5", "m2"]
    assert queue.pop(10) == []
    assert queue.shard_sizes()["a"] == {"size": 0, "uacked": 3}


def test_pop_respects_the_delay(queue, clock) -> None:
    queue.push([Message("x", timeout=0), Message("y", timeout=0),
                Message("late", "p", timeout=500)])
    assert queue.pop(1) == []  # late is on shard a, due in 500 ms
    clock.advance(499)
    assert queue.pop(1) == []
    clock.advance(1)
    [message] = queue.pop(1)
    assert (message.id, message.payload, message.timeout, message.shard) == ("late", "p", 500, "a")


@pytest.mark.one_partition("due order holds within a partition")
def test_priority_orders_only_within_one_millisecond(queue, clock) -> None:
    queue.push([Message("b1"), Message("c1"), Message("early", priority=99)])
    clock.advance(1)
    queue.push([Message("b2"), Message("c2"), Message("later", priority=0)])
    assert ids(queue.pop(2)) == ["early", "later"]


@pytest.mark.one_partition("reads the one-partition keys (test_partitions checks it)")
def test_one_push_uses_one_now(make_queues, raw, prefix) -> None:
    q = make_queues(shard_supplier=SingleShardSupplier("s")).get("batch")
    q.push([Message(f"m{i}") for i in range(1200)])  # three script calls
    scores = {s for _, s in raw.zrange(q.keys.queue_shard("s"), 0, -1, withscores=True)}
    assert len(scores) == 1


def test_pop_count_zero_and_bad_arguments(queue) -> None:
    assert queue.pop(0) == []
    for bad in [-1, 1.5, "3", True]:
        with pytest.raises(InvalidArgumentError):
            queue.pop(bad)
    with pytest.raises(InvalidArgumentError):
        queue.pop(1, wait_ms=-5)


def test_large_pop_spans_several_script_calls(make_queues) -> None:
    q = make_queues(shard_supplier=SingleShardSupplier("s")).get(unique())
    q.push([Message(f"m{i:04d}") for i in range(1100)])
    popped = q.pop(1050)
    assert len(popped) == 1050 and len(set(ids(popped))) == 1050
    assert q.shard_sizes() == {"s": {"size": 50, "uacked": 1050}}


def test_ack_and_ack_many(queue, clock) -> None:
    queue.push(local(9))
    popped = queue.pop(3)
    assert queue.ack("m0") is False  # waiting on shard b, never popped
    assert queue.ack(popped[0].id) is True
    assert queue.ack(popped[0].id) is False
    assert queue.get(popped[0].id) is None
    assert queue.ack_many([popped[1], popped[2].id, "nope"]) == 2
    assert queue.ack_many([]) == 0
    assert queue.shard_sizes()["a"] == {"size": 0, "uacked": 0}
    with pytest.raises(InvalidArgumentError):
        queue.ack("")
    with pytest.raises(InvalidArgumentError):
        queue.ack_many("m1")
    with pytest.raises(InvalidArgumentError):
        queue.ack_many(["m1", None])


@pytest.mark.one_partition("reads the one-partition keys")
def test_lease_expiry_redelivers_with_its_priority(queue, clock, raw) -> None:
    queue.push([Message("b"), Message("c"), Message("m", "x", priority=42)])
    [message] = queue.pop(1)
    clock.advance(999)
    assert queue.process_unacks() == 0
    clock.advance(1)
    assert queue.atomic_process_unacks() == 1
    score = raw.zscore(queue.keys.queue_shard("a"), "m")
    assert score == pytest.approx(clock.now_ms + 0.42, abs=1e-6)
    [again] = queue.pop(1)
    assert again.id == message.id and again.payload == "x"


def test_process_unacks_handles_more_than_one_batch(make_queues, clock) -> None:
    q = make_queues(shard_supplier=SingleShardSupplier("s"), clock=clock,
                    unack_timeout_ms=10).get(unique())
    q.push([Message(f"m{i}") for i in range(1200)])
    assert len(q.pop(1200)) == 1200
    clock.advance(10)
    assert q.process_unacks() == 1200
    assert q.shard_sizes() == {"s": {"size": 1200, "uacked": 0}}


def test_set_unack_timeout_extends_and_shortens(queue, clock) -> None:
    queue.push(local(3))
    [message] = queue.pop(1)
    assert queue.set_unack_timeout(message.id, 5000) is True
    clock.advance(4000)
    assert queue.process_unacks() == 0
    assert queue.set_unack_timeout_if_shorter(message.id, 2000) is False  # 1000 left: longer
    assert queue.set_unack_timeout_if_shorter(message.id, 100) is True
    clock.advance(100)
    assert queue.process_unacks() == 1
    assert queue.set_unack_timeout(message.id, 10) is False  # waiting again, not leased
    assert queue.set_unack_timeout("m0", 10) is False
    with pytest.raises(InvalidArgumentError):
        queue.set_unack_timeout(message.id, -1)


def test_set_unack_timeout_zero_makes_it_eligible_at_once(queue, clock) -> None:
    queue.push(local(3))
    [message] = queue.pop(1)
    assert queue.set_unack_timeout(message.id, 0) is True
    assert queue.process_unacks() == 1


@pytest.mark.one_partition("reads the one-partition keys")
def test_set_timeout_keeps_priority_and_updates_the_stored_delay(queue, clock, raw) -> None:
    queue.push([Message("b"), Message("c"), Message("m", "p", priority=37)])
    assert queue.set_timeout("m", 2500) is True
    assert raw.zscore(queue.keys.queue_shard("a"), "m") == pytest.approx(
        clock.now_ms + 2500.37, abs=1e-6)
    assert queue.get("m").timeout == 2500
    assert queue.pop(1) == []
    clock.advance(2500)
    assert ids(queue.pop(1)) == ["m"]
    assert queue.set_timeout("m", 0) is False  # leased now
    assert queue.set_timeout("unknown", 0) is False


def test_remove_waiting_and_leased(queue, raw) -> None:
    queue.push(local(6))
    leased = queue.pop(1)[0].id
    assert queue.remove(leased) is True  # dyno-queues PR 109: payload goes too
    assert raw.hexists(queue.keys.message_hash, leased) == 0
    assert queue.shard_sizes()["a"]["uacked"] == 0
    assert queue.atomic_remove("m0") is True
    assert queue.remove("m0") is False
    assert queue.size() == 4


@pytest.mark.one_partition("reads the one-partition keys")
def test_push_of_an_existing_id_moves_it(queue, raw) -> None:
    queue.push(local(3))
    [leased] = queue.pop(1)
    assert leased.id == "m2"
    queue.push([Message("m2", "new payload")])  # goes to shard b now
    sizes = queue.shard_sizes()
    assert sizes["a"] == {"size": 0, "uacked": 0}
    assert sizes["b"]["size"] == 2
    assert queue.get("m2").payload == "new payload"
    assert queue.ack("m2") is False
    total = sum(raw.zcard(k) for k in queue.keys.all_keys()[1:])
    assert total == 3


@pytest.mark.one_partition("reads the one-partition keys")
def test_push_of_new_and_existing_ids_in_one_call(queue, raw) -> None:
    """push.lua stores new ids on its short path and hands a call with an existing id (replace
    mode) to its general code with nothing written: either way each id ends up stored once,
    waiting in one shard, with the last payload given for it."""
    queue.push(local(3))
    [leased] = queue.pop(1)  # m2, on shard a
    assert queue.push([Message("n1", "1"), Message("m2", "again"), Message("n2", "2")]) == [
        "n1", "m2", "n2"]
    assert queue.push([Message("d", "first"), Message("d", "second")]) == ["d", "d"]
    assert queue.push([Message("k", "first"), Message("k", "second")], if_exists="keep") == ["k"]
    assert (queue.get("m2").payload, queue.get("d").payload, queue.get("k").payload) == (
        "again", "second", "first")
    assert queue.ack("m2", receipt=leased.receipt) is False  # re-pushed: no longer leased
    expected = {"m0", "m1", "m2", "n1", "n2", "d", "k"}
    assert {k.decode() if isinstance(k, bytes) else k
            for k in raw.hkeys(queue.keys.message_hash)} == expected
    waiting = [m.decode() if isinstance(m, bytes) else m for key in queue.keys.all_keys()[1:]
               for m in raw.zrange(key, 0, -1)]
    assert sorted(waiting) == sorted(expected)


@pytest.mark.deployments("single", "ring", "sentinel", "cluster")  # Dynomite: no pub/sub
def test_a_push_rings_only_when_it_makes_a_message_due_earlier(make_queues, raw,
                                                               deployment) -> None:
    q = make_queues(shard_supplier=SingleShardSupplier("a")).get(unique())
    channel = q.keys.doorbell("a")
    bell = raw.pubsub(ignore_subscribe_messages=True)
    # On Cluster the rings are sharded (SPUBLISH): they reach the slot's nodes only, and a
    # plain subscriber (which any node's cluster bus would feed) hears nothing.
    cluster = deployment.name == "cluster"
    plain = raw.pubsub(ignore_subscribe_messages=True) if cluster else None
    if cluster:
        bell.ssubscribe(channel)
        plain.subscribe(channel)
    else:
        bell.subscribe(channel)

    def rings() -> int:  # what arrived within 0.2 s (an ignored confirmation reads as None)
        count, until = 0, time.monotonic() + 0.2
        while time.monotonic() < until:
            message = (bell.get_sharded_message(timeout=0.05) if cluster
                       else bell.get_message(timeout=0.05))
            count += message is not None
        if plain is not None:
            assert plain.get_message(timeout=0.01) is None
        return count

    try:
        assert rings() == 0  # reads the subscription's confirmation: subscribed from here
        q.push([Message("later", timeout=60_000)])
        assert rings() == 1  # the first waiting message
        q.push([Message("even-later", timeout=120_000)])
        q.push([Message("b1", timeout=90_000), Message("b2", timeout=100_000)])
        assert rings() == 0
        q.push([Message("sooner", timeout=1_000)])
        assert rings() == 1
        q.push([Message("c1", timeout=2_000), Message("now1"), Message("now2")])
        assert rings() == 1  # once per call and shard
    finally:
        bell.close()
        if plain is not None:
            plain.close()


@pytest.mark.deployments("single", "managed", "sentinel", "cluster")
def test_a_server_that_lost_its_scripts_is_sent_them_again(queue, raw, deployment) -> None:
    """NOSCRIPT (a restart, SCRIPT FLUSH, or Redis 7.4+ / Valkey 8 evicting scripts sent with
    EVAL) is answered by loading the script's text with SCRIPT LOAD (never EVAL, whose scripts
    those servers evict) and calling it again, also on the short path of a script call that
    has run before."""
    assert queue.push([Message("a")]) == ["a"] and queue.push([Message("b")]) == ["b"]
    every = {"target_nodes": RedisCluster.ALL_NODES} if deployment.name == "cluster" else {}
    raw.execute_command("SCRIPT", "FLUSH", **every)
    raw.config_resetstat(**every)
    assert queue.push([Message("c")]) == ["c"]
    assert queue.push([Message("d")]) == ["d"] and queue.size() == 4
    stats = raw.info("commandstats", **every)
    nodes = list(stats.values()) if deployment.name == "cluster" else [stats]
    assert not any("cmdstat_eval" in node for node in nodes)
    loads = sum(node.get("cmdstat_script|load", {}).get("calls", 0) for node in nodes)
    assert loads >= 1  # each script the calls used, on the node that runs them


def test_ensure_is_push_if_absent(queue) -> None:
    assert queue.ensure(Message("e", "first")) is True
    assert queue.ensure(Message("e", "second")) is False
    assert queue.get("e").payload == "first"
    queue.push([Message("x"), Message("e2")])  # e2 lands on the local shard
    queue.pop(5)
    assert queue.ensure(Message("e2")) is False  # leased counts as present
    with pytest.raises(InvalidMessageError):
        queue.ensure("e3")


def test_contains_get_local_get_and_get_all(queue) -> None:
    queue.push([Message("a", "1"), Message("b", None, priority=5)])
    assert queue.contains("a") and not queue.contains("zz")
    assert queue.get("b") == Message("b") and queue.get("b").priority == 5
    assert queue.local_get("a").payload == "1"
    assert queue.get("zz") is None and queue.local_get("zz") is None
    assert sorted(ids(queue.get_all_messages())) == ["a", "b"]
    with pytest.raises(InvalidArgumentError):
        queue.get(None)


@pytest.mark.one_partition("due order holds within a partition")
def test_peek_does_not_lease_and_all_shards_peek_is_bounded(queue) -> None:
    queue.push(local(9))
    assert ids(queue.peek(2)) == ["m2", "m5"]
    assert ids(queue.peek(2)) == ["m2", "m5"]
    assert queue.peek(0) == []
    everything = queue.unsafe_peek_all_shards(100)
    assert len(everything) == 9
    assert ids(everything[:3]) == ["m2", "m5", "m8"]  # local shard first
    assert len(queue.unsafe_peek_all_shards(4)) == 4
    assert queue.shard_sizes()["a"]["uacked"] == 0


@pytest.mark.one_partition("due order holds within a partition")
def test_all_shard_pops(queue) -> None:
    queue.push(local(9))
    first = queue.unsafe_pop_all_shards(4)
    assert ids(first[:3]) == ["m2", "m5", "m8"] and len(first) == 4
    rest = queue.unsafe_bulk_pop(10)
    assert len(rest) == 5
    assert {m.shard for m in rest} <= {"b", "c"}
    assert queue.size() == 0


def test_bulk_pop_is_a_local_pop(queue) -> None:
    queue.push(local(9))
    assert ids(queue.bulk_pop(5)) == ["m2", "m5", "m8"]


def test_pop_with_msg_id_respects_shard_and_visibility(queue, clock) -> None:
    queue.push([Message("b1"), Message("c1"), Message("a1", timeout=100)])
    assert queue.pop_with_msg_id("a1") is None  # not due yet (dyno-queues ignored this)
    assert queue.pop_with_msg_id("b1") is None  # not on the local shard
    clock.advance(100)
    message = queue.pop_with_msg_id("a1")
    assert message is not None and message.shard == "a"
    assert queue.pop_with_msg_id("a1") is None  # leased now
    found = queue.unsafe_pop_with_msg_id_all_shards("c1")
    assert found is not None and found.shard == "c"
    assert queue.unsafe_pop_with_msg_id_all_shards("nope") is None


def test_predicates(queue) -> None:
    queue.push([Message("o1", '{"order":41}'), Message("o2", '{"order":42}'),
                Message("o3", '{"order":42,"x":1}')])
    assert queue.contains_predicate("order\\\":42")
    assert not queue.contains_predicate("order\\\":99")
    assert queue.get_msg_with_predicate("order\\\":41") == "o1"
    assert queue.get_msg_with_predicate("order\\\":41", local_only=True) is None  # o1 is on b
    assert queue.get_msg_with_predicate("order\\\":42,", local_only=True) == "o3"
    popped = queue.pop_msg_with_predicate("order\\\":42")
    assert popped is not None and popped.id in {"o2", "o3"}
    assert popped.payload.startswith('{"order":42')  # the real payload, not the stored JSON
    assert queue.get_msg_with_predicate("o%d") is not None
    assert queue.pop_msg_with_predicate("nothing matches") is None


@pytest.mark.parametrize("pattern", ["[a", "%", ""])
def test_malformed_patterns_raise_before_anything_changes(queue, pattern) -> None:
    queue.push(local(3))
    for call in (queue.contains_predicate, queue.get_msg_with_predicate,
                 queue.pop_msg_with_predicate):
        with pytest.raises(InvalidPatternError) as info:
            call(pattern)
        assert isinstance(info.value, ValueError)
    assert queue.size() == 3


@pytest.mark.one_partition("writes the one-partition keys")
def test_find_stale_messages_reports_ids_without_payload(queue, raw) -> None:
    queue.push(local(3))
    raw.hdel(queue.keys.message_hash, "m1")
    stale = queue.find_stale_messages()
    assert [(m.id, m.shard) for m in stale] == [("m1", "c")]
    assert raw.zscore(queue.keys.queue_shard("c"), "m1") is not None  # reported, not deleted


@pytest.mark.one_partition("writes the one-partition keys")
def test_a_pop_drops_ids_whose_payload_is_gone(queue, raw) -> None:
    queue.push(local(6))
    raw.hdel(queue.keys.message_hash, "m2")
    assert ids(queue.pop(5)) == ["m5"]
    assert raw.zscore(queue.keys.queue_shard("a"), "m2") is None


def test_clear(queue, raw) -> None:
    queue.push(local(6))
    queue.pop(1)
    queue.clear()
    assert queue.size() == 0
    assert all(raw.exists(k) == 0 for k in queue.keys.all_keys())


def test_local_only_strategy(make_queues) -> None:
    queues = make_queues()
    q = queues.get("local")
    from dynoqueue import StaticShardSupplier
    q2 = make_queues(sharding_strategy=LocalOnlyStrategy(StaticShardSupplier(["a", "b"], "b")))
    q2.get("local").push([Message("x"), Message("y")])
    assert q.shard_sizes()["b"]["size"] == 2


# ------------------------------------------------------------------ waiting pops


def test_waiting_pop_returns_a_message_pushed_meanwhile(make_queues) -> None:
    queues = make_queues()
    q = queues.get(unique())
    producer = make_queues(key_prefix=queues.key_prefix).get(q.name)

    def push_later() -> None:
        time.sleep(0.3)
        producer.push([Message("b"), Message("c"), Message("late-arrival")])

    threading.Thread(target=push_later).start()
    started = time.monotonic()
    popped = q.pop(1, wait_ms=5000)
    elapsed = time.monotonic() - started
    assert ids(popped) == ["late-arrival"]  # dyno-queues issue 58: it slept the whole wait
    assert 0.25 < elapsed < 2.0


def test_waiting_pop_returns_a_message_that_falls_due(make_queues) -> None:
    q = make_queues().get(unique())
    started = time.monotonic()  # before the push: its reply may come late on a busy machine
    q.push([Message("b"), Message("c"), Message("soon", timeout=400)])
    assert ids(q.pop(1, wait_ms=5000)) == ["soon"]
    assert 0.35 < time.monotonic() - started < 2.0


def test_waiting_pop_gives_up_at_its_deadline_and_returns_what_it_has(make_queues) -> None:
    q = make_queues().get(unique())
    q.push([Message("b"), Message("c"), Message("one")])
    started = time.monotonic()
    assert ids(q.pop(5, wait_ms=300)) == ["one"]
    assert 0.28 < time.monotonic() - started < 2.0


@pytest.mark.deployments("single")  # one server holds every command of the test
def test_a_waiting_pop_sends_few_commands(make_queues, raw) -> None:
    """No busy polling: an idle 1.5 s wait costs a handful of claims, not hundreds."""
    q = make_queues().get(unique())
    q.pop(1, wait_ms=10)  # doorbell subscribed, scripts loaded
    stats = raw

    def evalsha_calls() -> int:
        return int(stats.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    before = evalsha_calls()
    assert q.pop(1, wait_ms=1500) == []
    assert evalsha_calls() - before <= 6


@pytest.mark.deployments("single")
def test_a_waiting_pop_that_nothing_wakes_claims_once(make_queues, raw) -> None:
    """A wait shorter than poll_interval_ms that no ring or due time ends claims at its start
    only: no last claim at the deadline (a consumer's next pop claims at once anyway)."""
    q = make_queues(shard_supplier=SingleShardSupplier("a")).get(unique())
    q.pop(1, wait_ms=10)  # doorbell subscribed, scripts loaded

    def evalsha_calls() -> int:
        return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    before = evalsha_calls()
    started = time.monotonic()
    assert q.pop(1, wait_ms=400) == []
    assert 0.38 < time.monotonic() - started < 2.0
    assert evalsha_calls() - before == 1
    q.push([Message("due-at-deadline", timeout=300)])  # due before the deadline: claimed
    assert ids(q.pop(1, wait_ms=350)) == ["due-at-deadline"]


def test_close_stops_the_reprocessor_thread(redis_server, prefix) -> None:
    # Reprocessors that run already belong to other tests' factories in this process.
    before = {t for t in threading.enumerate() if t.name == "dynoqueue-unack-reprocessor"}
    client = redis_server.client()
    queues = RedisQueues(client, client, key_prefix=prefix, shard_supplier=SingleShardSupplier("a"),
                         unack_handler_interval_ms=50, unack_timeout_ms=50)
    q = queues.get("r")
    q.push([Message("m")])
    q.pop(1)
    assert eventually(lambda: q.size() == 1, timeout_s=5)  # the thread put it back
    queues.close()
    assert not any(t.name == "dynoqueue-unack-reprocessor" and t.is_alive()
                   for t in threading.enumerate() if t not in before)


def test_reprocessor_survives_errors(redis_server, prefix, caplog) -> None:
    client = redis_server.client()
    with RedisQueues(client, client, key_prefix=prefix, shard_supplier=SingleShardSupplier("a"),
                     unack_handler_interval_ms=30, unack_timeout_ms=30) as queues:
        broken = queues.get("broken")
        # A wrong-type key makes every unack pass of this queue fail.
        client.set(broken.keys.unack_shard("a"), "not a zset")
        good = queues.get("good")
        good.push([Message("m")])
        good.pop(1)
        assert eventually(lambda: good.size() == 1, timeout_s=5)
    assert "unack processing failed for queue broken" in caplog.text


def test_redis_failures_are_wrapped_with_operation_and_key(make_queues, raw) -> None:
    q = make_queues().get(unique())
    raw.set(q.keys.message_hash, "wrong type")
    with pytest.raises(RedisOperationError) as info:
        q.push([Message("m")])
    assert info.value.operation == "push" and info.value.key == q.keys.message_hash
    assert isinstance(info.value.__cause__, redis.ResponseError)


def test_connection_errors_are_wrapped(prefix) -> None:
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)
    queues = RedisQueues(dead, dead, key_prefix=prefix, shard_supplier=SingleShardSupplier("a"),
                         unack_handler_interval_ms=0)
    q = queues.get("x")
    with pytest.raises(RedisOperationError) as info:
        q.size()
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    queues.close()


@pytest.mark.deployments("single", "ring", "sentinel", "cluster")  # Dynomite: no pub/sub
def test_the_doorbell_wakes_a_waiting_pop(make_queues) -> None:
    """With polling every 5 s, only the doorbell can return the message well within a second."""
    queues = make_queues(poll_interval_ms=5000)
    q = queues.get(unique())
    q.pop(1, wait_ms=1)  # subscribe first, so the timing below measures the wake-up only
    producer = make_queues(key_prefix=queues.key_prefix).get(q.name)
    pushed_at: list[float] = []

    def push_later() -> None:
        time.sleep(0.2)
        pushed_at.append(time.monotonic())
        producer.push([Message("b"), Message("c"), Message("rung")])

    threading.Thread(target=push_later).start()
    assert ids(q.pop(1, wait_ms=8000)) == ["rung"]
    assert time.monotonic() - pushed_at[0] < 1.0


def test_a_pop_waiting_longer_than_the_lease_returns_each_message_once(make_queues) -> None:
    """The reprocessor may put back what this very pop leased; it is returned once, re-leased."""
    q = make_queues(shard_supplier=SingleShardSupplier("s"), unack_timeout_ms=100,
                    unack_handler_interval_ms=20).get(unique())
    q.push([Message("m1"), Message("m2")])
    popped = q.pop(5, wait_ms=700)
    assert sorted(ids(popped)) == ["m1", "m2"]
    # The 100 ms lease of the pop's last claim may run out before the ack (the reprocessor runs
    # every 20 ms): then the message waits again, still stored; otherwise the ack ends it.
    for message_id in ("m1", "m2"):
        assert q.ack(message_id) or q.get(message_id) is not None


def test_close_releases_a_waiting_pop(make_queues) -> None:
    queues = make_queues()
    q = queues.get(unique())
    results: list[list[Message]] = []
    waiter = threading.Thread(target=lambda: results.append(q.pop(1, wait_ms=10_000)))
    waiter.start()
    time.sleep(0.3)
    started = time.monotonic()
    queues.close()
    waiter.join(timeout=5)
    assert not waiter.is_alive() and results == [[]]
    assert time.monotonic() - started < 3.0


def test_close_stops_new_work_but_still_accepts_acks(make_queues) -> None:
    """Shutdown: closing a queue wakes waiting pops and refuses new pops and pushes, but the
    messages in hand can still be acked (not redelivered) until the factory closes."""
    queues = make_queues(shard_supplier=SingleShardSupplier("a"))
    q = queues.get(unique())
    q.push([Message("m1"), Message("m2"), Message("m3")])
    held = q.pop(3)
    q.close()
    with pytest.raises(QueueClosedError):
        q.pop(1)
    with pytest.raises(QueueClosedError):
        q.push([Message("late")])
    assert q.ack(held[0].id)
    assert q.ack_many([m.id for m in held[1:]]) == 2
    assert q.set_unack_timeout("gone", 1000) is False
    queues.close()
    with pytest.raises(QueueClosedError):
        q.ack("m1")


@pytest.mark.deployments("single", "ring", "sentinel", "cluster")  # Dynomite: no doorbell
def test_ping_checks_every_connection(make_queues) -> None:
    times = make_queues().ping()
    assert set(times) == {"quorum", "non_quorum", "doorbell"}
    assert all(0 <= ms < 5_000 for ms in times.values())
