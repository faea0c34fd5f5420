"""The spans of one instrumentation: what each kind of queue call records, and the trace
context a message carries in its headers.

:class:`Telemetry` holds the tracer and the options of :func:`dynoqueue.tracing.instrument`;
:mod:`dynoqueue.tracing.patch` calls it around the façade methods (the same code for the sync
and the asyncio API) and around a Worker's handler. Names and attributes follow the
OpenTelemetry messaging semantic conventions (span ``"{operation type} {queue}"``,
``messaging.operation.type`` create / send / receive / process / settle).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..errors import InvalidMessageError
from ..model.message import Message, check_headers, plain_headers
from ..worker.outcomes import DeadLetterNow, Retry

#: ``messaging.system`` of every span.
SYSTEM = "dynoqueue"
#: The semantic conventions' version the attribute names follow (the tracer's schema URL).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.27.0"

# Attribute names (OpenTelemetry messaging semantic conventions; messaging.dynoqueue.* are ours).
SYSTEM_ATTR = "messaging.system"
DESTINATION = "messaging.destination.name"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
MESSAGE_ID = "messaging.message.id"
BATCH_COUNT = "messaging.batch.message_count"
DELIVERY_COUNT = "messaging.dynoqueue.message.delivery_count"
SHARD = "messaging.dynoqueue.shard"
OUTCOME = "messaging.dynoqueue.outcome"
RETRY_DELAY = "messaging.dynoqueue.retry_delay_ms"
SETTLED = "messaging.dynoqueue.settled"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

#: Most links one span gets (the SDK's default span limit): a receive or settle of a bigger
#: batch links the first ones.
MAX_LINKS = 128

#: Ends a span that a call began: ``finish(result, error)``.
Finish = Callable[[Any, BaseException | None], None]

_W3C = TraceContextTextMapPropagator()


def error_type(error: BaseException) -> str:
    """``error.type`` of an exception: its class's qualified name (builtins unprefixed)."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


def _fits(message_id: str, headers: dict[str, str]) -> bool:
    if plain_headers(headers):
        return True
    try:
        check_headers(message_id, headers)
    except InvalidMessageError:
        return False
    return True


def _with_headers(message: Message, headers: dict[str, str]) -> Message:
    """A copy of ``message`` with these headers (the caller's message is left as it was)."""
    copy = object.__new__(Message)  # no __post_init__: the push validates it
    for name in _FIELDS:
        setattr(copy, name, getattr(message, name))
    copy.headers = headers
    return copy


_FIELDS = Message.__slots__


