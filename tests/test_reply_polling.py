"""The sync driver busy-polls for quick replies (``reply_spin_us``), and only for those.

A real redis-server answers; what is checked is what a caller sees (whole, right replies,
through reconnects) and when the driver polls (a counting wrapper around ``pinned.Pin.poll``):
a new kind of call polls, a script that takes 20 ms stops being polled for and is polled for
again once it is quick, a zero budget or a single usable CPU never polls. Whether quick calls
go on polling depends on the machine (polling must beat sleeping), so no test counts on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dynoqueue import ConfigurationError, Message, RedisQueues
from dynoqueue.core import requests as rq
from dynoqueue.embedded import RedisServer
from dynoqueue.io import pinned
from dynoqueue.io.sync import SyncDriver

pytestmark = pytest.mark.skipif(not pinned.can_poll(), reason="polls on Linux with 2+ CPUs only")

#: A script that keeps the server busy for about 20 ms while its key holds "slow", then
#: answers 1; and a quick one.
_BUSY_20MS = ("if redis.call('GET', KEYS[1]) == 'slow' then "
              "local t = redis.call('TIME') local start = t[1] * 1e6 + t[2] "
              "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - start >= 20000 end "
              "return 1")
_QUICK = "return 2"


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times pinned.Pin.poll ran, in this thread and others (a one-item list)."""
    count = [0]
    poll = pinned.Pin.poll

    def counted(pin: Any, until_ns: int) -> None:
        count[0] += 1
        poll(pin, until_ns)

    monkeypatch.setattr(pinned.Pin, "poll", counted)
    return count


@pytest.fixture
def queues(redis_server: RedisServer) -> Iterator[RedisQueues]:
    with RedisQueues.from_url(redis_server.url, key_prefix=f"spin{uuid.uuid4().hex[:8]}",
                              unack_handler_interval_ms=0) as factory:
        yield factory


def _script(driver: SyncDriver, head: tuple[Any, ...]) -> Any:
    def op() -> rq.Op[Any]:
        return (yield rq.Command(rq.QUORUM, head, head=head))
    return driver.run(op())


@pytest.mark.parametrize("value", [-1, 10_001, True, "200", 1.5])
def test_bad_reply_spin_us_is_refused_before_anything_is_written(
        redis_server: RedisServer, value: object) -> None:
    prefix = f"spinbad{uuid.uuid4().hex[:8]}"
    client = redis_server.client()
    with pytest.raises(ConfigurationError, match="reply_spin_us"):
        RedisQueues.from_url(redis_server.url, key_prefix=prefix, reply_spin_us=value)
    assert client.keys(f"*{prefix}*") == []


def test_quick_calls_poll_and_read_whole_replies(queues: RedisQueues, polls: list[int]) -> None:
    queue = queues.get("quick")
    for i in range(50):
        assert queue.push([Message(f"one-{i}", "x" * (i * 37))]) == [f"one-{i}"]
    # The first call of a kind polls, and one in 16 tries polling whatever is preferred (on
    # a quiet machine nearly all poll; where every CPU is busy, polling gains nothing).
    assert polls[0] >= 3
    big = [Message(f"big-{i}", "y" * 300) for i in range(500)]
    assert queue.push(big) == [m.id for m in big]
    popped = queue.pop(550, wait_ms=0)
    assert sorted(m.id for m in popped) == sorted([f"one-{i}" for i in range(50)]
                                                   + [m.id for m in big])
    assert {m.id: m.payload for m in popped}["one-49"] == "x" * (49 * 37)
    assert queue.ack_many(popped) == len(popped)


def test_a_slow_script_stops_polling_and_polls_again_once_quick(
        redis_server: RedisServer, polls: list[int]) -> None:
    client = redis_server.client()
    key = f"spin-slow-{uuid.uuid4().hex[:8]}"
    client.set(key, "slow")
    driver = SyncDriver(client, client, reply_spin_us=500)
    busy = ("EVAL", _BUSY_20MS, 1, key)  # one head: one kind of call
    try:
        for _ in range(3):
            assert _script(driver, busy) == 1
        before = polls[0]
        for _ in range(5):  # learned: 20 ms is far past 0.5 ms
            assert _script(driver, busy) == 1
        assert polls[0] == before
        # The same call, quick now: polled for again once its moving average of waits has
        # come down, long before 60 calls.
        client.set(key, "quick")
        resumed = None
        for n in range(60):
            before = polls[0]
            assert _script(driver, busy) == 1
            if polls[0] > before:
                resumed = n
                break
        assert resumed is not None
    finally:
        driver.release()


