"""Every Python block of the README and of the docs' getting-started pages runs as written, so an
example can never rot: each in a fresh interpreter against a fresh redis-server, with only the URL
changed (``redis://localhost:6379`` becomes the test server's), as a new user would copy it.

The pages share examples (the README is the landing page, docs/index.md the site's home, both
with the examples of docs/getting-started.md): a block that appears on several pages runs once.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynoqueue.embedded import RedisServer

ROOT = Path(__file__).resolve().parent.parent
# The pages whose every Python block is a runnable example (the other docs pages show fragments;
# tests/test_docs.py runs the deployment examples of docs/deployments.md).
PAGES = ("README.md", "docs/index.md", "docs/getting-started.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
LOCAL = "redis://localhost:6379"


def _blocks(page: str) -> list[tuple[int, str]]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


BLOCKS = {page: _blocks(page) for page in PAGES}
# Each distinct block once, named after its first page and line.
UNIQUE: dict[str, str] = {}
for _page, _found in BLOCKS.items():
    for _line, _code in _found:
        UNIQUE.setdefault(_code, f"{_page}:line{_line}")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as started:
        yield started


def _run(code: str, server: RedisServer) -> str:
    done = subprocess.run([sys.executable, "-c", code.replace(LOCAL, server.url)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_pages_have_their_examples() -> None:
    # The README and the site's home: sync, asyncio and a Worker; getting-started: those and a
    # zone-sharded queue on an embedded server.
    assert len(BLOCKS["README.md"]) >= 3
    assert len(BLOCKS["docs/index.md"]) >= 3
    assert len(BLOCKS["docs/getting-started.md"]) >= 4
    assert all(LOCAL in code or "dynoqueue.embedded" in code
               for found in BLOCKS.values() for _, code in found)


def test_the_readme_stays_a_landing_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "the README is a landing page: move details to docs/"
    assert "make test" in readme and "make demo" in readme  # the two commands (.ci/run: make test)
    for page in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / page).is_file(), f"README links to a missing {page}"


@pytest.mark.parametrize("code", list(UNIQUE), ids=list(UNIQUE.values()))
def test_an_example_runs_as_written(code: str, server: RedisServer) -> None:
    out = _run(code, server)
    assert out.strip(), "every example shows what it did"


def test_the_quick_example_delivers_both_messages_in_order(server: RedisServer) -> None:
    quick = {page: [c for _, c in found if 'reminders = queues.get("reminders")' in c
                    and "async" not in c] for page, found in BLOCKS.items()}
    (first,) = quick["README.md"]
    assert all(found == [first] for found in quick.values()), "one quick example, the same"
    lines = _run(first, server).splitlines()
    assert [line.split()[0:3] for line in lines] == [["now", "flight-1545", '{"gate":'],
                                                     ["in", "1.5", "s"]]
    assert lines[1].split()[3] == "flight-1546"
