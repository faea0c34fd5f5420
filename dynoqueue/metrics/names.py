"""The standard metric names and Camellia's waiting-time buckets (one place, documented in
``docs/operations.md``)."""

from __future__ import annotations

from ..model.stats import DAY_MS, HOUR_MS, MINUTE_MS

#: Camellia's waitingQueueInfo buckets (field name, from ms, to ms (None: no end)), the time
#: until a delayed message falls due: defined with the stats records (dynoqueue.model.stats).
from ..model.stats import WAITING_BUCKETS as WAITING_BUCKETS

#: In-process counters, fed by the core's events (no Redis traffic); label ``queue``.
#: Exposed with the ``_total`` suffix, e.g. ``dynoqueue_messages_pushed_total``.
COUNTERS: dict[str, str] = {
    "pushed": "dynoqueue_messages_pushed",
    "delivered": "dynoqueue_messages_delivered",
    "acked": "dynoqueue_messages_acked",
    "nacked": "dynoqueue_messages_nacked",
    "redelivered": "dynoqueue_messages_redelivered",
    "dead_lettered": "dynoqueue_messages_dead_lettered",
    "expired": "dynoqueue_messages_expired",
    "payload_missing": "dynoqueue_messages_payload_missing",
    "limited": "dynoqueue_pops_limited",
}
#: Keys the Redis server evicted (where an evicting maxmemory-policy was allowed), read by
#: each unack pass; label ``deployment``. Exposed as ``dynoqueue_evicted_keys_total``.
EVICTED_KEYS = "dynoqueue_evicted_keys"
#: The core's event that feeds LATENESS: once per delivery, count = its lateness in ms.
LATE_EVENT = "late_ms"
LATENESS = "dynoqueue_delivery_lateness_seconds"
HANDLER_DURATION = "dynoqueue_handler_duration_seconds"
HANDLER_OUTCOMES = "dynoqueue_handler_outcomes"

#: Gauges read from Redis at scrape time; labels ``queue`` and ``shard`` (dead: ``queue``).
WAITING = "dynoqueue_waiting_messages"
READY = "dynoqueue_ready_messages"
DELAYED = "dynoqueue_delayed_messages"
LEASED = "dynoqueue_leased_messages"
DEAD = "dynoqueue_dead_letters"
#: 1 while a queue is paused (``DynoQueue.pause()``), else 0; label ``queue``.
PAUSED = "dynoqueue_queue_paused"
OLDEST_READY_AGE = "dynoqueue_oldest_ready_age_ms"
#: Delayed messages by how long until they fall due; labels ``queue``, ``shard``, ``range``.
WAITING_TIME = "dynoqueue_delayed_messages_by_due_in"
SCRAPE_ROUND_TRIPS = "dynoqueue_scrape_round_trips"
SCRAPE_DURATION = "dynoqueue_scrape_duration_seconds"


def bucket_label(field: str) -> str:
    """The ``range`` label of a bucket: Camellia's field name without ``sizeOf`` ("0To1min")."""
    return field.removeprefix("sizeOf")


#: The units a bucket's title counts in: (name, ms, the largest bound it is used for).
_UNITS = (("min", MINUTE_MS, HOUR_MS), ("h", HOUR_MS, DAY_MS), ("days", DAY_MS, None))


def bucket_title(field: str) -> str:
    """What a person reads for a bucket: ``< 1 min``, ``1-10 min``, ..., ``6-24 h``,
    ``1-7 days``, ``> 30 days`` (from its bounds, in the unit of its larger one)."""
    low, high = next((low, high) for name, low, high in WAITING_BUCKETS if name == field)
    unit, size = next((u, ms) for u, ms, most in _UNITS
                      if most is None or (high if high is not None else low) <= most)
    if high is None:
        return f"> {low // size} {unit}"
    if low == 0:
        return f"< {high // size} {unit}"
    return f"{low // size}-{high // size} {unit}"
