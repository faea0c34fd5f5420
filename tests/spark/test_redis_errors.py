"""A Redis that went away: every entry point of the data source raises RedisOperationError.

Real redis-server processes, stopped with ``RedisServer.stop()``. The redis-py error is chained
as ``__cause__``; no bare ``redis.ConnectionError`` escapes. The stream reader's lease sweep
logs the failure and lets the trigger go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from dynoqueue import Message
from dynoqueue.embedded import single
from dynoqueue.errors import RedisOperationError
from dynoqueue.spark.batch_read import DynoQueueReader
from dynoqueue.spark.batch_write import WriteColumns, push_rows
from dynoqueue.spark.options import SourceOptions, connected
from dynoqueue.spark.streaming import DynoQueueStreamReader

pytestmark = pytest.mark.slow


def _failure(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # returned to the test thread, which checks its type
        return exc
    return None


def test_every_call_against_a_stopped_server_raises_redis_operation_error(prefix: str) -> None:
    with single() as server:
        source = {"url": server.url, "queue": "q", "keyPrefix": prefix, "zones": "z-a,z-b",
                  "maxMessagesPerTrigger": "5"}
        options = SourceOptions.parse(source)
        with connected(options) as queues:
            queues.get("q").push([Message(f"m{i}", "p") for i in range(20)])
        # Plan a batch read and record a stream batch while the server is up.
        ranges = DynoQueueReader(options).partitions()
        recorder = DynoQueueStreamReader(options)
        start = recorder.initialOffset()
        end = recorder.latestOffset(start, None)
        slices = recorder.partitions(start, end)
        recorder.stop()
        assert ranges and slices and end["batch"] == 1
        server.stop()

        def stream() -> DynoQueueStreamReader:
            return DynoQueueStreamReader(options)  # one per call: the calls run side by side

        text = StringType()
        write_due = WriteColumns.of(StructType([StructField("id", text),
                                                StructField("due", TimestampType())]))
        write_plain = WriteColumns.of(StructType([StructField("id", text),
                                                  StructField("payload", text)]))
        now = datetime.now(UTC)
        calls: dict[str, Callable[[], Any]] = {
            "batch partitions": lambda: DynoQueueReader(options).partitions(),
            "batch read": lambda: list(DynoQueueReader(options).read(ranges[0])),
            "stream initialOffset": lambda: stream().initialOffset(),
            "stream latestOffset": lambda: stream().latestOffset(end, None),
            "stream partitions": lambda: stream().partitions(start, end),
            "stream read": lambda: list(stream().read(slices[0])),
            "stream commit": lambda: stream().commit(end),
            "write with due": lambda: push_rows(options, write_due, iter([("w1", now)])),
            "write": lambda: push_rows(options, write_plain, iter([("w2", "p")])),
        }
        # Each call first rides out the builder's retry budget (~8.5 s): run them side by side.
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            failures = dict(zip(calls, pool.map(_failure, calls.values()), strict=True))
    for name, failure in failures.items():
        assert isinstance(failure, RedisOperationError), (name, repr(failure))
        assert isinstance(failure.__cause__, redis.ConnectionError), (name, failure.__cause__)
        assert failure.key.startswith(prefix), (name, failure.key)
    # The data source's own calls name the operation and the source (URL redacted).
    assert failures["batch read"].operation == "spark_read"  # type: ignore[union-attr]
    assert "queue 'q'" in str(failures["stream partitions"])


def test_lease_sweep_logs_a_redis_failure_and_does_not_fail_the_trigger(
        prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    with single() as server:
        reader = DynoQueueStreamReader(SourceOptions.parse(
            {"url": server.url, "queue": "q", "keyPrefix": prefix, "zones": "z-a,z-b"}))
        server.stop()
        with caplog.at_level(logging.WARNING, logger="dynoqueue.spark"):
            reader._sweep()  # no exception: the next trigger tries again
        reader.stop()
    warnings = [r.getMessage() for r in caplog.records if r.name == "dynoqueue.spark"]
    assert len(warnings) == 1  # the sweep stopped at the first shard
    assert "putting back expired leases of shard a failed" in warnings[0]
    assert "Connection refused" in warnings[0]


def test_a_spark_read_of_a_stopped_server_names_redis_operation_error(
        spark: Any, prefix: str) -> None:
    with single() as server:
        source = {"url": server.url, "queue": "q", "keyPrefix": prefix}
        df = spark.read.format("dynoqueue").options(**source).load()  # connects nothing yet
        server.stop()
        with pytest.raises(Exception, match="RedisOperationError") as failure:
            df.collect()
    assert "operation spark_read_partitions failed" in str(failure.value)
