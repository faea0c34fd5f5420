"""Real Celery workers on the dynoqueue kombu transport: one redis-server, and a 3-primary
Redis Cluster with partitioned queues; three zones each, one worker per zone.

Every worker is a real ``celery -A tests.celeryapps.app worker`` process (prefork pool on
the single server, threads pool on the Cluster; a solo worker for the priority order),
started once per deployment and always killed at the end. Tasks record each run in Redis
(tests/celeryapps/app.py); nothing here reads logs. The test process is a producer in zone
``us-east-1a`` that writes no zone heartbeat (``orphan_shard_grace=0``), so the workers
adopt the shard of a zone whose worker dies.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kombu")
celery = pytest.importorskip("celery")

import redis  # noqa: E402

import dynoqueue.kombu  # noqa: E402,F401
from dynoqueue import RedisQueues  # noqa: E402
from dynoqueue.embedded import ClusterTopology, RedisServer  # noqa: E402
from dynoqueue.kombu import factories  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
#: The lease of the workers' deliveries, s: tasks run far longer than it.
VISIBILITY_TIMEOUT = 5.0
WORKER_START_S = 90.0

pytestmark = pytest.mark.slow


@dataclass
class Cell:
    """One deployment with a worker per zone, and the test process's Celery app."""

    name: str
    broker_url: str
    redis_url: str
    results_url: str
    records: str
    options: dict[str, Any]
    logs: Path
    pool: tuple[str, ...]
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    app: Any = None

    @property
    def store(self) -> redis.Redis:
        return redis.Redis.from_url(self.results_url, decode_responses=True)

    def runs(self, kind: str, label: str) -> list[dict[str, Any]]:
        with self.store as client:
            return [json.loads(raw) for raw in client.lrange(f"{self.records}:{kind}:{label}",
                                                             0, -1)]

    def env(self, zone: str | None, **overrides: Any) -> dict[str, str]:
        options = dict(self.options, **overrides)
        if zone is not None:
            options["local_zone"] = zone
        env = dict(os.environ)
        env.update(DQ_BROKER_URL=self.broker_url, DQ_RESULTS_URL=self.results_url,
                   DQ_RECORDS=self.records, DQ_TRANSPORT_OPTIONS=json.dumps(options),
                   DQ_WORKER=zone or "solo", PYTHONPATH=str(ROOT))
        return env

    def start_worker(self, zone: str, *extra: str, name: str | None = None,
                     **overrides: Any) -> subprocess.Popen[bytes]:
        name = name or f"w{zone[-1]}"
        log = (self.logs / f"{self.name}-{name}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.celeryapps.app", "worker",
             "-n", f"{name}@%h", "-l", "info", "--without-gossip", "--without-mingle",
             *(extra or self.pool)],
            cwd=ROOT, env=self.env(zone, **overrides), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        return process

    def wait_ready(self, count: int) -> None:
        deadline = time.monotonic() + WORKER_START_S
        with self.store as client:
            while client.scard(f"{self.records}:ready") < count:
                dead = [z for z, p in self.workers.items() if p.poll() is not None]
                assert not dead, f"workers {dead} exited; see {self.logs}"
                assert time.monotonic() < deadline, f"workers not ready; see {self.logs}"
                time.sleep(0.2)

    def queues(self) -> RedisQueues:
        """A plain dynoqueue factory on the broker (no reprocessor, no heartbeat)."""
        zones = {"zones": ZONES, "local_zone": ZONES[0]}
        return RedisQueues.from_url(self.redis_url, key_prefix=self.options["key_prefix"],
                                    unack_handler_interval_ms=0, orphan_shard_grace_ms=0,
                                    **zones)


