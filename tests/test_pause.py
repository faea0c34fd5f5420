"""Queue pause (``DynoQueue.pause()`` / ``resume()`` / ``is_paused()``, bullmq's model): a paused
queue takes pushes and acks, its claims deliver nothing (a waiting pop sleeps and wakes on
resume), the flag is stored configuration that ``clear()`` keeps, on every partition; both
APIs, the CLI, the stats and the Prometheus gauge.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from dynoqueue import Message, QueuePolicy, RedisQueues
from dynoqueue.cli import main
from dynoqueue.embedded import RedisServer
from dynoqueue.metrics import read_stats
from dynoqueue.metrics.collector import SnapshotCollector

from .conftest import unique


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_paused_queue_takes_pushes_and_acks_and_delivers_nothing(
        factories: Callable[..., Any], partitions: int) -> None:
    queues = factories()
    q = queues.get(unique("paused"), QueuePolicy(partitions=partitions))
    q.push([Message(f"m{i}", "x") for i in range(4)])
    (leased,) = q.pop(1)
    assert q.is_paused() is False
    assert q.pause() is True
    assert q.pause() is False  # paused already
    assert q.is_paused() is True
    # Another process sees the stored flag.
    assert factories().get(q.name).is_paused() is True

    assert q.pop(4) == []
    assert q.unsafe_pop_all_shards(4) == []
    assert q.pop_with_msg_id("m3") is None
    assert q.pop_msg_with_predicate("x") is None
    assert q.ack(leased.id) is True  # acks go on
    q.push([Message("late", "x")])  # and pushes
    assert q.size() == 4

    q.clear()  # configuration: clear() keeps the pause
    assert q.is_paused() is True
    q.push([Message("after-clear", "x")])
    assert q.pop(1) == []

    assert q.resume() is True
    assert q.resume() is False
    assert q.is_paused() is False
    assert [m.id for m in q.pop(5)] == ["after-clear"]


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_waiting_pop_sleeps_while_paused_and_wakes_on_resume(
        factories: Callable[..., Any], partitions: int) -> None:
    # A poll interval longer than the wait: only the resume's doorbell can wake the pop in time.
    queues = factories(poll_interval_ms=60_000)
    q = queues.get(unique("sleeper"), QueuePolicy(partitions=partitions))
    q.pause()
    q.push([Message("job", "x")])
    got: list[Any] = []
    took: list[float] = []

    def consume() -> None:
        started = time.monotonic()
        got.extend(q.unsafe_pop_all_shards(1, wait_ms=20_000))
        took.append(time.monotonic() - started)

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(1.0)
    assert consumer.is_alive() and not got  # paused: the message is due, nothing delivered
    q.resume()
    consumer.join(timeout=30)
    assert [m.id for m in got] == ["job"]
    assert took[0] < 10.0, took  # woken by the ring, well before the wait's end (20 s)


def test_the_cli_pauses_and_resumes_and_the_stats_and_gauge_show_it(
        redis_server: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    prefix, name = unique("ops"), unique("ops")
    common = ["--url", redis_server.url, "--prefix", prefix]
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get(name)
        assert main(["pause", "nosuchqueue", *common]) == 1  # a typo is refused
        assert "no queue 'nosuchqueue'" in capsys.readouterr().err
        q.push([Message("a", "x")])
        assert main(["pause", name, *common]) == 0
        assert capsys.readouterr().out.strip() == f"{name}: paused"
        assert q.is_paused() and q.pop(1) == []

        (stats,) = read_stats(queues, [name])
        assert stats.paused is True
        registry = CollectorRegistry()
        registry.register(SnapshotCollector([stats]))
        gauge = f'dynoqueue_queue_paused{{queue="{name}"}} 1.0'
        assert gauge in generate_latest(registry).decode()

        assert main(["resume", name, *common, "--json"]) == 0
        assert '"paused": false' in capsys.readouterr().out
        assert not q.is_paused() and [m.id for m in q.pop(1)] == ["a"]
        (stats,) = read_stats(queues, [name])
        assert stats.paused is False
