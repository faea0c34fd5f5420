"""Callbacks for metrics: what a Worker did with each message.

Subclass :class:`WorkerHooks` and override what you need, then pass an instance as
``Worker(..., hooks=...)``. The sync Worker calls them from its threads (the claimer, the
handler slots, the finisher), the asyncio Worker from its tasks, so keep them quick and
thread-safe. An exception from a hook is logged (logger ``dynoqueue.worker``) and ignored.
"""

from __future__ import annotations

from ..model.message import Message


class WorkerHooks:
    """No-op callbacks; a metrics exporter overrides them (all optional).

    Every delivery ends in exactly one of on_acked, on_nacked or on_dead_lettered, unless the
    worker stops before sending it (a handler still running at the shutdown deadline: its
    message stays leased and comes back after its lease) or the send fails (logged).
    """

    def on_delivered(self, message: Message) -> None:
        """A pop leased ``message`` to this worker (``message.deliveries`` counts from 1)."""

    def on_acked(self, message: Message) -> None:
        """Its handler returned and the ack was sent (in a batch with others)."""

    def on_nacked(self, message: Message, delay_ms: int, error: str | None) -> None:
        """It is due again in ``delay_ms``: its handler raised ``error`` (a backoff retry),
        raised Retry (``error`` is the Retry's reason), or it was leased but not started when
        the worker stopped (given back uncounted with ``release``: delay 0, error None)."""

    def on_dead_lettered(self, message: Message, reason: str, error: str | None) -> None:
        """It was dead-lettered: ``reason`` is DeadLetterNow's reason, or "max_deliveries" when
        its handler failed on its last allowed delivery (``error`` is that failure)."""

    def on_handler_duration(self, message: Message, seconds: float) -> None:
        """Its handler ran for ``seconds`` (wall time, whatever the outcome)."""
