"""What tracing costs: batched push and pop + ack with ``dynoqueue.tracing`` off, instrumented
without an SDK, and instrumented with the SDK and an exporter that drops what it gets; and,
with ``--baseline``, the same calls on an older checkout (the code before tracing existed).

    python -m benchmarks.tracing [--rounds 7] [--messages 20000] [--baseline /tmp/dq-old]

One redis-server; each variant is its own process (so an older checkout's ``dynoqueue`` can be
imported beside this one, and the variants share no interpreter state), each with its own
queue. Every round, each variant pushes ``messages`` due messages 500 a call, then pops them
500 a call and acks each batch with ``ack_many``; the variants take turns in an order that
rotates each round, so a change in the machine's load hits all alike. Reported: the median
msgs/s of each and the median per-round ratio to "off".

``--baseline DIR``: a checkout of an older commit, e.g. ``git worktree add /tmp/dq-old
ad194b3`` (the last commit before message headers and tracing), run with ``PYTHONPATH=DIR``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any

BATCH = 500

# The block runner: started as ``python benchmarks/tracing.py --blocks MODE URL``, it reads
# commands ("push N", "popack", "quit") and answers each with the msgs/s of the block. It
# imports nothing from benchmarks/ (an older checkout's dynoqueue runs it too), so it has its
# own copies of core_throughput's batched push and pop_ack_all loops.
MODES = ("off", "no SDK", "SDK, no-op exporter", "SDK, create_spans=False")


def _setup(mode: str) -> None:
    if mode in ("off", "today"):
        return
    from dynoqueue import tracing

    provider = None
    if mode.startswith("SDK"):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Dropped(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
    tracing.instrument(tracer_provider=provider, create_spans=mode != "SDK, create_spans=False")


def _blocks(mode: str, url: str, queue: str) -> None:
    from dynoqueue import Message, RedisQueues, SingleShardSupplier

    _setup(mode)
    queues = RedisQueues.from_url(url, shard_supplier=SingleShardSupplier("a"),
                                  unack_handler_interval_ms=0)
    q = queues.get(queue)
    serial = 0
    for line in sys.stdin:
        command = line.split()
        if command[0] == "quit":
            break
        started = time.perf_counter()
        if command[0] == "push":
            n = int(command[1])
            for i in range(0, n, BATCH):
                q.push([Message(f"m{serial}-{j}", "x" * 100)
                        for j in range(i, min(i + BATCH, n))])
            serial += 1
        else:
            n = 0
            while got := q.pop(BATCH):
                n += q.ack_many(got)
        print(n / (time.perf_counter() - started), flush=True)
    queues.close()


class Variant:
    """One variant's block runner process."""

    def __init__(self, name: str, url: str, baseline: str | None) -> None:
        self.name = name
        env = dict(os.environ)
        if name == "today":
            env["PYTHONPATH"] = baseline or ""
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--blocks", name, url,
             f"q{len(name)}{abs(hash(name)) % 10_000}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, command: str) -> float:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return float(self._proc.stdout.readline())

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write("quit\n")
        self._proc.stdin.flush()
        self._proc.wait(30)


def measure(url: str, rounds: int, messages: int,
            baseline: str | None) -> dict[str, dict[str, float]]:
    """Median rates and per-round ratios to "off", by variant and workload."""
    names = (["today"] if baseline else []) + list(MODES)
    variants = [Variant(name, url, baseline) for name in names]
    rates: dict[str, dict[str, list[float]]] = {
        v.name: {"push": [], "popack": []} for v in variants}
    try:
        for v in variants:  # warm-up: connections open, scripts loaded
            v.run(f"push {BATCH}")
            v.run("popack")
        for r in range(rounds):
            for v in variants[r % len(variants):] + variants[:r % len(variants)]:
                rates[v.name]["push"].append(v.run(f"push {messages}"))
                rates[v.name]["popack"].append(v.run("popack"))
    finally:
        for v in variants:
            v.close()
    out: dict[str, dict[str, float]] = {}
    for name, by in rates.items():
        out[name] = {}
        for work, values in by.items():
            out[name][work] = statistics.median(values)
            out[name][work + " ratio"] = statistics.median(
                a / b for a, b in zip(values, rates["off"][work], strict=True))
    return out


def main(argv: list[str] | None = None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--blocks":
        _blocks(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--baseline", help="an older checkout to compare with (PYTHONPATH)")
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    from dynoqueue.embedded import RedisServer

    with RedisServer() as server:
        results = measure(server.url, args.rounds, args.messages, args.baseline)
    table = Table(title=f"tracing cost: {args.messages:,} messages a block, {BATCH} a call, "
                        f"{args.rounds} rounds (medians)")
    for column in ("variant", "push msgs/s", "vs off", "pop+ack msgs/s", "vs off"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for name, row in results.items():
        table.add_row(name, f"{row['push']:,.0f}", f"{row['push ratio']:.3f}x",
                      f"{row['popack']:,.0f}", f"{row['popack ratio']:.3f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
