"""Batch write and batch read through the ``dynoqueue`` format, on real Spark and real Redis."""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynoqueue import Message
from dynoqueue.errors import ConfigurationError, InvalidMessageError
from dynoqueue.model.partitions import partition_of_message
from dynoqueue.queue import DynoQueue
from dynoqueue.spark.batch_write import DynoQueueWriter, PartitionWritten, WriteColumns
from dynoqueue.spark.options import SourceOptions, connected, ensure_partitions

from .conftest import queue_totals

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000


def _rows(n: int) -> list[tuple[Any, ...]]:
    # Every third message is due at once, the others in an hour; payloads sometimes null.
    return [(f"m{i:04d}", None if i % 7 == 0 else f"payload {i}",
             0 if i % 3 == 0 else HOUR_MS, i % 100) for i in range(n)]


def test_batch_write_then_read_back(spark: Any, source: dict[str, str], queue: Any) -> None:
    rows = _rows(600)
    df = spark.createDataFrame(rows, "id string, payload string, timeout long, priority int")
    before_ms = time.time() * 1000
    df.repartition(3).write.format("dynoqueue").options(**source).mode("append").save()
    after_ms = time.time() * 1000

    assert queue_totals(queue) == (600, 0)
    sizes = queue.shard_sizes()
    # Round robin per task: each of the 3 tasks spreads its rows evenly over the shards.
    assert set(sizes) == {"a", "b", "c"} and all(195 <= s["size"] <= 205 for s in sizes.values())

    # Lease some due messages so the snapshot shows both states.
    popped = queue.unsafe_pop_all_shards(50)
    assert len(popped) == 50

    snapshot = (spark.read.format("dynoqueue").options(**source).option("splitSize", "64")
                .load())
    # ~200 waiting ids per shard in splits of 64: 4 partitions per shard, + unack ranges.
    assert snapshot.rdd.getNumPartitions() >= 12
    got = {r["id"]: r for r in snapshot.collect()}
    assert len(got) == 600
    expected = {r[0]: r for r in rows}
    for message_id, row in got.items():
        _, payload, timeout, priority = expected[message_id]
        assert (row["payload"], row["timeout"], row["priority"]) == (payload, timeout, priority)
        assert row["shard"] in {"a", "b", "c"}
        assert row["claimed_at"] is None and row["batch"] is None
    leased = {m.id for m in popped}
    for message_id, row in got.items():
        if message_id in leased:
            assert row["state"] == "unacked" and row["due"] is None
            # Lease of 60 s from the pop (the pop happened after the write).
            expiry_ms = row["lease_expiry"].timestamp() * 1000
            assert after_ms + 59_000 < expiry_ms < time.time() * 1000 + 61_000
        else:
            assert row["state"] == "waiting" and row["lease_expiry"] is None
            due_ms = row["due"].timestamp() * 1000
            timeout = expected[message_id][2]
            assert before_ms + timeout - 1000 <= due_ms <= after_ms + timeout + 1000

    # Idempotent by id: writing the same rows again moves them (the leased ones back to
    # waiting), it never duplicates them.
    df.write.format("dynoqueue").options(**source).mode("append").save()
    assert queue_totals(queue) == (600, 0)


def test_write_with_due_column(spark: Any, source: dict[str, str], queue: Any) -> None:
    in_an_hour = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    past = datetime.now(UTC) - timedelta(days=1)
    df = spark.createDataFrame([("later", "x", in_an_hour), ("overdue", "y", past)],
                               "id string, payload string, due timestamp")
    df.write.format("dynoqueue").options(**source).mode("append").save()
    snapshot = {r["id"]: r for r in spark.read.format("dynoqueue").options(**source).load()
                .collect()}
    later_ms = snapshot["later"]["due"].timestamp() * 1000
    # Never before the row's due time, and only a push's latency after it.
    assert in_an_hour.timestamp() * 1000 <= later_ms < in_an_hour.timestamp() * 1000 + 5000
    assert snapshot["overdue"]["timeout"] == 0
    assert [m.id for m in queue.unsafe_pop_all_shards(10)] == ["overdue"]


def test_commit_message_reports_rows_per_partition(source: dict[str, str], queue: Any) -> None:
    # The writer's task body, called directly: what each Spark task returns to commit().
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    # Built by hand: StructType.fromDDL needs a running SparkSession.
    schema = StructType([StructField("id", StringType()), StructField("payload", StringType()),
                         StructField("priority", IntegerType())])
    writer = DynoQueueWriter(SourceOptions.parse({**source, "batchSize": "40"}),
                             WriteColumns.of(schema))
    message = writer.write(iter([(f"w{i}", "p", 1) for i in range(100)]))
    assert message == PartitionWritten(partition=0, attempt=0, rows=100, pushes=3)
    assert queue.size() == 100


