"""A queue's stored policy is its configuration: deleting messages (``clear()``, ``purge_dead``,
``dynoqueue purge``, Camellia's and Youzan's deletes) keeps it; ``delete_policy()`` and
``dynoqueue policy QUEUE --delete`` remove it. Both APIs, one partition and several, on a real
redis-server; the CLI run for real (``dynoqueue.cli.main``), the HTTP server as a real uvicorn
process."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dynoqueue import ConfigurationError, Message, QueuePolicy, RateLimit, RedisQueues
from dynoqueue.cli import main
from dynoqueue.embedded import RedisServer

LIMITED = QueuePolicy(max_in_flight=2, rate_limit=RateLimit(10, 1000), max_deliveries=3)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("partitions", [1, 4])
def test_clear_and_purge_dead_keep_the_policy_delete_policy_removes_it(
        factories: Callable[..., Any], redis_server: RedisServer, partitions: int) -> None:
    policy = LIMITED if partitions == 1 else QueuePolicy(
        max_in_flight=4, rate_limit=RateLimit(40, 1000), partitions=partitions)
    writer = factories()
    q = writer.get("kept", policy)
    q.push([Message(f"m{i}", "x") for i in range(8)])
    leased = q.pop(1)
    assert q.dead_letter(leased[0].id, "poison")
    assert q.purge_dead() == 1
    assert q.stored_policy() == policy
    q.clear()
    assert q.size() == 0 and q.stored_policy() == policy

    # A process given no policy still applies the stored limits after the clear.
    reader = factories().get("kept")
    assert reader.stored_policy() == policy
    reader.push([Message(f"n{i}", "x") for i in range(8)])
    assert len(reader.unsafe_pop_all_shards(8)) == policy.max_in_flight

    reader.clear()
    assert reader.delete_policy() is True
    assert reader.stored_policy() is None and q.stored_policy() is None
    assert reader.delete_policy() is False
    if partitions > 1:  # every partition's share went too
        with redis.Redis.from_url(redis_server.url) as raw:
            assert not raw.exists(*(part.keys.policy for part in q._core.parts))


@pytest.mark.parametrize("policy", [QueuePolicy(strict_priority=True),
                                    QueuePolicy(partitions=3)], ids=["strict", "partitioned"])
def test_a_layout_policy_is_not_deleted_while_the_queue_holds_messages(
        factories: Callable[..., Any], policy: QueuePolicy) -> None:
    q = factories().get("layout", policy)
    q.push([Message("a", "x"), Message("b", "x")])
    with pytest.raises(ConfigurationError, match="clear or drain"):
        q.delete_policy()
    assert q.stored_policy() == policy and q.size() == 2  # nothing changed
    q.clear()
    assert q.delete_policy() is True


def test_a_plain_policy_is_deleted_while_messages_wait(factories: Callable[..., Any]) -> None:
    q = factories().get("plain", LIMITED)
    q.push([Message(f"m{i}", "x") for i in range(5)])
    assert q.delete_policy() is True
    assert len(factories().get("plain").unsafe_pop_all_shards(5)) == 5  # no cap any more


def opts(server: RedisServer, prefix: str) -> list[str]:
    return ["--url", server.url, "--prefix", prefix]


def test_purge_keeps_the_policy_and_policy_delete_asks(
        redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        queues.get("ops").push([Message(f"m{i}", "x") for i in range(6)])
    code, out, err = cli(capsys, "policy", "ops", "--max-in-flight", "2", "--rate-limit",
                         "10/1000", *opts(redis_server, prefix))
    assert code == 0, err
    assert out == "ops: changed to max_in_flight=2 rate_limit=10/1000ms\n"
    code, out, err = cli(capsys, "purge", "ops", "--yes", "--json", *opts(redis_server, prefix))
    assert code == 0, err
    assert json.loads(out)["policy_kept"] is True
    code, out, _ = cli(capsys, "policy", "ops", *opts(redis_server, prefix))
    assert (code, out) == (0, "ops: max_in_flight=2 rate_limit=10/1000ms\n")
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get("ops")  # given no policy: applies the stored one
        q.push([Message(f"n{i}", "x") for i in range(5)])
        assert len(q.pop(5)) == 2

    code, _, err = cli(capsys, "policy", "ops", "--delete", *opts(redis_server, prefix))
    assert code == 1 and "without --yes" in err
    code, _, err = cli(capsys, "policy", "ops", "--delete", "--max-in-flight", "3",
                       *opts(redis_server, prefix))
    assert code == 2 and "--delete takes no policy fields" in err
    code, out, err = cli(capsys, "policy", "ops", "--delete", "--yes",
                         *opts(redis_server, prefix))
    assert code == 0, err
    assert out == "ops: stored policy deleted (was max_in_flight=2 rate_limit=10/1000ms)\n"
    code, out, _ = cli(capsys, "policy", "ops", "--delete", "--yes", "--json",
                       *opts(redis_server, prefix))
    assert code == 1  # none stored any more
    code, out, _ = cli(capsys, "policy", "ops", *opts(redis_server, prefix))
    assert code == 0 and "none stored" in out


def test_policy_refuses_a_queue_redis_knows_nothing_of_unless_create(
        redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "policy", "nosuchqueue", "--max-in-flight", "3",
                         *opts(redis_server, prefix))
    assert (code, out) == (2, "")
    assert err.startswith("dynoqueue policy: no queue 'nosuchqueue'") and "--create" in err
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix) as queues:
        assert queues.get("nosuchqueue").stored_policy() is None  # nothing written
    code, out, err = cli(capsys, "policy", "nosuchqueue", "--max-in-flight", "3", "--create",
                         "--message-ttl-ms", "60000", "--json", *opts(redis_server, prefix))
    assert code == 0, err
    assert json.loads(out)["policy"]["max_in_flight"] == 3
    code, out, _ = cli(capsys, "policy", "nosuchqueue", *opts(redis_server, prefix))
    assert (code, out) == (0, "nosuchqueue: message_ttl_ms=60000 max_in_flight=3\n")


def test_camellia_and_youzan_deletes_keep_the_policy(redis_server: RedisServer) -> None:
    pytest.importorskip("httpx", reason="dynoqueue serve needs the 'server' extra")
    from .test_server import Served

    served = Served(redis_server.url)
    try:
        with RedisQueues.from_url(redis_server.url, key_prefix=served.prefix,
                                  unack_handler_interval_ms=0) as queues:
            for topic in ("cam", "yz"):
                queues.get(topic).set_policy(LIMITED)
            served.camellia("sendMsg", topic="cam", msgId="c1", msg="x", delayMillis=0)
            assert served.camellia("deleteMsg", topic="cam", msgId="c1")["code"] == 200
            assert served.youzan(command="add", topic="yz", id="y1", delay=0, TTR=5,
                                 body="x").status_code == 200
            assert served.youzan(command="delete", id="y1").json()["success"] is True
            for topic in ("cam", "yz"):
                assert queues.get(topic).stored_policy() == LIMITED
    finally:
        served.close()
