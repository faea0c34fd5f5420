"""DynoqueueBroker: Dramatiq on dynoqueue queues, on real servers and real dramatiq workers.

Every test runs on one redis-server (``single``) and on the 3-primary embedded Redis Cluster
with a queue of 4 partitions (``partitioned``), with three zones. Workers are dramatiq's own:
``dramatiq.Worker`` in this process, and ``python -m dramatiq tests.dramatiq_app_worker``
processes (``--processes 1``). The actors (tests/dramatiq_app.py) record what they did in a
separate redis-server; the tests read those keys, never logs.
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

dramatiq = pytest.importorskip("dramatiq")

from dramatiq.errors import QueueJoinTimeout  # noqa: E402
from dramatiq.middleware import Middleware  # noqa: E402

from dynoqueue import MessageState, QueuePolicy, RedisQueues  # noqa: E402
from dynoqueue.dramatiq import DynoqueueBroker  # noqa: E402
from dynoqueue.embedded import RedisServer  # noqa: E402
from dynoqueue.errors import (  # noqa: E402
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
)

from .conftest import eventually  # noqa: E402
from .deployments import Deployment  # noqa: E402
from .dramatiq_app import QUEUE, ZONES, declare  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
ON = pytest.mark.deployments("single", "partitioned")
#: Reprocessor and zone-adoption timings of every broker here (ms).
FAST = {"orphan_shard_grace_ms": 600, "unack_handler_interval_ms": 300}

Actors = dict[str, Any]


@pytest.fixture
def records(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


def stamps(records: redis.Redis, key: str) -> list[tuple[int, int]]:
    """The ``(epoch ms, pid)`` entries an actor recorded under ``key``."""
    return [(int(ms), int(pid)) for ms, pid in
            (str(entry).split(":") for entry in records.lrange(key, 0, -1))]


def new_broker(deployment: Deployment, prefix: str, **options: Any) -> DynoqueueBroker:
    settings: dict[str, Any] = {"local_zone": ZONES[0], "lease_ms": 2000, **FAST, **options}
    return DynoqueueBroker(deployment.url, zones=ZONES, key_prefix=prefix,
                           partitions=deployment.partitions, read_from_replicas=False,
                           **settings)


class Enqueues(Middleware):
    """Counts the enqueues of each message id (a delayed message is enqueued once: no worker
    re-enqueues it from a delay queue)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        self.counts[message.message_id] += 1


class App:
    """A broker with the test actors and an in-process dramatiq Worker."""

    def __init__(self, deployment: Deployment, records: redis.Redis, threads: int,
                 lease_ms: int) -> None:
        self.prefix = f"dq{uuid.uuid4().hex[:10]}"
        self.tag = self.prefix
        self.broker = new_broker(deployment, self.prefix, lease_ms=lease_ms)
        self.enqueues = Enqueues()
        self.broker.add_middleware(self.enqueues)
        self.actors = declare(self.broker, records)
        self.queue = self.broker.queues[QUEUE]
        self.records = records
        self.broker.emit_after("process_boot")  # as the dramatiq CLI does (starts TimeLimit)
        self.worker = dramatiq.Worker(self.broker, worker_threads=threads, worker_timeout=100)
        self.worker.start()
        self.stopped = False

    def warm_up(self) -> None:
        """One message per shard, all run: the worker has adopted the zones nobody runs."""
        for _ in range(3):
            self.actors["note"].send(f"{self.tag}:warm")
        assert eventually(lambda: self.records.llen(f"{self.tag}:warm:done") == 3, 10)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.worker.stop(timeout=15_000)

    def close(self) -> None:
        self.stop()
        self.broker.close()


@pytest.fixture
def make_app(deployment: Deployment, records: redis.Redis) -> Iterator[Callable[..., App]]:
    apps: list[App] = []

    def make(threads: int = 2, lease_ms: int = 2000) -> App:
        app = App(deployment, records, threads, lease_ms)
        apps.append(app)
        app.warm_up()
        return app

    yield make
    for app in apps:
        app.close()


def dead_reasons(queue: Any) -> dict[str, str]:
    return {d.message.id: d.reason for d in queue.dead_letters()}


