"""``dynoqueue serve`` as a real uvicorn process on a free loopback port, driven over HTTP with
httpx, with requests shaped as Camellia's documentation and Youzan's protocol show them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from dynoqueue import Message, MessageState, RedisQueues
from dynoqueue.embedded import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
CAMELLIA = "/camellia/delayQueue"
FORM = {"Content-Type": "application/x-www-form-urlencoded;charset=utf-8"}




class Served:
    """One ``dynoqueue serve`` process and an httpx client to it."""

    def __init__(self, redis_url: str, *options: str, token: str | None = None,
                 prefix: str | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.prefix = prefix or f"s{uuid.uuid4().hex[:10]}"
        argv = [sys.executable, "-m", "dynoqueue", "serve", "--url", redis_url, "--port",
                str(self.port), "--prefix", self.prefix, *options]
        if token:
            argv += ["--token", token]
        self.process = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.base, timeout=30, headers=headers)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                out = self.process.stdout.read().decode() if self.process.stdout else ""
                raise RuntimeError(f"dynoqueue serve did not start: {out}")
            time.sleep(0.1)

    def camellia(self, call: str, **fields: Any) -> dict[str, Any]:
        reply = self.http.post(f"{CAMELLIA}/{call}", content=_form(fields), headers=FORM)
        assert reply.status_code == 200, reply.text
        doc: dict[str, Any] = reply.json()
        return doc

    def youzan(self, **command: Any) -> httpx.Response:
        return self.http.post("/youzan/delayQueue", json=command)

    def close(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _form(fields: dict[str, Any]) -> str:
    return httpx.QueryParams({k: str(v).lower() if isinstance(v, bool) else str(v)
                              for k, v in fields.items()}).__str__()


@pytest.fixture(scope="module")
def server(redis_server: RedisServer) -> Iterator[Served]:
    # 500 held long polls from one address: over the default cap of 16 per client.
    served = Served(redis_server.url, "--index-sweep-ms", "200", "--unack-interval-ms", "100",
                    "--max-long-polls-per-client", "600")
    yield served
    served.close()


def topic() -> str:
    return f"topic-{uuid.uuid4().hex[:8]}"


def test_camellia_send_pull_ack_get_delete(server: Served) -> None:
    t = topic()
    sent = server.camellia("sendMsg", topic=t, msgId="m1", msg="abc", delayMillis=0,
                           ttlMillis=60_000, maxRetry=3)
    assert sent["code"] == 200 and sent["msg"] == "success"
    msg = sent["delayMsg"]
    assert set(msg) == {"topic", "msgId", "msg", "produceTime", "triggerTime", "expireTime",
                        "maxRetry", "retry", "status", "headers"}
    assert (msg["topic"], msg["msgId"], msg["msg"], msg["maxRetry"], msg["retry"],
            msg["status"]) == (t, "m1", "abc", 3, 0, 2)
    assert msg["triggerTime"] == msg["produceTime"]
    assert msg["expireTime"] == msg["triggerTime"] + 60_000
    # msgId dedup: the first wins.
    again = server.camellia("sendMsg", topic=t, msgId="m1", msg="other", delayMillis=5000)
    assert again["delayMsg"]["msg"] == "abc"
    generated = server.camellia("sendMsg", topic=t, msg="no id", delayMillis=60_000)
    assert len(generated["delayMsg"]["msgId"]) == 32 and generated["delayMsg"]["status"] == 1

    pulled = server.camellia("pullMsg", topic=t, ackTimeoutMillis=30_000, batch=10)
    assert [m["msgId"] for m in pulled["delayMsgList"]] == ["m1"]
    assert pulled["delayMsgList"][0]["status"] == 3 and pulled["delayMsgList"][0]["retry"] == 1
    assert server.camellia("pullMsg", topic=t)["delayMsgList"] == []
    assert server.camellia("ackMsg", topic=t, msgId="m1") == {"code": 200, "msg": "success"}
    got = server.camellia("getMsg", topic=t, msgId="m1")
    assert got["code"] == 200 and got["delayMsg"]["status"] == 4  # kept for the retention

    delayed_id = generated["delayMsg"]["msgId"]
    assert server.camellia("getMsg", topic=t, msgId=delayed_id)["delayMsg"]["status"] == 1
    assert server.camellia("deleteMsg", topic=t, msgId=delayed_id, release=False) == {
        "code": 200, "msg": "success"}
    assert server.camellia("getMsg", topic=t, msgId=delayed_id)["delayMsg"]["status"] == 7
    assert server.camellia("getMsg", topic=t, msgId="never")["code"] == 404
    assert server.camellia("deleteMsg", topic=t, msgId="never")["code"] == 404

    monitor = server.http.get(f"{CAMELLIA}/getMonitorData").json()
    (stats,) = [s for s in monitor["data"]["requestStatsList"] if s["topic"] == t]
    assert (stats["sendMsg"], stats["pullMsg"], stats["ackMsg"], stats["deleteMsg"]) == (
        3, 2, 1, 2)
    assert any(g["topic"] == t and g["count"] == 1
               for g in monitor["data"]["pullMsgTimeGapStatsList"])


def test_camellia_nack_retry_and_max_retry(server: Served) -> None:
    t = topic()
    server.camellia("sendMsg", topic=t, msgId="r", msg="x", delayMillis=0, maxRetry=1)
    first = server.camellia("pullMsg", topic=t)["delayMsgList"]
    assert [m["retry"] for m in first] == [1]
    server.camellia("ackMsg", topic=t, msgId="r", ack=False)  # back at once
    second = server.camellia("pullMsg", topic=t)["delayMsgList"]
    assert [m["retry"] for m in second] == [2]
    server.camellia("ackMsg", topic=t, msgId="r", ack=False)  # its last delivery: dead
    assert server.camellia("getMsg", topic=t, msgId="r")["delayMsg"]["status"] == 6
    # A lease that is not acked in time comes back (the server runs the unack processing).
    server.camellia("sendMsg", topic=t, msgId="slow", msg="x", delayMillis=0)
    assert server.camellia("pullMsg", topic=t, ackTimeoutMillis=100)["delayMsgList"]
    deadline = time.monotonic() + 10
    while not (again := server.camellia("pullMsg", topic=t)["delayMsgList"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert again[0]["msgId"] == "slow" and again[0]["retry"] == 2


def test_camellia_topic_info(server: Served) -> None:
    t = topic()
    for i, delay in enumerate([0, 0, 30_000, 300_000, 7_200_000]):
        server.camellia("sendMsg", topic=t, msgId=f"m{i}", msg="x", delayMillis=delay)
    server.camellia("pullMsg", topic=t)
    info = server.http.get(f"{CAMELLIA}/getTopicInfo", params={"topic": t}).json()
    assert info["code"] == 200
    assert info["data"] == {
        "topic": t, "waitingQueueSize": 3, "readyQueueSize": 1, "ackQueueSize": 1,
        "waitingQueueInfo": {"sizeOf0To1min": 1, "sizeOf1minTo10min": 1,
                             "sizeOf10minTo30min": 0, "sizeOf30minTo1hour": 0,
                             "sizeOf1hourTo6hour": 1, "sizeOf6hourTo1day": 0,
                             "sizeOf1dayTo7day": 0, "sizeOf7dayTo30day": 0,
                             "sizeOf30dayToInfinite": 0}}
    listed = server.http.get(f"{CAMELLIA}/getTopicInfoList").json()
    assert info["data"] in listed["data"]


def test_bad_input_gets_400_in_camellia_shape_and_writes_nothing(
        server: Served, redis_server: RedisServer) -> None:
    t = topic()
    cases = [({"msg": "x", "delayMillis": 0}, "topic is empty"),
             ({"topic": t, "delayMillis": 0}, "msg is empty"),
             ({"topic": t, "msg": "x"}, "delayMillis is required"),
             ({"topic": t, "msg": "x", "delayMillis": "soon"}, "delayMillis must be an integer"),
             ({"topic": "bad topic", "msg": "x", "delayMillis": 0}, "topic"),
             ({"topic": t, "msg": "x" * (1024 * 1024 + 1), "delayMillis": 0}, "bytes")]
    for fields, text in cases:
        reply = server.http.post(f"{CAMELLIA}/sendMsg", content=_form(fields), headers=FORM)
        assert reply.status_code == 400, (fields, reply.text)
        assert reply.json()["code"] == 400 and text in reply.json()["msg"]
        assert "Traceback" not in reply.text
    reply = server.http.post(f"{CAMELLIA}/pullMsg", content=_form({"topic": t, "batch": 5000}),
                             headers=FORM)
    assert reply.status_code == 400 and reply.json()["code"] == 400
    reply = server.http.post(f"{CAMELLIA}/ackMsg", content=_form(
        {"topic": t, "msgId": "x", "ack": "maybe"}), headers=FORM)
    assert reply.status_code == 400
    # Nothing was written: every field is checked before the topic is even served (which
    # stores its policy).
    assert redis_server.client().keys(f"*{t}*") == []
    assert server.http.get("/no/such/route").status_code == 404


def test_long_poll_returns_within_50ms_of_due(server: Served) -> None:
    t = topic()

    async def main() -> tuple[dict[str, Any], float]:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            poll = asyncio.ensure_future(client.post(f"{CAMELLIA}/longPollingMsg", headers=FORM,
                                                     content=_form({
                                                         "topic": t,
                                                         "longPollingTimeoutMillis": 5000})))
            await asyncio.sleep(0.3)  # the poll is held
            sent = await client.post(f"{CAMELLIA}/sendMsg", headers=FORM, content=_form(
                {"topic": t, "msgId": "due", "msg": "x", "delayMillis": 700}))
            reply = await poll
            returned_ms = time.time() * 1000
            assert [m["msgId"] for m in reply.json()["delayMsgList"]] == ["due"]
            return sent.json()["delayMsg"], returned_ms

    sent, returned_ms = asyncio.run(main())
    late_ms = returned_ms - sent["triggerTime"]
    print(f"\nlong poll returned {late_ms:.1f} ms after the message fell due")
    assert 0 <= late_ms < 500


def test_500_concurrent_long_polls_on_one_server(server: Served) -> None:
    t = topic()
    polls, per_client = 500, 50  # httpx's pool slows down past ~100 connections per client

    async def main() -> tuple[list[list[str]], float]:
        clients = [httpx.AsyncClient(base_url=server.base, timeout=60,
                                     limits=httpx.Limits(max_connections=per_client))
                   for _ in range(polls // per_client)]

        async def poll(client: httpx.AsyncClient) -> list[str]:
            reply = await client.post(f"{CAMELLIA}/longPollingMsg", headers=FORM,
                                      content=_form({"topic": t, "batch": 1,
                                                     "longPollingTimeoutMillis": 30_000}))
            assert reply.status_code == 200
            return [m["msgId"] for m in reply.json()["delayMsgList"]]

        try:
            waiting = [asyncio.ensure_future(poll(clients[i // per_client]))
                       for i in range(polls)]
            await asyncio.sleep(3)  # every poll is held
            assert not any(w.done() for w in waiting)
            started = time.monotonic()
            async with httpx.AsyncClient(base_url=server.base, timeout=60) as sender:
                for i in range(0, polls, 50):
                    await asyncio.gather(*(sender.post(
                        f"{CAMELLIA}/sendMsg", headers=FORM,
                        content=_form({"topic": t, "msgId": f"m{j}", "msg": "x",
                                       "delayMillis": 0})) for j in range(i, i + 50)))
            got = await asyncio.gather(*waiting)
            return got, time.monotonic() - started
        finally:
            for client in clients:
                await client.aclose()

    got, seconds = asyncio.run(main())
    print(f"\n{polls} held long polls answered {seconds:.2f} s after the first send")
    assert all(len(ids) == 1 for ids in got)
    assert sorted(i for ids in got for i in ids) == sorted(f"m{j}" for j in range(polls))
    assert seconds < 25  # well inside the polls' 30 s hold


def test_youzan_commands(server: Served, redis_server: RedisServer) -> None:
    t, other = topic(), topic()
    job = f"job-{uuid.uuid4().hex[:6]}"
    reply = server.youzan(command="add", topic=t, id=job, delay=0, TTR=1, body="hello")
    assert reply.status_code == 200
    assert reply.json() == {"success": True, "error": "", "id": job, "value": None}
    clash = server.youzan(command="add", topic=other, id=job, delay=0, TTR=5, body="x")
    assert clash.status_code == 409 and clash.json()["success"] is False  # ids span topics
    popped = server.youzan(command="pop", topic=t).json()
    assert popped == {"success": True, "error": "", "id": job, "value": "hello", "headers": {}}
    assert server.youzan(command="pop", topic=t).json()["id"] is None
    # TTR 1 s: not finished in time, it is reserved again.
    deadline = time.monotonic() + 10
    while (again := server.youzan(command="pop", topic=t, timeout=1).json())["id"] is None:
        assert time.monotonic() < deadline
    assert again["id"] == job
    assert server.youzan(command="finish", id=job).json()["success"] is True
    index = redis_server.client()
    assert index.hget(f"{server.prefix}.YOUZAN.INDEX", job) is None  # dropped with the job
    assert server.youzan(command="finish", id=job).status_code == 404

    later = f"later-{uuid.uuid4().hex[:6]}"
    server.youzan(command="add", topic=t, id=later, delay=60, TTR=5, body="x")
    finish = server.youzan(command="finish", id=later)
    assert finish.status_code == 409 and "not reserved" in finish.json()["error"]
    assert server.youzan(command="delete", id=later).json() == {
        "success": True, "error": "", "id": later, "value": None}
    assert server.youzan(command="delete", id=later).status_code == 404

    # A job acked through another protocol leaves the index at the next sweep.
    third = f"third-{uuid.uuid4().hex[:6]}"
    server.youzan(command="add", topic=t, id=third, body="x")
    assert server.youzan(command="pop", topic=t).json()["id"] == third
    server.camellia("ackMsg", topic=t, msgId=third)
    deadline = time.monotonic() + 10
    while index.hget(f"{server.prefix}.YOUZAN.INDEX", third) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)

    for bad, status in [({"command": "add", "topic": t, "id": "x", "delay": "1"}, 400),
                        ({"command": "add", "topic": t}, 400),
                        ({"command": "jump"}, 400), ({"command": "pop"}, 400)]:
        reply = server.http.post("/youzan/delayQueue", json=bad)
        assert reply.status_code == status
        assert reply.json()["success"] is False and reply.json()["error"]
    reply = server.http.post("/youzan/delayQueue", content=b"{not json")
    assert reply.status_code == 400 and reply.json()["success"] is False


def test_the_index_sweep_spares_an_add_whose_push_is_on_its_way(
        server: Served, redis_server: RedisServer) -> None:
    # An add indexes its job, then pushes it: a sweep in between must not drop the entry, or
    # the job could no longer be finished and its id would not stay unique across topics.
    index, key = redis_server.client(), f"{server.prefix}.YOUZAN.INDEX"
    t, in_flight, stale = topic(), f"new-{uuid.uuid4().hex[:6]}", f"old-{uuid.uuid4().hex[:6]}"
    now_ms = int(time.time() * 1000)
    index.hset(key, in_flight, orjson.dumps({"topic": t, "ttr": 5, "at": now_ms}))
    index.hset(key, stale, orjson.dumps({"topic": t, "ttr": 5, "at": now_ms - 60_000}))
    deadline = time.monotonic() + 10
    while index.hget(key, stale) is not None:  # the sweep (every 200 ms) ran since
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # and at least twice more
    assert index.hget(key, in_flight) is not None
    index.close()


def test_metrics_healthz_and_openapi(server: Served) -> None:
    t = topic()
    server.camellia("sendMsg", topic=t, msgId="a", msg="x", delayMillis=0)
    server.camellia("sendMsg", topic=t, msgId="b", msg="x", delayMillis=90_000)
    server.camellia("pullMsg", topic=t)
    text = server.http.get("/metrics").text
    assert f'dynoqueue_messages_pushed_total{{queue="{t}"}} 2.0' in text
    assert f'dynoqueue_messages_delivered_total{{queue="{t}"}} 1.0' in text
    assert f'dynoqueue_leased_messages{{queue="{t}",shard="a"}} 1.0' in text
    assert f'dynoqueue_delayed_messages{{queue="{t}",shard="a"}} 1.0' in text
    assert f'dynoqueue_delivery_lateness_seconds_count{{queue="{t}"}} 1.0' in text
    health = server.http.get("/healthz").json()
    assert health["status"] == "ok" and set(health["redis_ms"]) >= {"quorum", "non_quorum"}
    paths = server.http.get("/openapi.json").json()["paths"]
    assert f"{CAMELLIA}/longPollingMsg" in paths and "/youzan/delayQueue" in paths


def test_expired_leases_of_queues_in_redis_come_back_without_a_request(
        redis_server: RedisServer) -> None:
    prefix = f"s{uuid.uuid4().hex[:10]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get("abandoned")
        q.push([Message("m", "x")])
        assert q.pop(1, lease_ms=1)
        served = Served(redis_server.url, "--unack-interval-ms", "100", prefix=prefix)
        try:
            deadline = time.monotonic() + 10
            while q.state("m") is not MessageState.READY:  # no request names the topic
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            served.close()


def test_token_and_bind_rules(redis_server: RedisServer) -> None:
    served = Served(redis_server.url, token="s3cret")
    try:
        anonymous = httpx.get(f"{served.base}/camellia/delayQueue/getTopicInfoList")
        assert anonymous.status_code == 401 and anonymous.json()["code"] == 401
        assert anonymous.headers["WWW-Authenticate"] == "Bearer"
        wrong = httpx.get(f"{served.base}/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        youzan = httpx.post(f"{served.base}/youzan/delayQueue", json={"command": "pop",
                                                                      "topic": "t"})
        assert youzan.status_code == 401 and youzan.json()["success"] is False
        assert httpx.get(f"{served.base}/openapi.json").status_code == 401
        # Liveness probes send no token: /healthz is open (GET only), as is the page.
        health = httpx.get(f"{served.base}/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert httpx.post(f"{served.base}/healthz").status_code == 401
        assert httpx.get(f"{served.base}/").status_code == 200
        assert served.http.get("/metrics").status_code == 200  # with the token
    finally:
        served.close()
    refused = subprocess.run([sys.executable, "-m", "dynoqueue", "serve", "--url",
                              redis_server.url, "--host", "0.0.0.0", "--port", "0"],
                             env={**os.environ, "PYTHONPATH": str(ROOT),
                                  "DYNOQUEUE_SERVE_TOKEN": ""},
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("dynoqueue serve: refusing to bind 0.0.0.0 without a "
                                      "token: pass --token or set $DYNOQUEUE_SERVE_TOKEN (or "
                                      "bind 127.0.0.1)")


def test_ack_or_nack_of_a_message_not_leased_is_camellias_404(server: Served) -> None:
    t = topic()
    not_found = {"code": 404, "msg": "msg not exists"}
    assert server.camellia("ackMsg", topic=t, msgId="never") == not_found
    assert server.camellia("ackMsg", topic=t, msgId="never", ack=False) == not_found
    server.camellia("sendMsg", topic=t, msgId="m", msg="x", delayMillis=0)
    assert server.camellia("ackMsg", topic=t, msgId="m") == not_found  # ready, not leased
    assert server.camellia("pullMsg", topic=t)["delayMsgList"]
    assert server.camellia("ackMsg", topic=t, msgId="m") == {"code": 200, "msg": "success"}
    assert server.camellia("ackMsg", topic=t, msgId="m") == not_found  # acked already
    assert server.camellia("getMsg", topic=t, msgId="m")["delayMsg"]["status"] == 4
    monitor = server.http.get(f"{CAMELLIA}/getMonitorData").json()["data"]
    (stats,) = [s for s in monitor["requestStatsList"] if s["topic"] == t]
    assert stats["ackMsg"] == 5  # a request counts whatever it found


def test_strict_fields_are_refused_before_anything_is_written(
        server: Served, redis_server: RedisServer) -> None:
    t = topic()
    cases = [
        ({"topic": t, "msg": "x", "delayMillis": -5}, "delayMillis must be in 0..3153600000000"),
        ({"topic": t, "msg": "x", "delayMillis": 3_153_600_000_001}, "delayMillis must be in"),
        ({"topic": t, "msg": "x", "delayMillis": 0, "ttlMillis": ""},
         "ttlMillis must be an integer"),
        ({"topic": t, "msg": "x", "delayMillis": "1" + "0" * 5000}, "delayMillis must be in"),
        ({"topic": t, "msg": "x", "delayMillis": " 5"}, "delayMillis must be an integer"),
        ({"topic": t, "msg": "x", "delayMillis": 0, "maxRetry": 2**31 - 1}, "maxRetry must be"),
        ({"topic": f"orders.DEAD.{t}", "msg": "x", "delayMillis": 0}, "'DEAD' between dots"),
    ]
    for fields, text in cases:
        reply = server.http.post(f"{CAMELLIA}/sendMsg", content=_form(fields), headers=FORM)
        assert reply.status_code == 400, (fields, reply.text)
        assert reply.json()["code"] == 400 and text in reply.json()["msg"], reply.text
    # A field given twice: which value is meant? (A repeated field no route reads is ignored.)
    twice = f"topic={t}&msg=x&delayMillis=0&delayMillis=5000"
    reply = server.http.post(f"{CAMELLIA}/sendMsg", content=twice, headers=FORM)
    assert reply.status_code == 400 and "delayMillis is given more than once" in reply.text
    for flag in ("1", "yes", "", "TRUE"):
        reply = server.http.post(f"{CAMELLIA}/ackMsg", headers=FORM, content=_form(
            {"topic": t, "msgId": "m", "ack": flag}))
        assert reply.status_code == 400 and "ack must be true or false" in reply.text, flag
    assert redis_server.client().keys(f"*{t}*") == []
    # Optional numbers <= 0 (maxRetry: < 0) are the defaults, as Camellia's SDKs send them.
    sent = server.camellia("sendMsg", topic=t, msgId="d", msg="x", delayMillis="+0",
                           ttlMillis=-1, maxRetry=-1)["delayMsg"]
    assert sent["maxRetry"] == 10 and sent["expireTime"] == sent["triggerTime"] + 3_600_000
    extra = f"topic={t}&msgId=e&msg=x&delayMillis=0&other=1&other=2"
    reply = server.http.post(f"{CAMELLIA}/sendMsg", content=extra, headers=FORM)
    assert reply.status_code == 200 and reply.json()["code"] == 200


def test_youzan_seconds_take_integral_json_numbers(server: Served) -> None:
    t = topic()
    job = f"job-{uuid.uuid4().hex[:6]}"
    reply = server.youzan(command="add", topic=t, id=job, delay=0.0, TTR=5.0, body="x")
    assert reply.status_code == 200 and reply.json()["success"] is True
    for bad, text in [({"delay": 1.5}, "delay must be an integer"),
                      ({"delay": -1}, "delay must be in 0..3153600000"),
                      ({"TTR": 0}, "TTR must be in 1..3153600000"),
                      ({"TTR": True}, "TTR must be an integer"),
                      ({"delay": 1e300}, "delay must be in"),
                      ({"topic": "a b"}, "topic"), ({"body": 5}, "body must be a string")]:
        command = {"command": "add", "topic": t, "id": f"other-{job}", **bad}
        reply = server.http.post("/youzan/delayQueue", json=command)
        assert reply.status_code == 400, (bad, reply.text)
        assert text in reply.json()["error"], reply.text
    for bad in [{"command": {}}, {"command": None}, {"command": ["pop"]}]:
        reply = server.http.post("/youzan/delayQueue", json=bad)
        assert reply.status_code == 400 and "command must be one of" in reply.json()["error"]
    popped = server.youzan(command="pop", topic=t, timeout=1.0).json()
    assert popped == {"success": True, "error": "", "id": job, "value": "x", "headers": {}}


@pytest.fixture(scope="module")
def capped(redis_server: RedisServer) -> Iterator[Served]:
    served = Served(redis_server.url, "--max-body-bytes", "2000",
                    "--max-long-polls-per-client", "2", "--max-long-poll-ms", "1500")
    yield served
    served.close()


def test_a_body_over_max_body_bytes_gets_413_and_writes_nothing(
        capped: Served, redis_server: RedisServer) -> None:
    t = topic()
    head = f"topic={t}&msgId=m&delayMillis=0&msg="
    exact = head + "x" * (2000 - len(head))
    over = exact + "x"
    reply = capped.http.post(f"{CAMELLIA}/sendMsg", content=over, headers=FORM)
    assert reply.status_code == 413
    assert reply.json() == {"code": 413, "msg": "the body is over 2000 bytes"}

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while it is read
        for i in range(0, len(over), 100):
            yield over[i:i + 100].encode()

    reply = capped.http.post(f"{CAMELLIA}/sendMsg", content=chunks(), headers=FORM)
    assert reply.status_code == 413 and "transfer-encoding" in reply.request.headers
    youzan = capped.http.post("/youzan/delayQueue", json={
        "command": "add", "topic": t, "id": "j", "body": "x" * 2000})
    assert youzan.status_code == 413 and youzan.json()["success"] is False
    assert redis_server.client().keys(f"*{t}*") == []
    reply = capped.http.post(f"{CAMELLIA}/sendMsg", content=exact, headers=FORM)
    assert reply.status_code == 200 and reply.json()["delayMsg"]["msg"] == "x" * (
        2000 - len(head))


def test_long_polls_per_client_and_their_longest_hold(capped: Served) -> None:
    t = topic()
    poll = {"topic": t, "longPollingTimeoutMillis": 1500}

    async def main() -> None:
        # Another loopback address is another client (request.client.host).
        other_address = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(base_url=capped.base, timeout=30) as client, \
                httpx.AsyncClient(base_url=capped.base, timeout=30,
                                  transport=other_address) as elsewhere:
            held = [asyncio.ensure_future(client.post(
                f"{CAMELLIA}/longPollingMsg", headers=FORM, content=_form(poll)))
                for _ in range(2)]
            await asyncio.sleep(0.4)  # both are held
            third = await client.post(f"{CAMELLIA}/longPollingMsg", headers=FORM,
                                      content=_form(poll))
            assert third.status_code == 429, third.text
            assert third.json()["code"] == 429 and "at most 2 at once" in third.json()["msg"]
            assert 1 <= int(third.headers["Retry-After"]) <= 2
            pop = await client.post("/youzan/delayQueue", json={"command": "pop", "topic": t,
                                                                "timeout": 1})
            assert pop.status_code == 429 and pop.json()["success"] is False
            assert "Retry-After" in pop.headers
            now = await client.post("/youzan/delayQueue", json={"command": "pop", "topic": t})
            assert now.status_code == 200  # no timeout: not a long poll
            other = await elsewhere.post(f"{CAMELLIA}/longPollingMsg", headers=FORM,
                                         content=_form(poll))
            assert other.status_code == 200  # another address has slots of its own
            assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
            again = await client.post(f"{CAMELLIA}/longPollingMsg", headers=FORM,
                                      content=_form(poll))
            assert again.status_code == 200  # the slots were given back

    asyncio.run(main())
    too_long = capped.http.post(f"{CAMELLIA}/longPollingMsg", headers=FORM, content=_form(
        {"topic": t, "longPollingTimeoutMillis": 1501}))
    assert too_long.status_code == 400
    assert "longPollingTimeoutMillis must be <= 1500" in too_long.json()["msg"]
    pop = capped.youzan(command="pop", topic=t, timeout=2)
    assert pop.status_code == 400 and "timeout must be in 0..1" in pop.json()["error"]
    # No hold given: Camellia's default 10 s, capped at the longest hold.
    started = time.monotonic()
    reply = capped.camellia("longPollingMsg", topic=t)
    assert reply["delayMsgList"] == [] and 1.4 < time.monotonic() - started < 5
    doc = capped.http.get("/openapi.json").json()
    form = doc["paths"][f"{CAMELLIA}/longPollingMsg"]["post"]["requestBody"]["content"]
    hold = form["application/x-www-form-urlencoded"]["schema"]["properties"][
        "longPollingTimeoutMillis"]
    assert hold["maximum"] == 1500 and "minimum" not in hold


def test_serve_refuses_bad_limits(redis_server: RedisServer) -> None:
    from dynoqueue.ops.serve import DEFAULT_MAX_BODY_BYTES
    from dynoqueue.server import ServerSettings

    assert ServerSettings().max_body_bytes == DEFAULT_MAX_BODY_BYTES == 4 * 1024 * 1024
    with pytest.raises(ValueError, match="max_long_poll_ms must be an int >= 1"):
        ServerSettings(max_long_poll_ms=0)
    for option in ("--max-body-bytes", "--max-long-polls-per-client", "--max-long-poll-ms"):
        refused = subprocess.run([sys.executable, "-m", "dynoqueue", "serve", "--url",
                                  redis_server.url, option, "0"],
                                 env={**os.environ, "PYTHONPATH": str(ROOT)},
                                 capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2 and f"{option}: must be an integer >= 1" in refused.stderr
    refused = subprocess.run([sys.executable, "-m", "dynoqueue", "serve", "--url",
                              redis_server.url, "--max-long-poll-ms", str(10**15)],
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "max_long_poll_ms must be" in refused.stderr


def test_headers_travel_through_both_protocols(server: Served) -> None:
    t = topic()
    trace = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    sent = server.camellia("sendMsg", topic=t, msgId="h", msg="x", delayMillis=0,
                           headers=orjson.dumps(trace).decode())
    assert sent["delayMsg"]["headers"] == trace
    plain = server.camellia("sendMsg", topic=t, msgId="p", msg="y", delayMillis=0)
    assert plain["delayMsg"]["headers"] == {}
    pulled = server.camellia("pullMsg", topic=t, batch=5)["delayMsgList"]
    assert {m["msgId"]: m["headers"] for m in pulled} == {"h": trace, "p": {}}
    assert server.camellia("getMsg", topic=t, msgId="h")["delayMsg"]["headers"] == trace
    for bad in ("[1, 2]", "not json", '{"n": 1}'):
        reply = server.http.post(f"{CAMELLIA}/sendMsg", headers=FORM, content=_form(
            {"topic": t, "msgId": "bad", "msg": "z", "delayMillis": 0, "headers": bad}))
        assert reply.status_code == 400, (bad, reply.text)
    assert server.http.post(f"{CAMELLIA}/getMsg", headers=FORM, content=_form(
        {"topic": t, "msgId": "bad"})).json()["code"] == 404  # nothing was written

    job = f"job-{uuid.uuid4().hex[:8]}"
    added = server.youzan(command="add", topic=t, id=job, body="b", headers=trace)
    assert added.status_code == 200 and added.json()["success"], added.text
    assert "headers" not in added.json()
    popped = server.youzan(command="pop", topic=t).json()
    assert (popped["id"], popped["value"], popped["headers"]) == (job, "b", trace)
    bad = server.youzan(command="add", topic=t, id=f"{job}-x", body="b", headers=["x"])
    assert bad.status_code == 400
