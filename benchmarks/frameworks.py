"""Celery and Dramatiq on dynoqueue against their own Redis brokers, in one run.

Each row starts real worker processes (``celery -A app worker``, ``dramatiq app``) with the same
settings on every broker, on an embedded redis-server of their own (the broker's), and counts
finished tasks on a second redis-server (an ``INCR`` per task: the same cost for every broker,
and off the broker's server):

- **immediate**: N no-op tasks (default 10,000) published while the workers run; the rate is
  N / (last task done - first publish), end to end, as a user sees it.
- **eta held** (Celery only): M tasks due in an hour (default 50,000) published to a running
  worker; how much the worker's RSS (its processes together) grew once the publishing ended
  and the worker settled. kombu's Redis transport hands ETA tasks to the worker at once, which
  holds them in memory until due (raising its prefetch for each); dynoqueue keeps them in
  Redis until due.

Run: ``python -m benchmarks.frameworks [--tasks N] [--eta-tasks M] [--pool prefork -c 2]``.
celery-redis-plus (a third-party sorted-set transport) needs Python >= 3.13; where it does not
install the row says so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from dynoqueue.embedded import RedisServer

#: The Celery app every row runs: the broker URL and options come from the environment, so
#: the same module serves every broker. ``noop`` counts itself done on the counter server.
CELERY_APP = '''
import os

import redis
from celery import Celery

if os.environ["BENCH_BROKER"].startswith("dynoqueue"):
    import dynoqueue.kombu  # noqa: F401  (registers the dynoqueue:// schemes)

app = Celery("bench", broker=os.environ["BENCH_BROKER"])
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                worker_prefetch_multiplier=int(os.environ.get("BENCH_PREFETCH", "4")),
                broker_connection_retry_on_startup=True, worker_send_task_events=False)
counter = redis.Redis.from_url(os.environ["BENCH_COUNTER"])


@app.task(name="noop")
def noop() -> None:
    counter.incr("done")
'''

#: The Dramatiq app: the broker chosen by BENCH_BROKER (``redis`` or ``dynoqueue``).
DRAMATIQ_APP = '''
import os

import dramatiq
import redis

url = os.environ["BENCH_URL"]
if os.environ["BENCH_BROKER"] == "dynoqueue":
    from dynoqueue.dramatiq import DynoqueueBroker
    broker = DynoqueueBroker(url=url)
else:
    from dramatiq.brokers.redis import RedisBroker
    broker = RedisBroker(url=url)
dramatiq.set_broker(broker)
counter = redis.Redis.from_url(os.environ["BENCH_COUNTER"])


@dramatiq.actor(max_retries=0)
def noop() -> None:
    counter.incr("done")
'''


@dataclass
class Row:
    """One measured row of the report."""

    framework: str
    broker: str
    workload: str
    value: float | None
    unit: str
    note: str = ""


def _rss_mb(pid: int) -> float:
    """The resident memory of ``pid`` and its children, MiB (psutil)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / (1 << 20)


