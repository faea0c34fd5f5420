"""A traced reminder: the request that schedules it and the Worker that sends it, one trace.

Run: ``python examples/tracing.py [REDIS_URL]`` (needs the ``otel`` extra and
opentelemetry-sdk; without a URL it starts a local redis-server). Prints each span as the
SDK's console exporter writes it (docs/operations.md, "Tracing", shows the output).
"""

from __future__ import annotations

import sys
import threading
from contextlib import ExitStack

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from dynoqueue import Message, RedisQueues, SingleShardSupplier, Worker, tracing
from dynoqueue.embedded import RedisServer

provider = TracerProvider(resource=Resource.create({"service.name": "reminders"}))
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(provider)
tracing.instrument()  # process spans link to the creation context ("child": continue its trace)
tracer = trace.get_tracer("shop")

with ExitStack() as stack:
    url = sys.argv[1] if len(sys.argv) > 1 else stack.enter_context(RedisServer()).url
    queues = stack.enter_context(RedisQueues.from_url(
        url, shard_supplier=SingleShardSupplier("eu-west-1a")))
    reminders = queues.get("reminders")

    with tracer.start_as_current_span("POST /orders"):  # the request that schedules it
        reminders.push([Message("order-42", '{"email": "ann@example.com"}', timeout=100)])

    sent = threading.Event()

    def send_reminder(message: Message) -> None:
        with tracer.start_as_current_span("email customer"):  # a child of the process span
            sent.set()

    with Worker(reminders, send_reminder, concurrency=1):
        sent.wait(10)
provider.shutdown()
