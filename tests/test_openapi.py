"""``/openapi.json`` says exactly what ``dynoqueue serve`` does: schemathesis (its CLI, as other
services' engineers run it) generates requests from the spec of a real ``dynoqueue serve``
process, without and with a token, with every check, 30 examples per operation plus its
coverage phase, and must find nothing: no 5xx, no response that breaks its schema or status
list, no schema-valid request refused, no schema-violating one accepted, no request that gets
past the token. Around each run, a queue filled beforehand must come out as it went in (no
request reaches a queue it does not name: without a token the run sends only generated names,
so a bystander topic of the same server is safe from every request; with one it also sends
names learnt from replies, as it does by default, and the bystander is another prefix's), and
with a token every request without it gets 401 (but ``GET /`` and ``GET /healthz``).

The long-poll maximum is 200 ms here (``--max-long-poll-ms``: the spec's maximum follows it),
so the held polls schemathesis sends keep the two runs within ~25 s. The seed is fixed (set
``$DYNOQUEUE_SCHEMATHESIS_SEED`` to explore others).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynoqueue.embedded import RedisServer
from dynoqueue.errors import ConfigurationError
from dynoqueue.model.keys import KEY_WORDS, check_queue_name
from dynoqueue.server import ServerSettings
from dynoqueue.server.openapi import queue_name_pattern, spec

from .test_server import CAMELLIA, Served

TOKEN = "st-token"
SEED = int(os.environ.get("DYNOQUEUE_SCHEMATHESIS_SEED", "20240611"))
#: The serve options of both runs: holds of at most 200 ms.
OPTIONS = ("--max-long-poll-ms", "200", "--unack-interval-ms", "200")
INSTALL = "install the dev extra: pip install -e '.[dev]' (schemathesis>=4)"


def schemathesis_binary() -> str:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or \
        shutil.which("schemathesis")
    if not found:
        pytest.fail(f"no schemathesis command for the spec test; {INSTALL}")
    return found


# ------------------------------------------------------------------ the spec, without a server

def accepted(name: str) -> bool:
    try:
        check_queue_name(name, "topic")
    except ConfigurationError:
        return False
    return True


NAMES = st.one_of(
    st.text(),
    st.lists(st.one_of(st.sampled_from(sorted(KEY_WORDS)), st.text(max_size=4),
                       st.sampled_from(["a", "DEADx", "xDEAD", "dead", "", " ", "{", "\x7f"])),
             min_size=1, max_size=4).map(".".join))


@given(NAMES)
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
def test_topic_pattern_is_the_queue_name_rule(name: str) -> None:
    # fullmatch: JSON Schema's (ECMA 262) $ is the end of the string, never before a newline.
    assert bool(re.fullmatch(queue_name_pattern(), name)) == accepted(name), repr(name)


@given(st.from_regex(queue_name_pattern(), fullmatch=True))
@settings(max_examples=200, deadline=None, derandomize=True, database=None)
def test_names_made_from_the_pattern_are_accepted(name: str) -> None:
    assert accepted(name), repr(name)


def test_pattern_examples() -> None:
    pattern = queue_name_pattern()
    for good in ["orders", "com.acme.resize", "DEADLINE.x", "x.dead", "a.", ".a", "..", "é",
                 "😀", "a|b~c"]:
        assert re.fullmatch(pattern, good) and accepted(good), good
    for bad in ["", "a b", "a{b}", "DEAD", "x.DEAD", "QUEUE.x", "a.YOUZAN.b", "tab\t",
                "nl\n", "\x00", "\x7f", "\u00a0", "\u2028", "\u3000", "\x85"]:
        assert not re.fullmatch(pattern, bad) and not accepted(bad), bad


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, item in doc["paths"].items()
            for method, op in item.items()]


def test_spec_without_a_token_has_no_security() -> None:
    doc = spec(ServerSettings())
    assert "security" not in doc and "components" not in doc
    for method, path, op in operations(doc):
        assert "401" not in op["responses"], (method, path)
        assert "security" not in op or op["security"] == [], (method, path)
    assert "no token" in doc["info"]["description"]


def test_spec_with_a_token_secures_every_operation_but_healthz() -> None:
    doc = spec(ServerSettings(token="t"))
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http",
                                                              "scheme": "bearer"}
    for method, path, op in operations(doc):
        if path == "/healthz":
            assert op["security"] == [] and set(op["responses"]) == {"200", "503"}
            continue
        assert "security" not in op, (method, path)
        unauthorized = op["responses"]["401"]
        assert unauthorized["headers"]["WWW-Authenticate"]["required"] is True
    assert len(operations(doc)) == 12


def test_spec_states_the_configured_limits() -> None:
    doc = spec(ServerSettings(max_long_poll_ms=4500, long_polling_timeout_ms=10_000),
               max_payload_bytes=1000)
    form = "application/x-www-form-urlencoded"
    send = doc["paths"][f"{CAMELLIA}/sendMsg"]["post"]
    fields = send["requestBody"]["content"][form]["schema"]["properties"]
    assert fields["msg"]["maxLength"] == 1000
    assert fields["delayMillis"]["minimum"] == 0
    assert fields["delayMillis"]["maximum"] == 100 * 365 * 24 * 3600 * 1000
    assert "minimum" not in fields["ttlMillis"] and "<= 0" in fields["ttlMillis"]["description"]
    assert set(send["responses"]) == {"200", "400", "409", "413", "415", "500", "503"}
    poll = doc["paths"][f"{CAMELLIA}/longPollingMsg"]["post"]
    hold = poll["requestBody"]["content"][form]["schema"]["properties"][
        "longPollingTimeoutMillis"]
    assert hold["maximum"] == 4500 and "default 4500" in hold["description"]
    assert poll["responses"]["429"]["headers"]["Retry-After"]["required"] is True
    youzan = doc["paths"]["/youzan/delayQueue"]["post"]
    branches = {b["title"]: b for b in
                youzan["requestBody"]["content"]["application/json"]["schema"]["oneOf"]}
    assert set(branches) == {"add", "pop", "finish", "delete"}
    assert branches["pop"]["properties"]["timeout"]["maximum"] == 4
    assert branches["add"]["required"] == ["command", "topic", "id"]
    assert branches["add"]["properties"]["TTR"]["minimum"] == 1
    assert branches["add"]["properties"]["body"]["maxLength"] == 1000


# ------------------------------------------------------------------ schemathesis against serve

class Bystander:
    """A queue filled before a run, in every state, and a Youzan job: what a run must leave
    as it was (no generated request names them: their names and ids are random)."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.topic = f"bystander-{uuid.uuid4().hex}"
        self.ids = [f"{state}-{uuid.uuid4().hex}" for state in
                    ("dead", "leased", "acked", "ready", "delayed")]
        dead, leased, acked, ready, delayed = self.ids
        for msg_id in (dead, leased, acked):
            self.send(msg_id, 0, maxRetry=0 if msg_id == dead else 5)
        for msg_id in (dead, leased, acked):
            pulled = served.camellia("pullMsg", topic=self.topic, ackTimeoutMillis=3_600_000)
            assert [m["msgId"] for m in pulled["delayMsgList"]] == [msg_id]
        assert served.camellia("ackMsg", topic=self.topic, msgId=dead, ack=False)["code"] == 200
        assert served.camellia("ackMsg", topic=self.topic, msgId=acked)["code"] == 200
        self.send(ready, 0)
        self.send(delayed, 7_200_000)  # well inside its waiting-time bucket (1 h to 6 h)
        self.job = f"job-{uuid.uuid4().hex}"
        added = served.youzan(command="add", topic=self.topic + "-youzan", id=self.job,
                              delay=7200, body="job")
        assert added.status_code == 200, added.text
        self.before = self.snapshot()
        assert [m["status"] for m in self.before["messages"]] == [6, 3, 4, 2, 1]

    def send(self, msg_id: str, delay: int, **fields: Any) -> None:
        self.served.camellia("sendMsg", topic=self.topic, msgId=msg_id, msg=f"payload {msg_id}",
                             delayMillis=delay, **fields)
        time.sleep(0.002)  # distinct due times: the pulls above take them in this order

    def snapshot(self) -> dict[str, Any]:
        http = self.served.http
        info = http.get(f"{CAMELLIA}/getTopicInfo", params={"topic": self.topic}).json()
        return {"messages": [self.served.camellia("getMsg", topic=self.topic, msgId=i)[
            "delayMsg"] for i in self.ids],
                "info": info["data"],
                "dead": http.get(f"/api/queues/{self.topic}/dead").json(),
                "youzan": http.get(f"{CAMELLIA}/getTopicInfo",
                                   params={"topic": self.topic + "-youzan"}).json()["data"]}


