"""The ops CLI (``dynoqueue stats|peek|get|dead|redrive|remove|purge|top``) against a real
redis-server: in-process through ``dynoqueue.cli.main`` and as a subprocess, tables and
``--json``, and the one-line errors (unreachable Redis, refused credentials, unknown queue or
message, unconfirmed destructive commands)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynoqueue import Message, MessageState, RateLimit, RedisQueues
from dynoqueue.cli import main
from dynoqueue.embedded import RedisServer
from dynoqueue.ops.commands import STATS_FIELDS

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def filled(redis_server: RedisServer, prefix: str) -> Iterator[RedisQueues]:
    """Queue "orders" over three zones: 4 ready, 2 delayed, 1 leased, 2 dead letters."""
    with RedisQueues.from_url(redis_server.url, zones=ZONES, local_zone=ZONES[0],
                              key_prefix=prefix, unack_handler_interval_ms=0) as queues:
        q = queues.get("orders")
        q.push([Message(f"r{i}", f"ready {i}") for i in range(6)])
        q.push([Message(f"d{i}", "later", timeout=600_000) for i in range(2)])
        leased = q.unsafe_pop_all_shards(3)
        assert len(leased) == 3
        assert q.dead_letter(leased[1].id, "poison", error="ValueError: bad gate")
        assert q.dead_letter(leased[2].id, "poison")
        yield queues


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def opts(server: RedisServer, prefix: str) -> list[str]:
    return ["--url", server.url, "--zones", ",".join(ZONES), "--local-zone", ZONES[0],
            "--prefix", prefix]


def test_stats_json_equals_shard_sizes(filled: RedisQueues, redis_server: RedisServer,
                                       prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "stats", "orders", "--json", *opts(redis_server, prefix))
    assert code == 0, err
    rows = json.loads(out)
    sizes = filled.get("orders").shard_sizes()
    assert [tuple(r) for r in rows] == [STATS_FIELDS] * 3
    assert {r["shard"]: (r["waiting"], r["leased"]) for r in rows} == {
        s: (v["size"], v["uacked"]) for s, v in sizes.items()}
    assert sum(r["ready"] for r in rows) == 3 and sum(r["delayed"] for r in rows) == 2
    assert {r["dead"] for r in rows} == {2}
    assert all(r["oldest_ready_age_ms"] >= 0 for r in rows)
    # Without names: every queue under the prefix; the table names the queue and its shards.
    code, out, _ = cli(capsys, "stats", *opts(redis_server, prefix))
    assert code == 0
    assert "orders" in out and all(f" {s} " in out for s in "abc")


def test_peek_get_and_dead(filled: RedisQueues, redis_server: RedisServer, prefix: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    before = filled.get("orders").shard_sizes()
    code, out, _ = cli(capsys, "peek", "orders", "-n", "2", "--json",
                       *opts(redis_server, prefix))
    assert code == 0
    peeked = json.loads(out)
    assert len(peeked) == 2 and all(p["id"].startswith("r") for p in peeked)
    assert filled.get("orders").shard_sizes() == before  # nothing leased by peek

    code, out, _ = cli(capsys, "get", "orders", "d0", "--json", *opts(redis_server, prefix))
    assert code == 0
    info = json.loads(out)
    assert (info["state"], info["code"], info["payload"]) == ("DELAYED", 1, "later")
    assert info["due_at_ms"] > 0 and info["lease_expires_at_ms"] is None
    code, out, _ = cli(capsys, "get", "orders", "d0", *opts(redis_server, prefix))
    assert code == 0 and "DELAYED" in out and "due_at_ms" in out

    code, out, _ = cli(capsys, "dead", "orders", "--json", *opts(redis_server, prefix))
    assert code == 0
    letters = json.loads(out)
    assert [d["reason"] for d in letters] == ["poison", "poison"]
    assert "ValueError: bad gate" in [d["last_error"] for d in letters]
    code, out, _ = cli(capsys, "dead", "orders", *opts(redis_server, prefix))
    assert "2 dead letters" in out and "poison" in out


def test_redrive_remove_and_purge(filled: RedisQueues, redis_server: RedisServer, prefix: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    q = filled.get("orders")
    first, second = (d.message.id for d in q.dead_letters())
    code, out, _ = cli(capsys, "redrive", "orders", first, "--json", *opts(redis_server, prefix))
    assert (code, json.loads(out)) == (0, {"queue": "orders", "redriven": 1})
    assert q.state(first) is MessageState.READY and q.dead_size() == 1
    code, _, err = cli(capsys, "redrive", "orders", *opts(redis_server, prefix))
    assert code == 2 and "--all" in err
    code, out, _ = cli(capsys, "redrive", "orders", "--all", *opts(redis_server, prefix))
    assert code == 0 and "1 dead letters back" in out
    assert q.state(second) is MessageState.READY

    # Destructive commands refuse without --yes when nobody can be asked.
    code, _, err = cli(capsys, "remove", "orders", "r0", *opts(redis_server, prefix))
    assert code == 1 and "without --yes" in err and q.contains("r0")
    code, out, _ = cli(capsys, "remove", "orders", "r0", "--yes", *opts(redis_server, prefix))
    assert code == 0 and not q.contains("r0")
    code, _, err = cli(capsys, "remove", "orders", "r0", "--yes", *opts(redis_server, prefix))
    assert code == 1 and err.strip() == "dynoqueue remove: no message 'r0' in queue 'orders'"

    q.push([Message("x", "x")])
    popped = q.unsafe_pop_with_msg_id_all_shards("x")
    assert popped is not None and q.dead_letter("x", "poison")
    code, out, _ = cli(capsys, "purge", "orders", "--dead", "--yes", "--json",
                       *opts(redis_server, prefix))
    assert (code, json.loads(out)["dead_purged"]) == (0, 1) and q.dead_size() == 0
    code, _, err = cli(capsys, "purge", "orders", *opts(redis_server, prefix))
    assert code == 1 and "without --yes" in err and q.size() > 0
    code, out, _ = cli(capsys, "purge", "orders", "--yes", "--json", *opts(redis_server, prefix))
    assert code == 0 and json.loads(out)["purged"] is True
    assert q.size() == 0 and sum(v["uacked"] for v in q.shard_sizes().values()) == 0
    code, _, err = cli(capsys, "stats", "orders", *opts(redis_server, prefix))
    assert code == 1 and "no queue 'orders'" in err


def test_top_refreshes_with_rates(filled: RedisQueues, redis_server: RedisServer, prefix: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "top", "--iterations", "2", "--interval", "0.1", "--json",
                       *opts(redis_server, prefix))
    assert code == 0
    decoder = json.JSONDecoder()
    frames, at = [], 0
    text = out.strip()
    while at < len(text):
        frame, at = decoder.raw_decode(text, at)
        frames.append(frame)
        at = len(text) - len(text[at:].lstrip())
    assert len(frames) == 2
    assert frames[0][0]["queue"] == "orders" and frames[0][0]["waiting_per_s"] is None
    assert frames[1][0]["waiting_per_s"] == 0 and frames[1][0]["dead"] == 2
    code, out, _ = cli(capsys, "top", "--iterations", "1", "--interval", "0.1",
                       *opts(redis_server, prefix))
    assert code == 0 and "dynoqueue top" in out and "orders" in out


def test_error_lines(redis_server: RedisServer, prefix: str,
                     capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    code, out, err = cli(capsys, "stats", "--url", f"redis://127.0.0.1:{dead_port}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"dynoqueue stats: cannot reach Redis at redis://127.0.0.1:{dead_port}: ")
    wrong = redis_server.url.replace("redis://", "redis://nobody:wrong@")
    code, _, err = cli(capsys, "dead", "orders", "--url", wrong)
    assert code == 2 and err.count("\n") == 1
    assert "refused the credentials" in err and "wrong" not in err  # password masked
    code, _, err = cli(capsys, "get", "nosuch", "id1", "--url", redis_server.url,
                       "--prefix", prefix)
    assert code == 1
    assert err == f"dynoqueue get: no queue 'nosuch' under prefix '{prefix}' at " \
                  f"{redis_server.url}\n"
    code, _, err = cli(capsys, "peek", "bad name", "--url", redis_server.url)
    assert code == 2 and err.count("\n") == 1 and "queue name" in err


def test_subprocess_default_url_and_traceback_free_errors(redis_server: RedisServer,
                                                          prefix: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix) as queues:
        queues.get("jobs").push([Message("j1", "x")])
    done = subprocess.run([sys.executable, "-m", "dynoqueue", "stats", "jobs", "--json",
                           "--url", redis_server.url, "--prefix", prefix],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["waiting"] == 1
    # The default URL is redis://localhost:6379; nothing listens there in the tests, or if
    # something does, the prefix holds no queue "jobs": either way one line, no traceback.
    done = subprocess.run([sys.executable, "-m", "dynoqueue", "get", "jobs", "j1",
                           "--prefix", prefix], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "localhost:6379" in done.stderr


def test_ops_cli_works_with_the_core_install_alone(redis_server: RedisServer,
                                                   prefix: str) -> None:
    """Without prometheus-client, rich or the server's packages: plain tables, and serve says
    which extra to install."""
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix) as queues:
        queues.get("core").push([Message("a", "x")])
    blocked = ("prometheus_client", "rich", "starlette", "uvicorn", "httpx")
    script = ("import sys\n"
              f"for name in {blocked!r}: sys.modules[name] = None\n"
              "from dynoqueue.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, "stats", "--url", redis_server.url,
                           "--prefix", prefix], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == list(STATS_FIELDS) and lines[2].split()[:3] == ["core", "a", "1"]
    done = subprocess.run([sys.executable, "-c", script, "serve", "--url", redis_server.url],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2
    assert "install the server extra: pip install 'dynoqueue[server]'" in done.stderr


def test_a_queue_holding_only_dead_letters_is_listed(redis_server: RedisServer, prefix: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Its message hash is gone (the dead letter lives in its dead set): the overview, the
    metrics' and the dashboard's queue discovery (one listing) must still show it."""
    with RedisQueues.from_url(redis_server.url, zones=ZONES, local_zone=ZONES[0],
                              key_prefix=prefix, unack_handler_interval_ms=0) as queues:
        q = queues.get("poisoned")
        q.push([Message("only")])
        (leased,) = q.unsafe_pop_all_shards(1)
        assert q.dead_letter(leased.id, "poison")
        assert q.dead_size() == 1 and q.size() == 0
    code, out, err = cli(capsys, "stats", "--json", *opts(redis_server, prefix))
    assert code == 0, err
    rows = json.loads(out)
    assert {r["queue"] for r in rows} == {"poisoned"}
    assert {r["dead"] for r in rows} == {1}  # per queue, on each of its shard rows


