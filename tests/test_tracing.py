"""OpenTelemetry tracing (``dynoqueue.tracing``), with the real SDK and its in-memory exporter
on a real redis-server: a push in one process reaches the handler in another as one trace (or
a link), both APIs and both Workers; a redelivered message's second ``process`` span links to
the same creation context; a batch of 500 makes one ``send`` span and 500 creation contexts;
spans end when a handler raises and when a pop is cancelled; uninstrumented, the queue classes
run their own methods.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the 'dev' extra brings opentelemetry-sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from dynoqueue import (
    Backoff,
    DeadLetterNow,
    InvalidArgumentError,
    Message,
    QueuePolicy,
    RedisQueues,
    Retry,
    StaticShardSupplier,
    Worker,
    tracing,
)
from dynoqueue.asyncio import DynoQueue as AsyncDynoQueue
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.asyncio import Worker as AsyncWorker
from dynoqueue.embedded import RedisServer
from dynoqueue.queue import DynoQueue
from dynoqueue.worker.base import HANDLER_WRAPPERS

SHARDS = ["a", "b", "c"]
TRACED = ("push", "ensure", "pop", "pop_with_msg_id", "ack", "ack_many", "nack", "dead_letter",
          "redrive", "release")


class Spans:
    """The spans the instrumentation exported, by name and kind."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
        self.exporter = exporter
        self.tracer = provider.get_tracer("app")

    def all(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans()
                if name is None or s.name.startswith(name)]

    def one(self, name: str) -> ReadableSpan:
        found = self.all(name)
        assert len(found) == 1, [s.name for s in self.all()]
        return found[0]


def recorder() -> tuple[InMemorySpanExporter, TracerProvider]:
    """An SDK tracer provider that keeps every span it ends in memory."""
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter, provider = recorder()
    tracing.instrument(tracer_provider=provider)
    try:
        yield Spans(exporter, provider)
    finally:
        tracing.uninstrument()
        provider.shutdown()


def console_spans(output: str) -> list[dict[str, Any]]:
    """The spans the SDK's console exporter printed (one JSON object each, starting at the
    start of a line), whatever else was printed around them."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (start := output.find("{\n", at)) >= 0:
        if start and output[start - 1] != "\n":
            at = start + 1
            continue
        span, at = decoder.raw_decode(output, start)
        spans.append(span)
    return spans


def _traceparent_ids(message: Message) -> tuple[int, int]:
    """(trace id, span id) of the creation context in a message's headers."""
    assert message.headers is not None
    _, trace_id, span_id, _ = message.headers["traceparent"].split("-")
    return int(trace_id, 16), int(span_id, 16)


# ------------------------------------------------------------------------------ off is off


def test_off_the_classes_run_their_own_methods() -> None:
    originals = {(cls, name): cls.__dict__[name] for cls in (DynoQueue, AsyncDynoQueue)
                 for name in TRACED}
    assert not tracing.is_instrumented() and HANDLER_WRAPPERS == []
    tracing.instrument()
    try:
        assert tracing.is_instrumented() and len(HANDLER_WRAPPERS) == 1
        for (cls, name), original in originals.items():
            assert cls.__dict__[name] is not original
            assert cls.__dict__[name].__wrapped__ is original
            assert cls.__dict__[name].__doc__ == original.__doc__
        tracing.instrument(process_parent="child")  # again: replaces, does not stack
        assert len(HANDLER_WRAPPERS) == 1
        assert all(cls.__dict__[name].__wrapped__ is original
                   for (cls, name), original in originals.items())
    finally:
        tracing.uninstrument()
    assert all(cls.__dict__[name] is original for (cls, name), original in originals.items())
    assert not tracing.is_instrumented() and HANDLER_WRAPPERS == []
    tracing.uninstrument()  # not instrumented: nothing to do


