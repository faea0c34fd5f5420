"""The Conductor QueueDAO (dynoqueue.conductor) on every deployment and both APIs.

First the scenarios of Conductor's own QueueDAO tests, ported: the dyno era's
``DynoQueueDAOTest``, and ``containsMessageTest``, ``pollMessagesTest`` (issue 399),
``pollDeferredMessagesTest`` (issue 448), ``processUnacksTest`` and the
``setUnackTimeoutIfShorter*`` tests its SQL DAOs share, with dyno-queues' meaning (``get_size``
counts waiting messages; lease calls act on leased ones). Then one test per Conductor bug the
DAO fixes, the units of every parameter, bad input, and the example engine.

Time is an injected FakeClock where a test needs exact due times; the waiting-pop tests use the
real clock. On ``api == "async"`` the DAO is AsyncDynoQueueDAO on the asyncio factory, driven
through the session's event loop (tests/apis.py) by :class:`DaoView`.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dynoqueue import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMessageError,
    LocalOnlyStrategy,
    Message,
    RedisQueues,
    SingleShardSupplier,
)
from dynoqueue.conductor import AsyncDynoQueueDAO, DynoQueueDAO, QueueDAO

from .apis import Bridge, _View
from .conftest import FakeClock, unique

ROOT = Path(__file__).resolve().parent.parent


class DaoView(_View):
    """An AsyncDynoQueueDAO whose coroutine methods block, run on the bridge's event loop."""


def dao_on(queues: Any, api: str, bridge: Bridge) -> Any:
    """The DAO of this run's API on a factory from ``make_queues``."""
    if api == "async":
        return DaoView(AsyncDynoQueueDAO(queues._target), bridge)
    return DynoQueueDAO(queues)


@pytest.fixture
def make_dao(make_queues, api: str, bridge: Bridge, clock: FakeClock) -> Callable[..., Any]:
    """A DAO on one shard "a" (Conductor's test set-up), a 1 s lease and the injected clock;
    ``real_clock=True`` keeps the server's clock; other keywords go to RedisQueues."""

    def build(*, real_clock: bool = False, **settings: Any) -> Any:
        settings.setdefault("shard_supplier", SingleShardSupplier("a"))
        settings.setdefault("unack_timeout_ms", 1000)
        if not real_clock:
            settings["clock"] = clock
        return dao_on(make_queues(**settings), api, bridge)

    return build


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


# ------------------------------------------------------------ Conductor's scenarios, ported


def test_dyno_queue_dao_test(make_dao) -> None:
    """DynoQueueDAOTest.test (and its SQL twin complexQueueTest) step by step."""
    dao, q = make_dao(), unique("TestQueue")
    for i in range(10):
        dao.push(q, f"msg{i}", 0)
    assert dao.get_size(q) == 10
    assert dao.queues_detail() == {q: 10}
    for i in range(10):
        assert dao.push_if_not_exists(q, f"msg{i}", 0) is False
    popped = dao.pop(q, 10, 100)
    assert sorted(popped) == [f"msg{i}" for i in range(10)]
    assert dao.queues_detail_verbose() == {q: {"a": {"size": 0, "uacked": 10}}}
    for message_id in popped:
        assert dao.ack(q, message_id) is True
    assert dao.queues_detail_verbose() == {q: {"a": {"size": 0, "uacked": 0}}}
    assert dao.pop(q, 10, 100) == []
    for i in range(10):
        assert dao.push_if_not_exists(q, f"msg{i}", 0) is True
    assert dao.get_size(q) == 10
    for i in range(10):
        assert dao.contains_message(q, f"msg{i}")
        dao.remove(q, f"msg{i}")
    assert dao.get_size(q) == 0
    for i in range(10):
        dao.push_if_not_exists(q, f"msg{i}", 0)
    dao.flush(q)
    assert dao.get_size(q) == 0
    assert dao.queues_detail_verbose() == {q: {"a": {"size": 0, "uacked": 0}}}


