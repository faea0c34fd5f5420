"""The Lua scripts' include lines (``--- @include "lib/x.lua"``, see dynoqueue.scripts): each
file includes the ``lib/`` files whose helpers it uses and no other, includes resolve once
each in dependency order, a cycle is refused, and every loaded script defines each helper it
uses before it. No server needed."""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

import pytest

from dynoqueue import scripts
from dynoqueue.scripts import (
    IncludeError,
    definitions,
    helpers,
    includes,
    libraries,
    names_declared,
    names_used,
)

FOLDER = resources.files(scripts)
NAMES = scripts.WRITE_SCRIPTS + scripts.READ_SCRIPTS


def _text(folder: Traversable, path: str) -> str:
    return folder.joinpath(path).read_text(encoding="utf-8")


def _libs(folder: Traversable) -> list[str]:
    return sorted(f"lib/{p.name}" for p in folder.joinpath("lib").iterdir()
                  if p.name.endswith(".lua"))


def _owners(folder: Traversable) -> dict[str, str]:
    """Each name a ``lib/`` file defines, with that file."""
    owners: dict[str, str] = {}
    for lib in _libs(folder):
        for definition in definitions(_text(folder, lib), lib):
            for name in definition.names:
                assert name not in owners, f"{name} is defined in {owners[name]} and {lib}"
                owners[name] = lib
    return owners


def include_problems(folder: Traversable, path: str) -> list[str]:
    """What is wrong with the include lines of ``path``: a helper it uses from a ``lib/`` file
    it does not include itself (each file names what it uses; what an included file includes
    does not count), an included file it uses nothing of, an include of a missing file."""
    text = _text(folder, path)
    own = {n for d in definitions(text, path) for n in d.names} if path.startswith("lib/") \
        else set()
    _first, marked, rest = text.partition(scripts._PRELUDE_MARK)
    used = names_used(rest if marked else text, keys=False) - names_declared(text) - own
    owners = _owners(folder)
    wanted = {owners[name] for name in used if name in owners}
    named = includes(text, path)
    problems = [f"{path} uses {name} of {owners[name]} but does not include it"
                for name in sorted(used) if name in owners and owners[name] not in named]
    problems += [f"{path} includes {lib} but uses nothing of it"
                 for lib in named if lib not in wanted]
    problems += [f"{path} includes {lib}, which does not exist"
                 for lib in named if not folder.joinpath(lib).is_file()]
    problems += [f"{path} includes {lib} twice" for lib in set(named) if named.count(lib) > 1]
    return problems


def test_the_prelude_is_gone_and_every_lib_file_holds_local_definitions_only() -> None:
    assert not FOLDER.joinpath("_prelude.lua").is_file()
    libs = _libs(FOLDER)
    assert len(libs) >= 8
    for lib in libs:
        assert definitions(_text(FOLDER, lib), lib), lib
    assert {"lifecycle_keys", "policy_of", "wait_in", "LIFE_PAD_VALUE", "group_insert",
            "dead_letter", "lease"} <= set(_owners(FOLDER))


@pytest.mark.parametrize("lib", _libs(FOLDER))
def test_each_lib_definition_is_a_whole_block(lib: str) -> None:
    """Each definition opens as many blocks (function, if, do: for and while) as it ends, so
    the loader's cut between definitions is where Lua's own is."""
    import re

    for definition in definitions(_text(FOLDER, lib), lib):
        words = re.findall(r"[A-Za-z_]\w*", scripts.code_of(definition.text))
        opened = sum(words.count(w) for w in ("function", "if", "do", "repeat"))
        closed = words.count("end") + words.count("until")
        assert opened == closed, (lib, sorted(definition.names))


@pytest.mark.parametrize("path", [f"{n}.lua" for n in NAMES] + _libs(FOLDER))
def test_each_file_includes_exactly_the_lib_files_it_uses(path: str) -> None:
    assert include_problems(FOLDER, path) == []


def test_every_lib_helper_is_used_by_some_script() -> None:
    kept = {n for name in NAMES
            for d in helpers(FOLDER, f"{name}.lua", _text(FOLDER, f"{name}.lua"))
            for n in d.names}
    assert set(_owners(FOLDER)) - kept == set()


@pytest.mark.parametrize("name", NAMES)
def test_each_loaded_script_defines_every_helper_it_uses_before_it_uses_it(name: str) -> None:
    owners = _owners(FOLDER)
    kept = helpers(FOLDER, f"{name}.lua", _text(FOLDER, f"{name}.lua"))
    defined: set[str] = set()
    for definition in kept:
        free = (names_used(definition.text, keys=False) - names_declared(definition.text)
                - definition.names)
        assert {n for n in free if n in owners} <= defined, (name, definition.names)
        defined |= definition.names
    body = _text(FOLDER, f"{name}.lua").partition(scripts._PRELUDE_MARK)
    used = (names_used(body[2] if body[1] else body[0], keys=False)
            - names_declared(body[0] + body[2]))
    assert {n for n in used if n in owners} <= defined, name
    for doorbell in (True, False):  # the loaded text: the helpers, then the script
        text = scripts.source(name, doorbell)
        for definition in kept:
            expected = definition.text if doorbell else definition.text.replace(
                "local DOORBELL = true", "local DOORBELL = false")
            assert expected in text


