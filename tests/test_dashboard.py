"""The dashboard of ``dynoqueue serve`` in a real headless Chromium (Debian's ``chromium``,
driven by Playwright): the page loads, shows the numbers of a queue the test filled, the
waiting-time bars, the dead letters, and its redrive button works; the token comes from the
link (``/#token=...``) or the page's login form, never a blocking ``prompt()``. Takes a
screenshot (saved as ``docs/dashboard.png`` with ``DYNOQUEUE_UPDATE_DOCS=1``, else in the
test's temporary folder: a test run leaves the tree as it was).

No browser is downloaded: Playwright drives the system binary (``$DYNOQUEUE_CHROMIUM`` or
``/usr/bin/chromium``); without it the test fails and says how to install it.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Dialog, Page, sync_playwright

from dynoqueue.embedded import RedisServer

from .test_server import CAMELLIA, Served

DOCS = Path(__file__).resolve().parent.parent / "docs"
INSTALL = "install it with: apt-get install -y chromium (as root), or set $DYNOQUEUE_CHROMIUM"


def chromium_path() -> str:
    found = os.environ.get("DYNOQUEUE_CHROMIUM") or shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if not found:
        pytest.fail(f"no chromium binary for the dashboard test; {INSTALL}")
    return found


@pytest.fixture(scope="module")
def server(redis_server: RedisServer) -> Iterator[Served]:
    served = Served(redis_server.url, token="dash-token")
    yield served
    served.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=chromium_path(), headless=True,
                                          args=["--no-sandbox", "--disable-gpu",
                                                "--disable-dev-shm-usage"])
        yield launched
        launched.close()


def new_tab(browser: Browser, dialogs: list[str]) -> Page:
    """A tab of a fresh context (its own session storage) that records any dialog (a
    prompt() would block a headless browser) and dismisses it."""
    tab = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()

    def dialog(d: Dialog) -> None:
        dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    tab.on("dialog", dialog)
    return tab


@pytest.fixture(scope="module")
def page(browser: Browser) -> Iterator[Page]:
    dialogs: list[str] = []
    yield new_tab(browser, dialogs)
    assert dialogs == []


def row_numbers(page: Page, queue: str) -> dict[str, str]:
    row = page.locator(f"#queues tr[data-queue='{queue}']")
    cells = row.locator("td").all_inner_texts()
    names = ["queue", "partitions", "waiting", "ready", "delayed", "leased", "dead", "age",
             "waiting/s", "leased/s", "dead/s"]
    return dict(zip(names, cells, strict=True))


def test_dashboard_shows_a_filled_queue_and_redrives(server: Served, page: Page,
                                                     tmp_path: Path) -> None:
    topic = f"reminders-{uuid.uuid4().hex[:6]}"
    send: list[dict[str, Any]] = [
        *({"msgId": f"bad-{i}", "delayMillis": 0, "maxRetry": 0} for i in range(2)),
        *({"msgId": f"now-{i}", "delayMillis": 0} for i in range(5)),
        *({"msgId": f"soon-{i}", "delayMillis": 30_000} for i in range(3)),
        *({"msgId": f"later-{i}", "delayMillis": 20 * 60_000} for i in range(2)),
        {"msgId": "tomorrow", "delayMillis": 26 * 3_600_000},
    ]
    for fields in send:
        server.camellia("sendMsg", topic=topic, msg=f"payload of {fields['msgId']}", **fields)
        time.sleep(0.002)  # distinct due times: pulls take them in this order
    bad = server.camellia("pullMsg", topic=topic, batch=2)["delayMsgList"]
    assert [m["msgId"] for m in bad] == ["bad-0", "bad-1"]
    for message in bad:  # their only delivery fails: dead letters
        server.camellia("ackMsg", topic=topic, msgId=message["msgId"], ack=False)
    assert len(server.camellia("pullMsg", topic=topic, batch=2)["delayMsgList"]) == 2
    info = server.http.get(f"{CAMELLIA}/getTopicInfo", params={"topic": topic}).json()["data"]

    page.goto(server.base + "/#token=dash-token")  # the link carries the token
    page.wait_for_selector(f"#queues tr[data-queue='{topic}']", timeout=15_000)
    assert page.url == server.base + "/"  # taken out of the address bar
    assert page.locator("#login-section").is_hidden()
    numbers = row_numbers(page, topic)
    assert numbers["ready"] == str(info["readyQueueSize"]) == "3"
    assert numbers["delayed"] == str(info["waitingQueueSize"]) == "6"
    assert numbers["leased"] == str(info["ackQueueSize"]) == "2"
    assert numbers["dead"] == "2"
    assert numbers["waiting"] == str(info["readyQueueSize"] + info["waitingQueueSize"])

    page.click(f"#queues tr[data-queue='{topic}']")
    page.wait_for_selector("#dead tbody tr[data-id='bad-0']", timeout=15_000)
    assert page.inner_text("#dead-total") == "2"
    assert "max_deliveries" in page.inner_text("#dead tbody")
    counts = dict(zip(page.locator("#buckets > span:not(.bucket-count)").all_inner_texts(),
                      page.locator("#buckets .bucket-count").all_inner_texts(), strict=True))
    assert list(counts) == ["< 1 min", "1-10 min", "10-30 min", "30-60 min", "1-6 h",
                            "6-24 h", "1-7 days", "7-30 days", "> 30 days"]  # human labels
    assert counts["< 1 min"] == "3" and counts["10-30 min"] == "2"
    assert counts["1-7 days"] == "1" and counts["> 30 days"] == "0"
    assert page.locator(".bar[data-range='0To1min']").evaluate("e => e.style.width") == "100%"

    time.sleep(2.5)  # one more refresh: the rates are known
    assert row_numbers(page, topic)["waiting/s"] != "-"
    shots = DOCS if os.environ.get("DYNOQUEUE_UPDATE_DOCS") == "1" else tmp_path
    page.screenshot(path=str(shots / "dashboard.png"), full_page=True)
    assert (shots / "dashboard.png").stat().st_size > 10_000

    page.check("#dead input[value='bad-1']")
    page.click("#redrive-selected")
    page.wait_for_function("document.getElementById('dead-total').textContent === '1'",
                           timeout=15_000)
    assert server.camellia("getMsg", topic=topic, msgId="bad-1")["delayMsg"]["status"] == 2
    page.click("#redrive-all")
    page.wait_for_function("document.getElementById('dead-total').textContent === '0'",
                           timeout=15_000)
    assert "2 redriven" not in page.inner_text("#redrive-result")
    assert page.inner_text("#redrive-result") == "1 redriven"
    assert server.camellia("getMsg", topic=topic, msgId="bad-0")["delayMsg"]["status"] == 2
    page.wait_for_function(
        f"document.querySelector(\"#queues tr[data-queue='{topic}'] td.dead-count\")"
        ".textContent === '0'", timeout=15_000)


def test_dashboard_shows_a_queues_limits_and_schedules(server: Served, page: Page,
                                                       redis_server: RedisServer) -> None:
    from dynoqueue import Message, QueuePolicy, RateLimit, RedisQueues

    topic = f"paced-{uuid.uuid4().hex[:6]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=server.prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get(topic, QueuePolicy(max_in_flight=1, rate_limit=RateLimit(50, 1000)))
        q.push([Message("one"), Message("two")])
        assert len(q.pop(2)) == 1  # the second is held back: counted in Redis
        q.schedule("digest", cron="0 6 * * *", timezone="Europe/Berlin")
    doc = server.http.get("/api/queues").json()
    (found,) = [x for x in doc["queues"] if x["queue"] == topic]
    assert found["limits"] == {"max_in_flight": 1, "rate_limit": {"count": 50, "per_ms": 1000}}
    assert found["limited"] == 1
    assert [x["schedule"] for x in found["schedules"]] == ["digest"]

    page.goto(server.base + "/#token=dash-token")
    page.wait_for_selector(f"#queues tr[data-queue='{topic}']", timeout=15_000)
    page.click(f"#queues tr[data-queue='{topic}']")
    page.wait_for_selector("#schedules tbody tr.schedule", timeout=15_000)
    assert page.inner_text("#limits") == ("Limits: at most 1 in flight, at most 50 deliveries "
                                          "per 1000 ms; pops held back: 1")
    assert "digest" in page.inner_text("#schedules tbody")
    assert "0 6 * * *" in page.inner_text("#schedules tbody")


def test_dashboard_asks_for_the_token_with_a_form(server: Served, browser: Browser) -> None:
    topic = f"login-{uuid.uuid4().hex[:6]}"
    server.camellia("sendMsg", topic=topic, msg="x", delayMillis=0)
    dialogs: list[str] = []
    tab = new_tab(browser, dialogs)
    try:
        tab.goto(server.base + "/")
        tab.wait_for_selector("#login-section:not([hidden])", timeout=15_000)
        assert tab.inner_text("#status") == "token needed"
        assert tab.inner_text("#login-error") == ""
        assert tab.locator("#queues tr[data-queue]").count() == 0
        tab.fill("#token", "not-the-token")
        tab.press("#token", "Enter")
        tab.wait_for_function("document.getElementById('login-error').textContent === "
                              "'the server refused this token'", timeout=15_000)
        assert tab.locator("#login-section").is_visible()
        tab.fill("#token", "dash-token")
        tab.click("#login button[type=submit]")
        tab.wait_for_selector(f"#queues tr[data-queue='{topic}']", timeout=15_000)
        assert tab.locator("#login-section").is_hidden()
        assert row_numbers(tab, topic)["ready"] == "1"
        tab.reload()  # the tab keeps the token
        tab.wait_for_selector(f"#queues tr[data-queue='{topic}']", timeout=15_000)
        assert tab.locator("#login-section").is_hidden()
    finally:
        tab.context.close()
    assert dialogs == []


def test_dashboard_api_needs_the_token(server: Served) -> None:
    import httpx

    assert httpx.get(server.base + "/").status_code == 200  # the page holds no data
    assert httpx.get(server.base + "/api/queues").status_code == 401
    assert server.http.get("/api/queues").status_code == 200
    bad = server.http.post("/api/queues/x/redrive", json={"ids": "all"})
    assert bad.status_code == 400 and bad.json()["code"] == 400


def test_dashboard_shows_partitions_and_registered_empty_queues(
        server: Served, page: Page, redis_server: RedisServer) -> None:
    from dynoqueue import Message, QueuePolicy, RedisQueues

    split, empty = f"split-{uuid.uuid4().hex[:6]}", f"empty-{uuid.uuid4().hex[:6]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=server.prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get(split, QueuePolicy(partitions=3))
        q.push([Message(f"m{i}", "x") for i in range(12)])
        assert len(q.pop(2)) == 2
        drained = queues.get(empty)  # registered by its push, then drained
        drained.push([Message("only")])
        assert drained.ack_many(drained.pop(1)) == 1
    page.goto(server.base + "/#token=dash-token")
    page.wait_for_selector(f"#queues tr[data-queue='{empty}']", timeout=15_000)
    assert row_numbers(page, empty)["waiting"] == "0"
    assert row_numbers(page, empty)["partitions"] == "1"
    assert row_numbers(page, split)["partitions"] == "3"
    page.click(f"#queues tr[data-queue='{split}']")
    page.wait_for_selector("#partitions tbody tr.partition", timeout=15_000)
    rows = [r.locator("td").all_inner_texts()
            for r in page.locator("#partitions tbody tr.partition").all()]
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert sum(int(r[1]) for r in rows) == 10 and sum(int(r[2]) for r in rows) == 2
    assert {r[3] for r in rows} == {f"127.0.0.1:{redis_server.port}"}
    assert {r[4] for r in rows} == {"-"}  # no Cluster, no slot


def test_dashboard_pauses_and_resumes_a_queue(server: Served, page: Page,
                                              redis_server: RedisServer) -> None:
    from dynoqueue import Message, QueuePolicy, RedisQueues

    topic = f"held-{uuid.uuid4().hex[:6]}"
    with RedisQueues.from_url(redis_server.url, key_prefix=server.prefix,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get(topic, QueuePolicy(partitions=2))
        q.push([Message("job", "x")])
        doc = server.http.get("/api/queues").json()
        assert [x["paused"] for x in doc["queues"] if x["queue"] == topic] == [False]
        page.goto(server.base + "/#token=dash-token")
        page.wait_for_selector(f"#queues tr[data-queue='{topic}']", timeout=15_000)
        page.click(f"#queues tr[data-queue='{topic}']")
        page.wait_for_selector("#pause-toggle:has-text('Pause')", timeout=15_000)
        page.click("#pause-toggle")
        page.wait_for_selector("#pause-toggle:has-text('Resume')", timeout=15_000)
        assert "paused" in page.inner_text("#pause-state")
        assert q.is_paused() and q.unsafe_pop_all_shards(1) == []
        doc = server.http.get("/api/queues").json()
        assert [x["paused"] for x in doc["queues"] if x["queue"] == topic] == [True]
        assert f'dynoqueue_queue_paused{{queue="{topic}"}} 1.0' in server.http.get(
            "/metrics").text
        page.click("#pause-toggle")
        page.wait_for_selector("#pause-toggle:has-text('Pause')", timeout=15_000)
        assert not q.is_paused()
        assert [m.id for m in q.unsafe_pop_all_shards(1)] == ["job"]
