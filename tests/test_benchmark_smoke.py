"""Smoke tests of the benchmark suite: its pieces move real messages on a real redis-server.

No timing assertions beyond generous bounds: figures belong to `dynoqueue bench`, not here.
The suite FLUSHALLs its server, so these tests start their own instead of the shared one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import lifecycle_ab, limits, ordering, redelivery, serving, workloads
from benchmarks.common import RoundTrips, items, percentiles
from benchmarks.core_throughput import one_run
from benchmarks.peers import PEERS, NotSupported, load
from benchmarks.suite import WORKER_CONCURRENCY, Options, plan
from dynoqueue.embedded import RedisServer, single


@pytest.fixture(scope="module")
def bench_server() -> Iterator[workloads.Server]:
    with single() as server:
        admin = server.client(decode_responses=True)
        RoundTrips.install()
        yield workloads.Server(f"redis://127.0.0.1:{server.port}/0", server.port, admin)
        admin.close()


def test_core_benchmark_run(redis_server: RedisServer) -> None:
    client = redis_server.client()
    figures = one_run(client, 2000)
    client.close()
    rates = {k: v for k, v in figures.items() if "lateness" not in k}
    assert len(rates) == 4 and all(v > 100 for v in rates.values())  # messages/s
    # Generous bound: a waiting consumer sees a due message well within half a second.
    assert 0 <= figures["waiting pop lateness p99 (ms)"] < 500


def test_dynoqueue_enqueue_and_raw_loop(bench_server: workloads.Server) -> None:
    bulk = workloads.enqueue(bench_server, "dynoqueue", 3000, batched=True)
    single_ = workloads.enqueue(bench_server, "dynoqueue", 300, batched=False)
    raw = limits.raw_python(bench_server.admin, 3000)
    assert bulk["rate"] > 0 and single_["rate"] > 0 and raw["push"] > 0 and raw["pop+ack"] > 0
    # One script per 500 messages; inside it an HSETNX per message (push.lua's usual path)
    # and one variadic ZADD per shard and call.
    assert bulk["round_trips_per_msg"] < 0.01
    assert 1 <= bulk["commands_per_msg"] <= 5
    assert bulk["commands"]["hsetnx"] == 3000 and bulk["commands"]["zadd"] <= 3000 // 100
    # One push per call: one round trip each.
    assert 0.99 <= single_["round_trips_per_msg"] <= 1.1
    assert bench_server.admin.keys("raw:*") == []


def test_dynoqueue_consume_memory_and_lateness(bench_server: workloads.Server) -> None:
    consumed = workloads.consume(bench_server, "dynoqueue", 3000, procs=2)
    # Each ack call deletes its messages and their lifecycle records (the delivery count of
    # each lease) with one variadic HDEL each, not one per message; the workload itself checks
    # that nothing is left waiting or leased.
    assert consumed["rate"] > 0 and 2 <= consumed["commands"]["hdel"] <= 3000 // 10
    assert consumed["round_trips_per_msg"] < 0.1
    memory = workloads.memory(bench_server, "dynoqueue", 2000)
    assert 50 < memory["memory_per_msg"] < 5000  # bytes
    late = workloads.lateness(bench_server, "dynoqueue", 200, 0.5, idle_s=0.5, lead_s=0.5)
    assert late["delivered"] == 200 and len(late["samples"]) == 200
    assert late["p99"] < 500  # ms; generous
    # A waiting consumer does not busy-poll (generous: the goal is a few commands/s).
    assert late["idle_commands_per_s"] < 50


def test_depth_scaling_shape(bench_server: workloads.Server) -> None:
    out = workloads.depth_scaling(bench_server, [100, 1000], probe=500, probe_single=20, runs=1)
    assert set(out["depths"]) == {100, 1000}
    for figures in out["depths"].values():
        assert set(figures) == {"push", "pop+ack", "push single", "pop+ack single"}
        assert all(len(v) == 1 and v[0] > 0 for v in figures.values())
    assert out["memory_per_msg"] > 0


def test_asyncio_workloads_move_messages(bench_server: workloads.Server) -> None:
    one = workloads.enqueue(bench_server, "dynoqueue.asyncio", 200, batched=False)
    bulk = workloads.enqueue(bench_server, "dynoqueue.asyncio", 1200, batched=True)
    many = workloads.enqueue(bench_server, "dynoqueue.asyncio", 300, batched=False, tasks=20)
    # The workload itself checks that every message waits afterwards.
    assert one["rate"] > 0 and bulk["rate"] > 0 and many["rate"] > 0
    assert 0.99 <= one["round_trips_per_msg"] <= 1.1  # one EVALSHA per push
    assert bulk["round_trips_per_msg"] < 0.01 and bulk["commands"]["hsetnx"] == 1200
    assert many["tasks"] == 20 and many["commands"]["hsetnx"] == 300
    consumed = workloads.consume(bench_server, "dynoqueue.asyncio", 1500, procs=1)
    # Each ack call deletes its messages and their records with one variadic HDEL each.
    assert 2 <= consumed["commands"]["hdel"] <= 1500 // 10
    assert consumed["round_trips_per_msg"] < 0.1
    with pytest.raises(NotSupported):  # the sync API has no concurrent tasks
        workloads.enqueue(bench_server, "dynoqueue", 10, batched=False, tasks=5)


def test_paired_blocks_alternate_and_count(bench_server: workloads.Server) -> None:
    from benchmarks.paired import paired, paired_consume

    out = paired(bench_server, "dynoqueue", "huey", batched=False, pairs=3, size=20)
    assert out["pairs"] == 3 and out["size"] == 20
    assert out["a_rate"] > 0 and out["b_rate"] > 0 and out["ratio"] > 0
    bulk = paired(bench_server, "dynoqueue.asyncio", "dynoqueue", batched=True, pairs=2,
                  size=600)
    assert bulk["ratio"] > 0
    assert bench_server.admin.dbsize() == 0  # flushed after
    with pytest.raises(NotSupported):  # huey has no bulk enqueue
        paired(bench_server, "dynoqueue", "huey", batched=True, pairs=1, size=10)
    drained = paired_consume(bench_server, "dynoqueue.asyncio", "dynoqueue", pairs=2, size=700)
    assert drained["a_rate"] > 0 and drained["b_rate"] > 0  # every block taken, none left


@pytest.mark.parametrize("name", ["bullmq", "saq"])
def test_asyncio_peer_concurrent_enqueue(bench_server: workloads.Server, name: str) -> None:
    out = workloads.enqueue(bench_server, name, 60, batched=False, tasks=20)
    assert out["n"] == 60 and out["tasks"] == 20 and out["rate"] > 0
    assert out["round_trips_per_msg"] >= 1  # one call per message, however concurrent


def test_plan_measures_each_dynoqueue_step_through_both_apis(
        bench_server: workloads.Server) -> None:
    opts = Options.quick_mode()
    opts.runs, opts.libraries = 1, ["dynoqueue", "saq"]
    steps, raw = plan(opts, bench_server)
    labels = [s.label.removeprefix("run 1/1 ") for s in steps]
    for what in ("enqueue one per call", "enqueue in bulk", "dequeue+ack, 1 consumer"):
        at = labels.index(f"dynoqueue: {what}")
        assert labels[at + 1] == f"dynoqueue.asyncio: {what}"
    assert "dynoqueue.asyncio: enqueue one per call, 100 tasks" in labels
    assert "saq: enqueue one per call, 100 tasks" in labels
    assert "dynoqueue: enqueue one per call, 100 tasks" not in labels
    assert set(raw["enqueue"]["dynoqueue.asyncio"]) == {"single", "concurrent", "batched"}


@pytest.mark.parametrize("name", PEERS)
def test_peer_adapter_moves_messages(bench_server: workloads.Server, name: str) -> None:
    try:
        load(name)
    except ImportError as exc:
        pytest.fail(f"{name} is not installed: pip install -e '.[bench]' ({exc})")
    enqueued = workloads.enqueue(bench_server, name, 40, batched=False)
    assert enqueued["round_trips_per_msg"] >= 1  # one call per message
    consumed = workloads.consume(bench_server, name, 60, procs=1, timeout_s=60)
    assert consumed["n"] == 60 and consumed["rate"] > 0
    adapter = load(name)(bench_server.url)
    try:
        assert adapter.waiting() == 0
    finally:
        adapter.close()


def test_percentiles() -> None:
    stats = percentiles([float(i) for i in range(1, 101)])
    assert stats["p50"] == 51 and stats["p99"] == 100 and stats["min"] == 1
    assert stats["count"] == 100
    assert items(3, prefix="z")[2].id == "z2"


@pytest.mark.slow
def test_bench_command_quick_writes_results(tmp_path: Path) -> None:
    from dynoqueue.cli import main

    assert main(["bench", "--quick", "--libraries", "dynoqueue,huey", "--out",
                 str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert {"enqueue", "consume", "lateness", "memory", "limits", "depth", "goals",
            "libraries", "meta"} <= set(data)
    assert data["enqueue"]["dynoqueue"]["batched"]["rate"]["median"] > 0
    assert "na" in data["enqueue"]["huey"]["batched"]  # huey has no bulk enqueue
    assert data["consume"]["huey"]["one"]["rate"]["median"] > 0
    assert data["lateness"]["dynoqueue"]["1000"]["delivered"]["median"] == 1000
    aio = data["enqueue"]["dynoqueue.asyncio"]
    assert all(aio[mode]["rate"]["median"] > 0 for mode in ("single", "concurrent", "batched"))
    assert data["consume"]["dynoqueue.asyncio"]["one"]["rate"]["median"] > 0
    assert sum(g["goal"].startswith("asyncio:") for g in data["goals"]) == 3
    assert all({"goal", "measured", "met"} <= set(g) for g in data["goals"])
    for png in ("throughput.png", "lateness.png", "depth.png"):
        assert (tmp_path / png).stat().st_size > 1000
    text = (tmp_path / "results.md").read_text()
    assert "### 1. Enqueue" in text and "### 7. asyncio APIs" in text
    # The paired blocks (table 1b) and the goals that read them.
    assert "### 1b. Paired blocks" in text
    assert data["paired"]["dynoqueue vs huey"]["single"]["ratio"]["median"] > 0
    aio_pairs = data["paired"]["dynoqueue.asyncio vs dynoqueue"]
    assert aio_pairs["batched"]["ratio"]["median"] > 0
    assert aio_pairs["consume"]["ratio"]["median"] > 0
    assert sum("paired" in g["measured"] for g in data["goals"]) == 3
    one = next(g for g in data["goals"] if g["goal"].startswith("one message per call push"))
    assert "paired vs huey" in one["measured"]
    # The Worker, serve and ordering sections (issues 13-15), with their goals.
    assert "### 8. Workers" in text and "### 9. dynoqueue serve" in text
    assert "### 10. Ordering" in text and "### 11. Message lifecycle" in text
    assert data["worker"]["dynoqueue Worker"]["consume"]["rate"]["median"] > 0
    assert data["serve"]["round_trip"]["rate"]["median"] > 0
    assert data["ordering"]["depths"]["20000"]["grouped"]["median"] > 0
    new_goals = [g["goal"] for g in data["goals"] if "Worker" in g["goal"]
                 or g["goal"].startswith(("serve:", "pop+ack with"))]
    assert len(new_goals) == 4 + 1 + 4
    assert data["lifecycle"]["cases"]["limits"]["rate"]["median"] > 0
    assert sum(g["goal"].startswith("lifecycle:") for g in data["goals"]) == 3
    # Redelivery after a lease ends (table 11b), with its goal.
    assert "### 11b. Redelivery after a lease ends" in text
    assert data["redelivery"]["lost"]["max"] == 0 and data["redelivery"]["n"] == 100
    assert sum(g["goal"].startswith("redelivery after a lease ends") for g in data["goals"]) == 1
    # The scale section (benchmarks.scale) at the quick depth, every id back once.
    scale_text = (tmp_path / "scale.txt").read_text()
    assert "20,000 messages" in scale_text and "0 lost, 0 duplicated" in scale_text


def test_worker_rows_move_messages(bench_server: workloads.Server) -> None:
    # The Worker rows: each Worker drains the queue through its no-op handler (the workload
    # checks that nothing is left waiting or leased) and sees sparse due messages arrive.
    for api, concurrency in WORKER_CONCURRENCY.items():
        consumed = workloads.consume(bench_server, api, 400, 1, {"worker": concurrency},
                                     timeout_s=60)
        assert consumed["n"] == 400 and consumed["rate"] > 0
        late = workloads.lateness(bench_server, api, 30, 0.3, idle_s=0.3, lead_s=0.3,
                                  options={"worker": concurrency})
        assert late["delivered"] == 30 and 0 <= late["p99"] < 1000  # ms; generous


def test_serve_round_trips_and_long_polls(bench_server: workloads.Server) -> None:
    with serving.Served(bench_server.url) as served:
        trips = serving.round_trips(served, clients=4, n=40)
        polls = serving.long_poll(served, clients=4, n=10, spread_s=0.3, lead_s=0.3)
    assert served.process.poll() is not None  # stopped on exit
    assert trips["n"] == 40 and trips["rate"] > 0 and trips["p99"] >= trips["p50"] > 0
    assert trips["server_cpu_ms"] > 0 and trips["client_cpu_ms"] > 0
    assert polls["delivered"] == 10 and 0 <= polls["p99"] < 1000  # ms; generous


def test_ordering_rows(bench_server: workloads.Server) -> None:
    out = ordering.ordering(bench_server, [600, 1500], probe=1000, groups=50, runs=1)
    for depth in (600, 1500):
        assert set(out["depths"][depth]) == set(ordering.KINDS)
        assert all(len(v) == 1 and v[0] > 0 for v in out["depths"][depth].values())
        # The depth is held: every probe pushes back as many as it took.
        assert out["waiting"][depth] == {k: depth for k in ordering.KINDS}
        assert all(s["pop"] > 0 and s["ack"] > 0 and s["push"] > 0
                   for s in out["server_us"][depth].values())
    assert out["memory_per_msg"]["grouped"] > out["memory_per_msg"]["plain"] > 0
    assert bench_server.admin.dbsize() == 0  # flushed after


def test_lifecycle_rows_against_the_pre_lifecycle_code(bench_server: workloads.Server) -> None:
    # The pre-lifecycle package is exported from git and imported beside this one; every case
    # moves all its messages (measure raises otherwise) and the server is flushed after.
    out = lifecycle_ab.measure(bench_server.url, bench_server.admin, n=1000, rounds=1)
    cases = ("pre", "default", "limits", "nack") if out["reference"] else lifecycle_ab.CASES[1:]
    assert tuple(out["cases"]) == cases
    for figures in out["cases"].values():
        assert figures["rate"][0] > 0 and figures["server_us"][0] > 0
        assert figures["memory"][0] > 0
    if out["reference"]:
        assert out["ratios"]["pre"] == [1.0]
    assert "dynoqueue_pre" not in sys.modules
    assert bench_server.admin.dbsize() == 0
    assert "| pop(500)+ack_many, default policy |" in lifecycle_ab.table(out)


def test_redelivery_after_a_lease_ends(bench_server: workloads.Server) -> None:
    # Every leased message that its first consumer never acks comes back to the waiting
    # consumer (once, as its 2nd delivery: measure raises otherwise), none is lost, and the
    # run's keys are deleted after. The timing goal is the bench's (table 11b), not this test's.
    out = redelivery.measure(bench_server.url, leases=30, lease_ms=200, wave=10)
    assert (out["n"], out["redelivered"], out["lost"], out["waves"]) == (30, 30, 0, 3)
    assert out["count"] == len(out["samples"]) == 30
    assert -1 < out["min"] <= out["p50"] <= out["p99"] <= out["max"] < 2000  # ms; generous
    assert 0 <= out["claim_p99"] < 2000
    assert bench_server.admin.keys("bench.redelivery.*") == []
    assert "| 30 | 30 |" in redelivery.table(out)


def test_plan_of_the_new_sections_alone(bench_server: workloads.Server) -> None:
    opts = Options.quick_mode()
    opts.runs, opts.libraries = 2, ["dynoqueue", "huey"]
    opts.sections = ["worker", "serve", "ordering"]
    steps, raw = plan(opts, bench_server)
    labels = [s.label for s in steps]
    assert not any("Redis limit" in label or "enqueue" in label for label in labels)
    assert sum("serve:" in label for label in labels) == 2
    assert sum(label.startswith("ordering:") for label in labels) == 1
    # Without the core section, the Worker section measures the peers' workers itself.
    assert "run 1/2 worker: huey's worker, dequeue+ack" in labels
    assert "run 2/2 worker: dynoqueue.asyncio Worker(concurrency=16), no-op handler" in labels
    assert set(raw["worker"]) == {"dynoqueue pop+ack", "dynoqueue Worker",
                                  "dynoqueue.asyncio Worker"}
    assert set(raw["consume"]) == set(raw["lateness"]) == {"huey"}


def test_tracing_cost_rows(redis_server: RedisServer) -> None:
    """benchmarks/tracing.py: every variant moves its messages (a small run, no baseline)."""
    pytest.importorskip("opentelemetry.sdk", reason="the 'dev' extra brings opentelemetry-sdk")
    from benchmarks.tracing import MODES, measure

    rows = measure(redis_server.url, rounds=1, messages=600, baseline=None)
    assert list(rows) == list(MODES)
    for row in rows.values():
        assert row["push"] > 0 and row["popack"] > 0
    assert rows["off"]["push ratio"] == rows["off"]["popack ratio"] == 1.0


@pytest.mark.slow
def test_scale_run_counts_every_message_once() -> None:
    """benchmarks/scale.py end to end at a small depth: every id back once, rates per tenth."""
    from benchmarks import scale

    options = argparse.Namespace(messages=20_000, primaries=3, partitions=12, procs=2,
                                 batch=500, expired=1_000)
    result = scale.run(options)
    assert result["size"] == 20_000
    assert (result["lost"], result["duplicated"]) == (0, 0)
    assert len(result["fill_tenths"]) == len(result["drain_tenths"]) == 10
    assert all(rate > 0 for rate in result["fill_tenths"] + result["drain_tenths"])
    assert 0 < result["bytes_per_msg"] < 2_000
    assert "0 lost, 0 duplicated" in scale.report(result)


@pytest.mark.slow  # fault injection (pyproject's "slow" marker); ~25 s
def test_scale_fault_run_loses_nothing_when_a_primary_is_killed() -> None:
    """benchmarks/scale.py --replicas 1 --kill-primary at a small depth: a primary SIGKILLed
    half-way through the drain, its replica promoted; nothing lost, nothing early, duplicates
    within the messages in flight at the kill plus one batch per consumer."""
    from benchmarks import scale

    options = argparse.Namespace(messages=20_000, primaries=3, partitions=12, procs=2,
                                 batch=500, expired=1_000, replicas=1, kill_primary=True)
    result = scale.run(options)
    assert result["size"] == 20_000 and result["replicas"] == 1
    assert result["killed_partitions"] >= 1
    assert 10_000 <= result["drained_at_kill"] < 20_000
    assert result["promoted_s"] is not None and result["rejoined_s"] is not None
    assert (result["lost"], result["early"]) == (0, 0)
    assert result["delayed"] == 200 and result["delayed_delivered"] >= 200
    assert result["duplicate_bound"] == result["in_flight"] + 2 * 500
    assert result["duplicated"] <= result["duplicate_bound"]
    assert not result["stalled"] and result["consumer_exits"] == [0, 0]
    errors = {**result["consumer_errors"], **result["parent_errors"]}
    assert not [kind for kind in errors if "untyped" in kind], errors
    assert scale.passed(result)
    text = scale.report(result)
    assert "0 lost" in text and "in flight at the kill" in text


@pytest.mark.slow
def test_frameworks_rows_measure_every_broker() -> None:
    """benchmarks/frameworks.py end to end at a small size: real Celery and Dramatiq workers on
    each broker; every row measured, and no ETA task held by a worker on dynoqueue."""
    pytest.importorskip("celery")
    pytest.importorskip("dramatiq")
    pytest.importorskip("psutil")
    from benchmarks import frameworks

    options = argparse.Namespace(tasks=100, eta_tasks=300, runs=1, pool="prefork",
                                 concurrency=2)
    rows = frameworks.run(options)
    measured = {(r.framework, r.broker, r.workload): r.value for r in rows}
    for framework, broker in (("celery", "kombu redis"), ("celery", "dynoqueue"),
                              ("dramatiq", "redis"), ("dramatiq", "dynoqueue")):
        rate = measured[(framework, broker, "immediate")]
        assert rate is not None and rate > 0, (framework, broker, rows)
    held = measured[("celery", "dynoqueue", "eta held")]
    assert held is not None and held < 20  # MiB: the 300 delayed tasks wait in Redis
    assert "dynoqueue" in frameworks.report(rows)