def test_policy_shows_and_changes_the_stored_policy(filled: RedisQueues, redis_server: RedisServer,
                                                    prefix: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "policy", "orders", *opts(redis_server, prefix))
    assert code == 0, err
    assert "none stored" in out
    code, out, err = cli(capsys, "policy", "orders", "--max-deliveries", "7",
                         "--retention-ms", "60000", "--json", *opts(redis_server, prefix))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["before"] is None
    assert (doc["policy"]["max_deliveries"], doc["policy"]["retention_ms"]) == (7, 60_000)
    code, out, _ = cli(capsys, "policy", "orders", "--max-deliveries", "9", "--json",
                       *opts(redis_server, prefix))
    doc = json.loads(out)
    assert (doc["before"]["max_deliveries"], doc["policy"]["max_deliveries"]) == (7, 9)
    assert doc["policy"]["retention_ms"] == 60_000  # the fields not given keep their values
    assert filled.get("orders").stored_policy().max_deliveries == 9  # one process, no restart
    code, _, err = cli(capsys, "policy", "orders", "--max-deliveries", "-1",
                       *opts(redis_server, prefix))
    assert code == 2 and "max-deliveries" in err


def test_policy_sets_and_removes_the_queue_wide_limits(
        filled: RedisQueues, redis_server: RedisServer, prefix: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "policy", "orders", "--max-in-flight", "5", "--rate-limit",
                         "50/1000", "--json", *opts(redis_server, prefix))
    assert code == 0, err
    assert json.loads(out)["policy"]["rate_limit"] == {"count": 50, "per_ms": 1000}
    stored = filled.get("orders").stored_policy()
    assert (stored.max_in_flight, stored.rate_limit) == (5, RateLimit(50, 1000))
    code, out, err = cli(capsys, "policy", "orders", "--rate-limit", "none",
                         *opts(redis_server, prefix))
    assert code == 0, err
    assert out == "orders: changed to max_in_flight=5\n"  # no raw dict, no defaults
    assert filled.get("orders").stored_policy().rate_limit is None
    for bad in ("50", "50/0", "x/1000", "0/1000"):
        code, _, err = cli(capsys, "policy", "orders", "--rate-limit", bad,
                           *opts(redis_server, prefix))
        assert code == 2 and "COUNT/MS" in err, (bad, err)
    assert filled.get("orders").stored_policy().rate_limit is None  # nothing written
