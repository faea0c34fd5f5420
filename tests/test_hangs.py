"""Calls end by their deadline (``call_timeout_ms``) when the server stops answering.

A real redis-server is frozen with SIGSTOP (its sockets stay open, nothing answers: what a
stalled or paused primary looks like), and a plain TCP listener that accepts and never replies
stands in for a partition that drops packets. Every call, on both APIs, must return or raise a
typed error within the deadline (a waiting pop: its wait plus that), ``close()`` too; after
SIGCONT the queue works and nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import dynoqueue.asyncio as dqa
from dynoqueue import CallTimeoutError, ConfigurationError, DynoQueueError, Message, RedisQueues
from dynoqueue.embedded import RedisServer

from .apis import Bridge
from .faults import Ledger, run_under_fault

DEADLINE_MS = 1000
LEASE_MS = 1000
#: Generous: a call may take its deadline, the test allows three times that (slow CI).
SLACK = 3.0


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A server of this module's own: the tests freeze it."""
    with RedisServer() as started:
        yield started


def _build(api: str, bridge: Bridge, url: str, prefix: str, **settings: Any) -> Any:
    factory: Any = dqa.RedisQueues if api == "async" else RedisQueues
    queues = factory.from_url(url, key_prefix=prefix, call_timeout_ms=DEADLINE_MS, **settings)
    return bridge.wrap_factory(queues) if api == "async" else queues


