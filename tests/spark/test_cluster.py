"""The data source on a real Redis Cluster: its keys share the queue's slot, every mode works
(the dead-letter read and the lifecycle columns included)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from dynoqueue import Message
from dynoqueue.embedded import cluster
from dynoqueue.spark.options import SourceOptions, connected

from .conftest import queue_totals, wait_for

pytestmark = pytest.mark.slow


def test_write_read_and_stream_on_a_cluster(spark: Any, prefix: str, tmp_path: Path) -> None:
    with cluster(3, 0) as topology:
        source = {"url": topology.url,  # redis+cluster://h:p,h:p,h:p
                  "queue": "reminders", "keyPrefix": prefix, "zones": "z-a,z-b,z-c"}
        ids = {f"c{i:03d}" for i in range(300)}
        (spark.createDataFrame(sorted((i, "p") for i in ids), "id string, payload string")
         .write.format("dynoqueue").options(**source).mode("append").save())
        snapshot = spark.read.format("dynoqueue").options(**source).load()
        assert {r["id"] for r in snapshot.collect()} == ids

        delivered: list[str] = []
        lock = threading.Lock()

        def sink(batch: Any, batch_id: int) -> None:
            rows = batch.collect()
            with lock:
                delivered.extend(r["id"] for r in rows)

        query = (spark.readStream.format("dynoqueue").options(**source)
                 .option("maxMessagesPerTrigger", "120").load()
                 .writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / "ck")).start())
        with connected(SourceOptions.parse(source)) as queues:
            queue = queues.get("reminders")
            assert queue.keys.hash_tag  # a Cluster queue's keys carry the {Q} tag
            try:
                wait_for(lambda: queue_totals(queue) == (0, 0), what="the stream to drain")
            finally:
                query.stop()
            assert sorted(delivered) == sorted(ids)
            client = topology.client()
            slot = client.keyslot(queue.keys.message_hash)
            spark_keys = [k.decode() for k in client.scan_iter(match=f"{prefix}.SPARK.*")]
            assert spark_keys and all(client.keyslot(k) == slot for k in spark_keys)
            client.close()

            # Lifecycle columns and dead letters: their keys share the queue's slot too.
            queue.push([Message("retry", "r"), Message("doomed", "d", max_deliveries=1)])
            assert queue.unsafe_pop_with_msg_id_all_shards("retry") is not None
            assert queue.unsafe_pop_with_msg_id_all_shards("doomed") is not None
            assert queue.nack("retry", 3_600_000, error="later")
            assert queue.nack("doomed", error="fatal")  # its only delivery: dead-lettered
            rows = spark.read.format("dynoqueue").options(**source).load().collect()
            assert [(r["id"], r["lifecycle_state"], r["deliveries"], r["last_error"])
                    for r in rows] == [("retry", "DELAYED", 1, "later")]
            dead = (spark.read.format("dynoqueue").options(**source)
                    .option("deadLetters", "true").load().collect())
            assert [(r["id"], r["reason"], r["deliveries"], r["last_error"]) for r in dead] == [
                ("doomed", "max_deliveries", 1, "fatal")]

            # A partitioned queue: the write stores its count, the rows land in every
            # partition, the read plans a Spark partition per queue partition at least (so
            # its tasks read all three primaries), and dead letters are read from each.
            parted = {**source, "queue": "spread", "partitions": "6", "splitSize": "100000"}
            rows_in = [(f"s{i:04d}", f"p{i}") for i in range(600)]
            (spark.createDataFrame(rows_in, "id string, payload string")
             .write.format("dynoqueue").options(**parted).mode("append").save())
            spread = queues.get("spread")
            assert spread.stored_policy() is not None
            assert spread.stored_policy().partitions == 6
            assert spread.size() == 600
            reader = spark.read.format("dynoqueue").options(**parted).load()
            assert reader.rdd.getNumPartitions() >= 6
            assert sorted((r["id"], r["payload"]) for r in reader.collect()) == rows_in
            for i in range(0, 600, 100):  # dead letters in several partitions
                assert spread.unsafe_pop_with_msg_id_all_shards(f"s{i:04d}") is not None
                assert spread.dead_letter(f"s{i:04d}", error="fatal")
            dead = (spark.read.format("dynoqueue").options(**parted)
                    .option("deadLetters", "true").load())
            assert sorted(r["id"] for r in dead.collect()) == [f"s{i:04d}" for i in
                                                               range(0, 600, 100)]
            with pytest.raises(Exception, match="partitions"):
                (spark.createDataFrame(rows_in[:1], "id string, payload string")
                 .write.format("dynoqueue").options(**{**parted, "partitions": "4"})
                 .mode("append").save())
