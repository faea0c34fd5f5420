"""The Lua scripts, one file per state change, and the code that loads them.

Each ``*.lua`` file starts with a header naming its KEYS and ARGV (with units) and what it
returns. ``_prelude.lua`` holds helpers shared by all of them; :func:`source` prepends it, so
the sync and the asyncio API run exactly the same text, named by its SHA1 (EVALSHA).
"""

from __future__ import annotations

import hashlib
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
    "bury",
    "postpone",
    "heartbeat",
    "clear",
)
#: Read-only scripts: they may run on a replica through the non-quorum connection.
READ_SCRIPTS = ("peek", "find_match", "find_stale", "inspect", "dead_list", "sizes",
                "group_info")

_DOORBELL_ON = "local DOORBELL = true"


@dataclass(frozen=True)
class Script:
    """One script's full text and its SHA1 (what EVALSHA names it by)."""

    name: str
    text: str
    sha: str


@cache
def source(name: str, doorbell: bool = True) -> str:
    """The full text of script ``name``: the shared prelude followed by the script's body.

    Args:
        doorbell: ring the shard's pub/sub doorbell on changes; False for servers without
            pub/sub (Dynomite).

    Raises:
        FileNotFoundError: there is no ``name.lua``.
    """
    folder = resources.files(__package__)
    prelude = folder.joinpath("_prelude.lua").read_text(encoding="utf-8")
    if not doorbell:
        prelude = prelude.replace(_DOORBELL_ON, "local DOORBELL = false")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return prelude + "\n" + body


@cache
def load(doorbell: bool = True) -> dict[str, Script]:
    """Every script by name, with its SHA1, for one doorbell setting."""
    out = {}
    for name in WRITE_SCRIPTS + READ_SCRIPTS:
        text = source(name, doorbell)
        sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        out[name] = Script(name, text, sha)
    return out