@pytest.mark.one_partition("due order holds within a partition")
def test_contains_message(make_dao) -> None:
    """containsMessageTest (Conductor issue 1892): waiting and leased count, removed do not."""
    dao, q = make_dao(), unique()
    for i in range(10):
        dao.push(q, f"msg{i}", 0)
    assert dao.pop(q, 1, 0) == ["msg0"]
    for i in range(10):
        assert dao.contains_message(q, f"msg{i}")
        dao.remove(q, f"msg{i}")
    assert not any(dao.contains_message(q, f"msg{i}") for i in range(10))
    assert dao.queues_detail_verbose()[q] == {"a": {"size": 0, "uacked": 0}}


@pytest.mark.one_partition("due order holds within a partition")
def test_poll_messages_in_batches_with_payloads_and_priorities(make_dao) -> None:
    """pollMessagesTest (Conductor issue 399): two polls take 3 then 4 of 10; the rest wait.
    All are due in the same millisecond, so the lower priority number comes first."""
    dao, q = make_dao(), unique()
    messages = [Message(f"testmsg-{i}", f'{{"id": {i}, "msg":"test {i}"}}',
                        priority=99 - i if i % 2 == 0 else 0) for i in range(10)]
    dao.push_messages(q, messages)
    assert dao.get_size(q) == 10
    first = dao.poll_messages(q, 3, 10_000)
    assert ids(first) == ["testmsg-1", "testmsg-3", "testmsg-5"]
    second = dao.poll_messages(q, 4, 10_000)
    assert ids(second) == ["testmsg-7", "testmsg-9", "testmsg-8", "testmsg-6"]
    assert [(m.payload, m.priority) for m in second[2:]] == [
        ('{"id": 8, "msg":"test 8"}', 91), ('{"id": 6, "msg":"test 6"}', 93)]
    assert dao.get_size(q) == 3  # waiting only, as dyno-queues (SQL DAOs counted 10)
    assert dao.queues_detail_verbose()[q] == {"a": {"size": 3, "uacked": 7}}


@pytest.mark.one_partition("due order holds within a partition")
def test_poll_deferred_messages(make_dao, clock: FakeClock) -> None:
    """pollDeferredMessagesTest (Conductor issue 448): delayed messages come in a later poll,
    and a poll for more than is due returns what is due."""
    dao, q = make_dao(), unique()
    for i in range(10):
        offset_s = 0 if i < 5 else 5 if i in (6, 7) else 10_000 + i
        dao.push(q, f"testmsg-{i}", offset_s)
    assert dao.get_size(q) == 10
    first = dao.poll_messages(q, 4, 100)
    assert ids(first) == [f"testmsg-{i}" for i in range(4)]
    assert all(dao.ack(q, m.id) for m in first)  # else their leases end: delivered again
    clock.advance(5_000)
    second = dao.poll_messages(q, 3 + 10, 100)
    assert sorted(ids(second)) == ["testmsg-4", "testmsg-6", "testmsg-7"]
    assert dao.get_size(q) == 3


def test_process_unacks(make_dao, clock: FakeClock) -> None:
    """processUnacksTest: a lease that has not run out stays; only the named queue is
    processed; once leases run out they come back (dyno-queues' unack processing)."""
    dao, q, other = make_dao(), unique("process_unacks_test"), unique("other")
    for i in range(10):
        dao.push(q, f"unack-{i}", 0 if i < 4 else 1_000_000)
        dao.push(other, f"other-{i}", 0)
    assert len(dao.poll_messages(q, 100, 10_000)) == 4
    assert len(dao.poll_messages(other, 100, 10_000)) == 10
    assert dao.ack(q, "unack-1")
    assert dao.queues_detail_verbose()[q]["a"]["uacked"] == 3
    dao.process_unacks(q)
    detail = dao.queues_detail_verbose()
    assert detail[q]["a"] == {"size": 6, "uacked": 3}
    assert detail[other]["a"] == {"size": 0, "uacked": 10}
    assert dao.queues_detail()[q] == 6
    clock.advance(1001)  # the 1 s leases ran out
    dao.process_unacks(q)
    detail = dao.queues_detail_verbose()
    assert detail[q]["a"] == {"size": 9, "uacked": 0}
    assert detail[other]["a"] == {"size": 0, "uacked": 10}
    assert sorted(dao.pop(q, 10, 0)) == ["unack-0", "unack-2", "unack-3"]