@ON
def test_in_process_delays_retries_dead_letters_and_middleware(
        make_app: Callable[..., App], records: redis.Redis) -> None:
    app = make_app()
    tag, note, queue = app.tag, app.actors["note"], app.queue
    sent_ms = int(time.time() * 1000)
    delayed = [note.send_with_options(args=(f"{tag}:d{i}",), delay=2000) for i in range(3)]
    flaky = app.actors["flaky"].send(f"{tag}:f", 2)
    doomed = app.actors["doomed"].send(f"{tag}:x")
    refused = app.actors["refuses"].send(f"{tag}:r")
    too_slow = app.actors["slow"].send_with_options(args=(f"{tag}:t", 3.0), time_limit=200)
    too_old = note.send_with_options(args=(f"{tag}:o",), delay=300, max_age=100)
    note.send_with_options(args=(f"{tag}:c",), on_success="on_done")

    # A delayed message waits in Redis (DELAYED, not leased): no worker holds it.
    time.sleep(0.5)
    assert [queue.state(m.message_id) for m in delayed] == [MessageState.DELAYED] * 3
    app.broker.join(QUEUE, timeout=20_000)

    for i in range(3):  # every delayed message ran once, 2-3 s after it was sent, none early
        (ran_ms, _), = stamps(records, f"{tag}:d{i}:done")
        assert 2000 <= ran_ms - sent_ms <= 3000, ran_ms - sent_ms
    assert [app.enqueues.counts[m.message_id] for m in delayed] == [1, 1, 1]
    assert app.enqueues.counts[flaky.message_id] == 3  # sent, then two retries
    policy, asked = queue.stored_policy(), app.broker.policy
    assert policy is not None and asked is not None and policy.partitions == asked.partitions
    starts = [ms for ms, _ in stamps(records, f"{tag}:f:start")]  # Retries, with back-off
    assert len(starts) == 3 and len(stamps(records, f"{tag}:f:done")) == 1
    assert all(later - earlier >= 290 for earlier, later in itertools.pairwise(starts)), starts
    assert records.get(f"{tag}:x:tries") == "2"  # max_retries=1: two tries, then dead
    assert records.get(f"{tag}:r:tries") == "1"  # throws: rejected at once
    assert records.llen(f"{tag}:c:callback") == 1  # Callbacks
    assert records.llen(f"{tag}:o:done") == 0  # AgeLimit
    assert dead_reasons(queue) == {
        doomed.message_id: "dramatiq: ValueError", refused.message_id: "dramatiq: LookupError",
        too_slow.message_id: "dramatiq: TimeLimitExceeded", too_old.message_id:
        "dramatiq: SkipMessage"}
    (doomed_letter,) = [d for d in queue.dead_letters() if d.message.id == doomed.message_id]
    assert (doomed_letter.last_error or "").startswith("ValueError: always fails\n\nTraceback")

    # A dead letter redriven with the dynoqueue API runs again.
    records.set(f"{tag}:r:allowed", 1)
    assert queue.redrive([refused.message_id]) == 1
    app.broker.join(QUEUE, timeout=10_000)
    assert records.get(f"{tag}:r:tries") == "2" and records.llen(f"{tag}:r:done") == 1
    assert queue.dead_size() == 3


