"""The batch read of queues with ordering (strict priority, ordered groups), on real Spark and a
real redis-server: a waiting message may live in a shard's queue zset, its ready zset or its
group's line; each shows exactly once, with the state, due time, priority and group that the
queue's own ``info()`` reports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dynoqueue import Message, QueuePolicy, RedisQueues

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000


def _queue(source: dict[str, str], policy: QueuePolicy | None) -> Iterator[Any]:
    queues = RedisQueues.from_url(source["url"], zones=source["zones"].split(","),
                                  local_zone="z-a", key_prefix=source["keyPrefix"],
                                  unack_handler_interval_ms=0, unack_timeout_ms=60_000,
                                  policy=policy)
    try:
        yield queues.get(source["queue"])
    finally:
        queues.close()


@pytest.fixture
def strict_queue(source: dict[str, str]) -> Iterator[Any]:
    yield from _queue(source, QueuePolicy(strict_priority=True))


@pytest.fixture
def plain_queue(source: dict[str, str]) -> Iterator[Any]:
    yield from _queue(source, None)


def _ms(value: Any) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


def _snapshot(spark: Any, source: dict[str, str]) -> dict[str, Any]:
    rows = (spark.read.format("dynoqueue").options(**source).option("splitSize", "2").load()
            .collect())
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"an id shows twice: {sorted(ids)}"
    return {r["id"]: r for r in rows}


def _agrees_with_info(queue: Any, rows: dict[str, Any]) -> None:
    for message_id, row in rows.items():
        info = queue.info(message_id)
        assert (row["lifecycle_state"], row["shard"], row["priority"], row["group"]) == (
            info.state.name, info.shard, info.priority, info.group), message_id
        assert row["state"] == ("unacked" if info.state.name == "LEASED" else "waiting")
        if row["state"] == "waiting":
            assert _ms(row["due"]) == info.due_at_ms, message_id
        else:
            assert _ms(row["lease_expiry"]) == info.lease_expires_at_ms, message_id


def test_strict_priority_queue_shows_its_ready_messages_once(
        spark: Any, source: dict[str, str], strict_queue: Any, redis_server: Any) -> None:
    q = strict_queue
    before = time.time() * 1000
    # Due at once: straight into the ready zsets; delayed: the queue zsets; "soon" falls due
    # in the queue zset and no claim has moved it yet.
    q.push([Message(f"now-{p}", "n", priority=p) for p in (0, 5, 42, 99)]
           + [Message("later", "l", timeout=HOUR_MS, priority=7),
              Message("soon", "s", timeout=50, priority=3), Message("taken", "t", priority=1)])
    popped = q.unsafe_pop_with_msg_id_all_shards("taken")
    assert popped is not None
    time.sleep(0.1)
    client = redis_server.client()
    try:
        in_ready = {m.decode() for s in q.shards for m in client.zrange(q.keys.ready_shard(s),
                                                                         0, -1)}
    finally:
        client.close()
    assert {"now-0", "now-99"} <= in_ready and "soon" not in in_ready

    rows = _snapshot(spark, source)
    assert set(rows) == {"now-0", "now-5", "now-42", "now-99", "later", "soon", "taken"}
    _agrees_with_info(q, rows)
    assert {i: r["lifecycle_state"] for i, r in rows.items()} == {
        "now-0": "READY", "now-5": "READY", "now-42": "READY", "now-99": "READY",
        "later": "DELAYED", "soon": "READY", "taken": "LEASED"}
    assert rows["now-99"]["priority"] == 99 and rows["later"]["priority"] == 7
    # The due time of a ready id, not its score (priority * 2**42 + due ms).
    assert before - 1000 <= _ms(rows["now-99"]["due"]) <= time.time() * 1000
    assert all(r["group"] is None for r in rows.values())


def test_grouped_queue_shows_the_messages_in_line_once(
        spark: Any, source: dict[str, str], plain_queue: Any) -> None:
    q = plain_queue
    odd = "grüppe:7"  # non-ASCII (the line member counts bytes) and a colon
    q.push([Message("g1-a", "1", group="g1", priority=4), Message("g1-b", "2", group="g1"),
            Message("g1-c", "3", group="g1", timeout=HOUR_MS, priority=9),
            Message("odd-a", "4", group=odd), Message("odd-b", "5", group=odd, priority=12),
            Message("solo", "6")])
    leased = q.unsafe_pop_with_msg_id_all_shards("odd-a")
    assert leased is not None
    assert q.group_info("g1")["waiting"] == 3 and q.group_info(odd)["leased"] == "odd-a"

    rows = _snapshot(spark, source)
    assert set(rows) == {"g1-a", "g1-b", "g1-c", "odd-a", "odd-b", "solo"}
    _agrees_with_info(q, rows)
    assert {i: (r["lifecycle_state"], r["group"]) for i, r in rows.items()} == {
        "g1-a": ("READY", "g1"), "g1-b": ("READY", "g1"), "g1-c": ("DELAYED", "g1"),
        "odd-a": ("LEASED", odd), "odd-b": ("READY", odd), "solo": ("READY", None)}
    assert (rows["g1-c"]["priority"], rows["odd-b"]["priority"]) == (9, 12)
    assert rows["g1-c"]["payload"] == "3"


def test_many_group_lines_are_split_and_packed_into_partitions(
        spark: Any, source: dict[str, str], plain_queue: Any) -> None:
    q = plain_queue
    groups = [f"g{i}" for i in range(7)] + ["{x}", "a.b", "%41", "A"]
    q.push([Message(f"{g}-{n}", str(n), group=g) for n in range(4) for g in groups])
    assert all(q.group_info(g)["waiting"] == 4 for g in groups)
    rows = _snapshot(spark, source)  # splitSize 2: lines of 3 are cut, short ones packed
    assert set(rows) == {f"{g}-{n}" for g in groups for n in range(4)}
    assert all(r["group"] == i.rsplit("-", 1)[0] for i, r in rows.items())
    _agrees_with_info(q, rows)