def test_set_unack_timeout_if_shorter(make_dao, clock: FakeClock) -> None:
    """The setUnackTimeoutIfShorter* tests, on leases (dyno-queues' unack set): shortening
    works, extending and an equal timeout do not, unknown and waiting ids are not leased."""
    dao, q = make_dao(), unique()
    dao.push(q, "m", 0)
    assert dao.pop(q, 1, 0) == ["m"]
    assert dao.set_unack_timeout_if_shorter(q, "m", 3_600_000) is False  # lease: 1 s
    assert dao.set_unack_timeout(q, "m", 500) is True
    assert dao.set_unack_timeout_if_shorter(q, "m", 500) is False  # equal: no change
    assert dao.set_unack_timeout_if_shorter(q, "m", 0) is True
    dao.process_unacks(q)
    assert dao.pop(q, 1, 0) == ["m"]
    assert dao.set_unack_timeout_if_shorter(q, "no-such-message", 0) is False
    dao.push(q, "waiting", 3600)
    assert dao.set_unack_timeout_if_shorter(q, "waiting", 0) is False
    assert dao.set_unack_timeout(q, "waiting", 0) is False
    assert dao.pop(q, 1, 0) == []


# ------------------------------------------------------------ the Conductor bugs fixed


def test_push_messages_honours_each_messages_timeout(make_dao, clock: FakeClock) -> None:
    """Conductor's DynoQueueDAO dropped Message timeouts: everything was due at once."""
    dao, q = make_dao(), unique()
    dao.push_messages(q, [Message("later", "p", timeout=2000, priority=3), Message("now", "n")])
    assert ids(dao.poll_messages(q, 5, 0)) == ["now"]
    assert dao.ack(q, "now")  # else its lease ends before 2 s: delivered again
    clock.advance(1999)
    assert dao.poll_messages(q, 5, 0) == []
    clock.advance(1)
    (later,) = dao.poll_messages(q, 5, 0)
    assert (later.id, later.payload, later.priority, later.shard) == ("later", "p", 3, "a")


def test_push_if_not_exists_is_atomic(make_dao) -> None:
    """Both Conductor DAOs checked, then pushed: racing callers all pushed. Here one wins."""
    dao, q = make_dao(), unique()
    # Connect first: a client still reading the Cluster slot map may repeat a call that ran
    # (redis-py retries MOVED / a lost connection), and a repeated push-if-absent answers
    # False. This test is about the check-then-push race, not about that retry.
    assert dao.get_size(q) == 0 and dao.push_if_not_exists(q, "warm-up", 0)
    dao.remove(q, "warm-up")
    start = threading.Barrier(8)
    results: list[bool] = []

    def push() -> None:
        start.wait()
        results.append(dao.push_if_not_exists(q, "task-1", 0))

    threads = [threading.Thread(target=push) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]
    assert dao.get_size(q) == 1
    assert dao.pop(q, 1, 0) == ["task-1"]
    assert dao.push_if_not_exists(q, "task-1", 0) is False  # leased counts as present
    assert dao.queues_detail_verbose()[q]["a"] == {"size": 0, "uacked": 1}


def test_ack_tells_the_truth(make_dao, clock: FakeClock) -> None:
    """orkes' DAO returned True from every ack."""
    dao, q = make_dao(), unique()
    assert dao.ack(q, "unknown") is False
    dao.push(q, "m", 0)
    assert dao.ack(q, "m") is False  # waiting, never popped: not acked, still there
    assert dao.get_size(q) == 1
    assert dao.pop(q, 1, 0) == ["m"]
    assert dao.ack(q, "m") is True
    assert dao.ack(q, "m") is False
    assert not dao.contains_message(q, "m")
    dao.push(q, "n", 0)
    assert dao.pop(q, 1, 0) == ["n"]
    clock.advance(1001)
    dao.process_unacks(q)  # the lease ran out: n waits again
    assert dao.ack(q, "n") is False