def _id_only() -> WriteColumns:
    from pyspark.sql.types import StringType, StructField, StructType

    return WriteColumns.of(StructType([StructField("id", StringType())]))


def _pushes_recorded(monkeypatch: pytest.MonkeyPatch) -> list[list[Message]]:
    """Every DynoQueue.push call of this process from now on, its messages in order."""
    calls: list[list[Message]] = []
    push = DynoQueue.push

    def recording(self: DynoQueue, messages: Any, **kwargs: Any) -> list[str]:
        calls.append(list(messages))
        return push(self, calls[-1], **kwargs)

    monkeypatch.setattr(DynoQueue, "push", recording)
    return calls


def test_a_partitioned_write_pushes_full_batches_of_one_partition(
        source: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are buffered per queue partition: each push call carries full batches, one per
    partition, instead of splitting batchSize rows into 12 slivers."""
    batch, partitions = 40, 12
    rows = partitions * batch * 2
    options = SourceOptions.parse({**source, "queue": "parted", "partitions": str(partitions),
                                   "batchSize": str(batch)})
    ensure_partitions(options)  # what the driver does before any task
    calls = _pushes_recorded(monkeypatch)
    writer = DynoQueueWriter(options, _id_only())
    message = writer.write(iter([(f"p{i}",) for i in range(rows)]))

    # Each call's share of a partition is one batch: full, except the last of each partition.
    shares = [Counter(partition_of_message(m, partitions) for m in call) for call in calls]
    per_partition: dict[int, list[int]] = {}
    for share in shares:
        for partition, size in share.items():
            per_partition.setdefault(partition, []).append(size)
    assert sorted(per_partition) == list(range(partitions))
    for sizes in per_partition.values():
        assert all(size == batch for size in sizes[:-1]) and 0 < sizes[-1] <= batch
    batches = sum(len(share) for share in shares)
    # About rows / batch batches (2 per partition here, one more for a partition's leftover),
    # not the ~12 slivers per batchSize rows of a push of mixed partitions (~24 * 12).
    assert rows // batch <= batches <= rows // batch + partitions
    assert message == PartitionWritten(partition=0, attempt=0, rows=rows, pushes=batches)
    assert [m.id for call in calls for m in call] != [f"p{i}" for i in range(rows)]  # regrouped
    assert sorted(m.id for call in calls for m in call) == sorted(f"p{i}" for i in range(rows))
    with connected(options) as queues:
        assert queues.get("parted").size() == rows


def test_a_spark_write_into_partitions_delivers_every_row_once(
        spark: Any, source: dict[str, str]) -> None:
    """The same through Spark (tasks in Python workers), with a due column: every row arrives
    once, in the partition of its id, never due before its due time."""
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    parted = {**source, "queue": "parted", "partitions": "12", "batchSize": "40"}
    rows = [(f"r{i}", f"payload {i}", due + timedelta(seconds=i % 60)) for i in range(1000)]
    df = spark.createDataFrame(rows, "id string, payload string, due timestamp")
    df.repartition(3).write.format("dynoqueue").options(**parted).mode("append").save()
    got = spark.read.format("dynoqueue").options(**parted).load().collect()
    assert sorted(r["id"] for r in got) == sorted(r[0] for r in rows)  # each exactly once
    expected = {r[0]: r for r in rows}
    for row in got:
        _, payload, due_at = expected[row["id"]]
        assert row["payload"] == payload and row["state"] == "waiting"
        due_ms = due_at.timestamp() * 1000
        assert due_ms <= row["due"].timestamp() * 1000 < due_ms + 5000
    with connected(SourceOptions.parse(parted)) as queues:
        queue = queues.get("parted")
        assert queue.size() == 1000 and queue.stored_policy().partitions == 12  # type: ignore


def test_a_bad_row_of_a_partitioned_write_tells_what_was_pushed(source: dict[str, str]) -> None:
    options = SourceOptions.parse({**source, "queue": "parted", "partitions": "4",
                                   "batchSize": "5"})
    ensure_partitions(options)
    writer = DynoQueueWriter(options, _id_only())
    with pytest.raises(InvalidMessageError, match="bad row 31 of partition 0") as failure:
        writer.write(iter([*[(f"b{i}",) for i in range(30)], ("",), ("after",)]))
    found = re.search(r"nor (\d+) earlier rows still buffered; (\d+) earlier rows of this "
                      r"partition were", str(failure.value))
    assert found is not None, str(failure.value)
    buffered, pushed = int(found[1]), int(found[2])
    assert buffered + pushed == 30 and pushed >= 20  # rounds of 4 * 5 rows buffered
    with connected(options) as queues:
        assert queues.get("parted").size() == pushed  # and the buffered rows were not


def test_bad_row_fails_the_job_and_names_the_row(spark: Any, source: dict[str, str],
                                                   queue: Any) -> None:
    rows = [("ok-1", "a", 0, 1), ("ok-2", "b", 0, 2), ("bad-1", "c", 0, 120), ("ok-3", "d", 0, 3)]
    df = spark.createDataFrame(rows, "id string, payload string, timeout long, priority int")
    with pytest.raises(Exception, match="priority") as failure:
        df.coalesce(1).write.format("dynoqueue").options(**source).mode("append").save()
    text = str(failure.value)
    assert "bad row 3 of partition 0" in text and "id='bad-1'" in text
    assert "0..99" in text
    # The bad row's batch was validated before anything of it was pushed.
    assert queue_totals(queue) == (0, 0)

    nulls = spark.createDataFrame([("x", "a"), (None, "b")], "id string, payload string")
    with pytest.raises(Exception, match="bad row 2 of partition 0") as failure:
        nulls.coalesce(1).write.format("dynoqueue").options(**source).mode("append").save()
    assert "id must be a non-empty string" in str(failure.value)
    negative = spark.createDataFrame([("neg", -5)], "id string, timeout long")
    with pytest.raises(Exception, match="timeout must be an int >= 0"):
        negative.write.format("dynoqueue").options(**source).mode("append").save()
    assert queue_totals(queue) == (0, 0)


@pytest.mark.parametrize(("ddl", "row", "message"), [
    ("id string, timeout string", ("x", "5"), "column 'timeout' has type string"),
    ("id string, delay long", ("x", 5), "unknown column(s) ['delay']"),
    ("payload string", ("x",), "needs an 'id' column"),
    ("id string, timeout long, due timestamp", ("x", 1, None), "either 'timeout'"),
])
def test_wrong_columns_fail_before_any_task(spark: Any, source: dict[str, str], queue: Any,
                                            ddl: str, row: tuple[Any, ...],
                                            message: str) -> None:
    df = spark.createDataFrame([row], ddl)
    with pytest.raises(Exception) as failure:
        df.write.format("dynoqueue").options(**source).mode("append").save()
    assert message in str(failure.value)
    assert queue_totals(queue) == (0, 0)


def test_options_are_checked_and_case_insensitive(spark: Any, source: dict[str, str],
                                                  queue: Any) -> None:
    queue.push([Message("one", "p")])
    # Spark lower-cases option keys; any spelling works.
    loaded = (spark.read.format("dynoqueue").option("URL", source["url"])
              .option("Queue", "q").option("KEYPREFIX", source["keyPrefix"])
              .option("zones", source["zones"]).load())
    assert [r["id"] for r in loaded.collect()] == ["one"]
    with pytest.raises(Exception, match="unknown option"):
        spark.read.format("dynoqueue").options(**source).option("splitsise", "5").load()
    with pytest.raises(Exception, match="option 'queue' is required"):
        spark.read.format("dynoqueue").option("url", source["url"]).load()
    with pytest.raises(Exception, match="only mode\\('append'\\)"):
        (spark.createDataFrame([("x",)], "id string").write.format("dynoqueue")
         .options(**source).mode("overwrite").save())
    with pytest.raises(ConfigurationError, match="'leaseMs' must be an int >= 1"):
        SourceOptions.parse({**source, "leaseMs": "0"})


def test_headers_are_written_and_read_back(spark: Any, source: dict[str, str],
                                           queue: Any) -> None:
    """The headers map column: written into Message.headers, read back by the batch read, the
    dead-letter read and (recorded with each claim) the streaming read."""
    rows = [("h1", "x", {"traceparent": "00-ab-cd-01", "tenant": "acme"}), ("h2", "y", None)]
    df = spark.createDataFrame(rows, "id string, payload string, headers map<string,string>")
    df.write.format("dynoqueue").options(**source).mode("append").save()
    assert queue.get("h1").headers == {"traceparent": "00-ab-cd-01", "tenant": "acme"}
    assert queue.get("h2").headers is None
    got = {r["id"]: r["headers"] for r in
           spark.read.format("dynoqueue").options(**source).load().collect()}
    assert got == {"h1": {"traceparent": "00-ab-cd-01", "tenant": "acme"}, "h2": None}
    assert queue.unsafe_pop_with_msg_id_all_shards("h1") is not None
    assert queue.dead_letter("h1", "poison")
    dead = (spark.read.format("dynoqueue").options(**source).option("deadLetters", "true")
            .load().collect())
    assert [(r["id"], r["headers"]) for r in dead] == [
        ("h1", {"traceparent": "00-ab-cd-01", "tenant": "acme"})]
    bad = spark.createDataFrame([("h3", {"n": 1})], "id string, headers map<string,int>")
    with pytest.raises(Exception, match="headers"):
        bad.write.format("dynoqueue").options(**source).mode("append").save()