#: schemathesis' configuration for a run whose requests name only what it generates: no
#: names learnt from responses (getTopicInfoList lists every topic, a bystander's too).
NO_LEARNING = "".join(f"[phases.{phase}.extra-data-sources]\nresponses = false\n"
                      for phase in ("examples", "coverage", "fuzzing"))


def run_schemathesis(served: Served, workdir: Path, token: str | None, *,
                     learn: bool) -> dict[str, Any]:
    """Run ``schemathesis run`` on ``served``'s spec (learning names from responses or not);
    return its JSON report, asserting exit 0."""
    config = workdir / "schemathesis.toml"
    config.write_text("" if learn else NO_LEARNING)
    argv = [schemathesis_binary(), "--config-file", str(config), "run",
            f"{served.base}/openapi.json", "--checks", "all", "--max-examples", "30",
            "--seed", str(SEED), "--generation-database", "none", "--request-timeout", "10",
            "--no-color", "--report", "json", "--report-dir", str(workdir)]
    if token:
        argv += ["-H", f"Authorization: Bearer {token}"]
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=300,
                          check=False)
    at = done.stdout.find("SUMMARY")
    summary = done.stdout[done.stdout.rfind("\n", 0, at) + 1:] if at >= 0 else ""
    print(f"\nschemathesis ({'token' if token else 'no token'}):\n{summary.strip()}")
    assert done.returncode == 0, done.stdout[-20_000:] + done.stderr[-5_000:]
    (report,) = workdir.glob("json-*.json")
    doc: dict[str, Any] = json.loads(report.read_text())
    return doc


