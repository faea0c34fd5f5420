"""Recurring schedules (``DynoQueue.schedule``): ticks, time zones and DST, catch-up, and each
tick sent exactly once however many factories run passes. Both APIs, real redis-server."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from dynoqueue import (
    InvalidArgumentError,
    Message,
    QueuePolicy,
    RedisQueues,
    StaticShardSupplier,
)
from dynoqueue.embedded import RedisServer
from dynoqueue.metrics import read_stats
from dynoqueue.model.schedules import Schedule, new_schedule, plan

from .conftest import FakeClock, unique

SHARDS = ["a", "b", "c"]
BERLIN = ZoneInfo("Europe/Berlin")


def _schedule(**kwargs: Any) -> Schedule:
    defaults: dict[str, Any] = {"payload": None, "cron": None, "every_ms": None,
                                "timezone": "UTC", "priority": 0, "catch_up": "once",
                                "start_at_ms": None, "now_ms": 1_000_000}
    return new_schedule("s", **{**defaults, **kwargs})


@pytest.mark.parametrize("bad", [
    {}, {"cron": "* * * * *", "every_ms": 1000}, {"cron": "61 * * * *"},
    {"cron": "* * * *"}, {"every_ms": 0}, {"every_ms": True}, {"every_ms": 10, "priority": 100},
    {"every_ms": 10, "catch_up": "some"}, {"cron": "@daily", "timezone": "Mars/Olympus"},
    {"every_ms": 10, "payload": 5}, {"every_ms": 10, "start_at_ms": -1},
    {"every_ms": 10, "timezone": "a" * 300}, {"every_ms": 10, "timezone": "UTC\x00"},
    {"every_ms": 10, "timezone": None},
])
def test_a_bad_definition_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        _schedule(**bad)
    with pytest.raises(InvalidArgumentError, match="@"):
        new_schedule("a@b", payload=None, cron=None, every_ms=10, timezone="UTC", priority=0,
                     catch_up="once", start_at_ms=None, now_ms=0)


def test_a_pass_keeps_at_most_the_next_two_ticks_queued() -> None:
    s = _schedule(every_ms=200, start_at_ms=1_000)
    first = plan(s, 1_000)
    assert first.ticks == [1_000, 1_200]  # not 121 ticks two reprocessor intervals ahead
    assert first.after.next_due_ms == 1_400 and first.after.last_sent_ms == 1_200
    assert plan(first.after, 1_000).ticks == []  # two still to come
    assert plan(first.after, 1_100).ticks == [1_400]  # 1,000 fell due: the next one
    assert plan(first.after, 1_300).ticks == [1_400, 1_600]
    hourly = _schedule(cron="@hourly", now_ms=1_000)
    assert plan(hourly, 1_000).ticks == [3_600_000, 7_200_000]
    # As read: the next tick to fall due, the latest that fell due (never in the future).
    seen = first.after.as_of(1_100)
    assert seen.next_due_ms == 1_200 and seen.last_sent_ms == 1_000
    assert first.after.as_of(999).last_sent_ms is None
    assert first.after.as_of(5_000).last_sent_ms == 1_200  # nothing queued after it
    daily = _schedule(cron="30 5 * * *", timezone="Europe/Berlin", now_ms=1_700_000_000_000)
    made = plan(daily, 1_700_000_000_000).after
    assert made.as_of(1_700_000_000_000).last_sent_ms is None  # not "tomorrow"


def _local(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, BERLIN).strftime("%m-%d %H:%M %Z")


def test_a_berlin_cron_ticks_once_a_day_across_both_dst_changes() -> None:
    spring = int(datetime(2026, 3, 27, 12, tzinfo=BERLIN).timestamp() * 1000)
    s = _schedule(cron="30 2 * * *", timezone="Europe/Berlin", now_ms=spring)
    ticks: list[int] = []
    now = spring
    for _ in range(8 * 24):  # a pass every hour for 8 days, one hour ahead
        done = plan(s, now)
        ticks += done.ticks
        s = done.after
        now += 3_600_000
    assert [_local(t) for t in ticks[:5]] == [
        "03-28 02:30 CET", "03-29 03:00 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST",
        "04-01 02:30 CEST"]
    days = [datetime.fromtimestamp(t / 1000, BERLIN).date() for t in ticks]
    assert len(ticks) == len(set(ticks)) and len(days) == len(set(days))  # once a day
    assert all((b - a).days == 1 for a, b in itertools.pairwise(days))  # every day
    autumn = int(datetime(2026, 10, 23, 12, tzinfo=BERLIN).timestamp() * 1000)
    s = _schedule(cron="30 2 * * *", timezone="Europe/Berlin", now_ms=autumn)
    ticks = []
    for hour in range(5 * 24):
        done = plan(s, autumn + hour * 3_600_000)
        ticks += done.ticks
        s = done.after
    assert [_local(t) for t in ticks][:5] == [
        "10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET", "10-27 02:30 CET",
        "10-28 02:30 CET"]
    assert len(ticks) == len(set(ticks))


@pytest.mark.parametrize("catch_up, expected", [
    ("skip", []), ("once", [2_800]), ("all", [1_000, 1_200, 1_400, 1_600, 1_800, 2_000, 2_200,
                                              2_400, 2_600, 2_800])])
def test_missed_ticks_follow_catch_up(catch_up: str, expected: list[int]) -> None:
    s = _schedule(every_ms=200, start_at_ms=1_000, catch_up=catch_up)
    done = plan(s, 2_900)  # nothing ran from 1,000 to 2,900
    assert done.ticks == [*expected, 3_000, 3_200]


# ---------------------------------------------------------------------------- on a server


def test_schedule_queues_ticks_that_come_due_as_messages(factories: Callable[..., Any]) -> None:
    clock = FakeClock(1_700_000_000_000)
    queues = factories(clock=clock)
    q = queues.get("reminders")
    made = q.schedule("beat", payload="tick", every_ms=1000, priority=3)
    assert made.every_ms == 1000 and made.payload == "tick" and made.priority == 3
    assert made.next_due_ms > clock.now_ms  # the first ticks are queued at once
    assert q.size() >= 2
    start = clock.now_ms
    first = q.unsafe_pop_all_shards(10)  # an interval's first tick is its start: now
    assert [m.id for m in first] == [f"beat@{start}"]
    clock.advance(2_000)
    got = first + q.unsafe_pop_all_shards(10)
    assert sorted(m.id for m in got) == [f"beat@{start + k * 1000}" for k in range(3)]
    assert {(m.payload, m.priority) for m in got} == {("tick", 3)}
    assert [s.id for s in q.schedules()] == ["beat"]
    # Replacing it drops the old definition's queued ticks; removing it drops its own.
    q.ack_many(got)
    q.schedule("beat", payload="new", every_ms=5000)
    assert {m.payload for m in q.peek(100)} <= {"new"}
    assert q.unschedule("beat") and not q.unschedule("beat")
    assert q.schedules() == [] and q.size() == 0


def test_bad_input_writes_nothing(factories: Callable[..., Any]) -> None:
    q = factories().get("strict")
    with pytest.raises(InvalidArgumentError):
        q.schedule("x", cron="not cron")
    with pytest.raises(InvalidArgumentError):
        q.schedule("x", every_ms=10, catch_up="never")
    assert q.schedules() == [] and q.size() == 0


@pytest.mark.parametrize("partitions", [1, 4])
def test_five_factories_in_three_zones_send_each_tick_once(
        factories: Callable[..., Any], partitions: int) -> None:
    """Five factories run passes at random moments for ~4 s and are replaced at random
    (closed and made anew, as a process killed and restarted); a consumer takes every tick.
    Every 200 ms tick from the first to the last is delivered exactly once."""
    policy = QueuePolicy(partitions=partitions)
    first = factories("a", policy=policy)
    q = first.get("beats")
    made = q.schedule("b", every_ms=200)
    start = made.next_due_ms - 0  # the first tick queued is the start (on the grid)
    delivered: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def passes(zone: str) -> None:
        rng = random.Random(zone)
        queues = factories(zone, policy=policy)
        try:
            while not stop.is_set():
                queues.run_schedules()
                if rng.random() < 0.2:  # "killed" and restarted
                    queues.close()
                    queues = factories(zone, policy=policy)
                time.sleep(rng.uniform(0.01, 0.3))
        except BaseException as exc:
            errors.append(exc)

    def consume() -> None:
        while not stop.is_set():
            got = q.unsafe_pop_all_shards(50, wait_ms=100)
            delivered.extend(m.id for m in got)
            q.ack_many(got)

    threads = [threading.Thread(target=passes, args=(SHARDS[i % 3],)) for i in range(5)]
    threads.append(threading.Thread(target=consume))
    for thread in threads:
        thread.start()
    time.sleep(4)
    stop.set()
    for thread in threads:
        thread.join(timeout=20)
    assert not errors, errors
    ticks = sorted(int(i.split("@")[1]) for i in delivered)
    assert len(delivered) == len(set(delivered)), "a tick was sent twice"
    assert len(ticks) >= 15
    assert ticks == [start - (start - ticks[0]) + k * 200 for k in range(len(ticks))], \
        "a tick between the first and the last was missed"


_PASSER = """
import sys, time
from dynoqueue import RedisQueues, StaticShardSupplier
url, prefix, zone = sys.argv[1:4]
queues = RedisQueues.from_url(url, key_prefix=prefix, unack_handler_interval_ms=100,
                              shard_supplier=StaticShardSupplier(["a", "b", "c"], zone))
