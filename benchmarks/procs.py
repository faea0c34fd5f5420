"""Consumer processes: each runs one library's consumer (spawn start method, its own client).

The parent starts N processes, waits until each has imported its library and connected, then
releases them all at once and times until the messages it expects have been delivered. Each
process counts into its own slot of a shared array (no lock), and the first one to see the
total reach the target sets an event, so the parent waits without polling. Lateness samples
and round-trip counts come back over a queue when the parent says stop.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue as queue_module
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from .common import RoundTrips, due_of, now_ms

_READY_TIMEOUT_S = 90.0
_RESULT_TIMEOUT_S = 15.0


def _consumer_main(name: str, url: str, options: dict[str, Any], slot: int, counts: Any,
                   target: int, lateness: bool, ready: Any, start: Any, done: Any, stop: Any,
                   results: Any) -> None:
    """Body of one consumer process (module level, so that spawn can import it)."""
    logging.basicConfig(level=logging.ERROR)
    for noisy in ("rq", "huey", "dramatiq", "saq", "bullmq"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    RoundTrips.install()
    samples: list[float] = []
    report: dict[str, Any] = {"slot": slot, "pid": os.getpid()}
    local_stop = threading.Event()
    try:
        from .peers import load

        adapter = load(name)(url, **options)
    except Exception:
        report["error"] = traceback.format_exc(limit=3)
        results.put(report)
        ready.put(slot)
        done.set()
        return

    def on_batch(bodies: Sequence[str]) -> None:
        if lateness:
            now = now_ms()
            samples.extend(now - due_of(body) for body in bodies)
        counts[slot] += len(bodies)
        if sum(counts[:]) >= target:
            done.set()

    def watch() -> None:
        stop.wait()
        local_stop.set()
        report["round_trips"] = RoundTrips.count
        report["samples"] = samples
        report["delivered"] = counts[slot]
        results.put(report)
        try:
            adapter.abort()
        finally:
            # The library's worker may not stop on request (signal handlers, blocking reads):
            # results are sent, so end the process here.
            time.sleep(0.1)
            os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    ready.put(slot)
    start.wait()
    RoundTrips.reset()
    try:
        adapter.consume(on_batch, local_stop)
    except Exception:
        report["error"] = traceback.format_exc(limit=3)
        done.set()
    stop.wait()
    time.sleep(60)  # the watcher ends the process


class ConsumerGroup:
    """``procs`` consumer processes of one library, released together.

    Args:
        name: adapter name (see :data:`benchmarks.peers.ADAPTERS`).
        url: server URL.
        procs: number of processes, >= 1.
        target: total deliveries after which :meth:`wait` returns.
        lateness: record ``now - due`` (ms) for every delivered message.
        options: keyword arguments for the adapter (e.g. ``consume_batch``).
    """

    def __init__(self, name: str, url: str, procs: int, target: int, *, lateness: bool = False,
                 options: dict[str, Any] | None = None) -> None:
        ctx = mp.get_context("spawn")
        self.target = target
        self.counts = ctx.Array("q", procs, lock=False)
        self._ready: Any = ctx.Queue()
        self._results: Any = ctx.Queue()
        self._start = ctx.Event()
        self._done = ctx.Event()
        self._stop = ctx.Event()
        self._procs = [
            ctx.Process(target=_consumer_main, name=f"bench-{name}-{i}", daemon=False,
                        args=(name, url, options or {}, i, self.counts, target, lateness,
                              self._ready, self._start, self._done, self._stop,
                              self._results))
            for i in range(procs)
        ]
        self.started_at = 0.0

    def start(self) -> ConsumerGroup:
        """Start the processes and wait until every one is connected and ready.

        Raises:
            RuntimeError: a process did not get ready within 90 s.
        """
        for proc in self._procs:
            proc.start()
        for _ in self._procs:
            try:
                self._ready.get(timeout=_READY_TIMEOUT_S)
            except queue_module.Empty:
                self.stop()
                raise RuntimeError("consumer processes did not start") from None
        return self

    def go(self) -> None:
        """Release every process; the clock of :meth:`wait` starts now."""
        self.started_at = time.perf_counter()
        self._start.set()

    def delivered(self) -> int:
        """Deliveries so far, over all processes."""
        return int(sum(self.counts[:]))

    def wait(self, timeout_s: float) -> float | None:
        """Wait until ``target`` deliveries; return seconds since :meth:`go`, None on timeout."""
        if not self._done.wait(timeout_s):
            return None
        return time.perf_counter() - self.started_at

    def stop(self) -> list[dict[str, Any]]:
        """Stop every process and collect its report.

        Returns:
            One dict per process that answered: ``slot``, ``pid``, ``delivered``,
            ``round_trips``, ``samples`` (lateness ms, when asked), and ``error`` if it failed.
        """
        self._stop.set()
        reports: list[dict[str, Any]] = []
        deadline = time.monotonic() + _RESULT_TIMEOUT_S
        while len(reports) < len(self._procs) and time.monotonic() < deadline:
            try:
                reports.append(self._results.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue_module.Empty:
                break
        for proc in self._procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        return reports