def test_reset_offset_time_keeps_the_priority(make_dao, clock: FakeClock) -> None:
    """dyno-queues' setTimeout dropped the priority; a reset message must still come after a
    message of lower priority number due in the same millisecond."""
    dao, q = make_dao(), unique()
    dao.push(q, "a-prio-50", 100, priority=50)
    dao.push(q, "b-prio-10", 0, priority=10)
    assert dao.reset_offset_time(q, "a-prio-50") is True
    assert dao.pop(q, 2, 0) == ["b-prio-10", "a-prio-50"]
    assert dao.reset_offset_time(q, "unknown") is False


def test_reset_offset_time_leaves_an_in_flight_message_alone(make_dao) -> None:
    """orkes' DAO re-scored in-flight messages too: a running task was delivered again."""
    dao, q = make_dao(), unique()
    dao.push(q, "running", 0)
    assert dao.pop(q, 1, 0) == ["running"]
    assert dao.reset_offset_time(q, "running") is False
    assert dao.pop(q, 1, 0) == []
    assert dao.queues_detail_verbose()[q]["a"] == {"size": 0, "uacked": 1}
    assert dao.reset_offset_time(q, "running", release_leased=True) is True
    assert dao.queues_detail_verbose()[q]["a"] == {"size": 1, "uacked": 0}
    (again,) = dao.poll_messages(q, 1, 0)
    assert (again.id, again.deliveries) == ("running", 2)


def test_set_offset_time_takes_seconds(make_dao, clock: FakeClock) -> None:
    """Conductor 2.x's setOffsetTime passed seconds on as milliseconds."""
    dao, q = make_dao(), unique()
    dao.push(q, "m", 100, priority=7)
    assert dao.set_offset_time(q, "m", 2) is True
    clock.advance(1999)
    assert dao.pop(q, 1, 0) == []
    clock.advance(1)
    (m,) = dao.poll_messages(q, 1, 0)
    assert (m.id, m.priority) == ("m", 7)
    assert dao.set_offset_time(q, "m", 0) is False  # leased
    assert dao.set_offset_time(q, "m", 1, release_leased=True) is True
    clock.advance(999)
    assert dao.pop(q, 1, 0) == []
    clock.advance(1)
    assert dao.pop(q, 1, 0) == ["m"]


def test_postpone_moves_a_message_in_one_step(make_dao, clock: FakeClock) -> None:
    """Conductor's postpone was remove + push: payload and delivery count were lost, and a
    crash in between lost the message. Here a leased message keeps both; an absent one is
    pushed, as Conductor's callers (callbacks of tasks acked at poll time) rely on."""
    dao, q = make_dao(), unique()
    dao.push_messages(q, [Message("task", "input", priority=1)])
    assert dao.pop(q, 1, 0) == ["task"]
    assert dao.postpone(q, "task", 7, 3) is True
    assert dao.queues_detail_verbose()[q]["a"] == {"size": 1, "uacked": 0}
    clock.advance(2999)
    assert dao.pop(q, 1, 0) == []
    clock.advance(1)
    (task,) = dao.poll_messages(q, 1, 0)
    assert (task.payload, task.priority, task.deliveries) == ("input", 7, 2)
    assert dao.postpone(q, "acked-at-poll", 0, 1) is True
    assert dao.contains_message(q, "acked-at-poll")
    clock.advance(1000)
    assert dao.pop(q, 1, 0) == ["acked-at-poll"]


def test_postponed_message_is_never_seen_absent(make_dao) -> None:
    """A reader during many postpones always finds the message (remove + push did not)."""
    dao, q = make_dao(real_clock=True), unique()
    dao.push(q, "wf-1", 0)
    done = threading.Event()
    misses = 0

    def watch() -> None:
        nonlocal misses
        while not done.is_set():
            misses += not dao.contains_message(q, "wf-1")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(40):
            assert dao.postpone(q, "wf-1", i % 100, 0)
    finally:
        done.set()
        watcher.join()
    assert misses == 0
    assert dao.get_size(q) == 1