def test_tries_of_polling_a_slow_call_grow_rare(redis_server: RedisServer,
                                                polls: list[int]) -> None:
    client = redis_server.client()
    key = f"spin-rare-{uuid.uuid4().hex[:8]}"
    client.set(key, "slow")
    script = _BUSY_20MS.replace("20000", "2000")  # 2 ms: far past the 0.3 ms budget
    driver = SyncDriver(client, client, reply_spin_us=300)
    busy = ("EVAL", script, 1, key)
    try:
        for _ in range(2):
            _script(driver, busy)
        before = polls[0]
        for _ in range(240):
            assert _script(driver, busy) == 1
        # Tries come 16, 32, 64, 128 calls apart (a try every 16th call would be 15 of them).
        assert 1 <= polls[0] - before <= 5
    finally:
        driver.release()


def test_kinds_are_learned_apart(redis_server: RedisServer, polls: list[int]) -> None:
    client = redis_server.client()
    driver = SyncDriver(client, client, reply_spin_us=500)
    try:
        key = f"spin-kinds-{uuid.uuid4().hex[:8]}"
        client.set(key, "slow")
        busy = ("EVAL", _BUSY_20MS, 1, key)
        for _ in range(4):
            _script(driver, busy)
        before = polls[0]
        for _ in range(5):
            assert _script(driver, ("EVAL", _QUICK, 0)) == 2
        assert polls[0] - before >= 4  # a different head: its own history, quick
    finally:
        driver.release()


def test_zero_budget_never_polls(redis_server: RedisServer, polls: list[int]) -> None:
    with RedisQueues.from_url(redis_server.url, key_prefix=f"spin0{uuid.uuid4().hex[:8]}",
                              unack_handler_interval_ms=0, reply_spin_us=0) as factory:
        queue = factory.get("q")
        for i in range(20):
            queue.push([Message(f"m{i}", "x")])
        assert len(queue.pop(20, wait_ms=0)) == 20
    assert polls[0] == 0


def test_threads_poll_their_own_connections(queues: RedisQueues, polls: list[int]) -> None:
    queue = queues.get("threads")
    errors: list[BaseException] = []

    def produce(t: int) -> None:
        try:
            for i in range(200):
                assert queue.push([Message(f"t{t}-{i}", "p")]) == [f"t{t}-{i}"]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert queue.size() == 800
    assert polls[0] > 0


def test_a_single_cpu_never_polls(redis_server: RedisServer) -> None:
    code = ("import os, sys\n"
            "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from dynoqueue import RedisQueues, Message\n"
            "from dynoqueue.io import pinned\n"
            "calls = []\n"
            "pinned.Pin.poll = lambda pin, until: calls.append(until)\n"
            "with RedisQueues.from_url(sys.argv[1], key_prefix='spincpu',\n"
            "                          unack_handler_interval_ms=0) as qs:\n"
            "    q = qs.get('q')\n"
            "    for i in range(20):\n"
            "        q.push([Message(f'm{i}', 'x')])\n"
            "    assert len(q.pop(20, wait_ms=0)) == 20\n"
            "print('polls', len(calls))\n")
    out = subprocess.run([sys.executable, "-c", code, redis_server.url], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "polls 0"


def test_a_reconnect_is_adopted_and_pollable(queues: RedisQueues,
                                             redis_server: RedisServer) -> None:
    queue = queues.get("reconnect")
    queue.push([Message("before", "x")])
    admin = redis_server.client()
    killed = admin.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    assert queue.push([Message("after", "y")]) == ["after"]  # retried on a new socket
    pin = queues._driver._pinned.quorum
    assert pin.sock is pin.conn._sock and pin.pollable
    assert sorted(m.id for m in queue.pop(2, wait_ms=0)) == ["after", "before"]


def test_a_forked_child_may_poll_though_a_parent_thread_was_polling() -> None:
    pinned.POLLING[0] = True  # as if another thread of this process were polling now
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if it may poll
            os._exit(0 if pinned.POLLING[0] is False else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        pinned.POLLING[0] = False
