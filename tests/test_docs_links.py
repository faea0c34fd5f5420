"""What a reader of the docs site gets: the API reference links the guides its docstrings name
(``docs/semantics.md, "Changing a stored policy"`` is a link to that section), its attribute
tables show types, the home page's code fits its box, and the user guides cite no internal
issue numbers. Builds the site for real (``mkdocs build --strict``, the docs extra)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs site needs the 'docs' extra")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: The guides a user reads (the journal, out of the nav, keeps its measurement notes).
GUIDES = sorted(p for p in DOCS.glob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_reference_links_the_guides_it_names(site: Path) -> None:
    queue = (site / "reference" / "queue" / "index.html").read_text(encoding="utf-8")
    assert ('<a href="../../semantics/#changing-a-stored-policy">docs/semantics.md</a>'
            in queue)
    for page in (site / "reference").glob("*/index.html"):
        html = page.read_text(encoding="utf-8")
        plain = re.findall(r'(?<![\w/.="\'>-])docs/[a-z-]+\.md', html)
        assert not plain, f"{page.parent.name}: {plain} named, not linked"
        for href in re.findall(r'<a href="\.\./\.\./([a-z-]+)/(#[\w-]+)?">docs/', html):
            target = (site / href[0] / "index.html").read_text(encoding="utf-8")
            assert not href[1] or f'id="{href[1][1:]}"' in target, href


def test_attribute_tables_show_types(site: Path) -> None:
    empty = []
    for page in sorted((site / "reference").glob("*/index.html")):
        html = page.read_text(encoding="utf-8")
        for table in re.findall(r'doc-section-title">Attributes:</span></p>\s*<table>(.*?)'
                                r'</table>', html, re.S):
            for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table, re.S):
                cells = re.findall(r"<td>(.*?)</td>", row, re.S)
                if len(cells) >= 2 and not cells[1].strip():
                    empty.append((page.parent.name, re.sub(r"<[^>]+>", "", cells[0]).strip()))
    assert not empty, f"attributes without a type: {empty}"


def test_the_home_page_code_fits_its_box() -> None:
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    for block in re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M):
        long = [line for line in block.splitlines() if len(line) > 100]
        assert not long, long


def test_user_guides_cite_no_internal_issue_numbers() -> None:
    cited = [(page.name, line) for page in GUIDES
             for line in page.read_text(encoding="utf-8").splitlines()
             if re.search(r"(?<!dyno-queues )(?<!Conductor )\b[Ii]ssue \d+|\(#\d+\)", line)
             and "journal/" not in line]
    assert not cited, cited