def test_queues_detail_covers_every_queue_in_redis(make_queues, make_dao, raw, deployment,
                                                   prefix: str, api: str,
                                                   bridge: Bridge) -> None:
    """Conductor's DAOs listed only the queues they had opened, and orkes' reported 0 leased.
    Another process's queues are found, also one whose messages are all leased."""
    # Shards a, b, c; this producer pushes to its own shard a only, so the counts are exact.
    producer = dao_on(make_queues(sharding_strategy=LocalOnlyStrategy("a")), api, bridge)
    names = [unique("task_") for _ in range(8)]
    for name in names:
        producer.push(name, "m1", 0)
    producer.push(names[0], "m2", 0)
    producer.push(names[0], "m3", 3600)
    producer.push_messages(names[1], [Message(f"x{i}") for i in range(3)])
    assert len(producer.pop(names[1], 1, 0)) == 1
    assert producer.pop(names[2], 1, 0) == ["m1"]  # its only message: no waiting set left
    make_queues(key_prefix=f"{prefix}x").get("elsewhere").push([Message("not-ours")])

    dao = dao_on(make_queues(key_prefix=prefix), api, bridge)  # a fresh process: opened nothing
    detail = dao.queues_detail()
    assert sorted(detail) == sorted(names)
    assert detail[names[0]] == 3
    verbose = dao.queues_detail_verbose()
    assert sorted(verbose) == sorted(names)
    empty = {"size": 0, "uacked": 0}
    assert verbose[names[0]] == {"a": {"size": 3, "uacked": 0}, "b": empty, "c": empty}
    assert verbose[names[1]] == {"a": {"size": 3, "uacked": 1}, "b": empty, "c": empty}
    assert verbose[names[2]] == {"a": {"size": 0, "uacked": 1}, "b": empty, "c": empty}
    assert detail[names[2]] == 0
    if deployment.name == "cluster":  # the queues live on several primaries: each was scanned
        nodes = {raw.get_node_from_key(f"{prefix}.MESSAGE.{{{n}}}").name for n in names}
        assert len(nodes) >= 2


def test_queues_detail_matches_the_prefix_literally(make_queues, api: str, bridge: Bridge,
                                                    prefix: str) -> None:
    """Glob characters in the key prefix are escaped: ``p?`` does not list ``px``'s queues."""
    dao_on(make_queues(key_prefix=f"{prefix}x"), api, bridge).push("theirs", "m", 0)
    ours = dao_on(make_queues(key_prefix=f"{prefix}?"), api, bridge)
    assert ours.queues_detail() == {}
    ours.push("mine", "m", 0)
    assert ours.queues_detail() == {"mine": 1}


def test_pop_returns_as_soon_as_one_message_is_due(make_dao) -> None:
    """A poll must not hold due work back to fill its batch, and waits at most timeout_ms."""
    dao, q = make_dao(real_clock=True), unique()
    started = time.monotonic()
    assert dao.pop(q, 5, 300) == []
    assert 0.25 <= time.monotonic() - started < 2.0
    dao.push(q, "due", 0)
    started = time.monotonic()
    assert dao.pop(q, 10, 5000) == ["due"]
    assert time.monotonic() - started < 1.0
    timer = threading.Timer(0.2, dao.push, (q, "arrives", 0))
    timer.start()
    started = time.monotonic()
    try:
        assert dao.pop(q, 10, 5000) == ["arrives"]
    finally:
        timer.join()
    assert time.monotonic() - started < 2.0


# ------------------------------------------------------------ units and bad input