def test_helpers_are_kept_only_when_used() -> None:
    push = scripts.source("push")
    assert "local function lease(" not in push and "local function group_insert(" in push
    assert "local function lease(" in scripts.source("claim_id")
    assert "local function group_insert(" not in scripts.source("claim")
    assert scripts.source("policy") == "\n" + _text(FOLDER, "policy.lua")  # includes nothing


def _folder(tmp_path: Path, files: dict[str, str]) -> Traversable:
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    return tmp_path


def test_includes_resolve_transitively_each_once_after_what_they_include(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {
        "s.lua": '-- s\n--- @include "lib/d.lua"\n--- @include "lib/b.lua"\nreturn d() + b()\n',
        "lib/a.lua": "-- a\n\nlocal function a() return 1 end\n\nlocal function unused() end\n",
        "lib/b.lua": ('--- @include "lib/a.lua"\n\n-- b\n\n'
                      "local function b()\n\n  return a()\nend\n"),
        "lib/c.lua": '--- @include "lib/a.lua"\nlocal function c() return a() end\n',
        "lib/d.lua": ('--- @include "lib/b.lua"\n--- @include "lib/c.lua"\n'
                      "local function d() return b() + c() end\n"),
    })
    assert libraries(folder, "s.lua") == ["lib/a.lua", "lib/b.lua", "lib/c.lua", "lib/d.lua"]
    kept = helpers(folder, "s.lua", _text(folder, "s.lua"))
    assert [sorted(d.names) for d in kept] == [["a"], ["b"], ["c"], ["d"]]
    assert kept[1].text == "local function b()\n\n  return a()\nend"  # a blank line inside
    assert [include_problems(folder, p) for p in ("s.lua", "lib/b.lua", "lib/d.lua")] == [
        [], [], []]


def test_a_helper_used_from_a_lib_not_included_is_reported(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {
        "s.lua": '-- s\n--- @include "lib/b.lua"\nreturn a() + b()\n',
        "t.lua": '-- t\n--- @include "lib/a.lua"\n--- @include "lib/b.lua"\nreturn b()\n',
        "u.lua": '-- u\n--- @include "lib/gone.lua"\nlocal a = 1\nreturn {a = a, b = 2}.b\n',
        "lib/a.lua": "local function a() return 1 end\n",
        "lib/b.lua": '--- @include "lib/a.lua"\nlocal function b() return a() end\n',
    })
    assert include_problems(folder, "s.lua") == [
        "s.lua uses a of lib/a.lua but does not include it"]
    assert include_problems(folder, "t.lua") == [
        "t.lua includes lib/a.lua but uses nothing of it"]
    assert include_problems(folder, "u.lua") == [
        "u.lua includes lib/gone.lua but uses nothing of it",
        "u.lua includes lib/gone.lua, which does not exist"]
    with pytest.raises(FileNotFoundError):
        libraries(folder, "u.lua")


def test_include_cycles_and_misplaced_lines_are_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {
        "s.lua": '--- @include "lib/a.lua"\nreturn a()\n',
        "self.lua": '--- @include "self.lua"\nreturn 1\n',
        "late.lua": 'local x = 1\n--- @include "lib/a.lua"\nreturn x\n',
        "lib/a.lua": '--- @include "lib/b.lua"\nlocal function a() return b() end\n',
        "lib/b.lua": '--- @include "lib/a.lua"\nlocal function b() return 1 end\n',
        "lib/code.lua": "local function f() return 1 end\nf()\n",
    })
    with pytest.raises(IncludeError, match=r"s\.lua -> lib/a\.lua -> lib/b\.lua -> lib/a\.lua"):
        libraries(folder, "s.lua")
    with pytest.raises(IncludeError, match="cycle"):
        libraries(folder, "self.lua")
    with pytest.raises(IncludeError, match="after the header"):
        libraries(folder, "late.lua")
    with pytest.raises(IncludeError, match="outside a local definition"):
        definitions(_text(folder, "lib/code.lua"), "lib/code.lua")


def test_names_skip_comments_strings_fields_and_table_keys() -> None:
    lua = ("local x = f(k.g, 'h(i)', \"j\", 0xFF, 2e5) -- m(n)\n--[[ o(p) ]] y = {q = r, s}\n"
           "local function t(u, v) for w, z in pairs(u) do end return a:b() .. c end\n")
    assert names_used(lua, keys=False) == {"x", "f", "k", "y", "r", "s", "t", "u", "v", "w",
                                           "z", "pairs", "a", "c"}
    assert "q" in names_used(lua)
    assert names_declared(lua) == {"x", "t", "u", "v", "w", "z"}