queues.get("beats")
print("up", flush=True)
time.sleep(3600)  # the reprocessor thread runs a schedule pass every 100 ms until killed
"""


@pytest.mark.slow
def test_sigkilled_processes_in_three_zones_send_each_tick_once(
        redis_server: RedisServer, tmp_path: Any) -> None:
    """Five processes in three zones run schedule passes every 100 ms (their reprocessors);
    one is SIGKILLed and started again every ~0.7 s, at any point of its passes. Over 20 s
    (``DYNOQUEUE_SCHEDULE_SOAK_S`` sets another length: the issue's minute) each 200 ms tick
    from the first to the last is delivered exactly once."""
    import os
    import signal
    import subprocess
    import sys

    prefix = f"t{uuid.uuid4().hex[:10]}"
    script = tmp_path / "passer.py"
    script.write_text(_PASSER)
    env = {**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[1])}

    def start(zone: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, str(script), redis_server.url, prefix, zone],
                                stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        return proc

    with RedisQueues.from_url(redis_server.url, key_prefix=prefix, unack_handler_interval_ms=0,
                              shard_supplier=StaticShardSupplier(SHARDS, "a")) as queues:
        q = queues.get("beats")
        procs = [start(SHARDS[i % 3]) for i in range(5)]
        # Made by a factory of the passers' interval (so its first pass queues ~1.2 s ahead,
        # not a minute), closed at once: from then on only the passers queue ticks.
        with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                  unack_handler_interval_ms=100,
                                  shard_supplier=StaticShardSupplier(SHARDS, "b")) as setup:
            made = setup.get("beats").schedule("b", every_ms=200)
        assert made.start_at_ms is not None and made.next_due_ms - made.start_at_ms < 2_000
        delivered: list[str] = []
        rng = random.Random(7)
        kills = 0
        try:
            soak_s = int(os.environ.get("DYNOQUEUE_SCHEDULE_SOAK_S", "20"))
            ends = time.monotonic() + soak_s
            next_kill = time.monotonic() + 0.7
            while time.monotonic() < ends:
                got = q.unsafe_pop_all_shards(50, wait_ms=100)
                delivered.extend(m.id for m in got)
                q.ack_many(got)
                if time.monotonic() >= next_kill:
                    i = rng.randrange(5)
                    procs[i].send_signal(signal.SIGKILL)
                    procs[i].wait()
                    kills += 1
                    procs[i] = start(SHARDS[i % 3])
                    next_kill = time.monotonic() + rng.uniform(0.3, 1.1)
            end_ms = made.start_at_ms + soak_s * 1000 - 1_000  # ticks surely due by now
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # what fell due last
                got = q.unsafe_pop_all_shards(50, wait_ms=100)
                delivered.extend(m.id for m in got)
                q.ack_many(got)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    ticks = sorted(int(i.split("@")[1]) for i in delivered)
    assert kills >= soak_s * 3 // 4
    assert len(delivered) == len(set(delivered)), "a tick was sent twice"
    assert ticks[0] == made.start_at_ms
    expected = list(range(made.start_at_ms, end_ms, 200))
    assert [t for t in ticks if t < end_ms] == expected, "a tick was missed"


def test_the_ops_cli_lists_schedules(redis_server: RedisServer,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from dynoqueue.cli import main

    prefix = f"t{uuid.uuid4().hex[:10]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        queues.get("mail").schedule("digest", cron="@daily", timezone="Europe/Berlin")
        queues.get("beats").schedule("b", every_ms=500)
    argv = ["--url", redis_server.url, "--prefix", prefix]
    assert main(["schedules", "--json", *argv]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["queue"], r["schedule"], r["cron"], r["every_ms"]) for r in rows] == [
        ("beats", "b", None, 500), ("mail", "digest", "0 0 * * *", None)]
    assert all(r["next_due_ms"] > 0 for r in rows)
    assert main(["schedules", "mail", *argv]) == 0
    out = capsys.readouterr().out
    assert "digest" in out and "Europe/Berlin" in out and "beats" not in out
    assert " UTC" in out  # times show their zone: UTC unless --tz
    assert main(["schedules", "mail", "--tz", "Europe/Berlin", *argv]) == 0
    out = capsys.readouterr().out
    assert " CET" in out or " CEST" in out
    assert main(["schedules", "--tz", "Mars/Olympus", *argv]) == 2


def test_a_berlin_cron_through_the_api_with_an_injected_clock(
        factories: Callable[..., Any]) -> None:
    """02:30 in Europe/Berlin from before the spring change to after the autumn one's week: a
    factory's passes every hour of an injected clock, a consumer of what falls due: one tick a
    day, 03:00 CEST on the spring day, the first 02:30 (CEST) on the autumn day."""
    def ms(*when: int) -> int:
        return int(datetime(*when, tzinfo=BERLIN).timestamp() * 1000)

    seen: list[str] = []
    for start, days in ((ms(2026, 3, 26, 12), 5), (ms(2026, 10, 22, 12), 5)):
        clock = FakeClock(start)
        queues = factories(clock=clock)
        q = queues.get(f"digest-{start}")
        q.schedule("nightly", cron="30 2 * * *", timezone="Europe/Berlin", catch_up="skip")
        for _ in range(days * 24):
            clock.advance(3_600_000)
            queues.run_schedules()
            got = q.unsafe_pop_all_shards(10)
            seen += [_local(int(m.id.split("@")[1])) for m in got]
            q.ack_many(got)
    assert seen == ["03-27 02:30 CET", "03-28 02:30 CET", "03-29 03:00 CEST",
                    "03-30 02:30 CEST", "03-31 02:30 CEST",
                    "10-23 02:30 CEST", "10-24 02:30 CEST", "10-25 02:30 CEST",
                    "10-26 02:30 CET", "10-27 02:30 CET"]


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_one_second_schedule_with_a_consumer_holds_two_ticks_and_is_on_time(
        factories: Callable[..., Any], partitions: int) -> None:
    """With a reprocessor pass once a minute, a 1 s schedule is never more than 2 messages
    (not 121 queued two intervals ahead), and each tick is delivered on time: the claim of a
    tick queues the next one."""
    queues = factories(unack_handler_interval_ms=60_000)
    q = queues.get(unique("beat"), QueuePolicy(partitions=partitions))
    made = q.schedule("beat", every_ms=1000)
    assert q.size() <= 2
    late_ms: list[int] = []
    delivered: list[str] = []
    ends = time.monotonic() + 4.5
    while time.monotonic() < ends:
        got = q.unsafe_pop_all_shards(1, wait_ms=1500)
        at_ms = time.time() * 1000
        late_ms += [int(at_ms - int(m.id.split("@")[1])) for m in got]
        delivered += [m.id for m in got]
        q.ack_many(got)
        assert q.size() <= 2, q.size()
    ticks = sorted(int(i.split("@")[1]) for i in delivered)
    assert len(delivered) == len(set(delivered))
    assert len(ticks) >= 4 and ticks == [ticks[0] + 1000 * k for k in range(len(ticks))]
    assert ticks[0] == made.first_ms
    assert max(late_ms) < 1000, late_ms  # generous: queued a second ahead, not at a pass
    (seen,) = q.schedules()
    assert seen.last_sent_ms is not None and seen.last_sent_ms <= time.time() * 1000 + 50
    assert seen.next_due_ms > seen.last_sent_ms


def test_schedules_and_stats_show_the_last_tick_that_fell_due_never_a_future_one(
        redis_server: RedisServer) -> None:
    """The README's daily 05:30 Berlin schedule: "last sent" is none until 05:30 came, never
    tomorrow's tick queued ahead; the stats count the queued ticks like any message and say
    how many are ticks."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get("mail")
        q.push([Message("other", "x")])
        made = q.schedule("digest", cron="30 5 * * *", timezone="Europe/Berlin")
        assert made.last_sent_ms is None and made.next_due_ms > time.time() * 1000
        (stats,) = read_stats(queues, ["mail"])
        assert stats.total("waiting") == q.size() == 3 and stats.ticks == 2
        assert stats.schedules[0].last_sent_ms is None
    clock = FakeClock(int(datetime(2026, 6, 1, 12, tzinfo=BERLIN).timestamp() * 1000))
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix, clock=clock,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get("faked")
        made = q.schedule("digest", cron="30 5 * * *", timezone="Europe/Berlin")
        tomorrow = int(datetime(2026, 6, 2, 5, 30, tzinfo=BERLIN).timestamp() * 1000)
        assert made.last_sent_ms is None and made.next_due_ms == tomorrow
        clock.advance(tomorrow - clock.now_ms + 60_000)  # 05:31 the next day
        (seen,) = q.schedules()
        assert seen.last_sent_ms == tomorrow and seen.next_due_ms == tomorrow + 86_400_000
        got = q.unsafe_pop_all_shards(10)
        assert [m.id for m in got] == [f"digest@{tomorrow}"]
        q.ack_many(got)
        assert q.size() == 2  # the claim queued the tick after the next one