def test_every_unit_is_pinned(make_dao, clock: FakeClock) -> None:
    """offset_time_s and postpone_s are seconds; unack_timeout_ms is milliseconds."""
    dao, q = make_dao(), unique()
    dao.push(q, "push", offset_time_s=3)
    dao.push_if_not_exists(q, "ensure", offset_time_s=3)
    dao.postpone(q, "postpone", 0, postpone_s=3)
    clock.advance(2999)
    assert dao.pop(q, 5, 0) == []
    clock.advance(1)
    popped = sorted(dao.pop(q, 5, 0))
    assert popped == ["ensure", "postpone", "push"]
    for message_id in popped:
        assert dao.set_unack_timeout(q, message_id, unack_timeout_ms=1500)
    clock.advance(1499)
    dao.process_unacks(q)
    assert dao.queues_detail_verbose()[q]["a"] == {"size": 0, "uacked": 3}
    clock.advance(1)
    dao.process_unacks(q)
    assert dao.queues_detail_verbose()[q]["a"] == {"size": 3, "uacked": 0}


BAD_ARGUMENTS = [
    ("push", (-1,), "offset_time_s"),
    ("push", (1.5,), "offset_time_s"),
    ("push", (True,), "offset_time_s"),
    ("push", (0, 100), "priority"),
    ("push", (0, -1), "priority"),
    ("push_if_not_exists", ("3",), "offset_time_s"),
    ("postpone", (100, 1), "priority"),
    ("postpone", (1, -5), "postpone_s"),
    ("set_offset_time", (-1,), "offset_time_s"),
    ("set_unack_timeout", (-1,), "unack_timeout_ms"),
    ("set_unack_timeout_if_shorter", (0.5,), "unack_timeout_ms"),
]


def test_bad_arguments_raise_before_anything_is_written(make_dao) -> None:
    dao, q = make_dao(), unique()
    for call, args, match in BAD_ARGUMENTS:
        with pytest.raises(InvalidArgumentError, match=match):
            getattr(dao, call)(q, "m", *args)
    assert dao.get_size(q) == 0 and not dao.contains_message(q, "m")


def test_other_bad_input(make_dao) -> None:
    dao, q = make_dao(), unique()
    with pytest.raises(InvalidArgumentError, match="count"):
        dao.pop(q, -1, 0)
    with pytest.raises(InvalidArgumentError, match="timeout_ms"):
        dao.poll_messages(q, 1, -1)
    with pytest.raises(InvalidArgumentError, match="release_leased"):
        dao.reset_offset_time(q, "m", release_leased="yes")
    with pytest.raises(InvalidArgumentError, match="message id"):
        dao.push(q, "", 0)
    with pytest.raises(InvalidMessageError):
        dao.push_messages(q, Message("m"))
    with pytest.raises(InvalidMessageError):
        dao.push_messages(q, [Message("ok"), "not a message"])
    with pytest.raises(ConfigurationError):
        dao.push("bad name", "m", 0)
    assert dao.get_size(q) == 0 and not dao.contains_message(q, "ok")
    assert dao.pop(q, 0, 0) == []


# ------------------------------------------------------------ the classes (no Redis needed)


def test_both_daos_have_the_contracts_methods_and_signatures(redis_server) -> None:
    methods = [n for n in vars(QueueDAO) if not n.startswith("_") and callable(vars(QueueDAO)[n])]
    assert len(methods) == 18
    for name in methods:
        contract = inspect.signature(getattr(QueueDAO, name))
        assert inspect.signature(getattr(DynoQueueDAO, name)) == contract, name
        assert inspect.signature(getattr(AsyncDynoQueueDAO, name)) == contract, name
        assert inspect.iscoroutinefunction(getattr(AsyncDynoQueueDAO, name)), name
        assert getattr(AsyncDynoQueueDAO, name).__doc__ == getattr(QueueDAO, name).__doc__
    with RedisQueues.from_url(redis_server.url, key_prefix=unique("cls")) as queues:
        assert isinstance(DynoQueueDAO(queues), QueueDAO)
        with pytest.raises(ConfigurationError, match="asyncio"):
            AsyncDynoQueueDAO(queues)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="RedisQueues"):
        DynoQueueDAO(object())  # type: ignore[arg-type]


def test_the_example_engine_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "conductor_engine.py")],
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("COMPLETED") == 3, result.stdout
    assert "queues_detail_verbose" in result.stdout
