"""Streaming read and write through the ``dynoqueue`` format, on real Spark and real Redis."""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from dynoqueue import Message
from dynoqueue.errors import ConfigurationError
from dynoqueue.model.keys import StreamKeys
from dynoqueue.spark.options import SourceOptions, connected
from dynoqueue.spark.rows import COLUMNS
from dynoqueue.spark.streaming import DynoQueueStreamReader

from .conftest import queue_totals, wait_for

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000


def _push(queue: Any, count: int, *, prefix: str = "m", timeout: int = 0) -> list[str]:
    ids = [f"{prefix}{i:04d}" for i in range(count)]
    queue.push([Message(i, f"payload of {i}", timeout=timeout) for i in ids])
    return ids


def _read_all(reader: DynoQueueStreamReader, start: dict[str, Any],
              end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [row for part in reader.partitions(start, end) for row in reader.read(part)]


def test_stream_reader_protocol_replays_recorded_batches(source: dict[str, str],
                                                         queue: Any) -> None:
    """The reader's calls as Spark makes them, driven directly: claim, record, replay, ack."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    due = _push(queue, 30)
    _push(queue, 5, prefix="later", timeout=HOUR_MS)
    options = SourceOptions.parse({**source, "maxMessagesPerTrigger": "10"})
    reader = DynoQueueStreamReader(options)
    start = reader.initialOffset()
    assert start["batch"] == 0
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end["batch"] == 1
    assert queue_totals(queue) == (25, 10)
    first = _read_all(reader, start, end)
    assert len(first) == 10 and {r[0] for r in first} <= set(due)
    assert all(r[5] == "unacked" and r[9] == 1 for r in first)
    # Lifecycle columns: LEASED, first delivery; the rest is not known to a claim.
    assert all(len(r) == len(COLUMNS) and r[10:] == ("LEASED", 1, None, None, None, None,
                                                      None) for r in first)

    # The driver dies after recording batch 1 but before Spark logged the offset. The new
    # driver's reader is asked again from batch 0: it replays batch 1 instead of claiming.
    reader.stop()
    restarted = DynoQueueStreamReader(options)
    assert restarted.latestOffset(start, ReadMaxRows(10)) == end
    assert queue_totals(queue) == (25, 10)
    assert _read_all(restarted, start, end) == first
    # What Spark ships to executors carries no live client.
    assert pickle.loads(pickle.dumps(restarted)).options == options

    # Spark committed batch 1 and asks for the next: batch 1 is acked before the next claim.
    second = restarted.latestOffset(end, ReadMaxRows(10))
    assert second["batch"] == 2
    assert queue_totals(queue) == (15, 10)
    assert not any(queue.contains(r[0]) for r in first)
    conn = redis.Redis.from_url(source["url"])
    keys = StreamKeys(source["keyPrefix"], "q", "spark")
    assert not conn.exists(keys.batch(1)) and conn.exists(keys.batch(2))
    restarted.commit(second)  # Spark's (lazy) commit of batch 2: acked, record dropped
    assert queue_totals(queue) == (15, 0) and not conn.exists(keys.batch(2))

    # A checkpoint of another consumer is refused.
    other = DynoQueueStreamReader(SourceOptions.parse({**source, "consumerName": "other"}))
    with pytest.raises(ConfigurationError, match="another queue or consumer"):
        other.latestOffset(second, ReadMaxRows(10))
    other.stop()
    restarted.stop()
    conn.close()


def test_stream_reader_redelivers_claims_that_were_never_recorded(source: dict[str, str],
                                                                  queue: Any) -> None:
    _push(queue, 5)
    # A driver claimed these and died before recording them: they stay leased until expiry.
    with connected(SourceOptions.parse(source), unack_timeout_ms=200) as short:
        lost = {m.id for m in short.get("q").unsafe_pop_all_shards(5)}
    assert queue_totals(queue) == (0, 5)
    time.sleep(0.3)
    reader = DynoQueueStreamReader(SourceOptions.parse(source))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)  # Spark 4.0 style call: no limit
    rows = _read_all(reader, start, end)
    assert {r[0] for r in rows} == lost
    assert all(r[COLUMNS.index("deliveries")] == 2 for r in rows)  # the lost claim counted
    reader.stop()


def _leased(conn: redis.Redis, prefix: str, message_id: str) -> bool:
    return any(conn.zscore(f"{prefix}.UNACK.q.{s}", message_id) is not None for s in "abc")


def test_stream_read_acks_only_after_the_batch_commits(spark: Any, source: dict[str, str],
                                                       queue: Any, tmp_path: Path) -> None:
    due = set(_push(queue, 300))
    _push(queue, 20, prefix="later", timeout=HOUR_MS)
    conn = redis.Redis.from_url(source["url"], decode_responses=True)
    seen: list[tuple[int, str, int, bool]] = []
    lock = threading.Lock()

    def sink(batch: Any, batch_id: int) -> None:
        for row in batch.collect():
            with lock:  # while Spark processes a batch its messages are still leased
                seen.append((batch_id, row["id"], row["batch"],
                             _leased(conn, source["keyPrefix"], row["id"])))

    stream = (spark.readStream.format("dynoqueue").options(**source)
              .option("maxMessagesPerTrigger", "100").load())
    query = (stream.writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        wait_for(lambda: queue_totals(queue) == (20, 0), what="every due message acked")
    finally:
        query.stop()
    ids = [message_id for _, message_id, _, _ in seen]
    assert sorted(ids) == sorted(due)  # each due message once, nothing not yet due
    assert all(leased for *_, leased in seen)
    per_batch: dict[int, int] = {}
    for _, _, source_batch, _ in seen:
        per_batch[source_batch] = per_batch.get(source_batch, 0) + 1
    assert len(per_batch) >= 3 and max(per_batch.values()) <= 100
    # Every record was dropped once acked: only the LAST marker remains.
    assert conn.keys(f"{source['keyPrefix']}.SPARK.*") == [
        f"{source['keyPrefix']}.SPARK.{{q}}.spark.LAST"]
    conn.close()


def test_killed_query_restarts_and_loses_nothing(spark: Any, source: dict[str, str],
                                                 queue: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    due = set(_push(queue, 400))
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    crash_at = 2

    def make_sink(crash: bool) -> Any:
        def sink(batch: Any, batch_id: int) -> None:
            batch.selectExpr("id", "batch", f"{batch_id} AS spark_batch",
                             f"{int(crash)} AS first_run").write.mode("append").parquet(str(out))
            if crash and batch_id == crash_at:  # dies after its output, before the commit
                raise RuntimeError("simulated crash of the streaming job")
        return sink

    def start(crash: bool) -> Any:
        stream = (spark.readStream.format("dynoqueue").options(**source)
                  .option("maxMessagesPerTrigger", "50").load())
        return (stream.writeStream.foreachBatch(make_sink(crash))
                .option("checkpointLocation", str(checkpoint)).start())

    query = start(crash=True)
    with pytest.raises(StreamingQueryException, match="simulated crash"):
        query.awaitTermination(120)
    waiting, leased = queue_totals(queue)
    assert leased >= 50 and waiting + leased < 400  # batch 2's claim is still leased

    query = start(crash=False)
    try:
        wait_for(lambda: queue_totals(queue) == (0, 0), what="the restarted query to drain")
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    delivered = [r["id"] for r in rows]
    assert set(delivered) == due  # nothing lost
    duplicates = len(delivered) - len(due)
    crashed = {r["id"] for r in rows if r["first_run"] == 1 and r["spark_batch"] == crash_at}
    replayed = {r["id"] for r in rows if r["first_run"] == 0 and r["spark_batch"] == crash_at}
    # Spark re-ran the failed batch from the recorded claim: exactly the same messages.
    assert crashed and replayed == crashed
    assert duplicates == len(crashed)
    assert {r["batch"] for r in rows if r["id"] in crashed} == {crash_at + 1}


def test_stream_write_is_idempotent_by_id(spark: Any, source: dict[str, str], queue: Any,
                                          tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()

    def drop(name: str, ids: range) -> None:
        with open(inbox / name, "w", encoding="utf-8") as handle:
            for i in ids:
                handle.write(json.dumps({"id": f"s{i:04d}", "payload": f"p{i}",
                                         "timeout": HOUR_MS, "priority": i % 10}) + "\n")

    def run(checkpoint: str) -> None:
        stream = (spark.readStream.schema("id string, payload string, timeout long, "
                                          "priority int")
                  .option("maxFilesPerTrigger", "1").json(str(inbox)))
        query = (stream.writeStream.format("dynoqueue").options(**source)
                 .option("checkpointLocation", str(tmp_path / checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    drop("1.json", range(0, 100))
    drop("2.json", range(100, 200))
    drop("3.json", range(200, 300))
    run("ck-a")
    assert queue_totals(queue) == (300, 0)
    message = queue.get("s0123")
    assert message is not None and (message.payload, message.priority) == ("p123", 3)
    # The same files through a fresh checkpoint: every id is pushed again, none duplicated.
    run("ck-b")
    assert queue_totals(queue) == (300, 0)
    # The first query picks up only the new file.
    drop("4.json", range(300, 350))
    run("ck-a")
    assert queue_totals(queue) == (350, 0)
