"""The Lua scripts, one file per state change, and the code that loads them.

Each ``*.lua`` file starts with a header naming its KEYS and ARGV (with units) and what it
returns. ``_prelude.lua`` holds helpers shared by all of them; :func:`source` prepends it, so
the sync client and a later asyncio twin run exactly the same text.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

#: Scripts that change state: they run on the quorum connection.
WRITE_SCRIPTS = (
    "push",
    "ensure",
    "claim",
    "claim_id",
    "claim_match",
    "ack",
    "set_unack_timeout",
    "set_timeout",
    "remove",
    "requeue_expired",
)
#: Read-only scripts: they may run on a replica through the non-quorum connection.
READ_SCRIPTS = ("peek", "find_match", "find_stale")


@cache
def source(name: str) -> str:
    """The full text of script ``name``: the shared prelude followed by the script's body.

    Raises:
        FileNotFoundError: there is no ``name.lua``.
    """
    folder = resources.files(__package__)
    prelude = folder.joinpath("_prelude.lua").read_text(encoding="utf-8")
    body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return prelude + "\n" + body


def register(client: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Register scripts on a redis-py client (sync or asyncio, standalone or cluster).

    Returns:
        name -> the client's Script object (EVALSHA, loading the script on NOSCRIPT).
    """
    return {name: client.register_script(source(name)) for name in names}
