"""Queues in three zones over a real zone ring: primary in us-east-1a, replicas in 1b and 1c."""

from __future__ import annotations

import uuid

import pytest

from dynoqueue import Message, QuorumNotReachedError, RedisQueues, ZoneShardSupplier

from .conftest import ZONES, eventually


@pytest.fixture
def zone_queues(ring):
    """One RedisQueues per zone: quorum = primary (write_quorum=1), non-quorum = local node."""
    prefix = f"mz{uuid.uuid4().hex[:8]}"
    built, clients = {}, []
    for zone in ZONES:
        quorum, local = ring.primary.client(), ring.node_for(zone).client()
        clients += [quorum, local]
        built[zone] = RedisQueues(
            quorum, local, key_prefix=prefix,
            shard_supplier=ZoneShardSupplier.from_zone_suffix(ZONES, zone),
            write_quorum=1, write_quorum_timeout_ms=2000,
            unack_timeout_ms=300, unack_handler_interval_ms=100,
        )
    yield built
    for queues in built.values():
        queues.close()
    for client in clients:
        client.close()


def test_zone_names_map_to_shards(zone_queues) -> None:
    assert [zone_queues[z].local_shard for z in ZONES] == ["a", "b", "c"]


def test_every_zone_consumes_its_own_shard(zone_queues) -> None:
    producers = {zone: zone_queues[zone].get("work") for zone in ZONES}
    pushed = set()
    for zone, q in producers.items():
        batch = [Message(f"{zone}-{i}", zone) for i in range(30)]
        pushed |= set(q.push(batch))
    # Reads through each zone's replica see the replicated sizes.
    for q in producers.values():
        assert eventually(lambda q=q: q.size() == 90)
    got: dict[str, set[str]] = {}
    for zone, q in producers.items():
        messages = q.pop(100, wait_ms=200)
        assert {m.shard for m in messages} == {q.local_shard}
        got[zone] = {m.id for m in messages}
        assert q.ack_many(messages) == len(messages)
    assert sum(len(s) for s in got.values()) == 90
    assert set().union(*got.values()) == pushed
    assert all(len(s) == 30 for s in got.values())  # round robin spreads evenly


def test_non_quorum_reads_go_to_the_local_replica(ring, zone_queues) -> None:
    q = zone_queues["us-east-1c"].get("reads")
    q.push([Message("m1", "x")])
    replica = ring.node_for("us-east-1c").client(decode_responses=True)

    def zcard_calls() -> int:
        return int(replica.info("commandstats").get("cmdstat_zcard", {}).get("calls", 0))

    before = zcard_calls()
    assert eventually(lambda: q.size() == 1)
    assert zcard_calls() > before
    assert eventually(lambda: q.local_get("m1") is not None)
    # peek is a read-only script: it runs on the replica too (and sees m1 on shard b or c).
    evals_before = int(replica.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    q.unsafe_peek_all_shards(5)
    assert int(replica.info("commandstats")["cmdstat_evalsha"]["calls"]) > evals_before
    assert [m.id for m in q.unsafe_peek_all_shards(5)] == ["m1"]
    replica.close()


def test_redelivery_in_a_zone_through_its_reprocessor(zone_queues) -> None:
    q = zone_queues["us-east-1b"].get("redeliver")
    q.push([Message(f"m{i}") for i in range(3)])  # one message per shard
    [first] = q.pop(1, wait_ms=500)
    assert first.shard == "b"
    # Never acked: the zone's reprocessor puts it back once the 300 ms lease expires.
    again = q.pop(1, wait_ms=5000)
    assert [m.id for m in again] == [first.id]
    assert q.ack(first.id)


def test_write_quorum_met_and_missed(ring) -> None:
    prefix = f"wq{uuid.uuid4().hex[:8]}"
    primary = ring.primary.client()
    supplier = ZoneShardSupplier.from_zone_suffix(ZONES, ZONES[0])
    with RedisQueues(primary, primary, key_prefix=prefix, shard_supplier=supplier,
                     write_quorum=2, write_quorum_timeout_ms=2000,
                     unack_handler_interval_ms=0) as ok:
        assert ok.get("q").push([Message("m1")]) == ["m1"]
    with RedisQueues(primary, primary, key_prefix=prefix, shard_supplier=supplier,
                     write_quorum=3, write_quorum_timeout_ms=50,
                     unack_handler_interval_ms=0) as too_many:
        q = too_many.get("q")
        with pytest.raises(QuorumNotReachedError) as info:
            q.push([Message("m2")])
        assert (info.value.acknowledged, info.value.required) == (2, 3)
        assert "unknown" in str(info.value)
        # The write happened on the primary: its outcome is unknown, not failed.
        assert q.get("m2") is not None
    primary.close()
