"""Celery's OpenTelemetry spans and dynoqueue's join: a task published with ``delay`` on the
dynoqueue kombu transport, run by an in-process Celery worker (solo pool), with
``opentelemetry-instrumentation-celery`` (CeleryInstrumentor) and ``dynoqueue.tracing`` both
instrumented, the real SDK and its in-memory exporter, on a real redis-server.

Celery's instrumentation injects its ``apply_async/{task}`` PRODUCER span into the task
message's headers (inside the kombu message, which is the dynoqueue message's payload); the
transport gives the dynoqueue message that same context as its creation context. So, asserted
by span ids:

* ``send {queue}`` is a child of ``apply_async/{task}`` and links to it;
* ``receive {queue}`` links to ``apply_async/{task}``, the span ``run/{task}`` is the child
  of (CeleryInstrumentor's default) or links to (``use_span_links=True``);
* the worker's ``settle {queue}`` (Celery's ack) names the same dynoqueue message.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("kombu")
pytest.importorskip("celery")
pytest.importorskip("opentelemetry.sdk", reason="the 'dev' extra brings opentelemetry-sdk")
pytest.importorskip("opentelemetry.instrumentation.celery",
                    reason="the 'dev' extra brings opentelemetry-instrumentation-celery")

from celery import Celery
from celery.contrib.testing.worker import start_worker
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

import dynoqueue.kombu  # noqa: F401
from dynoqueue import tracing
from dynoqueue.embedded import RedisServer
from dynoqueue.kombu import factories
from dynoqueue.kombu.codec import to_dynoqueue

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def recorded() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield exporter, provider
    finally:
        tracing.uninstrument()
        provider.shutdown()


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def _trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _links(span: ReadableSpan) -> list[int]:
    return [link.context.span_id for link in span.links]


# ------------------------------------------------------------------------------ the codec


def test_the_codec_carries_a_kombu_messages_trace_context_only_when_tracing(
        recorded: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    kombu_message: dict[str, Any] = {
        "body": "e30=", "headers": {"id": "t1", "task": "x", "traceparent": TRACEPARENT,
                                    "tracestate": "congo=t61rcWkgMzE"},
        "properties": {"delivery_tag": "tag"}}
    assert to_dynoqueue(kombu_message, "m").headers is None  # not instrumented: nothing
    tracing.instrument(tracer_provider=recorded[1])
    assert to_dynoqueue(kombu_message, "m").headers == {"traceparent": TRACEPARENT,
                                                        "tracestate": "congo=t61rcWkgMzE"}
    kombu_message["headers"]["traceparent"] = "00-not-a-context-01"
    assert to_dynoqueue(kombu_message, "m").headers is None  # invalid: the push injects its own
    kombu_message["headers"].update(traceparent=TRACEPARENT, baggage="k=" + "v" * 9000)
    assert to_dynoqueue(kombu_message, "m").headers == {  # over the header limit: W3C alone
        "traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"}
    kombu_message["headers"] = None
    assert to_dynoqueue(kombu_message, "m").headers is None


# ------------------------------------------------------------------------------ Celery


@pytest.mark.parametrize("use_span_links", [False, True], ids=["run-child", "run-link"])
def test_celery_and_dynoqueue_spans_join(
        recorded: tuple[InMemorySpanExporter, TracerProvider], redis_server: RedisServer,
        use_span_links: bool) -> None:
    exporter, provider = recorded
    host, port = redis_server.address
    queue = f"kt{uuid.uuid4().hex[:8]}"
    app = Celery("kt", broker=f"dynoqueue://{host}:{port}/0", set_as_current=False)
    prefix = f"k{uuid.uuid4().hex[:10]}"
    app.conf.update(broker_transport_options={"key_prefix": prefix},
                    task_default_queue=queue, worker_enable_remote_control=False,
                    worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)
    ran: list[str] = []
    both_ran = threading.Event()

    @app.task(name="kt.echo", bind=True, shared=False)
    def echo(self: Any, label: str) -> str:
        ran.append(self.request.id)
        if len(ran) == 2:
            both_ran.set()
        return label

    tracing.instrument(tracer_provider=provider)
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider, use_span_links=use_span_links)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
            with provider.get_tracer("app").start_as_current_span("request") as request:
                tasks = [echo.delay("one").id, echo.apply_async(("two",)).id]
            assert both_ran.wait(30), "the worker ran no task"
            deadline = time.monotonic() + 20
            while len(_named(exporter, "run/kt.echo")) < 2 \
                    or len(_named(exporter, f"settle {queue}")) < 2:
                assert time.monotonic() < deadline, [s.name for s in exporter.get_finished_spans()]
                time.sleep(0.05)
    finally:
        instrumentor.uninstrument()
        app.amqp.producer_pool.force_close_all()  # the producer's pooled connections:
        app.pool.force_close_all()  # the last one closes the transport's factory
        app.close()
    assert not [key for key in factories._factories if prefix in repr(key)]
    assert sorted(ran) == sorted(tasks)
    request_ctx = request.get_span_context()

    for task_id in tasks:
        (publish,) = [s for s in _named(exporter, "apply_async/kt.echo")
                      if (s.attributes or {}).get("messaging.message.id") == task_id]
        assert publish.kind is SpanKind.PRODUCER
        assert _parent(publish) == request_ctx.span_id
        assert _trace_id(publish) == request_ctx.trace_id

        # producer: dynoqueue's send is Celery's publish span's child, and links to it: the
        # task message's creation context is Celery's, not a second one of dynoqueue's
        (send,) = [s for s in _named(exporter, f"send {queue}")
                   if _parent(s) == _span_id(publish)]
        assert send.kind is SpanKind.PRODUCER
        assert _trace_id(send) == _trace_id(publish)
        assert _links(send) == [_span_id(publish)]
        message_id = (send.attributes or {})["messaging.message.id"]

        # worker: the receive links to that creation context ...
        (receive,) = [s for s in _named(exporter, f"receive {queue}")
                      if _span_id(publish) in _links(s)]
        assert receive.kind is SpanKind.CLIENT and receive.parent is None
        if "messaging.batch.message_count" not in (receive.attributes or {}):
            assert (receive.attributes or {})["messaging.message.id"] == message_id

        # ... which Celery's run span continues (child) or links to (use_span_links)
        (run,) = [s for s in _named(exporter, "run/kt.echo")
                  if (s.attributes or {}).get("messaging.message.id") == task_id]
        assert run.kind is SpanKind.CONSUMER
        if use_span_links:
            assert _links(run) == [_span_id(publish)]
            assert _trace_id(run) != _trace_id(publish)
        else:
            assert _parent(run) == _span_id(publish)
            assert _trace_id(run) == request_ctx.trace_id
        assert set(_links(receive)) <= {_span_id(s) for s in _named(exporter, "apply_async/")}

        # Celery's ack settles the dynoqueue message the send pushed
        (settle,) = [s for s in _named(exporter, f"settle {queue}")
                     if (s.attributes or {}).get("messaging.message.id") == message_id]
        assert (settle.attributes or {})["messaging.operation.name"] == "ack"


def _named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]
