"""The docs site (mkdocs.yml) shows every page of docs/: a new page must be put in the nav, or
under ``not_in_nav`` on purpose, or nobody finds it. ``make test`` builds the site itself
(``mkdocs build --strict``: links, anchors, docstrings); this checks what the build only warns
about in passing, and that the nav names no missing page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")  # PyYAML comes with the docs extra (mkdocs)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return config


def _nav_pages(entry: Any) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [page for item in entry for page in _nav_pages(item)]
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in _nav_pages(value)]
    return []


def _kept_out(config: dict[str, Any]) -> list[str]:
    """The not_in_nav patterns (gitignore style; here only folders and pages)."""
    return [line.strip().lstrip("/") for line in config.get("not_in_nav", "").splitlines()
            if line.strip() and not line.startswith("#")]


def test_every_page_is_in_the_nav_or_kept_out_on_purpose() -> None:
    config = _config()
    nav = set(_nav_pages(config["nav"]))
    kept_out = _kept_out(config)
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    forgotten = {page for page in pages - nav
                 if not any(page == p or (p.endswith("/") and page.startswith(p))
                            for p in kept_out)}
    assert not forgotten, f"add these pages to mkdocs.yml's nav (or to not_in_nav): {forgotten}"
    assert not nav - pages, f"mkdocs.yml's nav names missing pages: {nav - pages}"


def test_the_site_covers_the_guides_and_the_api() -> None:
    nav = set(_nav_pages(_config()["nav"]))
    for page in ("index.md", "getting-started.md", "model.md", "semantics.md", "deployments.md",
                 "operations.md", "conductor.md", "spark.md", "demo.md", "architecture.md",
                 "benchmarks.md", "reference/index.md", "reference/queues.md",
                 "reference/queue.md", "reference/asyncio.md", "reference/worker.md"):
        assert page in nav, page
    for page in (DOCS / "reference").glob("*.md"):
        if page.name != "index.md":
            assert ":::" in page.read_text(encoding="utf-8"), f"{page.name} documents no object"
