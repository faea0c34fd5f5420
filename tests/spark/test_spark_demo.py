"""``dynoqueue spark-demo`` on a few hours of real flights, through its Python API and its CLI."""

from __future__ import annotations

import io
from datetime import datetime
from typing import Any

import pytest
from rich.console import Console

from dynoqueue.cli import build_parser
from dynoqueue.demo import iter_flight_rows
from dynoqueue.demo.spark_run import SparkDemoOptions, render_spark_report, run_spark_demo


def _flights_between(start: datetime, end: datetime) -> dict[int, int]:
    """Reminders per local hour, counted straight from the CSV (independently of Spark)."""
    per_hour: dict[int, int] = {}
    for row in iter_flight_rows():
        if row["year"] != str(start.year) or row["month"] != str(start.month):
            continue
        sched = row["sched_dep_time"].strip()
        if not sched.isdigit():
            continue
        hour, minute = divmod(int(sched), 100)
        departure = datetime(start.year, start.month, int(row["day"]), hour, minute)
        if start <= departure < end:
            remind = hour * 60 + minute - 30
            per_hour[remind // 60] = per_hour.get(remind // 60, 0) + 1
    return per_hour


@pytest.mark.slow
def test_spark_demo_on_a_few_hours(spark: Any) -> None:
    start, end = datetime(2013, 1, 15, 6, 0), datetime(2013, 1, 15, 10, 0)
    # Four hours in ~4 s of wall time.
    options = SparkDemoOptions(start=start, end=end, day_seconds=24.0)
    phases: list[str] = []
    report = run_spark_demo(options, spark=spark,
                            progress=lambda phase, done, total: phases.append(phase))

    expected = _flights_between(start, end)
    assert report.flights == sum(expected.values()) > 200
    assert {h.hour: h.scheduled for h in report.hours} == expected
    total = report.total
    assert (total.scheduled, total.delivered, total.lost, total.early) == (
        report.flights, report.flights, 0, 0)
    assert report.queue_left == 0 and report.ok
    assert total.p50_ms is not None and 0 <= total.p50_ms <= total.p99_ms <= total.max_ms
    assert report.batches >= 2  # reminders came due over several micro-batches
    assert phases[0] == "load" and "stream" in phases and phases[-1] == "report"

    out = io.StringIO()
    render_spark_report(report, Console(file=out, width=110))
    text = out.getvalue()
    assert f"OK: {report.flights}/{report.flights} delivered, 0 lost, 0 early" in text
    assert "total" in text and "p99 ms" in text


def test_spark_demo_command_line() -> None:
    parser = build_parser()
    args = parser.parse_args(["spark-demo", "--day", "2013-07-04", "--day-seconds", "2",
                              "--max-per-trigger", "500"])
    assert args.day == (datetime(2013, 7, 4), datetime(2013, 7, 5))
    assert (args.day_seconds, args.max_per_trigger, args.year) == (2.0, 500, False)
    args = parser.parse_args(["spark-demo", "--month", "2013-12"])
    assert args.month == (datetime(2013, 12, 1), datetime(2014, 1, 1))
    assert callable(args.handler)
    for bad in (["--month", "2014-01"], ["--day-seconds", "0"], ["--year", "--month", "2013-02"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["spark-demo", *bad])