class Telemetry:
    """What an instrumentation records (see :func:`dynoqueue.tracing.instrument` for the
    arguments)."""

    def __init__(self, tracer: trace.Tracer, propagator: TextMapPropagator | None,
                 process_parent: str, empty_receives: bool, create_spans: bool = True) -> None:
        self.tracer = tracer
        self.create_spans = create_spans
        self._propagator = propagator
        self.process_as_child = process_parent == "child"
        self.empty_receives = empty_receives
        self._servers: weakref.WeakKeyDictionary[Any, dict[str, Any]] = \
            weakref.WeakKeyDictionary()

    def propagator(self) -> TextMapPropagator:
        """The propagator given to instrument(), else the global one (read at each call, so a
        later ``set_global_textmap`` applies)."""
        return self._propagator or propagate.get_global_textmap()

    # ------------------------------------------------------------------------- attributes

    def attributes(self, queue: Any, op_type: str, op_name: str) -> dict[str, Any]:
        """What every span of ``queue`` carries: system, queue, operation, server (a new dict
        the caller may add to)."""
        server = self._servers.get(queue)
        if server is None:
            server = self._servers[queue] = _server_attributes(queue)
        return {SYSTEM_ATTR: SYSTEM, DESTINATION: queue.name, OPERATION_TYPE: op_type,
                OPERATION_NAME: op_name, **server}

    @staticmethod
    def _one(attrs: dict[str, Any], message: Message) -> None:
        attrs[MESSAGE_ID] = message.id
        if message.deliveries:
            attrs[DELIVERY_COUNT] = message.deliveries
        if message.shard is not None:
            attrs[SHARD] = message.shard

    # ------------------------------------------------------------------------- contexts

    def creation(self, message: Any) -> Context | None:
        """The creation context a message carries in its headers, or None."""
        headers = getattr(message, "headers", None)
        if not headers or type(headers) is not dict:
            return None
        extracted = self.propagator().extract(headers)
        if not trace.get_current_span(extracted).get_span_context().is_valid:
            return None
        return extracted

    def carried(self, carrier: Mapping[str, Any]) -> dict[str, str] | None:
        """The creation context a layer above put in its own message's headers (Celery's task
        headers inside a kombu message), as headers for the dynoqueue message that carries it:
        the propagator's fields ``carrier`` holds as text, when they make a valid span context
        and fit a message's header limits (else W3C trace context alone, if it fits); None
        when there is none. The push then keeps that context as the message's creation
        context (the conventions' custom creation context) instead of injecting its own."""
        propagator = self.propagator()
        fields = {name: value for name in propagator.fields
                  if type(value := carrier.get(name)) is str and value}
        if not fields:
            return None
        extracted = propagator.extract(fields)
        if not trace.get_current_span(extracted).get_span_context().is_valid:
            return None
        if _fits("carried", fields):
            return fields
        w3c = {name: value for name, value in fields.items() if name in _W3C.fields}
        return w3c if w3c and _fits("carried", w3c) else None

    def _link(self, span: Span, messages: Sequence[Any]) -> None:
        """Link a recording span to each distinct creation context of ``messages`` (the first
        MAX_LINKS); a span that records nothing (no SDK, not sampled) costs no extraction.
        Messages whose propagation headers repeat ones seen (a batch pushed without
        ``create_spans``) are not extracted again."""
        if not span.is_recording():
            return
        linked: set[tuple[int, int]] = set()
        fields = sorted(self.propagator().fields)
        seen: set[tuple[Any, ...]] = set()
        for message in messages:
            headers = getattr(message, "headers", None)
            if not headers or type(headers) is not dict:
                continue
            carried = tuple(headers.get(name) for name in fields)
            if carried in seen:
                continue
            seen.add(carried)
            created = self.creation(message)
            if created is not None:
                context = trace.get_current_span(created).get_span_context()
                if (context.trace_id, context.span_id) not in linked:
                    linked.add((context.trace_id, context.span_id))
                    span.add_link(context)
                    if len(linked) >= MAX_LINKS:
                        break

    def _carry(self, message: Message, context: Context, propagator: TextMapPropagator) -> Any:
        """``message`` (one without a creation context) with ``context`` injected into (a copy
        of) its headers. Left as it is: a message with invalid headers (push then raises its
        error), and one whose headers the context would take over their limits (then W3C
        trace context alone is tried)."""
        headers = message.headers
        if headers is not None and (type(headers) is not dict or not _fits(message.id, headers)):
            return message
        carrier = dict(headers) if headers else {}
        propagator.inject(carrier, context=context)
        if not _fits(message.id, carrier):
            carrier = dict(headers) if headers else {}
            _W3C.inject(carrier, context=context)
            if not _fits(message.id, carrier):
                return message
        if carrier == (headers or {}):
            return message
        return _with_headers(message, carrier)

    # ------------------------------------------------------------------------- calls

    def send(self, queue: Any, op_name: str, messages: list[Any]) -> tuple[list[Any], Finish]:
        """Begin a push of ``messages``: a ``send`` span, current while the push runs, and the
        messages to push instead, each carrying its creation context. For a batch, each gets a
        ``create`` PRODUCER span of its own (a child of the send span, which links to them and
        is then a CLIENT span); for one message, or without ``create_spans``, or when the send
        span is not sampled, the send span (a PRODUCER span) is every message's creation
        context. A message that carries a creation context keeps it, and the send span links
        to it (the conventions' "custom creation context"). Anything but a Message is passed
        on as it is (push then raises its error)."""
        attrs = self.attributes(queue, "send", op_name)
        count = len(messages)
        if count == 1 and type(messages[0]) is Message:
            attrs[MESSAGE_ID] = messages[0].id
        elif count != 1:
            attrs[BATCH_COUNT] = count
        creates = count != 1 and self.create_spans
        span = self.tracer.start_span(
            f"send {queue.name}", kind=SpanKind.CLIENT if creates else SpanKind.PRODUCER,
            attributes=attrs)
        context = trace.set_span_in_context(span)
        if not span.get_span_context().is_valid:  # no SDK: no context to carry
            carried = messages
        else:
            recording = span.is_recording()
            creates = creates and recording  # unsampled: no per-message spans
            propagator = self.propagator()
            create = {SYSTEM_ATTR: SYSTEM, DESTINATION: queue.name, OPERATION_TYPE: "create",
                      OPERATION_NAME: op_name}
            carried, linked = [], set[tuple[int, int]]()
            for message in messages:
                link: SpanContext | None = None
                if type(message) is not Message:
                    out = message
                elif (custom := self.creation(message)) is not None:  # kept, and linked
                    out, link = message, trace.get_current_span(custom).get_span_context()
                elif creates:
                    out, link = self._create(queue.name, create, message, context, propagator)
                else:
                    out = self._carry(message, context, propagator)
                carried.append(out)
                if recording and link is not None and len(linked) < MAX_LINKS:
                    key = link.trace_id, link.span_id
                    if key not in linked:
                        linked.add(key)
                        span.add_link(link)
        token = otel_context.attach(context)

        def finish(result: Any, error: BaseException | None) -> None:
            otel_context.detach(token)
            self._end(span, error)

        return carried, finish

    def _create(self, queue_name: str, attrs: dict[str, Any], message: Message, parent: Context,
                propagator: TextMapPropagator) -> tuple[Any, SpanContext]:
        """``message`` (one without a creation context) carrying a ``create`` span of its own
        (no server attributes: it sends nothing), and that span's context."""
        create = self.tracer.start_span(f"create {queue_name}", context=parent,
                                        kind=SpanKind.PRODUCER,
                                        attributes={**attrs, MESSAGE_ID: message.id})
        try:
            return (self._carry(message, trace.set_span_in_context(create, parent), propagator),
                    create.get_span_context())
        finally:
            create.end()

    def receive(self, queue: Any, op_name: str) -> Finish:
        """Begin a pop: its ``receive`` CLIENT span is made when it ends (from its start), with
        a link to each message's creation context; a pop that comes back empty makes none
        unless ``empty_receives``."""
        started = time.time_ns()

        def finish(result: Any, error: BaseException | None) -> None:
            messages = result if type(result) is list else [] if result is None else [result]
            if not messages and error is None and not self.empty_receives:
                return
            attrs = self.attributes(queue, "receive", op_name)
            if len(messages) == 1:
                self._one(attrs, messages[0])
            else:
                attrs[BATCH_COUNT] = len(messages)
            span = self.tracer.start_span(f"receive {queue.name}", kind=SpanKind.CLIENT,
                                          attributes=attrs, start_time=started)
            self._link(span, messages)
            self._end(span, error)

        return finish

    def settle(self, queue: Any, op_name: str, target: Any) -> Finish:
        """Begin an ack, nack, dead letter, release or redrive of ``target`` (an id, or a list
        of ids or messages; None: every dead letter): a ``settle`` CLIENT span, linked to the
        creation contexts of the messages given."""
        attrs = self.attributes(queue, "settle", op_name)
        if type(target) is list:
            attrs[BATCH_COUNT] = len(target)
        elif type(target) is str:
            attrs[MESSAGE_ID] = target
        span = self.tracer.start_span(f"settle {queue.name}", kind=SpanKind.CLIENT,
                                      attributes=attrs)
        if type(target) is list:
            self._link(span, target)
        token = otel_context.attach(trace.set_span_in_context(span))

        def finish(result: Any, error: BaseException | None) -> None:
            otel_context.detach(token)
            if error is None and type(result) in (bool, int):
                span.set_attribute(SETTLED, result)
                if target is None:
                    span.set_attribute(BATCH_COUNT, result)
            self._end(span, error)

        return finish

    def process(self, queue: Any, message: Message) -> Finish:
        """Begin handling ``message``: a ``process`` CONSUMER span, linked to the message's
        creation context (or its child, with ``process_parent="child"``), current until the
        handler ends; its end records the outcome the Worker gives the message."""
        created = self.creation(message)
        attrs = self.attributes(queue, "process", "process")
        self._one(attrs, message)
        parent, links = None, []
        if created is not None:
            if self.process_as_child:
                parent = created
            else:
                links = [Link(trace.get_current_span(created).get_span_context())]
        span = self.tracer.start_span(f"process {queue.name}", context=parent,
                                      kind=SpanKind.CONSUMER, attributes=attrs, links=links)
        token = otel_context.attach(trace.set_span_in_context(span, parent))

        def finish(result: Any, error: BaseException | None) -> None:
            otel_context.detach(token)
            if error is None:
                span.set_attribute(OUTCOME, "ack")
            elif isinstance(error, Retry):
                span.set_attribute(OUTCOME, "retry")
                span.set_attribute(RETRY_DELAY, error.delay_ms)
                error = None  # asked for, not a failure
            elif isinstance(error, DeadLetterNow):
                span.set_attribute(OUTCOME, "dead_letter")
            elif isinstance(error, Exception):
                span.set_attribute(OUTCOME, "nack")
            self._end(span, error)

        return finish

    @staticmethod
    def _end(span: Span, error: BaseException | None) -> None:
        if error is not None:
            span.set_attribute(ERROR_TYPE, error_type(error))
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200]))
        span.end()


def _server_attributes(queue: Any) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of the queue's writes, where known."""
    endpoint = queue._driver.endpoint()  # the façade's driver: both APIs have one
    if endpoint is None:
        return {}
    host, port = endpoint
    return {SERVER_ADDRESS: host} if port is None else {SERVER_ADDRESS: host, SERVER_PORT: port}