@contextlib.contextmanager
def _worker(argv: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process group, ended (TERM, then KILL) when the block ends."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_count(counter: Any, target: int, timeout_s: float) -> float:
    """Wait until the counter reaches ``target``; the monotonic time it did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if int(counter.get("done") or 0) >= target:
            return time.monotonic()
        time.sleep(0.005)
    raise TimeoutError(f"{counter.get('done')} of {target} tasks done in {timeout_s} s")


class Bench:
    """The servers, the app modules and the options of one run."""

    def __init__(self, options: argparse.Namespace, workdir: Path) -> None:
        self.options = options
        self.workdir = workdir
        (workdir / "celery_bench_app.py").write_text(textwrap.dedent(CELERY_APP))
        (workdir / "dramatiq_bench_app.py").write_text(textwrap.dedent(DRAMATIQ_APP))
        self.counter_server = RedisServer().start()
        self.counter = redis.Redis(port=self.counter_server.port)
        # The producer side imports the same app modules as the workers.
        sys.path.insert(0, str(workdir))
        os.environ["BENCH_COUNTER"] = self.env()["BENCH_COUNTER"]

    def close(self) -> None:
        sys.path.remove(str(self.workdir))
        self.counter.close()
        self.counter_server.stop()
        if "dynoqueue.kombu" in sys.modules:  # the producer's pooled broker connections
            from dynoqueue.kombu import factories

            factories.close_all()

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.workdir), env.get("PYTHONPATH", "")])
        env["BENCH_COUNTER"] = f"redis://127.0.0.1:{self.counter_server.port}/0"
        env.update(extra)
        return env

    def _load_app(self, name: str, **variables: str) -> Any:
        """The bench app module ``name`` (re)imported in this process (the producer), with
        ``variables`` (its broker) set in this process's environment."""
        import importlib

        os.environ.update(variables)
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    def _celery_app(self, broker_url: str) -> Any:
        """The Celery bench app in this process, on ``broker_url``."""
        return self._load_app("celery_bench_app", BENCH_BROKER=broker_url)

    def _celery_argv(self) -> list[str]:
        return [sys.executable, "-m", "celery", "-A", "celery_bench_app", "worker",
                "--pool", self.options.pool, "-c", str(self.options.concurrency),
                "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                "--without-heartbeat"]

    def _through_worker(self, argv: list[str], env: dict[str, str], send: Any) -> float:
        """Start a worker, wait until it ran a warm-up task, then ``send()`` N tasks and time
        them to the last one done: tasks/s end to end."""
        self.counter.flushall()
        with _worker(argv, env, self.workdir):
            send()  # warm-up: the worker is up and consuming
            _wait_count(self.counter, 1, 120)
            self.counter.flushall()
            n = self.options.tasks
            start = time.monotonic()
            for _ in range(n):
                send()
            done = _wait_count(self.counter, n, 600)
        return n / (done - start)

    def celery_immediate(self, broker: str, url: str) -> Row:
        """N immediate no-op tasks through a running worker: tasks/s end to end."""
        server = RedisServer().start()
        try:
            broker_url = url.format(port=server.port)
            module = self._celery_app(broker_url)
            rate = self._through_worker(self._celery_argv(), self.env(BENCH_BROKER=broker_url),
                                        module.noop.delay)
            module.app.close()
            return Row("celery", broker, "immediate", rate, "tasks/s",
                       f"{self.options.tasks:,} no-op tasks")
        finally:
            server.stop()

    def celery_eta_held(self, broker: str, url: str) -> Row:
        """M tasks due in an hour published to a running worker: its RSS growth, MiB."""
        server = RedisServer().start()
        try:
            broker_url = url.format(port=server.port)
            module = self._celery_app(broker_url)
            self.counter.flushall()
            with _worker(self._celery_argv(), self.env(BENCH_BROKER=broker_url),
                         self.workdir) as proc:
                module.noop.delay()
                _wait_count(self.counter, 1, 120)
                time.sleep(1.0)
                before = _rss_mb(proc.pid)
                m = self.options.eta_tasks
                for _ in range(m):
                    module.noop.apply_async(countdown=3600)
                after = self._settled_rss(proc.pid)
            module.app.close()
            return Row("celery", broker, "eta held", after - before, "MiB",
                       f"worker RSS growth with {m:,} tasks due in 1 h")
        finally:
            server.stop()

    def _settled_rss(self, pid: int) -> float:
        """The worker's RSS once it stopped growing (< 1 MiB in 3 s), or after 60 s."""
        last, deadline = _rss_mb(pid), time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(3)
            now = _rss_mb(pid)
            if now - last < 1.0:
                return max(now, last)
            last = now
        return last

    def dramatiq_immediate(self, broker: str) -> Row:
        """N immediate no-op messages through a running dramatiq worker: messages/s."""
        server = RedisServer().start()
        try:
            env = self.env(BENCH_BROKER=broker, BENCH_URL=f"redis://127.0.0.1:{server.port}/0")
            module = self._load_app("dramatiq_bench_app", BENCH_BROKER=broker,
                                    BENCH_URL=env["BENCH_URL"])
            argv = [sys.executable, "-m", "dramatiq", "dramatiq_bench_app", "--processes", "1",
                    "--threads", str(self.options.concurrency)]
            rate = self._through_worker(argv, env, module.noop.send)
            module.broker.close()
            return Row("dramatiq", broker, "immediate", rate, "msgs/s",
                       f"{self.options.tasks:,} no-op messages")
        finally:
            server.stop()


#: The Celery brokers compared: (name, URL template).
CELERY_BROKERS = [("kombu redis", "redis://127.0.0.1:{port}/0"),
                  ("dynoqueue", "dynoqueue://127.0.0.1:{port}/0")]


def _guarded(fn: Any, *args: Any, framework: str, broker: str, workload: str) -> Row:
    try:
        row: Row = fn(*args)
        return row
    except Exception as exc:  # one failing row must not sink the others
        return Row(framework, broker, workload, None, "", f"{type(exc).__name__}: {exc}"[:200])


def run(options: argparse.Namespace) -> list[Row]:
    """Every row, brokers of one framework interleaved round by round."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dq-frameworks-") as tmp:
        bench = Bench(options, Path(tmp))
        try:
            for _ in range(options.runs):
                for broker, url in CELERY_BROKERS:
                    rows.append(_guarded(bench.celery_immediate, broker, url, framework="celery",
                                         broker=broker, workload="immediate"))
                for broker in ("redis", "dynoqueue"):
                    rows.append(_guarded(bench.dramatiq_immediate, broker,
                                         framework="dramatiq", broker=broker,
                                         workload="immediate"))
            if options.eta_tasks:
                for broker, url in CELERY_BROKERS:
                    rows.append(_guarded(bench.celery_eta_held, broker, url, framework="celery",
                                         broker=broker, workload="eta held"))
        finally:
            bench.close()
    rows.append(Row("celery", "celery-redis-plus", "immediate", None, "",
                    "not run: it needs Python >= 3.13" if sys.version_info < (3, 13)
                    else "not installed"))
    return rows


def report(rows: list[Row]) -> str:
    """The rows as a text table with each dynoqueue row's ratio to the framework's own broker
    (the median over the runs)."""
    import statistics

    medians: dict[tuple[str, str, str], float] = {}
    groups: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        if row.value is not None:
            groups.setdefault((row.framework, row.broker, row.workload), []).append(row.value)
    for key, values in groups.items():
        medians[key] = statistics.median(values)
    own = {"celery": "kombu redis", "dramatiq": "redis"}
    lines = [f"{'framework':<10} {'broker':<18} {'workload':<10} {'median':>16}  ratio  note"]
    seen: set[tuple[str, str, str]] = set()
    for row in rows:
        key = (row.framework, row.broker, row.workload)
        if key in seen:
            continue
        seen.add(key)
        value = medians.get(key)
        base = medians.get((row.framework, own[row.framework], row.workload))
        ratio = (f"{value / base:5.2f}x" if value is not None and base and row.unit != "MiB"
                 else "     ")
        shown = f"{value:,.1f} {row.unit}" if value is not None else "-"
        lines.append(f"{row.framework:<10} {row.broker:<18} {row.workload:<10} {shown:>16}  "
                     f"{ratio}  {row.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.frameworks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="immediate tasks per row")
    parser.add_argument("--eta-tasks", type=int, default=50_000,
                        help="tasks due in an hour for the RSS row (0: skip it)")
    parser.add_argument("--runs", type=int, default=3, help="rounds, brokers interleaved")
    parser.add_argument("--pool", default="prefork",
                        help="celery worker pool, the same for every broker (default prefork, "
                             "Celery's own default)")
    parser.add_argument("-c", "--concurrency", type=int, default=2,
                        help="celery worker concurrency / dramatiq threads (default 2)")
    options = parser.parse_args(argv)
    rows = run(options)
    print(report(rows))
    return 0 if all(r.value is not None or r.note.startswith("not run") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