@ON
def test_in_process_heartbeat_requeue_join_and_flush(make_app: Callable[..., App],
                                                     records: redis.Redis) -> None:
    app = make_app(threads=1, lease_ms=2000)
    tag, slow, queue = app.tag, app.actors["slow"], app.queue

    # 4.5 s on a 2 s lease: the consumer's heartbeats keep it; it runs once.
    long = slow.send(f"{tag}:h", 4.5)
    app.broker.join(QUEUE, timeout=15_000)
    assert len(stamps(records, f"{tag}:h:start")) == 1
    assert len(stamps(records, f"{tag}:h:done")) == 1
    assert queue.state(long.message_id) is None  # acked and gone

    # A paused worker keeps its prefetched message's lease (the heartbeat thread renews it);
    # stopping it gives that message back at once.
    sent = [slow.send(f"{tag}:s", 1.0) for _ in range(4)]
    assert eventually(lambda: records.llen(f"{tag}:s:start") == 1, 10)

    def leased() -> int:
        return sum(s["uacked"] for s in queue.shard_sizes().values())

    assert eventually(lambda: leased() == 2, 5)  # one running, one prefetched (prefetch 2)
    app.worker.pause()  # returns once the running message is done
    held, waiting, started = leased(), queue.size(), records.llen(f"{tag}:s:start")
    assert held >= 1  # prefetched, not started
    time.sleep(2.8)  # more than a lease plus an unack pass: nothing came back or ran
    assert (leased(), queue.size(), records.llen(f"{tag}:s:start")) == (held, waiting, started)
    app.stop()
    done = records.llen(f"{tag}:s:done")
    assert done == started and leased() == 0 and queue.size() == 4 - done  # given back at once
    assert sorted(str(queue.state(m.message_id)) for m in sent) == sorted(
        [str(None)] * done + [str(MessageState.READY)] * (4 - done))

    with pytest.raises(QueueJoinTimeout):
        app.broker.join(QUEUE, timeout=300)
    app.broker.flush(QUEUE)
    app.broker.join(QUEUE, timeout=1000)

    # flush_all: waiting, delayed and dead messages all go.
    app.actors["note"].send_with_options(args=(f"{tag}:later",), delay=60_000)
    app.actors["note"].send(f"{tag}:now")
    (popped,) = queue.pop(1, 2000)
    assert queue.dead_letter(popped.id, "manual", receipt=popped.receipt)
    assert queue.size() == 1 and queue.dead_size() == 1
    app.broker.flush_all()
    assert queue.size() == 0 and queue.dead_size() == 0


class Workers:
    """Real ``dramatiq`` worker processes on one deployment, each in its own session."""

    def __init__(self, deployment: Deployment, records_url: str, prefix: str,
                 tmp_path: Path) -> None:
        self.env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DQ_URL": deployment.url,
                    "DQ_PREFIX": prefix, "DQ_PARTITIONS": str(deployment.partitions),
                    "DQ_LEASE_MS": "3000", "DQ_RECORDS_URL": records_url,
                    "dramatiq_worker_timeout": "200"}
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, zone: str) -> subprocess.Popen[bytes]:
        with open(self.tmp_path / f"worker-{len(self.procs)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dramatiq", "tests.dramatiq_app_worker",
                 "--processes", "1", "--threads", "2"],
                cwd=REPO_ROOT, env={**self.env, "DQ_ZONE": zone}, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def kill_group_of(self, pid: int) -> subprocess.Popen[bytes]:
        """SIGKILL the worker (main and child process) whose child ``pid`` is."""
        (proc,) = [p for p in self.procs if p.pid == os.getpgid(pid)]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.tmp_path.glob("worker-*.log")))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


