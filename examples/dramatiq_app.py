"""A Dramatiq app on dynoqueue: the broker line is the only dynoqueue-specific line.

Run a worker: ``dramatiq examples.dramatiq_app --processes 1 --threads 4`` (from the repository
root; set ``DYNOQUEUE_URL`` for a deployment other than ``redis://localhost:6379``, e.g.
``redis+cluster://127.0.0.1:7000``). Send work: ``python -m examples.dramatiq_app``: one
reminder now, one in 5 seconds (stored in Redis as the message's due time) and one that fails
and ends as a dead letter (``dynoqueue dead reminders`` shows it; ``dynoqueue redrive
reminders --all`` runs it again).
"""

from __future__ import annotations

import os

import dramatiq

from dynoqueue.dramatiq import DynoqueueBroker

# Was: broker = RedisBroker(url="redis://localhost:6379")
broker = DynoqueueBroker(os.environ.get("DYNOQUEUE_URL", "redis://localhost:6379"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="reminders", max_retries=2, min_backoff=1_000)
def remind(user: str) -> None:
    """Send a reminder (here: print it)."""
    if user == "nobody":
        raise LookupError("no such user")  # retried twice with back-off, then dead-lettered
    print(f"reminder for {user}", flush=True)


if __name__ == "__main__":
    remind.send("ann")
    remind.send_with_options(args=("bob",), delay=5_000)
    remind.send("nobody")
    print("sent 3 reminders to the queue 'reminders'")
