"""Workload 9 (issue 14): ``dynoqueue serve`` over HTTP, Camellia's protocol, driven by httpx.

:class:`Served` starts a real ``dynoqueue serve`` process (uvicorn) on a free loopback port
against the suite's redis-server. Two measurements, each on a fresh topic:

* :func:`round_trips`: ``clients`` concurrent clients (asyncio tasks, one HTTP connection
  each) repeat sendMsg (due now) -> pullMsg (batch 1) -> ackMsg, one message per round;
  msgs/s over all of them and the latency of each round (ms).
* :func:`long_poll`: ``clients`` clients hold longPollingMsg while ``n`` messages fall due
  spread over ``spread_s``; wake-up latency = when the held poll's answer arrives - the due
  time the server recorded (the sendMsg reply's ``triggerTime``), ms.

The load generator runs in the benchmark process, on the same cores as the server and Redis;
``client_cpu_s`` and ``server_cpu_s`` say where the CPU went.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from dynoqueue.embedded import free_port

from .common import PAD, now_ms, percentiles

PREFIX = "/camellia/delayQueue"
_ROOT = Path(__file__).resolve().parent.parent
_START_TIMEOUT_S = 30.0
#: How long a held poll waits before the client asks again, ms.
HOLD_MS = 5_000




def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


class Served:
    """A ``dynoqueue serve`` process on a free loopback port (a context manager).

    Args:
        redis_url: the deployment it serves.
        prefix: the queues' key prefix.

    Raises:
        RuntimeError: it did not answer /healthz within 30 s (the message holds its output).
    """

    def __init__(self, redis_url: str, prefix: str = "bench") -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dynoqueue", "serve", "--url", redis_url, "--port",
             str(self.port), "--prefix", prefix],
            env=env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_healthy()
        except BaseException:
            self.close()
            raise

    def _wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + _START_TIMEOUT_S
        with httpx.Client(base_url=self.base, timeout=5) as http:
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"dynoqueue serve did not start: {self.output()}")
                time.sleep(0.1)

    def output(self) -> str:
        """What the process printed so far (its last 2,000 characters)."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def cpu_s(self) -> float:
        """CPU seconds the server process used so far."""
        return _cpu_s(self.process.pid)

    def close(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 15 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


async def _call(http: Any, call: str, **fields: Any) -> dict[str, Any]:
    reply = await http.post(f"{PREFIX}/{call}", data={k: str(v) for k, v in fields.items()})
    doc: dict[str, Any] = reply.json()
    if reply.status_code != 200 or doc.get("code") != 200:
        raise RuntimeError(f"{call}: HTTP {reply.status_code} {reply.text[:200]}")
    return doc


def _clients(base: str, clients: int) -> list[Any]:
    import httpx

    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return [httpx.AsyncClient(base_url=base, limits=limits, timeout=HOLD_MS / 1000 + 30)
            for _ in range(clients)]


async def _round_trips(base: str, topic: str, clients: int, n: int) -> dict[str, Any]:
    https = _clients(base, clients)
    latencies: list[float] = []
    left = [n]
    pulls = [0]
    warm: list[int] = []
    go = asyncio.Event()
    all_warm = asyncio.Event()

    async def one_round(http: Any, i: int) -> float:
        started = time.perf_counter()
        await _call(http, "sendMsg", topic=topic, msgId=f"r{i}", msg=f"r{i}{PAD}{PAD}",
                    delayMillis=0)
        while True:
            pulled = (await _call(http, "pullMsg", topic=topic, batch=1))["delayMsgList"]
            pulls[0] += 1
            if pulled:
                break
        await _call(http, "ackMsg", topic=topic, msgId=pulled[0]["msgId"])
        return (time.perf_counter() - started) * 1000

    async def client(k: int, http: Any) -> None:
        await one_round(http, -1 - k)  # untimed: connects, creates the topic
        warm.append(k)
        if len(warm) == clients:
            all_warm.set()
        await go.wait()
        while left[0] > 0:
            left[0] -= 1
            latencies.append(await one_round(http, left[0]))

    try:
        tasks = [asyncio.ensure_future(client(k, h)) for k, h in enumerate(https)]
        await all_warm.wait()
        started = time.perf_counter()
        go.set()
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
    finally:
        await asyncio.gather(*(h.aclose() for h in https))
    return {"rate": len(latencies) / elapsed, **percentiles(latencies), "n": len(latencies),
            "clients": clients, "pulls_per_msg": pulls[0] / max(1, n + clients)}


def round_trips(served: Served, clients: int, n: int) -> dict[str, Any]:
    """sendMsg (due now) + pullMsg + ackMsg per message from ``clients`` concurrent clients,
    after one untimed round each.

    Returns:
        ``rate`` (msgs/s), ``p50``/``p99``/``max``/``min`` (ms per round), ``n``, ``clients``,
        ``pulls_per_msg`` (1 when no pull came back empty), ``client_cpu_ms`` /
        ``server_cpu_ms`` (CPU ms per message of the load generator and of the server
        process).
    """
    topic = f"rt{uuid.uuid4().hex[:8]}"
    cpu0, srv0 = time.process_time(), served.cpu_s()
    out = asyncio.run(_round_trips(served.base, topic, clients, n))
    out["client_cpu_ms"] = (time.process_time() - cpu0) * 1000 / max(1, out["n"])
    out["server_cpu_ms"] = (served.cpu_s() - srv0) * 1000 / max(1, out["n"])
    return out


async def _long_poll(base: str, topic: str, clients: int, n: int, spread_s: float,
                     lead_s: float) -> dict[str, Any]:
    https = _clients(base, clients + 1)
    producer, pollers = https[0], https[1:]
    due: dict[str, int] = {}
    samples: list[float] = []
    got = asyncio.Event()

    async def poller(http: Any) -> None:
        while len(samples) < n:
            doc = await _call(http, "longPollingMsg", topic=topic, batch=1,
                              longPollingTimeoutMillis=HOLD_MS)
            arrived = now_ms()
            for msg in doc["delayMsgList"]:
                samples.append(arrived - due.get(msg["msgId"], msg["triggerTime"]))
                await _call(http, "ackMsg", topic=topic, msgId=msg["msgId"])
            if len(samples) >= n:
                got.set()

    try:
        await _call(producer, "pullMsg", topic=topic, batch=1)  # creates the topic
        tasks = [asyncio.ensure_future(poller(h)) for h in pollers]
        await asyncio.sleep(0.3)  # every poll is held by now
        first = now_ms() + lead_s * 1000
        for i in range(n):
            sent = await _call(producer, "sendMsg", topic=topic, msgId=f"l{i}", msg=f"l{i}{PAD}",
                               delayMillis=max(0, round(first + i * spread_s * 1000 / n
                                                        - now_ms())))
            due[f"l{i}"] = sent["delayMsg"]["triggerTime"]
        await asyncio.wait_for(got.wait(), lead_s + spread_s + 30)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        monitor = (await producer.get(f"{PREFIX}/getMonitorData")).json()["data"]
    finally:
        await asyncio.gather(*(h.aclose() for h in https))
    # The server's own part: due time -> leased by the dispatcher's pop (its pull gap).
    gaps = [g for g in monitor["pullMsgTimeGapStatsList"] if g["topic"] == topic]
    return {**percentiles(samples), "delivered": len(samples), "n": n, "clients": clients,
            "spread_s": spread_s,
            **({"claim_gap_avg_ms": gaps[0]["avg"], "claim_gap_max_ms": gaps[0]["max"]}
               if gaps else {})}


def long_poll(served: Served, clients: int, n: int, spread_s: float,
              lead_s: float = 1.0) -> dict[str, Any]:
    """Wake-up latency of held longPollingMsg requests: ``clients`` clients hold polls
    (batch 1, held up to HOLD_MS) while ``n`` messages fall due evenly over ``spread_s``
    seconds, the first ``lead_s`` after sending starts; each client acks what it gets and
    polls again.

    Returns:
        ``p50``/``p99``/``max``/``min`` (ms from the recorded due time to the answer's
        arrival), ``delivered``, ``n``, ``clients``, ``spread_s``, and the server's own part
        (due -> leased, Camellia's pull gap) as ``claim_gap_avg_ms`` / ``claim_gap_max_ms``.
    """
    topic = f"lp{uuid.uuid4().hex[:8]}"
    return asyncio.run(_long_poll(served.base, topic, clients, n, spread_s, lead_s))
