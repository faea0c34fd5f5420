"""Partitioned queues (``QueuePolicy(partitions=n)``): where partitions live, how a process finds
them, and what a partitioned queue does that the contract suite (its ``partitioned`` deployment)
does not check: the shared "now" of a batch, the refusals, the spread over a cluster's primaries.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from dynoqueue import (
    ConfigurationError,
    Message,
    QueuePolicy,
    RedisQueues,
    SingleShardSupplier,
    StaticShardSupplier,
)
from dynoqueue.cli import main
from dynoqueue.embedded import RedisServer
from dynoqueue.metrics import read_stats
from dynoqueue.model.keys import QueueKeys
from dynoqueue.model.partitions import (
    MAX_PARTITIONS,
    SLOTS,
    partition_of,
    partition_of_message,
    partition_tags,
    partitions_of_messages,
    slot_of_tag,
)

from .deployments import Deployment


def _distance(a: int, b: int) -> int:
    d = abs(a - b) % SLOTS
    return min(d, SLOTS - d)


@pytest.mark.parametrize("count", [2, 3, 12, 64, 1024])
def test_partition_slots_sit_within_two_slots_of_even_spacing(count: int) -> None:
    tags = partition_tags("orders", count)
    base = slot_of_tag("orders")
    assert len(set(tags)) == count
    worst = max(_distance(slot_of_tag(t), base + k * SLOTS // count) for k, t in enumerate(tags))
    assert worst <= 2, worst
    assert partition_tags("orders", count) == tags  # the same in every process


def test_partitions_of_twelve_split_three_primaries_four_four_four() -> None:
    # A 3-primary cluster owns slots 0-5460, 5461-10922, 10923-16383 (redis-cli's split).
    for queue in ("orders", "q", "conductor.task_1", "ünïcode"):
        owners = Counter(min(slot_of_tag(t) * 3 // SLOTS, 2) for t in partition_tags(queue, 12))
        assert sorted(owners.values()) == [4, 4, 4], (queue, owners)


def test_partition_of_is_crc32_modulo_the_count() -> None:
    assert partition_of("m1", 1) == 0
    counts = Counter(partition_of(f"m{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8)) and min(counts.values()) > 800


@given(st.lists(st.tuples(st.text(min_size=1, max_size=12),
                          st.none() | st.text(min_size=1, max_size=6)), max_size=20),
       st.integers(1, MAX_PARTITIONS))
def test_a_batch_routes_as_its_messages_one_by_one(
        items: list[tuple[str, str | None]], count: int) -> None:
    batch = [Message(id, "x", group=group) for id, group in items]
    assert partitions_of_messages(batch, count) == [partition_of_message(m, count)
                                                    for m in batch]


@pytest.mark.parametrize("bad", [0, 1025, -1, True, 2.0, "2", None])
def test_a_partition_count_out_of_range_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="partitions"):
        QueuePolicy(partitions=bad)


def test_one_partition_is_stored_as_before_and_more_are_stored_as_parts() -> None:
    assert "parts" not in QueuePolicy().to_json()
    policy = QueuePolicy(max_deliveries=3, partitions=MAX_PARTITIONS)
    assert '"parts":1024' in policy.to_json()
    assert QueuePolicy.from_json(policy.to_json()) == policy
    assert QueuePolicy.from_json(QueuePolicy().to_json()).partitions == 1


@given(st.text(alphabet="abc.-_:#", min_size=1, max_size=8),
       st.text(alphabet="abc.-_:#", min_size=1, max_size=8),
       st.integers(2, 16), st.booleans())
def test_no_partition_key_is_another_queues_key(one: str, other: str, count: int,
                                                tagged: bool) -> None:
    if any(not part for part in one.split(".")) or any(not p for p in other.split(".")):
        return
    plain = set(QueueKeys("p", other, ("a", "b"), tagged).every_key())
    for k, tag in enumerate(partition_tags(one, count)):
        keys = QueueKeys("p", one, ("a", "b"), tagged, tag).every_key()
        assert not plain.intersection(keys)
        for j, tag2 in enumerate(partition_tags(other, count)):
            if (one, k) != (other, j):
                assert not set(keys).intersection(
                    QueueKeys("p", other, ("a", "b"), tagged, tag2).every_key())


# ---------------------------------------------------------------------------- on a server


@pytest.fixture
def factory(redis_server: RedisServer) -> Iterator[Any]:
    made: list[RedisQueues] = []
    prefix = f"t{uuid.uuid4().hex[:10]}"

    def make(local: str = "a", shards: tuple[str, ...] = ("a", "b"),
             **options: Any) -> RedisQueues:
        client = redis.Redis.from_url(redis_server.url)
        queues = RedisQueues(client, client, key_prefix=prefix,
                             shard_supplier=StaticShardSupplier(list(shards), local),
                             unack_handler_interval_ms=0, **options)
        queues.own_connections([client])
        made.append(queues)
        return queues

    yield make
    for queues in made:
        queues.close()


def test_a_partitioned_queue_spreads_messages_and_serves_them_all(factory: Any) -> None:
    q = factory().get("jobs", QueuePolicy(partitions=4))
    ids = [f"m{i}" for i in range(400)]
    assert q.push([Message(i, "x") for i in ids]) == ids
    per_part = [sum(s["size"] for s in sizes.values())
                for sizes in q._run(q._core.partition_sizes())]
    assert sum(per_part) == 400 and min(per_part) > 60, per_part
    assert q.shard_sizes() == {"a": {"size": 200, "uacked": 0}, "b": {"size": 200, "uacked": 0}}
    got = q.pop(500)
    assert sorted(m.id for m in got) == sorted(ids[1::2])  # shard a: every other one
    assert q.ack_many(got) == 200
    assert q.size() == 200


def test_a_push_split_over_partitions_has_one_now_per_partition(
        factory: Any, redis_server: RedisServer) -> None:
    q = factory().get("batch", QueuePolicy(partitions=4))
    q.push([Message(f"m{i}") for i in range(4000)])  # over 500 a partition: several calls
    raw = redis_server.client()
    try:
        for part in q._core.parts:
            scores = {score for key in part.keys.all_queue_shards
                      for _, score in raw.zrange(key, 0, -1, withscores=True)}
            assert len(scores) == 1
    finally:
        raw.close()


def test_a_process_given_no_policy_finds_the_partitions(factory: Any) -> None:
    q = factory().get("found", QueuePolicy(partitions=4, max_deliveries=2))
    q.push([Message(f"m{i}", "x") for i in range(20)])
    other = factory(local="b").get("found")  # no policy: reads the stored one
    assert other.size() == 20
    assert "partitions=4" in repr(other)
    assert sorted(m.id for m in other.pop(20)) == sorted(f"m{i}" for i in range(0, 20, 2))
    assert other.info("m1").max_deliveries == 2


def test_a_consumer_started_before_the_first_producer_finds_the_partitions(
        factory: Any) -> None:
    consumer = factory(shards=("a",)).get("late")  # no policy, none stored: one partition
    assert consumer.pop(1) == []
    producer = factory(shards=("a",)).get("late", QueuePolicy(partitions=4))
    producer.push([Message(f"m{i}", "x") for i in range(8)])
    started = time.monotonic()
    got: list[Message] = []
    while len(got) < 8 and time.monotonic() - started < 10:
        got += consumer.pop(8, wait_ms=500)
    assert sorted(m.id for m in got) == [f"m{i}" for i in range(8)]
    assert "partitions=4" in repr(consumer)  # within the policy's re-read (1 s), not never


@pytest.mark.parametrize("count", [1, 8])
def test_a_process_given_another_count_is_refused(factory: Any, count: int) -> None:
    factory().get("fixed", QueuePolicy(partitions=4)).push([Message("m")])
    with pytest.raises(ConfigurationError, match="configure every process alike"):
        factory().get("fixed", QueuePolicy(partitions=count)).size()


def test_messages_of_the_one_partition_layout_block_partitioning(
        factory: Any, redis_server: RedisServer) -> None:
    plain = factory().get("early")  # no policy stored: the one-partition layout
    plain.push([Message("m0", "x")])
    partitioned = factory().get("early", QueuePolicy(partitions=4))
    with pytest.raises(ConfigurationError, match="1 messages are stored in its one-partition"):
        partitioned.push([Message("m1", "x")])
    raw = redis_server.client()
    try:  # nothing written to the partitions, nothing lost
        assert not any(raw.exists(p.keys.message_hash) for p in partitioned._core.parts)
    finally:
        raw.close()
    assert plain.get("m0") is not None


def test_partitions_cannot_change_on_a_live_queue(factory: Any) -> None:
    partitioned = factory().get("live", QueuePolicy(partitions=4))
    partitioned.push([Message("m")])
    with pytest.raises(ConfigurationError, match="partitions cannot change"):
        partitioned.set_policy(QueuePolicy(max_deliveries=3))
    assert partitioned.set_policy(QueuePolicy(max_deliveries=3, partitions=4)) is not None
    plain = factory().get("flat", QueuePolicy())
    plain.push([Message("m")])
    with pytest.raises(ConfigurationError, match="partitions cannot change"):
        plain.set_policy(QueuePolicy(partitions=4))
    assert plain.stored_policy() == QueuePolicy()


def test_a_waiting_pop_wakes_on_a_push_into_any_partition(factory: Any) -> None:
    q = factory(shards=("a",), poll_interval_ms=10_000).get("bell", QueuePolicy(partitions=8))
    q.pop(1, wait_ms=0)
    ids = [f"m{i}" for i in range(8)]
    assert len({partition_of(i, 8) for i in ids}) > 3
    for id in ids:
        pusher = threading.Timer(0.2, lambda id=id: q.push([Message(id, "x")]))
        pusher.start()
        started = time.monotonic()
        got = q.pop(1, wait_ms=8000)
        pusher.join()
        # The push's ring ends the wait, not the 10 s poll interval (generous bound).
        assert [m.id for m in got] == [id] and time.monotonic() - started < 5


def _script_calls(server: RedisServer) -> int:
    stats = redis.Redis.from_url(server.url).info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval"))


def test_a_waiting_pop_after_a_round_that_found_nothing_asks_no_partition_again(
        factory: Any, redis_server: RedisServer) -> None:
    """A consumer's ``pop(n) or pop(1, wait)``: the waiting pop starts from the round the pop
    before it made (no ring since), so each message costs one round over the partitions, not
    two; and a message pushed by another process meanwhile still ends the wait at once."""
    q = factory(shards=("a",), poll_interval_ms=10_000).get("quiet", QueuePolicy(partitions=8))
    q.pop(1, wait_ms=1)  # the doorbell is subscribed from now on
    q.push([Message("later", "x", timeout=500)])
    time.sleep(0.1)  # the push's ring has come (a ring after the round would void it)
    assert q.pop(10) == []  # a round over the 8 partitions: nothing due
    before = _script_calls(redis_server)
    started = time.monotonic()
    got = q.pop(1, wait_ms=5000)
    assert [m.id for m in got] == ["later"]
    assert time.monotonic() - started < 2.0  # woken at the due time, not the poll interval
    # One claim of the partition whose message fell due (8+ if the partitions were asked).
    assert _script_calls(redis_server) - before <= 2
    other = factory(shards=("a",), poll_interval_ms=10_000).get("quiet")
    assert q.pop(10) == []
    other.push([Message("now", "x")])
    started = time.monotonic()
    assert [m.id for m in q.pop(1, wait_ms=5000)] == ["now"]
    assert time.monotonic() - started < 2.0  # the push's ring, not the 10 s poll


def test_grouped_messages_are_found_by_id_and_keep_their_order(factory: Any) -> None:
    q = factory().get("grouped", QueuePolicy(partitions=8))
    q.push([Message(f"g{i}", "x", group="user-7") for i in range(6)])
    seen = []
    for _ in range(6):
        (m,) = q.pop(2) or q.unsafe_pop_all_shards(2)
        seen.append(m.id)
        assert q.state(m.id).name == "LEASED"  # found by id although in the group's partition
        assert q.ack(m.id)  # by id alone
    assert seen == [f"g{i}" for i in range(6)]
    assert q.size() == 0


def test_leases_expire_and_dead_letters_merge_over_partitions(factory: Any) -> None:
    q = factory(unack_timeout_ms=50).get("leases", QueuePolicy(partitions=4, max_deliveries=1))
    q.push([Message(f"m{i}", "x") for i in range(20)])
    assert len(q.pop(40)) == 10  # shard a
    time.sleep(0.1)
    q.process_unacks()
    dead = q.dead_letters(100)
    assert len(dead) == 10 and [d.died_at_ms for d in dead] == sorted(d.died_at_ms for d in dead)
    assert q.dead_size() == 10
    assert q.redrive() == 10 and q.dead_size() == 0


# ---------------------------------------------------------------------------- on a cluster


@pytest.mark.slow
@pytest.mark.deployments("cluster")
def test_twelve_partitions_put_a_third_of_the_queue_on_each_primary(
        deployment: Deployment) -> None:
    queues = deployment.build(key_prefix=f"t{uuid.uuid4().hex[:10]}",
                              shard_supplier=SingleShardSupplier("a"),
                              unack_handler_interval_ms=0)
    raw = deployment.raw()
    try:
        q = queues.get("spread", QueuePolicy(partitions=12))
        q.push([Message(f"m{i}", "x") for i in range(3000)])
        topology: Any = deployment.topology
        per_primary: Counter[int] = Counter()
        for part in q._core.parts:
            owner = topology.owner_of(part.keys.message_hash)
            per_primary[owner.port] += raw.hlen(part.keys.message_hash)
        assert len(per_primary) == 3 and min(per_primary.values()) > 800, per_primary
        got = q.pop(3000)
        assert len(got) == 3000 and q.ack_many(got) == 3000
    finally:
        raw.close()
        queues.close()


@pytest.mark.slow
@pytest.mark.deployments("partitioned")
def test_stats_ops_cli_and_serve_see_every_partition(
        deployment: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    queues = deployment.build(key_prefix=prefix, unack_handler_interval_ms=0)
    try:
        q = queues.get("layers")
        q.push([Message(f"r{i}", "x") for i in range(40)]
               + [Message(f"d{i}", "x", timeout=600_000) for i in range(10)])
        leased = q.pop(6)
        assert len(leased) == 6
        for message in leased[:3]:
            assert q.dead_letter(message.id, "poison")
        (stats,) = read_stats(queues, ["layers"])
        assert [p.partition for p in stats.partitions] == list(range(deployment.partitions))
        assert all(p.total("waiting") for p in stats.partitions)  # 50 ids spread over 4
        assert (stats.total("waiting"), stats.total("ready"), stats.total("delayed"),
                stats.total("leased"), stats.dead) == (q.size(), 34, 10, 3, 3)
        assert sum(p.dead for p in stats.partitions) == 3

        argv = ["--url", deployment.url, "--prefix", prefix]
        assert main(["stats", "layers", "--partitions", "--json", *argv]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert sorted({r["partition"] for r in rows}) == list(range(deployment.partitions))
        assert sum(r["waiting"] for r in rows) == 44 and sum(r["leased"] for r in rows) == 3
        assert main(["stats", "layers", "--json", *argv]) == 0
        assert [r["waiting"] for r in json.loads(capsys.readouterr().out)] == [44]
        assert main(["dead", "layers", "--json", *argv]) == 0
        assert len(json.loads(capsys.readouterr().out)) == 3

        pytest.importorskip("httpx", reason="dynoqueue serve needs the 'server' extra")
        from .test_server import CAMELLIA, Served

        served = Served(deployment.url, prefix=prefix)
        try:
            info = served.http.get(f"{CAMELLIA}/getTopicInfo", params={"topic": "layers"})
            assert {k: v for k, v in info.json()["data"].items() if k.endswith("Size")} == {
                "waitingQueueSize": 10, "readyQueueSize": 34, "ackQueueSize": 3}
            served.camellia("sendMsg", topic="layers", msgId="via-http", msg="h", delayMillis=0)
            assert q.get("via-http") is not None  # the server found the partitions
            board = served.http.get("/api/queues").json()["queues"]
            assert [(b["queue"], b["ready"], b["dead"]) for b in board] == [("layers", 35, 3)]
        finally:
            served.close()
    finally:
        queues.close()
