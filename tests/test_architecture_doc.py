"""docs/architecture.md's tree names every module of dynoqueue/, and only modules that exist: the
map a new maintainer reads first must match the tree."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dynoqueue"


def _tree_entries() -> set[str]:
    """The paths the page's first code block names, relative to dynoqueue/ ("core/queue.py",
    "core/" for a package)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```", 2)[1]
    entries: set[str] = set()
    folders: dict[int, str] = {}
    for line in block.splitlines():
        match = re.match(r"( *)(\S+)", line)
        if match is None or not line.strip():
            continue
        indent, name = len(match.group(1)), match.group(2)
        if indent == 0 or not re.fullmatch(r"[\w.]+/?", name):
            continue  # the root line, or a description's continuation
        parent = "".join(folders[i] for i in sorted(folders) if i < indent)
        for deeper in [i for i in folders if i >= indent]:
            del folders[deeper]
        if name.endswith("/"):
            folders[indent] = name
        entries.add(parent + name)
    return entries


def _modules() -> set[str]:
    """Every module of the package, as the tree would name it: a file, or a package for its
    ``__init__.py`` (the root's ``__init__.py`` is named as a file)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" and path.parent != PACKAGE:
            relative = relative[: -len("__init__.py")]
        names.add(relative)
    return names


def test_every_module_is_on_the_map() -> None:
    missing = sorted(_modules() - _tree_entries())
    assert missing == [], f"docs/architecture.md does not name: {missing}"


def test_the_map_names_nothing_that_is_gone() -> None:
    entries = {e for e in _tree_entries() if e.endswith(".py") or e.endswith("/")}
    gone = sorted(e for e in entries if not (PACKAGE / e).exists())
    assert gone == [], f"docs/architecture.md names what no longer exists: {gone}"
