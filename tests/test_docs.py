"""The runnable examples of the docs run as they stand (each starts its own local deployment)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .deployments import NEEDS_DYNOMITE

DOCS = Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _examples(name: str) -> list[tuple[str, str]]:
    text = (DOCS / name).read_text(encoding="utf-8")
    found = []
    for block in _BLOCK.findall(text):
        if "dynoqueue.embedded import" in block:  # self-contained: it starts its own servers
            heading = text[: text.index(block)].rsplit("\n### ", 1)[-1].split("\n", 1)[0]
            found.append((heading, block))
    return found


EXAMPLES = _examples("deployments.md")


def test_every_deployment_has_a_runnable_example() -> None:
    headings = " ".join(h for h, _ in EXAMPLES)
    for word in ("Single", "Zone ring", "Sentinel", "Cluster"):
        assert word in headings


@pytest.mark.slow
@pytest.mark.parametrize("code", [
    pytest.param(c, marks=[NEEDS_DYNOMITE] if "dynomite" in c else []) for _, c in EXAMPLES],
    ids=[h for h, _ in EXAMPLES])
def test_deployment_example_runs(code: str) -> None:
    exec(compile(code, "docs/deployments.md", "exec"), {"__name__": "docs_example"})
