"""Every Python block of the README runs as written, so an example can never rot: each in a
fresh interpreter against a fresh redis-server, with only the URL changed
(``redis://localhost:6379`` becomes the test server's), as a new user would copy it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynoqueue.embedded import RedisServer

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
LOCAL = "redis://localhost:6379"


def _blocks() -> list[tuple[int, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


BLOCKS = _blocks()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def _run(code: str, server: RedisServer) -> str:
    done = subprocess.run([sys.executable, "-c", code.replace(LOCAL, server.url)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_readme_has_its_examples() -> None:
    assert len(BLOCKS) >= 4
    assert all(LOCAL in code or "dynoqueue.embedded" in code for _, code in BLOCKS)


@pytest.mark.parametrize("code", [c for _, c in BLOCKS], ids=[f"line{n}" for n, _ in BLOCKS])
def test_a_readme_example_runs_as_written(code: str, server: RedisServer) -> None:
    out = _run(code, server)
    assert out.strip(), "every example shows what it did"


def test_the_quick_example_delivers_both_messages_in_order(server: RedisServer) -> None:
    (quick,) = [c for _, c in BLOCKS if 'reminders = queues.get("reminders")' in c
                and "async" not in c]
    lines = _run(quick, server).splitlines()
    assert [line.split()[0:3] for line in lines] == [["now", "flight-1545", '{"gate":'],
                                                     ["in", "1.5", "s"]]
    assert lines[1].split()[3] == "flight-1546"