def _timed(call: Callable[[], Any], limit_s: float) -> tuple[float, Any]:
    """Run ``call`` in a daemon thread; (seconds it took, its result or error). A call still
    blocked after ``limit_s`` fails the test (and is left behind, as a hang would be)."""
    out: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            out["value"] = call()
        except BaseException as exc:  # reported, not raised in the thread
            out["value"] = exc
        out["took"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert "took" in out, f"still blocked after {limit_s:.1f} s"
    return out["took"], out["value"]


def _ends_typed(name: str, call: Callable[[], Any], bound_s: float) -> float:
    took, value = _timed(call, bound_s * SLACK)
    assert isinstance(value, CallTimeoutError), f"{name}: {value!r} is not a CallTimeoutError"
    assert took <= bound_s * SLACK, f"{name} took {took:.2f} s"
    return took


@pytest.fixture
def frozen(server: RedisServer) -> Iterator[Callable[[], None]]:
    """Call it to SIGSTOP the server; SIGCONT always follows, at the latest at teardown."""
    assert server.pid is not None
    pid = server.pid
    stopped: list[bool] = []

    def freeze() -> None:
        os.kill(pid, signal.SIGSTOP)
        stopped.append(True)

    try:
        yield freeze
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_calls_on_a_frozen_server_end_by_the_deadline(
        api: str, bridge: Bridge, server: RedisServer, frozen: Callable[[], None]) -> None:
    prefix = f"h{uuid.uuid4().hex[:8]}"
    queues = _build(api, bridge, server.url, prefix, unack_handler_interval_ms=100,
                    unack_timeout_ms=LEASE_MS)
    q = queues.get("jobs")
    q.push([Message("a-held", "x"), Message("b-kept", "before the freeze")])
    (held,) = q.pop(1, wait_ms=0)
    assert held.id == "a-held"
    deadline_s = DEADLINE_MS / 1000
    frozen()
    took = {
        "push": _ends_typed("push", lambda: q.push([Message("during", "y")]), deadline_s),
        "pop": _ends_typed("pop", lambda: q.pop(1, wait_ms=0), deadline_s),
        "waiting pop": _ends_typed("waiting pop", lambda: q.pop(1, wait_ms=1000),
                                   1.0 + deadline_s),
        "ack": _ends_typed("ack", lambda: q.ack(held.id, receipt=held.receipt), deadline_s),
        "size": _ends_typed("size", q.size, deadline_s),
    }
    # close() stops the reprocessor (busy on the frozen server) and the doorbell, in time.
    close_s, error = _timed(queues.close, deadline_s * SLACK + 1.0)
    assert error is None
    print(f"{api}: " + ", ".join(f"{k} {v:.2f} s" for k, v in took.items())
          + f", close {close_s:.2f} s")
    os.kill(server.pid, signal.SIGCONT)  # (the fixture's SIGCONT is then a no-op)

    # After the server returns: nothing acknowledged is lost, and the queue works. A timed-out
    # pop may have leased messages once the server read it: they come back after the lease.
    time.sleep(LEASE_MS / 1000 + 0.2)
    again = _build(api, bridge, server.url, prefix, unack_handler_interval_ms=0)
    try:
        q = again.get("jobs")
        again.process_unacks()
        got = {m.id for m in q.pop(10, wait_ms=0)}
        assert "b-kept" in got  # its push was acknowledged before the freeze
        # "a-held" is back unless the timed-out ack was applied; "during": a push whose
        # outcome was unknown.
        assert got <= {"a-held", "b-kept", "during"}
        assert q.ack("b-kept")
        assert q.push([Message("after", "z")]) == ["after"]
        (after,) = q.pop(1, wait_ms=1000)
        assert q.ack(after.id, receipt=after.receipt)
    finally:
        again.close()


def test_an_async_write_larger_than_the_socket_buffer_waits_for_it_or_ends_by_the_deadline(
        bridge: Bridge, server: RedisServer, frozen: Callable[[], None]) -> None:
    """The asyncio driver writes on the socket itself (``dynoqueue.io.batching.write_batch``);
    a write the socket buffer cannot take at once waits for it to drain, as redis.asyncio
    would: it lands whole while the server reads, and on a frozen server it ends by the
    deadline and drops the connection, so the server never runs the cut-off command."""
    prefix = f"h{uuid.uuid4().hex[:8]}"
    queues = _build("async", bridge, server.url, prefix, unack_handler_interval_ms=0)
    q = queues.get("big")
    payload = "p" * (512 * 1024)
    # 32 MiB in one script call: far more than a loopback socket buffer takes at once.
    first = [Message(f"first-{i}", payload) for i in range(64)]
    assert q.push(first) == [m.id for m in first]
    assert q.size() == 64
    got = q.get("first-63")
    assert got is not None and got.payload == payload
    q.clear()

    frozen()
    took = _ends_typed("big push", lambda: q.push(
        [Message(f"cut-{i}", payload) for i in range(64)]), DEADLINE_MS / 1000)
    os.kill(server.pid or 0, signal.SIGCONT)
    assert q.size() == 0  # the server dropped the partial command with its connection
    assert q.push([Message("after", "z")]) == ["after"]
    assert [m.id for m in q.pop(1, wait_ms=1000)] == ["after"]
    queues.close()
    print(f"a 32 MiB push on a frozen server ended after {took:.2f} s")


@contextlib.contextmanager
def _silent_listener(kind: str) -> Iterator[str]:
    """The URL of a local address that never answers. ``accepts``: connections are accepted
    and held open, nothing is ever sent back (packets to a live connection dropped).
    ``drops``: a listener that never accepts, its backlog full, so the kernel drops new SYNs
    (a DROP partition as new connections see it: connect() hangs)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        host, port = listener.getsockname()
        held: list[socket.socket] = []
        stop = threading.Event()
        thread = None
        if kind == "accepts":
            listener.listen(64)
            listener.settimeout(0.1)

            def accept() -> None:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        held.append(listener.accept()[0])  # held open, never answered

            thread = threading.Thread(target=accept, daemon=True)
            thread.start()
        else:
            listener.listen(0)
            filler = socket.create_connection((host, port), timeout=1)  # fills the backlog
            held.append(filler)
        try:
            yield f"redis://{host}:{port}"
        finally:
            stop.set()
            if thread is not None:
                thread.join(2)
            for conn in held:
                conn.close()


@pytest.mark.parametrize("kind", ["accepts", "drops"])
@pytest.mark.parametrize("api", ["sync", "async"])
def test_calls_to_a_silent_address_end_by_the_deadline(api: str, kind: str,
                                                       bridge: Bridge) -> None:
    """Stand-ins for an iptables DROP partition (no network namespaces here): every call and
    close() end in time, with CallTimeoutError."""
    with _silent_listener(kind) as url:
        queues = _build(api, bridge, url, "silent", unack_handler_interval_ms=100)
        q = queues.get("jobs")
        deadline_s = DEADLINE_MS / 1000
        for name, call, bound in (
                ("push", lambda: q.push([Message("m", "x")]), deadline_s),
                ("pop", lambda: q.pop(1, wait_ms=0), deadline_s),
                ("waiting pop", lambda: q.pop(1, wait_ms=500), 0.5 + deadline_s),
                ("ack", lambda: q.ack("m"), deadline_s),
                ("size", q.size, deadline_s),
                ("ping", queues.ping, deadline_s)):
            _ends_typed(name, call, bound)
        _, error = _timed(queues.close, deadline_s * SLACK + 1.0)
        assert error is None


FREEZE_S = 4.0


@pytest.mark.slow
def test_producers_and_consumers_ride_out_a_frozen_primary(server: RedisServer,
                                                            frozen: Callable[[], None]) -> None:
    """The primary freezes for 4 s under load: calls fail in time with typed errors instead of
    hanging, the load resumes when it does, and no acknowledged push is lost."""
    ledger = Ledger(f"primary frozen {FREEZE_S:.0f} s (SIGSTOP)")
    prefix = f"h{uuid.uuid4().hex[:8]}"
    factories = [RedisQueues.from_url(server.url, key_prefix=prefix, call_timeout_ms=DEADLINE_MS,
                                      unack_timeout_ms=1500, unack_handler_interval_ms=200)
                 for _ in range(2)]
    took: dict[str, float] = {}
    try:
        queues = [f.get("load") for f in factories]

        def freeze() -> None:
            frozen()
            started = time.monotonic()
            # Meanwhile, calls end in time (typed) instead of waiting for the server.
            limit_s = DEADLINE_MS / 1000 * SLACK
            ledger.attempt(["while-frozen"], 0)
            took["push"], error = _timed(
                lambda: queues[0].push([Message("while-frozen", "p")]), limit_s)
            assert isinstance(error, CallTimeoutError), error
            took["pop"], error = _timed(lambda: queues[1].pop(5, wait_ms=200), limit_s + 0.2)
            assert isinstance(error, CallTimeoutError), error
            time.sleep(max(0.0, started + FREEZE_S - time.monotonic()))
            assert server.pid is not None
            os.kill(server.pid, signal.SIGCONT)
            started = time.monotonic()
            while time.monotonic() - started < 10:  # until a push goes through again
                try:
                    queues[0].push([Message(f"probe-{uuid.uuid4().hex[:6]}", "p")])
                    break
                except DynoQueueError:
                    time.sleep(0.05)
            took["back"] = time.monotonic() - started

        run_under_fault(ledger, [queues[0]], queues, freeze)
    finally:
        closing = time.monotonic()
        for f in factories:
            f.close()
        took["close"] = time.monotonic() - closing
    print("\n" + ledger.row() + f"  (frozen: push {took['push']:.2f} s, pop {took['pop']:.2f} s;"
          f" pushes again {took['back']:.2f} s after SIGCONT)")
    assert not ledger.lost, sorted(ledger.lost)[:10]
    assert ledger.early == 0
    assert not ledger.untyped_errors(), ledger.untyped_errors()[:3]
    assert len(ledger.acknowledged) > 100
    # No call hung: the longest gap without an acknowledged push is the freeze plus at most
    # one deadline (a push sent just before SIGSTOP times out only then).
    assert ledger.seconds_unavailable() < FREEZE_S + DEADLINE_MS / 1000 * SLACK
    assert took["close"] < DEADLINE_MS / 1000 * SLACK + 1.0


def test_call_timeout_ms_is_checked_and_sets_the_socket_timeouts(server: RedisServer) -> None:
    for bad in (99, 3_600_001, 1.5, True, "10"):
        with pytest.raises(ConfigurationError, match="call_timeout_ms"):
            RedisQueues.from_url(server.url, call_timeout_ms=bad)
    with RedisQueues.from_url(server.url, call_timeout_ms=2000, unack_handler_interval_ms=0,
                              client_options={"socket_connect_timeout": None}) as queues:
        kwargs = queues.quorum_conn.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 2.0  # a read may take the whole deadline
        assert kwargs["socket_connect_timeout"] == 2.0  # None (forever) is cut to the deadline
    # Sentinel (connects lazily): the data connections and the sentinel clients themselves.
    for factory in (RedisQueues, dqa.RedisQueues):
        queues = factory.from_sentinel([("127.0.0.1", 1)], "primary", call_timeout_ms=2000,
                                       unack_handler_interval_ms=0)
        pool = queues.quorum_conn.connection_pool
        assert pool.connection_kwargs["socket_timeout"] == 2.0
        for sentinel in pool.sentinel_manager.sentinels:
            assert sentinel.connection_pool.connection_kwargs["socket_timeout"] == 0.5
            assert sentinel.connection_pool.connection_kwargs["socket_connect_timeout"] == 0.5
        if factory is RedisQueues:
            queues.close()
        else:
            asyncio.run(queues.aclose())


def _script_calls(server: RedisServer) -> int:
    stats = server.client().info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval"))


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_claim_is_not_sent_again_after_a_read_timeout(
        api: str, bridge: Bridge, server: RedisServer, frozen: Callable[[], None]) -> None:
    """A server stalls longer than one read timeout but less than the deadline. A pop's claim
    is not sent again on a new connection once the server is back (it would lease other
    messages, the first claim's stay leased to nobody): the server runs it once."""
    factory: Any = dqa.RedisQueues if api == "async" else RedisQueues
    built = factory.from_url(server.url, key_prefix=f"h{uuid.uuid4().hex[:8]}",
                             call_timeout_ms=3000, unack_handler_interval_ms=0,
                             client_options={"socket_timeout": 0.3})
    queues = bridge.wrap_factory(built) if api == "async" else built
    try:
        q = queues.get("jobs")
        q.push([Message("m1", "x"), Message("m2", "y")])  # connected, scripts loaded
        before = _script_calls(server)
        frozen()
        outcome: list[Any] = []
        popping = threading.Thread(
            target=lambda: outcome.append(_timed(lambda: q.pop(1, wait_ms=0), 9.0)))
        popping.start()
        time.sleep(0.8)  # the first read timed out at 0.3 s
        assert server.pid is not None
        os.kill(server.pid, signal.SIGCONT)
        popping.join()
        ((took_s, result),) = outcome
        ran = _script_calls(server) - before
        print(f"{api}: pop ended after {took_s:.2f} s with {result!r:.60}; the server ran "
              f"{ran} claim(s)")
        # Not sent again: the caller learns the outcome is unknown (its lease, if the server
        # ran the first claim after all, expires), instead of a second claim's messages.
        assert isinstance(result, CallTimeoutError)
        assert ran <= 1
    finally:
        assert server.pid is not None
        os.kill(server.pid, signal.SIGCONT)
        queues.close()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_stall_shorter_than_the_deadline_is_waited_out(api: str, bridge: Bridge,
                                                          server: RedisServer) -> None:
    """``CLIENT PAUSE 2000 WRITE`` (what a failover does to the old primary) and ``CLIENT
    PAUSE 2000 ALL`` (a stalled server): with a 3 s deadline a push and a pop wait them out
    instead of giving up after one read timeout at half the deadline; a longer stall (``CLIENT
    PAUSE 5000 ALL``) still ends at the deadline."""
    factory: Any = dqa.RedisQueues if api == "async" else RedisQueues
    built = factory.from_url(server.url, key_prefix=f"h{uuid.uuid4().hex[:8]}",
                             call_timeout_ms=3000, unack_handler_interval_ms=0)
    queues = bridge.wrap_factory(built) if api == "async" else built
    admin = server.client()
    try:
        q = queues.get("jobs")
        q.push([Message("warm")])  # connected, scripts loaded
        admin.execute_command("CLIENT", "PAUSE", 2000, "WRITE")
        took, value = _timed(lambda: q.push([Message("paused")]), 10)
        assert value == ["paused"], value
        assert 1.5 <= took <= 3.0 * SLACK
        admin.execute_command("CLIENT", "PAUSE", 2000, "ALL")
        took, value = _timed(lambda: q.pop(5, wait_ms=0), 10)
        assert sorted(m.id for m in value) == ["paused", "warm"]
        assert 1.5 <= took <= 3.0 * SLACK
        admin.execute_command("CLIENT", "PAUSE", 5000, "ALL")
        took = _ends_typed("size during a 5 s pause", q.size, 3.0)
        assert took >= 2.5  # the whole deadline, not half of it
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
        queues.close()
