"""The Lua scripts, one file per state change, and the code that loads them.

Each ``*.lua`` file starts with a header naming its KEYS and ARGV (with units) and what it
returns. ``_prelude.lua`` holds helpers shared by all of them; :func:`source` prepends the
helpers a script uses, so the sync and the asyncio API run exactly the same text, named by its
SHA1 (EVALSHA).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

#: Scripts that change state: they run on the quorum connection.
WRITE_SCRIPTS = (
    "push",
    "claim",
    "claim_id",
    "claim_match",
    "match_page",
    "ack",
    "set_unack_timeout",
    "set_timeout",
    "remove",
    "requeue_expired",
    "release",
    "nack",
    "sweep",
    "redrive",
    "purge_dead",
    "policy",
    "set_policy",
    "bury",
    "postpone",
    "heartbeat",
    "clear",
)
#: Read-only scripts: they may run on a replica through the non-quorum connection.
READ_SCRIPTS = ("peek", "find_match", "find_stale", "inspect", "dead_list", "sizes",
                "group_info")

_DOORBELL_ON = "local DOORBELL = true"
#: A script's text before a line ``-- @prelude`` runs before the prelude's helpers are made
#: (a common case that needs none of them returns there, and saves making their closures); the
#: prelude comes in at that line, then the rest of the script.
_PRELUDE_MARK = "\n-- @prelude\n"


@dataclass(frozen=True)
class Script:
    """One script's full text and its SHA1 (what EVALSHA names it by)."""

    name: str
    text: str
    sha: str


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINES = re.compile(r"^local (?:function ([A-Za-z_]\w*)|([A-Za-z_][\w, ]*?)\s*=)", re.M)
_COMMENT = re.compile(r"--[^\n]*")


def _words(lua: str) -> set[str]:
    """The names a piece of Lua mentions outside comments (a superset of those it uses: a
    string holding a name counts too, which only keeps more of the prelude)."""
    return set(_WORD.findall(_COMMENT.sub("", lua)))


def _used_prelude(prelude: str, body: str) -> str:
    """The paragraphs of ``prelude`` (split at blank lines; each defines some locals) that
    ``body`` needs, directly or through another kept paragraph, in their order; paragraphs
    that define nothing (section comments) stay. Redis runs a script's whole text on every
    call, making every helper's closure again, so a helper a script never calls costs it
    time: ~0.05 us each, and the search for their upvalues grows with the prelude."""
    paragraphs = prelude.split("\n\n")
    defined = []
    for paragraph in paragraphs:
        names: set[str] = set()
        for function, variables in _DEFINES.findall(_COMMENT.sub("", paragraph)):
            names.update([function] if function else
                         [v.strip() for v in variables.split(",")])
        defined.append(names)
    wanted = _words(body)
    keep = [not names for names in defined]
    grew = True
    while grew:
        grew = False
        for i, names in enumerate(defined):
            if not keep[i] and names & wanted:
                keep[i] = grew = True
                wanted |= _words(paragraphs[i])
    return "\n\n".join(p for p, kept in zip(paragraphs, keep, strict=True) if kept)


@cache
def source(name: str, doorbell: bool = True) -> str:
    """The full text of script ``name``: the helpers of the shared prelude that it uses,
    followed by the script's body.

    Args:
        doorbell: ring the shard's pub/sub doorbell on changes; False for servers without
            pub/sub (Dynomite).

    Raises:
        FileNotFoundError: there is no ``name.lua``.
    """
    folder = resources.files(__package__)
    prelude = folder.joinpath("_prelude.lua").read_text(encoding="utf-8")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    first, marked, rest = body.partition(_PRELUDE_MARK)
    if marked:  # a fast path that needs no helper goes before them (see _PRELUDE_MARK)
        text = first + "\n" + _used_prelude(prelude, rest) + "\n" + rest
    else:
        text = _used_prelude(prelude, body) + "\n" + body
    if not doorbell:
        text = text.replace(_DOORBELL_ON, "local DOORBELL = false")
    return text


@cache
def load(doorbell: bool = True) -> dict[str, Script]:
    """Every script by name, with its SHA1, for one doorbell setting."""
    out = {}
    for name in WRITE_SCRIPTS + READ_SCRIPTS:
        text = source(name, doorbell)
        sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        out[name] = Script(name, text, sha)
    return out
