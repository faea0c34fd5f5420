"""``dynoqueue dev``: a local topology in the foreground, run for real as a subprocess; its
URL and export line; SIGTERM and Ctrl-C stop every process it started. And ``$DYNOQUEUE_URL``:
every ops command reads it when ``--url`` is absent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis

from dynoqueue import Message, QueuePolicy, RedisQueues
from dynoqueue.embedded import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class Dev:
    """One ``dynoqueue dev`` process and the two lines it prints on start."""

    def __init__(self, *argv: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dynoqueue", "dev", *argv], env=ENV, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        self.export = self.process.stdout.readline().strip()
        if not self.url:
            self.process.kill()
            raise AssertionError(f"dynoqueue dev printed no URL: {self.process.stderr.read()}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, float, str]:
        """Send ``sig``; the exit code, the seconds it took and stderr."""
        started = time.monotonic()
        self.process.send_signal(sig)
        _, err = self.process.communicate(timeout=60)
        return self.process.returncode, time.monotonic() - started, err


def _refused(port: int) -> bool:
    try:
        redis.Redis(port=port, socket_connect_timeout=1).ping()
    except redis.ConnectionError:
        return True
    return False


def test_dev_single_prints_its_url_and_stops_on_sigterm() -> None:
    port = free_port()
    dev = Dev("single", "--port", str(port))
    try:
        assert dev.url == f"redis://127.0.0.1:{port}/0"
        assert dev.export == f"export DYNOQUEUE_URL={dev.url}"
        with RedisQueues.from_url(dev.url) as queues:
            queues.get("try").push([Message("m1", "x")])
            assert queues.get("try").size() == 1
    finally:
        code, took, err = dev.stop()
    assert code == 0 and took < 10, err
    assert err.rstrip().endswith("dynoqueue dev: stopped")
    assert _refused(port)  # the server is gone


@pytest.mark.slow
def test_dev_cluster_holds_a_partitioned_queue_and_stops_on_ctrl_c() -> None:
    dev = Dev("cluster", "--primaries", "3", "--replicas", "0")
    try:
        assert dev.url.startswith("redis+cluster://127.0.0.1:")
        ports = [int(node.rpartition(":")[2]) for node in
                 dev.url.removeprefix("redis+cluster://").split(",")]
        assert len(ports) == 3
        prefix = f"t{uuid.uuid4().hex[:10]}"
        with RedisQueues.from_url(dev.url, key_prefix=prefix) as queues:
            queues.get("split", QueuePolicy(partitions=6)).push(
                [Message(f"m{i}", "x") for i in range(30)])
        # The ops commands read $DYNOQUEUE_URL when --url is absent.
        done = subprocess.run([sys.executable, "-m", "dynoqueue", "stats", "split",
                               "--partitions", "--json", "--prefix", prefix],
                              env={**ENV, "DYNOQUEUE_URL": dev.url}, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert sum(r["waiting"] for r in rows) == 30
        assert len({r["node"] for r in rows}) == 3
    finally:
        code, took, err = dev.stop(signal.SIGINT)
    assert code == 0 and took < 20, err
    assert all(_refused(port) for port in ports)


def test_dev_refuses_options_that_do_not_fit() -> None:
    for argv, words in ((["single", "--replicas", "1"], "no replicas"),
                        (["ring", "--primaries", "2"], "--primaries is for a cluster"),
                        (["cluster", "--port", "60000"], "55535")):
        done = subprocess.run([sys.executable, "-m", "dynoqueue", "dev", *argv], env=ENV,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_every_ops_command_reads_dynoqueue_url(redis_server: RedisServer, prefix: str) -> None:
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix) as queues:
        queues.get("jobs").push([Message("j1", "x")])
    env = {**ENV, "DYNOQUEUE_URL": redis_server.url}
    for argv in (["stats", "jobs", "--json"], ["peek", "jobs", "--json"],
                 ["get", "jobs", "j1", "--json"], ["policy", "jobs", "--json"]):
        done = subprocess.run([sys.executable, "-m", "dynoqueue", *argv, "--prefix", prefix],
                              env=env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, (argv, done.stderr)
    # --url still wins over the variable.
    done = subprocess.run([sys.executable, "-m", "dynoqueue", "stats", "--prefix", prefix,
                           "--url", f"redis://127.0.0.1:{free_port()}"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "cannot reach Redis" in done.stderr
