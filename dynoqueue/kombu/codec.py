"""kombu messages as dynoqueue messages, and back.

A kombu virtual transport hands ``_put`` a message as a dict (``body``, ``headers``,
``properties`` with ``delivery_tag``, ``priority``, ``delivery_info``, ``expiration``, ...).
It is stored whole, as JSON, in the dynoqueue message's payload; the dynoqueue message takes
its id from the delivery tag (a fresh uuid per publish), and from the kombu message:

* its due time from Celery's ``eta`` header (task protocol 2: ISO-8601; ``countdown`` and
  ``retry(countdown=...)`` become an ``eta``), so a delayed task waits in Redis, not in a
  worker's memory;
* its priority from the ``priority`` property, 0 first as in kombu's Redis transport (clamped
  to 0..99);
* its TTL from the AMQP ``expiration`` property (milliseconds as a string);
* its headers, when :mod:`dynoqueue.tracing` is instrumented, from the trace context in the
  kombu message's headers (where Celery's OpenTelemetry instrumentation injects its
  ``apply_async`` span): that span stays the message's creation context, so dynoqueue's
  spans link to the one Celery's ``run`` span continues (docs/celery.md, "Tracing").
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any

from ..model.message import MAX_PRIORITY, MIN_PRIORITY, Message
from ..model.validate import MAX_EPOCH_MS, MAX_MS
from ._kombu import dumps, loads


def to_dynoqueue(message: dict[str, Any], message_id: str) -> Message:
    """The dynoqueue message that carries kombu ``message`` under id ``message_id``.

    Args:
        message: the kombu message dict (as a virtual channel's ``_put`` receives it).
        message_id: the dynoqueue id: the publish's delivery tag.

    Returns:
        A :class:`~dynoqueue.Message` with the message as JSON payload, ``due_at_ms`` when the
        ``eta`` header is in the future, ``priority`` and ``ttl_ms`` from the properties.

    Raises:
        InvalidMessageError: the message cannot be stored (e.g. a payload over the limit).
    """
    properties = message.get("properties") or {}
    headers = message.get("headers") or {}
    return Message(message_id, dumps(message), priority=priority_of(properties),
                   due_at_ms=due_at_ms(headers.get("eta")),
                   ttl_ms=ttl_ms(properties.get("expiration")),
                   headers=creation_context(headers))


def creation_context(headers: Any) -> dict[str, str] | None:
    """The dynoqueue headers that carry the trace context of a kombu message's ``headers``
    (Celery's task headers), or None: always None unless :mod:`dynoqueue.tracing` is
    instrumented (never imported here: a process that does not trace pays one lookup)."""
    if "dynoqueue.tracing" not in sys.modules or not isinstance(headers, dict):
        return None
    from ..tracing import creation_headers
    return creation_headers(headers)


def from_dynoqueue(popped: Message, queue: str) -> dict[str, Any]:
    """The kombu message dict a popped dynoqueue message carries, marked redelivered when this
    is not its first delivery; ``queue`` is recorded as its delivery_info's queue name.

    An ``eta`` header that has passed (by this process's clock) is cleared: the message
    waited in Redis until it was due, so Celery runs it at once, in delivery (priority)
    order, instead of holding it in its timer as a scheduled task. An eta still ahead (a
    clock behind Redis's) is kept, and Celery waits out the difference.
    """
    message: dict[str, Any] = loads(popped.payload or "{}")
    headers = message.get("headers")
    if isinstance(headers, dict) and headers.get("eta") and due_at_ms(headers["eta"]) is None:
        headers["eta"] = None
    properties = message.setdefault("properties", {})
    info = properties.setdefault("delivery_info", {})
    redelivered = popped.deliveries > 1
    info["redelivered"] = redelivered
    info.setdefault("routing_key", queue)
    message["redelivered"] = redelivered
    return message


def priority_of(properties: dict[str, Any]) -> int:
    """The dynoqueue priority of a kombu message: its ``priority`` property clamped to 0..99
    (0 first, as kombu's Redis transport orders them); 0 when absent or not a number."""
    try:
        value = int(properties.get("priority") or 0)
    except (TypeError, ValueError):
        return MIN_PRIORITY
    return min(max(value, MIN_PRIORITY), MAX_PRIORITY)


def due_at_ms(eta: Any) -> int | None:
    """Epoch ms of an ``eta`` header (ISO-8601 text or a datetime; naive means UTC) when it is
    in the future of this process's clock, else None (deliver now). An unreadable eta is None
    too: Celery's worker reports it when it receives the task."""
    if not eta:
        return None
    try:
        when = eta if isinstance(eta, datetime) else datetime.fromisoformat(str(eta))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    due = int(when.timestamp() * 1000)
    if due <= int(time.time() * 1000):
        return None
    return min(due, MAX_EPOCH_MS)


def ttl_ms(expiration: Any) -> int | None:
    """The TTL of an AMQP ``expiration`` property (ms, as text or a number), or None."""
    if expiration is None or expiration == "":
        return None
    try:
        value = int(float(expiration))
    except (TypeError, ValueError):
        return None
    return min(max(value, 1), MAX_MS)
