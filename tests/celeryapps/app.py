"""The Celery app of tests/test_kombu_celery.py, run by real ``celery -A ... worker`` processes.

Configured from the environment, so one module serves every deployment:

* ``DQ_BROKER_URL``: the broker (``dynoqueue://...`` or ``dynoqueue+cluster://...``);
* ``DQ_TRANSPORT_OPTIONS``: the transport options, as JSON;
* ``DQ_RESULTS_URL``: a ``redis://`` server for the result backend and the run records;
* ``DQ_RECORDS``: the prefix of the record keys.

Each task records every run in Redis (``<records>:runs:<label>``: one JSON entry per run),
so the tests count runs without reading logs.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

import redis
from celery import Celery, signals
from celery.exceptions import Reject

import dynoqueue.kombu  # noqa: F401  (registers dynoqueue://)

RECORDS = os.environ.get("DQ_RECORDS", "dqtest")
RESULTS_URL = os.environ.get("DQ_RESULTS_URL", "redis://127.0.0.1:6379/0")

app = Celery("dqtest", broker=os.environ.get("DQ_BROKER_URL", "dynoqueue://127.0.0.1:6379/0"),
             backend=RESULTS_URL)
app.conf.update(
    broker_transport_options=json.loads(os.environ.get("DQ_TRANSPORT_OPTIONS", "{}")),
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=False,
    result_expires=600,
)

_records = redis.Redis.from_url(RESULTS_URL)


def record(kind: str, label: str, **fields: Any) -> None:
    """Append one run record under ``<records>:<kind>:<label>``."""
    entry = {"at": time.time(), "pid": os.getpid(), "host": socket.gethostname(), **fields}
    _records.rpush(f"{RECORDS}:{kind}:{label}", json.dumps(entry))


@signals.worker_ready.connect
def _ready(sender: Any = None, **kwargs: Any) -> None:
    _records.sadd(f"{RECORDS}:ready", str(sender.hostname if sender is not None else "?"))


@app.task(name="dq.mark")
def mark(label: str, due: float | None = None) -> str:
    """Record one run of ``label`` (with the time it was due, epoch s)."""
    record("runs", label, due=due)
    return label


@app.task(name="dq.order")
def order(group: str, label: str) -> str:
    """Record ``label`` in the run order of ``group``."""
    _records.rpush(f"{RECORDS}:order:{group}", label)
    return label


@app.task(name="dq.sleepy", acks_late=True)
def sleepy(label: str, seconds: float) -> str:
    """Run ``seconds`` (acks late): records its start and its end."""
    record("starts", label, worker=os.environ.get("DQ_WORKER", "?"))
    time.sleep(seconds)
    record("ends", label)
    return label


@app.task(name="dq.retrier", bind=True, acks_late=True, max_retries=5)
def retrier(self: Any, label: str) -> None:
    """Retry with countdown=1 three times, then reject without requeue (a dead letter)."""
    record("runs", label, retries=self.request.retries)
    if self.request.retries < 3:
        raise self.retry(countdown=1)
    raise Reject(f"{label} gave up after {self.request.retries} retries", requeue=False)


@app.task(name="dq.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="dq.total")
def total(values: list[int]) -> int:
    return sum(values)