@ON
def test_dramatiq_worker_processes_in_two_zones(deployment: Deployment, records: redis.Redis,
                                                redis_server: RedisServer,
                                                tmp_path: Path) -> None:
    prefix = f"dq{uuid.uuid4().hex[:10]}"
    tag = prefix
    # A pure producer: no reprocessor, no zone heartbeat (its zone's shard is adopted).
    producer = new_broker(deployment, prefix, local_zone=ZONES[2], lease_ms=3000,
                          orphan_shard_grace_ms=0, unack_handler_interval_ms=0)
    actors = declare(producer, records)
    workers = Workers(deployment, redis_server.url, prefix, tmp_path)
    try:
        workers.start(ZONES[0])
        workers.start(ZONES[1])

        def both_up() -> bool:
            for _ in range(3):
                actors["note"].send(f"{tag}:warm")
            time.sleep(0.3)
            return len({pid for _, pid in stamps(records, f"{tag}:warm:done")}) == 2

        assert eventually(both_up, 60, 0.2), workers.logs()
        producer.join(QUEUE, timeout=10_000)

        sent_ms = int(time.time() * 1000)
        for i in range(3):
            actors["note"].send_with_options(args=(f"{tag}:d{i}",), delay=2000)
        actors["flaky"].send(f"{tag}:f", 2)
        doomed = actors["doomed"].send(f"{tag}:x")
        producer.join(QUEUE, timeout=20_000)
        for i in range(3):
            (ran_ms, _), = stamps(records, f"{tag}:d{i}:done")
            assert 2000 <= ran_ms - sent_ms <= 3000, ran_ms - sent_ms
        starts = [ms for ms, _ in stamps(records, f"{tag}:f:start")]
        assert len(starts) == 3 and len(stamps(records, f"{tag}:f:done")) == 1
        assert all(later - earlier >= 290 for earlier, later in itertools.pairwise(starts))
        assert records.get(f"{tag}:x:tries") == "2"

        # The operator CLI shows the dead letter.
        shown = subprocess.run(
            [sys.executable, "-m", "dynoqueue", "dead", "--url", deployment.url, "--zones",
             ",".join(ZONES), "--prefix", prefix, "--json", QUEUE],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert doomed.message_id in shown.stdout and "dramatiq: ValueError" in shown.stdout

        # SIGKILL the worker running a 4 s task: the other zone's worker runs it once, after
        # the lease (3 s), and its heartbeats keep it for the whole 4 s.
        actors["slow"].send(f"{tag}:k", 4.0)
        assert eventually(lambda: records.llen(f"{tag}:k:start") == 1, 15), workers.logs()
        time.sleep(0.5)
        (_, first_pid), = stamps(records, f"{tag}:k:start")
        workers.kill_group_of(first_pid)
        assert eventually(lambda: records.llen(f"{tag}:k:done") == 1, 30), workers.logs()
        producer.join(QUEUE, timeout=10_000)
        (_, done_pid), = stamps(records, f"{tag}:k:done")
        assert [pid for _, pid in stamps(records, f"{tag}:k:start")] == [first_pid, done_pid]
        assert done_pid != first_pid
    finally:
        workers.close()
        producer.close()


def test_bad_options_raise_configuration_errors_before_anything_is_written(
        redis_server: RedisServer) -> None:
    url = redis_server.url
    for bad in ({"lease_ms": 100}, {"lease_ms": "30000"}, {"partitions": 0},
                {"partitions": 2, "policy": QueuePolicy(partitions=3)},
                {"policy": "strict"}, {"unack_timeout_ms": 5}, {"shard_supplier": None},
                {"zones": ["x-a", "x-b"]},  # no local zone
                {"factory": object()}):
        with pytest.raises(ConfigurationError):
            DynoqueueBroker(url, **bad)
    with pytest.raises(ConfigurationError):
        DynoqueueBroker("http://localhost:1")
    prefix = f"dq{uuid.uuid4().hex[:10]}"
    broker = DynoqueueBroker(url, key_prefix=prefix, max_payload_bytes=1024)
    try:
        with pytest.raises(ConfigurationError):
            broker.declare_queue("has space")
        broker.declare_queue("ok")
        message = dramatiq.Message(queue_name="ok", actor_name="a", args=(), kwargs={},
                                   options={})
        bad_delays: list[Any] = [-1, float("nan"), "1"]
        for delay in bad_delays:
            with pytest.raises(InvalidArgumentError):
                broker.enqueue(message, delay=delay)
        with pytest.raises(InvalidMessageError):  # over max_payload_bytes
            broker.enqueue(message.copy(args=("x" * 2000,)))
        with redis.Redis.from_url(url) as client:
            assert client.keys(f"{prefix}*") == []
        assert broker.get_declared_delay_queues() == set()
    finally:
        broker.close()
    with RedisQueues.from_url(url, key_prefix=prefix, unack_handler_interval_ms=0) as shared:
        with pytest.raises(ConfigurationError):
            DynoqueueBroker(factory=shared, zones=["x-a"], local_zone="x-a")
        on_shared = DynoqueueBroker(factory=shared)
        assert on_shared.policy is None  # the factory's own policy applies
        on_shared.declare_queue("shared")
        assert on_shared.queues["shared"] is shared.get("shared")
        on_shared.close()  # leaves the app's factory open
        shared.ping()


def test_pickle_encoder_and_redis_broker_eta_messages(redis_server: RedisServer) -> None:
    """Binary (pickle) payloads travel as base64; a message moved from a RedisBroker delay
    queue (``x.DQ`` with an ``eta``) lands in ``x``, due at its eta, without the option."""
    prefix = f"dq{uuid.uuid4().hex[:10]}"
    broker = DynoqueueBroker(redis_server.url, key_prefix=prefix)
    old = dramatiq.get_encoder()
    try:
        broker.declare_queue("x")
        queue = broker.queues["x"]
        dramatiq.set_encoder(dramatiq.PickleEncoder())
        broker.enqueue(dramatiq.Message(queue_name="x", actor_name="a", args=(b"\xff",),
                                        kwargs={}, options={}, message_id="p1"))
        eta = int(time.time() * 1000) + 1500
        moved = broker.enqueue(dramatiq.Message(queue_name="x.DQ", actor_name="a", args=(),
                                                kwargs={}, options={"eta": eta},
                                                message_id="m1"))
        assert moved.queue_name == "x" and "eta" not in moved.options
        info = queue.info("m1")
        assert info is not None and info.state is MessageState.DELAYED
        assert abs((info.due_at_ms or 0) - eta) <= 1
        consumer = broker.consume("x", prefetch=2, timeout=100)
        got = next(consumer)
        assert got is not None and got.args == (b"\xff",) and got.message_id == "p1"
        consumer.ack(got)
        assert queue.state("p1") is None
        deadline = time.monotonic() + 5
        while (got := next(consumer)) is None and time.monotonic() < deadline:
            pass
        assert got is not None and got.message_id == "m1" and int(time.time() * 1000) >= eta
        assert got.queue_name == "x" and "eta" not in got.options  # the worker runs it now
        consumer.requeue([got])  # given back: due at once, not leased
        assert queue.state("m1") is MessageState.READY
        consumer.close()
    finally:
        dramatiq.set_encoder(old)
        broker.close()


@pytest.mark.deployments("sentinel")
def test_sentinel_url(deployment: Deployment) -> None:
    """A ``redis+sentinel://`` URL: enqueue, consume, ack through the Sentinel-named primary."""
    broker = DynoqueueBroker(deployment.url, key_prefix=f"dq{uuid.uuid4().hex[:10]}",
                             read_from_replicas=False)
    try:
        broker.declare_queue("s")
        sent = broker.enqueue(dramatiq.Message(queue_name="s", actor_name="a", args=(1,),
                                               kwargs={}, options={}))
        consumer = broker.consume("s", timeout=1000)
        got = next(consumer)
        assert got is not None and got.message_id == sent.message_id and got.args == (1,)
        consumer.ack(got)
        broker.join("s", timeout=2000)
    finally:
        broker.close()


def test_migrating_a_redis_broker_s_messages(redis_server: RedisServer) -> None:
    """examples/dramatiq_migrate.py: waiting and delayed RedisBroker messages move over, the
    delayed one due at its eta."""
    from dramatiq.brokers.redis import RedisBroker

    spec = importlib.util.spec_from_file_location(
        "dramatiq_migrate", REPO_ROOT / "examples" / "dramatiq_migrate.py")
    assert spec is not None and spec.loader is not None
    migrate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migrate)
    namespace = f"old{uuid.uuid4().hex[:8]}"
    old = RedisBroker(url=redis_server.url, namespace=namespace)  # type: ignore[no-untyped-call]
    new = DynoqueueBroker(redis_server.url, key_prefix=f"dq{uuid.uuid4().hex[:10]}")
    try:
        old.declare_queue("mail")
        now = old.enqueue(dramatiq.Message(queue_name="mail", actor_name="a", args=(1,),
                                           kwargs={}, options={}))
        later = old.enqueue(dramatiq.Message(queue_name="mail", actor_name="a", args=(2,),
                                             kwargs={}, options={}), delay=60_000)
        assert migrate.move_messages(old.client, namespace, ["mail"], new) == 2
        queue = new.queues["mail"]
        assert queue.state(now.message_id) is MessageState.READY
        info = queue.info(later.message_id)
        assert info is not None and info.state is MessageState.DELAYED
        assert abs((info.due_at_ms or 0) - later.options["eta"]) <= 1
        assert old.client.keys(f"{namespace}:mail*") == []
        assert migrate.move_messages(old.client, namespace, ["mail"], new) == 0
    finally:
        new.close()
        old.close()
