"""A Celery app on dynoqueue: the broker lines are the only dynoqueue-specific lines.

Run a worker (from the repository root; set ``DYNOQUEUE_BROKER`` for a deployment other than
``dynoqueue://localhost:6379/0``, e.g. ``dynoqueue+cluster://127.0.0.1:7000``)::

    celery -A examples.celery_app worker -l info

Send work: ``python -m examples.celery_app``: a reminder in 5 seconds (stored in Redis as the
message's due time, not held by the worker), a chord, and a task that retries twice and then
ends as a dead letter (``dynoqueue dead celery`` shows it; ``dynoqueue redrive celery --all``
runs it again).
"""

from __future__ import annotations

import os

from celery import Celery, chord
from celery.exceptions import Reject

import dynoqueue.kombu  # noqa: F401  (registers dynoqueue://)

# Was: Celery("reminders", broker="redis://localhost:6379/0", ...)
app = Celery("reminders",
             broker=os.environ.get("DYNOQUEUE_BROKER", "dynoqueue://localhost:6379/0"),
             backend=os.environ.get("CELERY_RESULTS", "redis://localhost:6379/1"))
app.conf.broker_transport_options = {"visibility_timeout": 30, "max_deliveries": 10}


@app.task
def remind(user: str) -> str:
    """Send a reminder (here: print it)."""
    print(f"reminder for {user}", flush=True)
    return user


@app.task
def square(x: int) -> int:
    return x * x


@app.task
def total(values: list[int]) -> int:
    return sum(values)


@app.task(bind=True, acks_late=True, max_retries=2)
def flaky(self: object, user: str) -> None:
    """Retry twice a second apart, then give up: the message becomes a dead letter."""
    retries = self.request.retries  # type: ignore[attr-defined]
    if retries < 2:
        raise self.retry(countdown=1)  # type: ignore[attr-defined]
    raise Reject(f"no such user {user}", requeue=False)


if __name__ == "__main__":
    remind.apply_async(("ann",), countdown=5)
    print("chord:", chord(square.s(i) for i in range(10))(total.s()).get(timeout=30))
    flaky.delay("nobody")
    print("sent a reminder due in 5 s and a task that ends as a dead letter")