def stop(*processes: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """End workers we started: SIGTERM to each one's process group, SIGKILL to those still
    running after ``grace_s``."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str,
             process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert process is None or process.poll() is None, f"the worker exited ({what})"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster_topology() -> Iterator[ClusterTopology]:
    topology = ClusterTopology(3, 0).start()
    try:
        yield topology
    finally:
        topology.stop()


@pytest.fixture(scope="module", params=["single", "cluster"])
def cell(request: pytest.FixtureRequest, redis_server: RedisServer,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cell]:
    """Three workers (one per zone) on the deployment, and a producer app for the test."""
    prefix = f"k{uuid.uuid4().hex[:10]}"
    host, port = redis_server.address
    results_url = f"redis://{host}:{port}/0"
    options: dict[str, Any] = {
        "zones": ZONES, "key_prefix": prefix, "visibility_timeout": VISIBILITY_TIMEOUT,
        "unack_interval": 0.5, "orphan_shard_grace": 2.0,
    }
    if request.param == "single":
        redis_url = results_url
    else:
        topology = request.getfixturevalue("cluster_topology")
        redis_url = topology.url
        options["partitions"] = 3
    broker_url = "dynoqueue" + redis_url[len("redis"):]
    # Both pools Celery users run: prefork on one deployment, threads on the other.
    pool = ("--pool=prefork", "-c", "2") if request.param == "single" else (
        "--pool=threads", "-c", "4")
    cell = Cell(request.param, broker_url, redis_url, results_url, f"{prefix}r", options,
                tmp_path_factory.mktemp(f"celery-{request.param}"), pool)
    try:
        for zone in ZONES:  # two queues each: "side" gets dq.add (task_routes below)
            cell.workers[zone] = cell.start_worker(zone, *cell.pool, "-Q", "celery,side")
        app = celery.Celery("producer", broker=broker_url, backend=results_url)
        producer_options = dict(options, local_zone=ZONES[0], orphan_shard_grace=0)
        app.conf.update(broker_transport_options=producer_options, task_serializer="json",
                        accept_content=["json"], result_serializer="json",
                        task_routes={"dq.add": {"queue": "side"}})
        cell.app = app
        cell.wait_ready(len(ZONES))
        yield cell
    finally:
        stop(*cell.workers.values())
        if cell.app is not None:
            cell.app.close()
        factories.close_all()  # connections Celery keeps pooled


def test_countdown_runs_once_two_to_three_seconds_later(cell: Cell) -> None:
    label = uuid.uuid4().hex
    sent = time.time()
    cell.app.send_task("dq.mark", (label, sent + 2), countdown=2)
    wait_for(lambda: bool(cell.runs("runs", label)), 15, "the countdown task")
    time.sleep(0.5)
    runs = cell.runs("runs", label)
    assert len(runs) == 1
    assert 2.0 <= runs[0]["at"] - sent <= 3.0, runs[0]["at"] - sent


def test_expires_is_honoured(cell: Cell) -> None:
    """A task that expires before it falls due is not run (Celery checks at the worker)."""
    expired, kept = uuid.uuid4().hex, uuid.uuid4().hex
    cell.app.send_task("dq.mark", (expired,), countdown=1.5, expires=0.5)
    cell.app.send_task("dq.mark", (kept,), countdown=1.5, expires=30)
    wait_for(lambda: bool(cell.runs("runs", kept)), 15, "the task that has not expired")
    time.sleep(0.5)
    assert cell.runs("runs", expired) == []


def test_delayed_tasks_run_exactly_once_never_early(cell: Cell) -> None:
    """200 tasks due over 10 s, leases of 5 s: each runs once, none before its eta, and the
    workers hold (nearly) none of them as scheduled eta tasks."""
    rng = random.Random(7)
    count = 200
    labels = [f"{uuid.uuid4().hex}" for _ in range(count)]
    started = time.time()
    dues = {}
    for label in labels:
        delay = rng.uniform(0, 10)
        dues[label] = time.time() + delay
        cell.app.send_task("dq.mark", (label, dues[label]), countdown=delay)
    held = []
    inspect = cell.app.control.inspect(timeout=1.0)
    for _ in range(3):
        time.sleep(2)
        replies = inspect.scheduled() or {}
        held.append(sum(len(tasks) for tasks in replies.values()))
    with cell.store as client:
        def done() -> bool:
            pipe = client.pipeline()
            for label in labels:
                pipe.exists(f"{cell.records}:runs:{label}")
            return all(pipe.execute())
        wait_for(done, 40, "every delayed task")
    time.sleep(VISIBILITY_TIMEOUT + 1)  # a duplicate would come after a lease ran out
    for label in labels:
        runs = cell.runs("runs", label)
        assert len(runs) == 1, (label, runs)
        assert runs[0]["at"] >= dues[label] - 0.01, (runs[0]["at"], dues[label])
    assert max(held) <= 2, held  # delivered when due, with the eta cleared: never scheduled
    assert time.time() - started < 60


def test_retry_countdown_then_reject_is_one_dead_letter(cell: Cell) -> None:
    label = uuid.uuid4().hex
    cell.app.send_task("dq.retrier", (label,))
    wait_for(lambda: len(cell.runs("runs", label)) >= 4, 30, "four runs of the retrier")
    with cell.queues() as queues:
        queue = queues.get("celery")

        def dead() -> list[Any]:
            return [d for d in queue.dead_letters(1000) if label in (d.message.payload or "")]
        wait_for(lambda: bool(dead()), 10, "the dead letter")
        letters = dead()
    runs = cell.runs("runs", label)
    assert [r["retries"] for r in runs] == [0, 1, 2, 3]
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.95 for gap in gaps), gaps
    assert len(letters) == 1
    assert letters[0].reason == "rejected"
    assert label in (letters[0].last_error or "") or "dq.retrier" in (letters[0].last_error or "")


def test_priorities_order_due_tasks(cell: Cell) -> None:
    """Tasks due together run lowest priority number first (a solo worker, prefetch 1).

    Priority orders each shard and each partition: the tasks are published to the worker's
    zone's shard (``sharding="local"``), as a producer in that zone does, of a queue of one
    partition (on the Cluster too: one hash slot)."""
    queue = f"prio{uuid.uuid4().hex[:8]}"
    group = uuid.uuid4().hex
    priorities = [5, 9, 0, 7, 3, 1, 8, 2]
    producer = celery.Celery("local", broker=cell.broker_url, backend=cell.results_url)
    producer.conf.broker_transport_options = dict(
        cell.options, local_zone=ZONES[0], orphan_shard_grace=0, sharding="local",
        partitions=1)
    try:
        for index, priority in enumerate(priorities):
            producer.send_task("dq.order", (group, f"{priority}:{index}"), queue=queue,
                               priority=priority, countdown=1)
    finally:
        producer.close()
    time.sleep(1.5)  # all due now
    worker = cell.start_worker(ZONES[0], "--pool=solo", "-Q", queue,
                               "--prefetch-multiplier=1", name=f"solo{queue}", partitions=1)
    try:
        with cell.store as client:
            wait_for(lambda: client.llen(f"{cell.records}:order:{group}") == len(priorities),
                     WORKER_START_S, "the priority tasks", worker)
            ran = client.lrange(f"{cell.records}:order:{group}", 0, -1)
    finally:
        stop(worker)
    assert [int(label.split(":")[0]) for label in ran] == sorted(priorities)


def test_remote_control_ping_and_canvas(cell: Cell) -> None:
    """Every worker answers ``inspect ping``; a chain, a group and a chord complete, with
    ``dq.add`` routed to the queue "side" (every worker runs ``-Q celery,side``)."""
    replies = cell.app.control.inspect(timeout=2.0).ping() or {}
    assert len(replies) == len(ZONES), replies
    assert all(reply == {"ok": "pong"} for reply in replies.values())
    add = cell.app.signature("dq.add")
    total = cell.app.signature("dq.total")
    assert (add.clone((1, 2)) | add.clone((3,))).apply_async().get(timeout=30) == 6
    assert celery.group(add.clone((i, i)) for i in range(5)).apply_async().get(
        timeout=30) == [0, 2, 4, 6, 8]
    assert celery.chord(add.clone((i, i)) for i in range(5))(total).get(timeout=30) == 20
    queues = cell.app.control.inspect(timeout=2.0).active_queues() or {}
    assert all({q["name"] for q in qs} == {"celery", "side"} for qs in queues.values()), queues
    with cell.queues() as dq:
        side = dq.get("side")  # the routed tasks went through it: it stored its policy
        assert side.stored_policy() is not None and side.size() == 0


class _Seen(Exception):
    """Stops the event receiver once the awaited event came."""


def test_task_events_reach_a_receiver(cell: Cell) -> None:
    """``celery events`` / Flower: workers' task events arrive over the fanout exchange."""
    # With the workers' replies: a task run before a worker took the broadcast sends no
    # event (a loaded CI run once saw that race).
    assert cell.app.control.enable_events(reply=True, timeout=10.0, limit=len(cell.workers))
    try:
        seen: dict[str, Any] = {}
        wanted: list[str] = []

        def on_succeeded(event: dict[str, Any]) -> None:
            if wanted and event.get("uuid") == wanted[0]:
                seen.update(event)
                raise _Seen

        with cell.app.connection_for_read() as conn:
            receiver = cell.app.events.Receiver(
                conn, handlers={"task-succeeded": on_succeeded, "*": lambda event: None})
            capture = receiver.itercapture(limit=None, timeout=15, wakeup=False)
            next(capture)  # an event: the subscription's confirmation
            wanted.append(cell.app.send_task("dq.mark", (uuid.uuid4().hex,)).id)
            deadline = time.monotonic() + 15
            with pytest.raises(_Seen):
                while time.monotonic() < deadline:
                    next(capture)  # one event each
        assert seen["type"] == "task-succeeded" and seen["hostname"].startswith("w")
    finally:
        cell.app.control.disable_events()


def test_long_task_keeps_its_lease(cell: Cell) -> None:
    """A task running 3x the visibility timeout runs once: heartbeats extend its lease."""
    label = uuid.uuid4().hex
    cell.app.send_task("dq.sleepy", (label, 3 * VISIBILITY_TIMEOUT + 1))
    wait_for(lambda: bool(cell.runs("ends", label)), 3 * VISIBILITY_TIMEOUT + 20, "the end")
    time.sleep(1)
    assert len(cell.runs("starts", label)) == 1
    assert len(cell.runs("ends", label)) == 1


def test_killed_worker_task_runs_again_once_elsewhere(cell: Cell) -> None:
    """acks_late: SIGKILL the worker mid-task; another zone's worker adopts the shard and runs
    the task again, once. (Runs last: it leaves one worker dead.)"""
    label = uuid.uuid4().hex
    cell.app.send_task("dq.sleepy", (label, 4.0))
    wait_for(lambda: bool(cell.runs("starts", label)), 15, "the first start")
    victim = cell.runs("starts", label)[0]["worker"]
    os.killpg(cell.workers[victim].pid, signal.SIGKILL)
    cell.workers[victim].wait(5)
    wait_for(lambda: bool(cell.runs("ends", label)), 40, "the run on another worker")
    time.sleep(VISIBILITY_TIMEOUT + 1)
    starts = cell.runs("starts", label)
    assert len(starts) == 2, starts
    assert starts[1]["worker"] != victim
    assert len(cell.runs("ends", label)) == 1