def check_report(report: dict[str, Any]) -> None:
    assert report["complete"] is True and report["exit_code"] == 0
    assert report["operations"]["tested"] == report["operations"]["total"] == 12
    assert report["test_cases"]["unique_failures"] == 0 and report["failures"] == []
    assert report["errors"] == []
    assert report["phases"]["coverage"]["status"] == "success"
    assert report["phases"]["fuzzing"]["status"] == "success"
    assert report["test_cases"]["generated"] >= 12 * 30
    # The topic pattern (a lookahead) is used as written, not dropped as unsupported.
    assert report["warnings"]["unsupported_regex"] == []
    assert report["warnings"]["validation_mismatch"] == []
    print(f"{report['operations']['tested']} operations, "
          f"{report['test_cases']['generated']} test cases generated, "
          f"{report['test_cases']['unique_failures']} failures")


@pytest.fixture(scope="module")
def plain(redis_server: RedisServer) -> Iterator[Served]:
    served = Served(redis_server.url, *OPTIONS)
    yield served
    served.close()


@pytest.fixture(scope="module")
def secured(redis_server: RedisServer) -> Iterator[Served]:
    served = Served(redis_server.url, *OPTIONS, token=TOKEN)
    yield served
    served.close()


def test_schemathesis_finds_nothing_without_a_token(plain: Served, tmp_path: Path) -> None:
    # Names are only generated (none learnt from responses), so none is the bystander's:
    # any change to it is a request reaching a queue it did not name.
    bystander = Bystander(plain)
    assert "security" not in plain.http.get("/openapi.json").json()
    check_report(run_schemathesis(plain, tmp_path, None, learn=False))
    assert bystander.snapshot() == bystander.before


def test_schemathesis_finds_nothing_with_a_token(secured: Served, redis_server: RedisServer,
                                                 tmp_path: Path) -> None:
    # schemathesis as users run it: it also sends the topics and ids it learns from replies
    # (getTopicInfoList lists every topic), so the bystander is under another prefix.
    elsewhere = Served(redis_server.url, *OPTIONS)
    try:
        bystander = Bystander(elsewhere)
        spec_doc = secured.http.get("/openapi.json").json()
        assert spec_doc["security"] == [{"bearer": []}]
        check_report(run_schemathesis(secured, tmp_path, TOKEN, learn=True))
        assert bystander.snapshot() == bystander.before
    finally:
        elsewhere.close()
    # Without the header, or with another token, every operation gets 401 (in its protocol's
    # shape) before anything is read or written; GET /healthz and the page are open.
    for method, path, _ in operations(spec_doc):
        for headers in ({}, {"Authorization": f"Bearer {TOKEN}x"},
                        {"Authorization": TOKEN}):
            reply = httpx.request(method, secured.base + path, headers=headers,
                                  json={"command": "add", "topic": "t", "id": "x"}
                                  if path.startswith("/youzan") else None)
            if path == "/healthz":
                assert reply.status_code == 200, (method, path, headers)
                continue
            assert reply.status_code == 401, (method, path, headers, reply.text)
            assert reply.headers["WWW-Authenticate"] == "Bearer"
            body = reply.json()
            assert body == ({"success": False, "error": body["error"], "id": None,
                             "value": None} if path.startswith("/youzan") else
                            {"code": 401, "msg": body["msg"]})
    for path in ("/openapi.json", "/api/queues", "/no/such/route"):
        assert httpx.get(secured.base + path).status_code == 401, path
    assert httpx.get(secured.base + "/").status_code == 200
    info = secured.http.get(f"{CAMELLIA}/getTopicInfo", params={"topic": "t"}).json()["data"]
    assert info["waitingQueueSize"] == info["readyQueueSize"] == 0  # the 401s wrote nothing