def test_bad_options_are_refused_before_anything_changes() -> None:
    with pytest.raises(InvalidArgumentError, match="process_parent"):
        tracing.instrument(process_parent="sibling")
    with pytest.raises(InvalidArgumentError, match="empty_receives"):
        tracing.instrument(empty_receives="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="create_spans"):
        tracing.instrument(create_spans=1)  # type: ignore[arg-type]
    assert not tracing.is_instrumented() and HANDLER_WRAPPERS == []


def test_the_package_leaves_tracing_out_and_tracing_says_what_to_install() -> None:
    code = textwrap.dedent("""
        import sys
        import dynoqueue, dynoqueue.asyncio
        assert "dynoqueue.tracing" not in sys.modules, "imported"
        sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
        try:
            import dynoqueue.tracing
        except ImportError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "pip install 'dynoqueue[otel]'" in done.stdout


# ------------------------------------------------------------------------------ one process


def test_a_push_sends_and_its_pop_receives_and_ack_settles(
        spans: Spans, factories: Callable[..., Any], redis_server: RedisServer) -> None:
    q = factories().get("jobs")
    user = Message("u", "x", headers={"tenant": "acme"})
    q.push([user])
    assert user.headers == {"tenant": "acme"}  # the caller's message is not changed
    send = spans.one("send jobs")
    assert send.kind is SpanKind.PRODUCER
    attrs = dict(send.attributes or {})
    assert attrs == {"messaging.system": "dynoqueue", "messaging.destination.name": "jobs",
                     "messaging.operation.type": "send", "messaging.operation.name": "push",
                     "messaging.message.id": "u", "server.address": "127.0.0.1",
                     "server.port": redis_server.port}
    (got,) = q.unsafe_pop_all_shards(1)
    assert got.headers is not None and got.headers["tenant"] == "acme"
    assert _traceparent_ids(got) == (send.context.trace_id, send.context.span_id)
    receive = spans.one("receive jobs")
    assert receive.kind is SpanKind.CLIENT
    assert [link.context.span_id for link in receive.links] == [send.context.span_id]
    assert receive.attributes["messaging.dynoqueue.message.delivery_count"] == 1
    assert receive.attributes["messaging.dynoqueue.shard"] == got.shard
    assert q.ack(got.id, receipt=got.receipt)
    settle = spans.one("settle jobs")
    assert settle.attributes["messaging.operation.name"] == "ack"
    assert settle.attributes["messaging.message.id"] == "u"
    assert settle.attributes["messaging.dynoqueue.settled"] is True
    assert q.unsafe_pop_all_shards(1) == []
    assert len(spans.all("receive")) == 1  # an empty pop makes no span


def test_a_batch_of_500_makes_one_send_span_and_500_creation_contexts(
        spans: Spans, factories: Callable[..., Any]) -> None:
    q = factories().get("batch")
    with spans.tracer.start_as_current_span("request") as request:
        q.push(Message(f"m{i}", "x") for i in range(500))  # a generator: read once
    send = spans.one("send batch")
    assert send.attributes["messaging.batch.message_count"] == 500
    assert send.kind is SpanKind.CLIENT  # not the creation context: the create spans are
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    creates = spans.all("create batch")
    assert len(creates) == 500
    assert {c.parent.span_id for c in creates if c.parent} == {send.context.span_id}
    assert {c.context.trace_id for c in creates} == {request.get_span_context().trace_id}
    got = q.unsafe_pop_all_shards(500)
    assert len(got) == 500
    contexts = {m.id: _traceparent_ids(m) for m in got}
    assert len(set(contexts.values())) == 500
    by_id = {c.attributes["messaging.message.id"]: c.context for c in creates}
    assert all(contexts[i] == (by_id[i].trace_id, by_id[i].span_id) for i in contexts)
    # The send span links to the creation contexts it injected (the SDK keeps 128).
    assert [link.context.span_id for link in send.links] == [
        by_id[f"m{i}"].span_id for i in range(128)]
    receive = spans.one("receive batch")
    assert receive.attributes["messaging.batch.message_count"] == 500
    assert len(receive.links) == 128  # the SDK's default limit: the first 128
    assert q.ack_many(iter(got)) == 500  # an iterator: read once, passed on as a list
    settle = spans.one("settle batch")
    assert settle.attributes["messaging.batch.message_count"] == 500
    assert settle.attributes["messaging.dynoqueue.settled"] == 500


def test_a_message_keeps_the_creation_context_it_carries(
        spans: Spans, factories: Callable[..., Any]) -> None:
    q = factories().get("kept")
    theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    full = {f"h{i}": "x" for i in range(64)}  # no room for another header
    q.push([Message("carried", headers={"traceparent": theirs}), Message("full", headers=full),
            Message("plain")])
    assert q.get("carried").headers == {"traceparent": theirs}
    assert q.get("full").headers == full  # pushed as it was, not refused
    assert "traceparent" in q.get("plain").headers
    assert [c.attributes["messaging.message.id"] for c in spans.all("create")] == ["full",
                                                                                  "plain"]
    send = spans.one("send kept")
    assert int("b7ad6b7169203331", 16) in {link.context.span_id for link in send.links}
    q.push([Message("alone", headers={"traceparent": theirs})])  # one message, kept context
    alone = [s for s in spans.all("send kept") if s.attributes.get("messaging.message.id")]
    assert alone[0].kind is SpanKind.PRODUCER
    assert [link.context.span_id for link in alone[0].links] == [int("b7ad6b7169203331", 16)]
    assert q.get("alone").headers == {"traceparent": theirs}


def test_settle_spans_for_nack_dead_letter_release_and_redrive(
        spans: Spans, factories: Callable[..., Any]) -> None:
    q = factories().get("settle")
    q.push([Message(f"m{i}") for i in range(4)])
    got = q.unsafe_pop_all_shards(4)
    assert q.nack(got[0].id, 60_000, error="boom")
    assert q.dead_letter(got[1].id, "poison")
    assert q.release(m for m in got[2:]) == 2
    assert q.redrive() == 1
    names = [(s.attributes["messaging.operation.name"], s.attributes.get(
        "messaging.batch.message_count"), s.attributes["messaging.dynoqueue.settled"])
        for s in spans.all("settle")]
    assert names == [("nack", None, True), ("dead_letter", None, True), ("release", 2, 2),
                     ("redrive", 1, 1)]
    release = next(s for s in spans.all("settle")
               if s.attributes["messaging.operation.name"] == "release")
    assert len(release.links) == 2  # the messages given carry their creation contexts


def test_a_failed_call_ends_its_span_with_the_error(
        spans: Spans, factories: Callable[..., Any]) -> None:
    queues = factories()
    q = queues.get("closed")
    queues.close()
    with pytest.raises(Exception) as raised:
        q.pop(1)
    receive = spans.one("receive closed")
    assert receive.status.status_code is StatusCode.ERROR
    assert receive.attributes["error.type"].endswith(type(raised.value).__qualname__)
    assert [e.name for e in receive.events] == ["exception"]


def test_a_cancelled_pop_ends_its_span(spans: Spans, redis_server: RedisServer) -> None:
    async def main() -> None:
        async with AsyncRedisQueues.from_url(
                redis_server.url, key_prefix=f"t{uuid.uuid4().hex[:8]}",
                shard_supplier=StaticShardSupplier(SHARDS, "a")) as queues:
            pop = asyncio.ensure_future(queues.get("idle").pop(1, wait_ms=10_000))
            await asyncio.sleep(0.3)
            pop.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pop

    asyncio.run(main())
    receive = spans.one("receive idle")
    assert receive.end_time is not None
    assert receive.attributes["error.type"] == "asyncio.exceptions.CancelledError"
    assert 0.2e9 < receive.end_time - receive.start_time < 5e9


def test_a_partitioned_queue_carries_contexts_through_every_partition(
        spans: Spans, factories: Callable[..., Any]) -> None:
    q = factories().get("parts", QueuePolicy(partitions=4))
    q.push([Message(f"m{i}", group=f"g{i}") for i in range(40)])
    got = q.unsafe_pop_all_shards(40)
    assert len(got) == 40
    creates = {c.attributes["messaging.message.id"]: c.context.span_id
               for c in spans.all("create parts")}
    assert {m.id: _traceparent_ids(m)[1] for m in got} == creates


# ------------------------------------------------------------------------------ two processes

PRODUCER = textwrap.dedent("""
    import asyncio, json, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from dynoqueue import Message, StaticShardSupplier, tracing
    url, prefix, name, api = sys.argv[1:5]
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracing.instrument()
    supplier = StaticShardSupplier(["a"], "a")
    with trace.get_tracer("producer").start_as_current_span("request"):
        if api == "sync":
            from dynoqueue import RedisQueues
            with RedisQueues.from_url(url, key_prefix=prefix, shard_supplier=supplier) as qs:
                qs.get(name).push([Message("order-1", "pay")])
        else:
            from dynoqueue.asyncio import RedisQueues
            async def main():
                async with RedisQueues.from_url(url, key_prefix=prefix,
                                                shard_supplier=supplier) as qs:
                    await qs.get(name).push([Message("order-1", "pay")])
            asyncio.run(main())
    print(json.dumps({s.name: [s.context.trace_id, s.context.span_id]
                      for s in exporter.get_finished_spans()}))
""")


def _produce(redis_server: RedisServer, prefix: str, name: str, api: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", PRODUCER, redis_server.url, prefix, name, api],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "OTEL_PROPAGATORS": "tracecontext,baggage"})
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _consume(kind: str, redis_server: RedisServer, prefix: str, name: str,
             handle: Callable[[Message], None], until: Callable[[], bool]) -> None:
    """Run a Worker of ``kind`` (threads or asyncio) on the queue (one shard, as the
    producer's) until ``until()``."""
    supplier = StaticShardSupplier(["a"], "a")
    fast = Backoff(initial_ms=0, factor=1.0, max_ms=0, jitter=0.0)
    deadline = time.monotonic() + 30
    if kind == "threads":
        with RedisQueues.from_url(redis_server.url, key_prefix=prefix, shard_supplier=supplier,
                                  unack_handler_interval_ms=100) as queues, \
                Worker(queues.get(name), handle, concurrency=2, backoff=fast):
            while not until() and time.monotonic() < deadline:
                time.sleep(0.02)
        return

    async def ahandle(message: Message) -> None:
        await asyncio.sleep(0)
        handle(message)

    async def main() -> None:
        async with AsyncRedisQueues.from_url(
                redis_server.url, key_prefix=prefix, shard_supplier=supplier,
                unack_handler_interval_ms=100) as queues, \
                AsyncWorker(queues.get(name), ahandle, concurrency=2, backoff=fast):
            while not until() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

    asyncio.run(main())


@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_push_in_one_process_reaches_the_handler_in_another(
        spans: Spans, redis_server: RedisServer, kind: str, api: str) -> None:
    """The producer process pushes inside its request span; here a Worker handles the
    message, fails its first delivery and acks the second: both process spans link to the
    producer's send span, in the producer's trace, and the handler's own span is a child of
    its process span."""
    prefix, name = f"t{uuid.uuid4().hex[:8]}", "orders"
    produced = _produce(redis_server, prefix, name, api)
    trace_id, send_id = produced["send orders"]
    assert produced["request"][0] == trace_id
    seen: list[tuple[int, int]] = []

    def handle(message: Message) -> None:
        current = trace.get_current_span().get_span_context()
        with spans.tracer.start_as_current_span("charge card"):
            seen.append((current.trace_id, current.span_id))
        if message.deliveries == 1:
            raise RuntimeError("card declined")

    _consume(kind, redis_server, prefix, name, handle, lambda: len(spans.all("process")) >= 2)
    first, second = sorted(spans.all("process orders"), key=lambda s: s.start_time)
    for span, deliveries in ((first, 1), (second, 2)):
        assert span.kind is SpanKind.CONSUMER
        assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
            (trace_id, send_id)]
        assert span.parent is None and span.context.trace_id != trace_id  # linked, not child
        assert span.attributes["messaging.message.id"] == "order-1"
        assert span.attributes["messaging.dynoqueue.message.delivery_count"] == deliveries
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "RuntimeError"
    assert first.attributes["messaging.dynoqueue.outcome"] == "nack"
    assert second.status.status_code is StatusCode.UNSET
    assert second.attributes["messaging.dynoqueue.outcome"] == "ack"
    charges = spans.all("charge card")
    assert {(c.parent.trace_id, c.parent.span_id) for c in charges if c.parent} == {
        (p.context.trace_id, p.context.span_id) for p in (first, second)}
    assert seen == [(p.context.trace_id, p.context.span_id) for p in (first, second)]
    assert any(s.attributes["messaging.operation.name"] == "ack_many"
               for s in spans.all("settle orders"))


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_process_parent_child_continues_the_producers_trace(
        redis_server: RedisServer, kind: str) -> None:
    exporter, provider = recorder()
    tracing.instrument(tracer_provider=provider, process_parent="child")
    try:
        prefix, name = f"t{uuid.uuid4().hex[:8]}", "orders"
        trace_id, send_id = _produce(redis_server, prefix, name, "sync")["send orders"]
        done = threading.Event()
        _consume(kind, redis_server, prefix, name, lambda m: done.set(), done.is_set)
        time.sleep(0.1)  # the process span ends just after the handler returns
    finally:
        tracing.uninstrument()
    (process,) = [s for s in exporter.get_finished_spans() if s.name == "process orders"]
    assert process.parent is not None and process.links == ()
    assert (process.context.trace_id, process.parent.span_id) == (trace_id, send_id)


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_retry_and_dead_letter_outcomes_are_recorded(
        spans: Spans, redis_server: RedisServer, kind: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              shard_supplier=StaticShardSupplier(["a"], "a")) as queues:
        queues.get("jobs").push([Message("retry"), Message("poison")])

    def handle(message: Message) -> None:
        if message.id == "poison":
            raise DeadLetterNow("cannot parse")
        if message.deliveries == 1:
            raise Retry(0, "not yet")

    _consume(kind, redis_server, prefix, "jobs", handle,
             lambda: len(spans.all("process")) >= 3)
    outcomes = sorted((s.attributes["messaging.message.id"],
                       s.attributes["messaging.dynoqueue.outcome"], s.status.status_code)
                      for s in spans.all("process"))
    assert outcomes == [("poison", "dead_letter", StatusCode.ERROR),
                        ("retry", "ack", StatusCode.UNSET),
                        ("retry", "retry", StatusCode.UNSET)]
    retried = next(s for s in spans.all("process")
               if s.attributes["messaging.dynoqueue.outcome"] == "retry")
    assert retried.attributes["messaging.dynoqueue.retry_delay_ms"] == 0


def test_processing_gives_code_outside_a_worker_the_same_span(
        spans: Spans, factories: Callable[..., Any]) -> None:
    q = factories().get("manual")
    q.push([Message("m")])
    (message,) = q.unsafe_pop_all_shards(1)
    with pytest.raises(ValueError), tracing.processing(q, message) as span:
        assert span is trace.get_current_span() and span.is_recording()
        raise ValueError("bad payload")
    process = spans.one("process manual")
    assert process.attributes["error.type"] == "ValueError"
    assert process.attributes["messaging.dynoqueue.outcome"] == "nack"
    assert [link.context.span_id for link in process.links] == [spans.one("send").context.span_id]
    tracing.uninstrument()
    with tracing.processing(q, message) as nothing:
        assert nothing is None


# ------------------------------------------------------------------------- auto-instrumentation


def test_the_instrumentor_and_opentelemetry_instrument(redis_server: RedisServer) -> None:
    pytest.importorskip("opentelemetry.instrumentation",
                        reason="the 'dev' extra brings opentelemetry-instrumentation")
    from dynoqueue.tracing.instrumentor import DynoqueueInstrumentor

    instrumentor = DynoqueueInstrumentor()
    instrumentor.instrument(process_parent="child")
    try:
        assert tracing.is_instrumented()
    finally:
        instrumentor.uninstrument()
    assert not tracing.is_instrumented()

    code = textwrap.dedent(f"""
        from dynoqueue import Message, RedisQueues, SingleShardSupplier
        with RedisQueues.from_url({redis_server.url!r}, key_prefix="auto{uuid.uuid4().hex[:6]}",
                                  shard_supplier=SingleShardSupplier("a")) as queues:
            queues.get("auto").push([Message("m1", "x")])
            print("headers:", queues.get("auto").get("m1").headers)
    """)
    bin_dir = os.path.dirname(sys.executable)
    done = subprocess.run(
        [os.path.join(bin_dir, "opentelemetry-instrument"), "--traces_exporter", "console",
         "--metrics_exporter", "none", "--logs_exporter", "none", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "OTEL_SERVICE_NAME": "shop"})
    assert "headers: {'traceparent': '00-" in done.stdout
    (exported,) = console_spans(done.stdout)
    assert exported["name"] == "send auto" and exported["kind"] == "SpanKind.PRODUCER"
    assert exported["attributes"]["messaging.system"] == "dynoqueue"
    assert exported["resource"]["attributes"]["service.name"] == "shop"


def test_the_example_prints_the_trace_the_docs_show(redis_server: RedisServer) -> None:
    """examples/tracing.py, whose output docs/operations.md ("Tracing") shows: six spans, the
    send span a child of the request, receive, process and settle linked to it, the handler's
    span a child of the process span."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, os.path.join(root, "examples", "tracing.py"),
                           redis_server.url], capture_output=True, text=True, timeout=120,
                          check=True)
    printed = {span["name"]: span for span in console_spans(done.stdout)}
    assert sorted(printed) == ["POST /orders", "email customer", "process reminders",
                               "receive reminders", "send reminders", "settle reminders"]
    send = printed["send reminders"]["context"]["span_id"]
    assert printed["send reminders"]["parent_id"] == printed["POST /orders"]["context"]["span_id"]
    for name in ("receive reminders", "process reminders", "settle reminders"):
        assert printed[name]["parent_id"] is None
        assert [link["context"]["span_id"] for link in printed[name]["links"]] == [send]
    assert printed["email customer"]["parent_id"] == \
        printed["process reminders"]["context"]["span_id"]
    assert printed["process reminders"]["attributes"]["messaging.dynoqueue.outcome"] == "ack"


def test_without_create_spans_a_batch_carries_the_send_context(
        factories: Callable[..., Any]) -> None:
    exporter, provider = recorder()
    tracing.instrument(tracer_provider=provider, create_spans=False)
    try:
        q = factories().get("lean")
        q.push([Message(f"m{i}") for i in range(50)])
        got = q.unsafe_pop_all_shards(50)
    finally:
        tracing.uninstrument()
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["send lean", "receive lean"]
    send, receive = exporter.get_finished_spans()
    assert send.kind is SpanKind.PRODUCER  # every message's creation context
    assert {_traceparent_ids(m) for m in got} == {(send.context.trace_id, send.context.span_id)}
    assert [link.context.span_id for link in receive.links] == [send.context.span_id]


def test_a_handler_cancelled_at_the_shutdown_deadline_ends_its_span(
        spans: Spans, redis_server: RedisServer) -> None:
    """The asyncio Worker cancels a handler still running at its deadline: its process span
    ends, with the cancellation as its error and no outcome (the message stays leased)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with AsyncRedisQueues.from_url(
                redis_server.url, key_prefix=prefix,
                shard_supplier=StaticShardSupplier(["a"], "a")) as queues:
            q = queues.get("slow")
            await q.push([Message("stuck")])
            started = asyncio.Event()

            async def handle(message: Message) -> None:
                started.set()
                await asyncio.sleep(60)

            worker = AsyncWorker(q, handle, concurrency=1, shutdown_grace_ms=200)
            run = asyncio.ensure_future(worker.run())
            await asyncio.wait_for(started.wait(), 10)
            worker.stop()
            await asyncio.wait_for(run, 10)

    asyncio.run(main())
    process = spans.one("process slow")
    assert process.end_time is not None
    assert process.attributes["error.type"] == "asyncio.exceptions.CancelledError"
    assert "messaging.dynoqueue.outcome" not in process.attributes
