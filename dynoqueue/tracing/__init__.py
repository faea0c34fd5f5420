"""OpenTelemetry traces that follow a message from its push to its handler (extra ``otel``).

``pip install 'dynoqueue[otel]'`` adds ``opentelemetry-api``; configure an SDK (or run under
``opentelemetry-instrument``) to export the spans. Then::

    from dynoqueue import tracing
    tracing.instrument()            # every queue of both APIs, and Workers started after it

Once instrumented (spans named as in the OpenTelemetry messaging semantic conventions):

* a push (``push``, ``ensure``) makes one ``send {queue}`` span per call, current while it
  runs, and gives each message a creation context, injected into its headers with the global
  propagator (W3C ``traceparent`` / ``tracestate`` by default): the send span itself (a
  PRODUCER span) for one message, a ``create {queue}`` PRODUCER span per message (children of
  the send span, which links to them and is a CLIENT span) for a batch. A message that already
  carries a creation context keeps it, and the send span links to it;
* a pop makes a ``receive {queue}`` CLIENT span linked to each message's creation context
  (a pop that returns nothing makes none unless ``empty_receives``);
* a :class:`~dynoqueue.Worker` (both APIs) makes one ``process {queue}`` CONSUMER span per
  handler call, linked to the message's creation context (or its child), with the handler
  running inside it, so the handler's own spans are its children; it records what the Worker
  does with the message (``messaging.dynoqueue.outcome``: ack, retry, nack, dead_letter) and
  the handler's error (status, exception event, ``error.type``). Code that pops and handles
  messages itself gets the same span from :func:`processing`;
* ``ack``, ``ack_many``, ``nack``, ``nack_many``, ``dead_letter``, ``release`` and ``redrive``
  make ``settle {queue}`` CLIENT spans.

The attribute table is in docs/operations.md ("Tracing"). Not instrumented (the default), the
queue classes run their own methods: tracing costs nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.propagators.textmap import TextMapPropagator
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("dynoqueue.tracing needs opentelemetry-api: pip install "
                      "'dynoqueue[otel]'") from exc

from .. import __version__
from ..errors import InvalidArgumentError
from ..model.message import Message
from .patch import Patches
from .spans import SCHEMA_URL, Telemetry

__all__ = ["creation_headers", "instrument", "is_instrumented", "processing", "uninstrument"]

_lock = threading.Lock()
_active: tuple[Telemetry, Patches] | None = None


def instrument(*, tracer_provider: trace.TracerProvider | None = None,
               propagator: TextMapPropagator | None = None, process_parent: str = "link",
               empty_receives: bool = False, create_spans: bool = True) -> None:
    """Trace every queue of both APIs, and the Workers whose run starts from now on.

    Calling it again replaces the options. Mirrors what ``opentelemetry-instrument`` does
    through :class:`dynoqueue.tracing.instrumentor.DynoqueueInstrumentor` (SQS's trace
    propagation through message attributes, Celery's through message headers).

    Args:
        tracer_provider: where spans go (default: the global tracer provider, as set by
            the SDK or ``opentelemetry-instrument``).
        propagator: injects and extracts the creation context (default: the global one,
            read at each call; W3C trace context and baggage unless configured otherwise).
        process_parent: ``"link"`` (default): a ``process`` span starts a trace of its own
            with a link to the message's creation context (the producer's trace may have
            ended long before); ``"child"``: it continues the producer's trace.
        empty_receives: also make a ``receive`` span for a pop that returns nothing (a
            Worker's idle pops make one each per wait).
        create_spans: give each message of a batch push a ``create`` span of its own, as the
            semantic conventions recommend (default). False: every message of a batch
            carries the ``send`` span's context, which costs the SDK one span per push instead
            of one per message (see docs/benchmarks.md, "Tracing").

    Raises:
        InvalidArgumentError: process_parent is neither "link" nor "child", or a flag is not
            a bool.
    """
    global _active
    if process_parent not in ("link", "child"):
        raise InvalidArgumentError(
            f"process_parent must be 'link' or 'child', got {process_parent!r:.40}")
    for name, flag in (("empty_receives", empty_receives), ("create_spans", create_spans)):
        if type(flag) is not bool:
            raise InvalidArgumentError(f"{name} must be a bool, got {flag!r:.40}")
    tracer = trace.get_tracer("dynoqueue", __version__, tracer_provider, schema_url=SCHEMA_URL)
    telemetry = Telemetry(tracer, propagator, process_parent, empty_receives, create_spans)
    with _lock:
        if _active is not None:
            _active[1].remove()
        _active = telemetry, Patches(telemetry)


def uninstrument() -> None:
    """Stop tracing: the queue classes get their own methods back (a Worker already running
    keeps tracing its handler until it stops). Does nothing if not instrumented."""
    global _active
    with _lock:
        if _active is not None:
            _active[1].remove()
            _active = None


def is_instrumented() -> bool:
    """True between instrument() and uninstrument()."""
    return _active is not None


def creation_headers(carrier: Mapping[str, Any]) -> dict[str, str] | None:
    """For transports under another library's tracing (``dynoqueue.kombu`` under Celery's):
    the trace context that library injected into its own message's headers (``carrier``),
    as headers to give the dynoqueue message that carries it, so that context stays the
    message's creation context (the ``send`` span links to it; ``receive``, ``process`` and
    ``settle`` spans link to it) and both libraries' spans join one trace. None when not
    instrumented, or ``carrier`` holds no valid context (the push then injects its own)."""
    active = _active
    return None if active is None else active[0].carried(carrier)


@contextlib.contextmanager
def processing(queue: Any, message: Message) -> Iterator[trace.Span | None]:
    """The ``process`` span of a message handled outside a Worker (what a Worker makes per
    handler call), current inside the block; an exception leaving the block is recorded on
    it (and propagates). Works in sync and asyncio code alike.

    Args:
        queue: the DynoQueue (either API) the message was popped from.
        message: the popped message.

    Yields:
        The span, or None when not instrumented (the block then runs untraced).
    """
    active = _active
    if active is None:
        yield None
        return
    finish = active[0].process(queue, message)
    span = trace.get_current_span()
    try:
        yield span
    except BaseException as exc:
        finish(None, exc)
        raise
    finish(None, None)
