"""The overview of every queue: every registered queue (``P.QUEUES``) and every queue a SCAN
finds appears in ``dynoqueue stats``, ``top`` and ``/api/queues``, with zeros when empty; and
where each partition lives (node ``host:port``, Cluster slot) in ``stats --partitions`` and
``/api/queues``. Real redis-server processes, the CLI run for real, the server a real uvicorn.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from redis.crc import key_slot

from dynoqueue import Message, QueuePolicy, RedisQueues
from dynoqueue.cli import main
from dynoqueue.embedded import RedisServer
from dynoqueue.model.partitions import partition_keys

from .deployments import Deployment


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def drained(url: str, prefix: str, *names: str) -> None:
    """Push to each queue, then ack everything: registered, nothing left in Redis."""
    with RedisQueues.from_url(url, key_prefix=prefix, unack_handler_interval_ms=0) as queues:
        for name in names:
            q = queues.get(name)
            q.push([Message(f"{name}-1", "x")])
            assert q.ack_many(q.pop(1)) == 1


def test_registered_empty_queues_appear_with_zeros(redis_server: RedisServer, prefix: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", redis_server.url, "--prefix", prefix]
    drained(redis_server.url, prefix, "lim", "other")
    code, out, err = cli(capsys, "stats", "--json", *argv)
    assert code == 0, err
    rows = json.loads(out)
    assert sorted({r["queue"] for r in rows}) == ["lim", "other"]
    assert all((r["waiting"], r["leased"], r["dead"]) == (0, 0, 0) for r in rows)
    code, out, err = cli(capsys, "stats", "lim", *argv)  # its zero row, not "no queue"
    assert code == 0 and err == "", err
    assert "lim" in out and "other" not in out
    code, out, err = cli(capsys, "stats", "lim", "--json", *argv)
    assert code == 0, err
    assert [(r["queue"], r["waiting"], r["leased"], r["dead"]) for r in json.loads(out)] == [
        ("lim", 0, 0, 0)]
    code, out, err = cli(capsys, "top", "--iterations", "1", "--json", *argv)
    assert code == 0, err
    assert [(r["queue"], r["waiting"]) for r in json.loads(out)] == [("lim", 0), ("other", 0)]
    # A queue that only has a stored policy (configured, or purged) is listed too.
    assert cli(capsys, "policy", "fresh", "--create", "--max-in-flight", "4", *argv)[0] == 0
    code, out, _ = cli(capsys, "stats", "--json", *argv)
    assert sorted({r["queue"] for r in json.loads(out)}) == ["fresh", "lim", "other"]


def test_no_queues_under_a_prefix_says_so(redis_server: RedisServer, prefix: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "stats", *argv)
    assert (code, out) == (0, f"no queues under prefix '{prefix}' at {redis_server.url}\n")
    code, out, _ = cli(capsys, "stats", "--json", *argv)
    assert (code, json.loads(out)) == (0, [])
    code, out, _ = cli(capsys, "top", "--iterations", "1", *argv)
    assert code == 0 and f"no queues under prefix '{prefix}'" in out


def test_api_queues_lists_registered_queues_and_partitions(redis_server: RedisServer) -> None:
    pytest.importorskip("httpx", reason="dynoqueue serve needs the 'server' extra")
    from .test_server import Served

    prefix = f"t{uuid.uuid4().hex[:10]}"
    drained(redis_server.url, prefix, *(f"q{i}" for i in range(5)))
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        split = queues.get("split", QueuePolicy(partitions=3))
        split.push([Message(f"m{i}", "x") for i in range(30)])
        split.pop(4)
        served = Served(redis_server.url, prefix=prefix)
        try:
            board = {q["queue"]: q for q in served.http.get("/api/queues").json()["queues"]}
        finally:
            served.close()
    assert sorted(board) == ["q0", "q1", "q2", "q3", "q4", "split"]
    assert all(board[f"q{i}"]["waiting"] == board[f"q{i}"]["leased"] == 0 for i in range(5))
    assert board["q0"]["partitions"] == 1 and board["split"]["partitions"] == 3
    node = f"127.0.0.1:{redis_server.port}"
    assert board["q0"]["partition_stats"] == [
        {"partition": 0, "waiting": 0, "leased": 0, "node": node, "slot": None}]
    parts = board["split"]["partition_stats"]
    assert [p["partition"] for p in parts] == [0, 1, 2]
    assert sum(p["waiting"] for p in parts) == 26 and sum(p["leased"] for p in parts) == 4
    assert {p["node"] for p in parts} == {node}
    assert [b["label"] for b in board["split"]["buckets"]][::8] == ["< 1 min", "> 30 days"]


@pytest.mark.slow
@pytest.mark.deployments("cluster")
def test_stats_partitions_and_api_name_each_partitions_node_and_slot(
        deployment: Deployment, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    queues = deployment.build(key_prefix=prefix, unack_handler_interval_ms=0)
    try:
        policy = QueuePolicy(partitions=6)
        queues.get("spread", policy).push([Message(f"m{i}", "x") for i in range(60)])
        topology: Any = deployment.topology
        expected = {}
        for k, keys in enumerate(partition_keys(queues.keys_of("spread"), 6)):
            owner = topology.owner_of(keys.message_hash)
            expected[k] = (f"{owner.host}:{owner.port}", key_slot(keys.message_hash.encode()))
        assert len({node for node, _ in expected.values()}) == 3  # spread over the primaries
        argv = ["--url", deployment.url, "--prefix", prefix]
        assert main(["stats", "spread", "--partitions", "--json", *argv]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert list(rows[0]) == ["queue", "partition", "node", "slot", "shard", "waiting",
                                 "ready", "delayed", "leased", "dead", "oldest_ready_age_ms"]
        assert {r["partition"]: (r["node"], r["slot"]) for r in rows} == expected
        assert main(["stats", "spread", "--partitions", *argv]) == 0
        text = capsys.readouterr().out
        assert "node" in text and "slot" in text
        assert all(node in text and str(slot) in text for node, slot in expected.values())

        pytest.importorskip("httpx", reason="dynoqueue serve needs the 'server' extra")
        from .test_server import Served

        served = Served(deployment.url, prefix=prefix)
        try:
            (board,) = served.http.get("/api/queues").json()["queues"]
        finally:
            served.close()
        assert board["partitions"] == 6
        assert {p["partition"]: (p["node"], p["slot"])
                for p in board["partition_stats"]} == expected
        assert sum(p["waiting"] for p in board["partition_stats"]) == 60
    finally:
        queues.close()
