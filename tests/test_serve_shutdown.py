"""``dynoqueue serve`` stops within a second of SIGTERM (or Ctrl-C), answering the long polls it
holds at once, empty (HTTP 200, no message), and says it stopped. A real uvicorn process."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from typing import Any

import httpx
import pytest

from dynoqueue.embedded import RedisServer

from .test_server import CAMELLIA, FORM, Served, _form


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_serve_answers_held_long_polls_and_stops_within_a_second(
        redis_server: RedisServer, sig: int) -> None:
    served = Served(redis_server.url)
    topic = f"held-{uuid.uuid4().hex[:6]}"
    answers: dict[str, Any] = {}

    def camellia() -> None:
        answers["camellia"] = httpx.post(
            f"{served.base}{CAMELLIA}/longPollingMsg", headers=FORM, timeout=30,
            content=_form({"topic": topic, "longPollingTimeoutMillis": 30_000}))

    def youzan() -> None:
        answers["youzan"] = httpx.post(f"{served.base}/youzan/delayQueue", timeout=30,
                                       json={"command": "pop", "topic": topic, "timeout": 30})

    polls = [threading.Thread(target=camellia), threading.Thread(target=youzan)]
    try:
        for poll in polls:
            poll.start()
        time.sleep(1.0)  # both are held now
        assert not answers
        started = time.monotonic()
        served.process.send_signal(sig)
        served.process.wait(timeout=30)
        took = time.monotonic() - started
        for poll in polls:
            poll.join(timeout=30)
    finally:
        served.close()
    output = served.process.stdout.read().decode() if served.process.stdout else ""
    assert took < 1.0, (took, output)
    assert served.process.returncode == 0, output
    assert answers["camellia"].status_code == 200, answers["camellia"].text
    assert answers["camellia"].json()["delayMsgList"] == []
    assert answers["youzan"].status_code == 200, answers["youzan"].text
    assert answers["youzan"].json()["id"] is None
    assert output.rstrip().endswith("dynoqueue serve: stopped"), output
    assert "Traceback" not in output
