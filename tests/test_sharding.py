"""Shard suppliers and sharding strategies (pure Python)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from dynoqueue import (
    ConfigurationError,
    LocalOnlyStrategy,
    Message,
    RoundRobinStrategy,
    ShardingStrategy,
    ShardSupplier,
    SingleShardSupplier,
    StaticShardSupplier,
    ZoneShardSupplier,
)


def test_round_robin_increments_first() -> None:
    rr = RoundRobinStrategy()
    shards = ["s0", "s1", "s2"]
    assert [rr.get_next_shard(shards, Message("m")) for _ in range(7)] == [
        "s1", "s2", "s0", "s1", "s2", "s0", "s1"]
    single = RoundRobinStrategy()
    assert {single.get_next_shard(["only"], Message("m")) for _ in range(3)} == {"only"}


def test_round_robin_is_even_under_threads() -> None:
    rr = RoundRobinStrategy()
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def work() -> None:
        for _ in range(3000):
            shard = rr.get_next_shard(["a", "b", "c"], Message("m"))
            with lock:
                counts[shard] += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == {"a": 4000, "b": 4000, "c": 4000}


def test_local_only() -> None:
    supplier = StaticShardSupplier(["a", "b"], "b")
    assert LocalOnlyStrategy(supplier).get_next_shard(["a", "b"], Message("m")) == "b"
    assert LocalOnlyStrategy("a").get_next_shard(["a", "b"], Message("m")) == "a"
    assert isinstance(RoundRobinStrategy(), ShardingStrategy)


def test_suppliers() -> None:
    static = StaticShardSupplier(["a", "b", "c"], "b")
    assert static.get_queue_shards() == ["a", "b", "c"] and static.get_current_shard() == "b"
    single = SingleShardSupplier("only")
    assert single.get_queue_shards() == ["only"] and single.get_current_shard() == "only"
    assert isinstance(single, ShardSupplier)


def test_zone_supplier_explicit_map_and_suffix_rule() -> None:
    explicit = ZoneShardSupplier({"us-east-1c": "c", "us-east-1d": "d", "eu-west-1a": "c2"},
                                 "us-east-1d")
    assert explicit.get_queue_shards() == ["c", "d", "c2"]
    assert explicit.get_current_shard() == "d"
    assert explicit.shard_for_zone("eu-west-1a") == "c2"
    suffix = ZoneShardSupplier.from_zone_suffix(["us-east-1a", "us-east-1b", "us-east-1c"],
                                                "us-east-1c")
    assert suffix.get_queue_shards() == ["a", "b", "c"] and suffix.get_current_shard() == "c"
    with pytest.raises(ConfigurationError):
        suffix.shard_for_zone("mars-1a")


@pytest.mark.parametrize("make", [
    lambda: StaticShardSupplier([], "a"),
    lambda: StaticShardSupplier("abc", "a"),
    lambda: StaticShardSupplier(["a", "a"], "a"),
    lambda: StaticShardSupplier(["a", "b"], "c"),
    lambda: StaticShardSupplier(["a", "{b}"], "a"),
    lambda: SingleShardSupplier(""),
    lambda: ZoneShardSupplier({}, "x"),
    lambda: ZoneShardSupplier({"z1": "a"}, "z2"),
    lambda: ZoneShardSupplier({"z1": "a", "z2": "a"}, "z1"),
    lambda: ZoneShardSupplier.from_zone_suffix(["us-east-1a", "us-west-2a"], "us-east-1a"),
    lambda: ZoneShardSupplier.from_zone_suffix("us-east-1a", "us-east-1a"),
])
def test_bad_supplier_configuration(make) -> None:
    with pytest.raises(ConfigurationError) as info:
        make()
    assert isinstance(info.value, ValueError)


def test_a_strategy_returning_an_unknown_shard_writes_nothing(make_queues, raw, prefix) -> None:
    class Broken:
        def get_next_shard(self, all_shards, message):
            return "nowhere"

    q = make_queues(sharding_strategy=Broken()).get("broken")
    with pytest.raises(ConfigurationError, match="nowhere"):
        q.push([Message("m")])
    assert raw.keys(f"{prefix}.*") == []
