"""The lifecycle columns of the batch read and the dead-letter read (option ``deadLetters``), on
real Spark and a real redis-server: every value is checked against what the queue's own
``info()`` / ``dead_letters()`` report."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dynoqueue import Message, MessageState, QueuePolicy, RedisQueues
from dynoqueue.errors import ConfigurationError
from dynoqueue.spark.rows import COLUMNS, DEAD_COLUMNS
from dynoqueue.spark.source import DynoQueueDataSource

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000


@pytest.fixture
def policy_queue(source: dict[str, str]) -> Iterator[Any]:
    """Queue ``q`` of ``source`` under QueuePolicy(max_deliveries=2), stored with the queue."""
    queues = RedisQueues.from_url(source["url"], zones=source["zones"].split(","),
                                  local_zone="z-a", key_prefix=source["keyPrefix"],
                                  unack_handler_interval_ms=0,
                                  unack_timeout_ms=60_000,
                                  policy=QueuePolicy(max_deliveries=2))
    try:
        yield queues.get(source["queue"])
    finally:
        queues.close()


def _ms(value: Any) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


def _pop(queue: Any, message_id: str) -> Message:
    popped = queue.unsafe_pop_with_msg_id_all_shards(message_id)
    assert popped is not None and popped.id == message_id
    return popped


def test_batch_read_has_the_lifecycle_columns(spark: Any, source: dict[str, str],
                                              policy_queue: Any, redis_server: Any) -> None:
    q = policy_queue
    q.push([Message("ready", "r", priority=3), Message("delayed", "d", timeout=HOUR_MS),
            Message("own-limit", "o", max_deliveries=5), Message("ttl", "t", ttl_ms=HOUR_MS),
            Message("leased", "l"), Message("retried", "x"), Message("poison", "p", priority=7)])
    _pop(q, "leased")
    _pop(q, "retried")
    assert q.nack("retried", HOUR_MS, error="upstream timeout")
    _pop(q, "own-limit")
    assert q.nack("own-limit", error="first try")
    _pop(q, "poison")
    assert q.nack("poison", error="boom 1")
    _pop(q, "poison")
    before_death = time.time() * 1000
    assert q.nack("poison", error="boom 2")  # its 2nd delivery of 2: dead-lettered
    after_death = time.time() * 1000
    assert q.state("poison") is MessageState.DEAD

    snapshot = spark.read.format("dynoqueue").options(**source).load()
    assert tuple(snapshot.columns) == COLUMNS
    rows = {r["id"]: r for r in snapshot.collect()}
    assert set(rows) == {"ready", "delayed", "own-limit", "ttl", "leased", "retried"}

    expected = {  # id: (lifecycle_state, state, deliveries, max_deliveries, last_error)
        "ready": ("READY", "waiting", 0, 2, None),
        "delayed": ("DELAYED", "waiting", 0, 2, None),
        "own-limit": ("READY", "waiting", 1, 5, "first try"),
        "ttl": ("READY", "waiting", 0, 2, None),
        "leased": ("LEASED", "unacked", 1, 2, None),
        "retried": ("DELAYED", "waiting", 1, 2, "upstream timeout"),
    }
    for message_id, (life, state, deliveries, max_deliveries, error) in expected.items():
        row = rows[message_id]
        assert (row["lifecycle_state"], row["state"], row["deliveries"], row["max_deliveries"],
                row["last_error"]) == (life, state, deliveries, max_deliveries, error), message_id
        info = q.info(message_id)  # the queue's own view agrees on every column
        assert row["lifecycle_state"] == info.state.name
        assert (row["deliveries"], row["max_deliveries"], row["last_error"]) == (
            info.deliveries, info.max_deliveries, info.last_error)
        assert _ms(row["expires_at"]) == info.expires_at_ms
        assert row["shard"] == info.shard
    assert rows["ttl"]["expires_at"] is not None
    assert all(rows[i]["expires_at"] is None for i in expected if i != "ttl")
    # The column positions of the earlier schema are unchanged.
    assert COLUMNS[:10] == ("id", "payload", "priority", "timeout", "shard", "state", "due",
                            "lease_expiry", "claimed_at", "batch")

    # Dead letters: the poison message, and one the library could not decode.
    client = redis_server.client()
    try:
        client.hset(q.keys.message_hash, "garbled", "{not json")
        client.zadd(q.keys.queue_shard("b"), {"garbled": 0})
    finally:
        client.close()
    assert q.unsafe_pop_all_shards(10) != []  # "ready", "own-limit", "ttl"; "garbled" buried
    assert {d.message.id: d.reason for d in q.dead_letters()} == {
        "poison": "max_deliveries", "garbled": "undecodable"}

    dead = (spark.read.format("dynoqueue").options(**source).option("deadLetters", "true")
            .option("splitSize", "1").load())
    assert tuple(dead.columns) == DEAD_COLUMNS
    assert dead.rdd.getNumPartitions() == 2  # one letter per partition
    letters = {r["id"]: r for r in dead.collect()}
    poison = letters["poison"]
    assert (poison["payload"], poison["priority"], poison["reason"], poison["deliveries"],
            poison["last_error"]) == ("p", 7, "max_deliveries", 2, "boom 2")
    assert poison["shard"] == next(d for d in q.dead_letters() if d.message.id == "poison"
                                   ).message.shard
    assert poison["shard"] in {"a", "b", "c"}
    assert before_death - 1000 <= _ms(poison["died_at"]) <= after_death + 1000
    garbled = letters["garbled"]
    assert (garbled["payload"], garbled["priority"], garbled["reason"], garbled["shard"]) == (
        None, None, "undecodable", "b")
    assert _ms(poison["died_at"]) <= _ms(garbled["died_at"])
    for letter in q.dead_letters():
        assert _ms(letters[letter.message.id]["died_at"]) == letter.died_at_ms


def test_dead_letter_read_of_an_empty_queue_and_where_the_option_is_refused(
        spark: Any, source: dict[str, str], queue: Any) -> None:
    dead = spark.read.format("dynoqueue").options(**source).option("deadLetters", "true").load()
    assert dead.collect() == []
    with pytest.raises(Exception, match="'deadLetters' is for batch reads"):
        (spark.createDataFrame([("x",)], "id string").write.format("dynoqueue")
         .options(**source).option("deadLetters", "true").mode("append").save())
    assert queue.size() == 0
    from pyspark.sql.types import StructType

    data_source = DynoQueueDataSource({**source, "deadLetters": "yes"})
    with pytest.raises(ConfigurationError, match="not a streaming read"):
        data_source.streamReader(StructType.fromDDL(data_source.schema()))
    with pytest.raises(ConfigurationError, match="the read schema is fixed"):
        data_source.reader(StructType.fromDDL("id string not null, reason string"))
    with pytest.raises(ConfigurationError, match="'deadLetters' must be true or false"):
        DynoQueueDataSource({**source, "deadLetters": "maybe"})
