"""The Lua scripts, one file per state change, and the code that loads them.

Each ``*.lua`` file starts with a header naming its KEYS and ARGV (with units) and what it
returns. Helpers shared by the scripts live in ``lib/*.lua``, one file per concern; a script
names the ones it uses in its header, one line each::

    --- @include "lib/records.lua"

and a ``lib/`` file names the ones it builds on the same way. :func:`source` puts the helpers a
script needs before its text (the included files, transitively, each once, each after those it
includes; an include cycle is refused), so the sync and the asyncio API run exactly the same
text, named by its SHA1 (EVALSHA). ``tests/test_script_includes.py`` checks that each file
includes what it uses and nothing else.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.abc import Traversable

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
    "delete_policy",
    "bury",
    "postpone",
    "heartbeat",
    "clear",
    "sched_cas",
    "pause",
    "resume",
)
#: Read-only scripts: they may run on a replica through the non-quorum connection.
READ_SCRIPTS = ("peek", "find_match", "find_stale", "inspect", "dead_list", "sizes",
                "group_info", "due")

_DOORBELL_ON = "local DOORBELL = true"
_UNSHARDED = "local SHARDED = false"
#: A script's text before a line ``-- @prelude`` runs before the included helpers are made (a
#: common case that needs none of them returns there, and saves making their closures); the
#: helpers come in at that line, then the rest of the script.
_PRELUDE_MARK = "\n-- @prelude\n"
#: One include line: the path of a ``lib/`` file, relative to this package's folder.
_INCLUDE = re.compile(r'--- @include "([^"\n]+)"[ \t]*')


class IncludeError(ValueError):
    """A script's include lines are wrong: a cycle, a line out of its header, or a ``lib/``
    file that holds something else than local definitions."""


@dataclass(frozen=True)
class Script:
    """One script's full text and its SHA1 (what EVALSHA names it by)."""

    name: str
    text: str
    sha: str


@dataclass(frozen=True)
class Definition:
    """One top-level definition of a ``lib/`` file: its text (with the comment lines right
    above it) and the names it defines."""

    text: str
    names: frozenset[str]


_KEYWORDS = frozenset(
    "and break do else elseif end false for function goto if in local nil not or repeat "
    "return then true until while".split())
_TOKEN = re.compile(r"0[xX][0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\.\.?|[A-Za-z_]\w*"
                    r"|==|~=|<=|>=|[^\sA-Za-z_]")
_LONG_BRACKET = re.compile(r"\[(=*)\[")
_LOCAL = re.compile(r"local\s+(?:function\s+([A-Za-z_]\w*)|([A-Za-z_][\w\s,]*?)\s*(?:=|$))")


def _is_name(token: str) -> bool:
    return (token[0].isalpha() or token[0] == "_") and token not in _KEYWORDS


def code_of(lua: str) -> str:
    """``lua`` with its comments and string literals blanked (each becomes one space), so what
    is left is names, keywords, numbers and punctuation."""
    out: list[str] = []
    i, n = 0, len(lua)
    while i < n:
        c = lua[i]
        if lua.startswith("--", i):
            long = _LONG_BRACKET.match(lua, i + 2)
            if long:
                end = lua.find("]" + long.group(1) + "]", long.end())
                i = n if end < 0 else end + len(long.group(0))
            else:
                end = lua.find("\n", i)
                i = n if end < 0 else end
            out.append(" ")
        elif c in "'\"":
            j = i + 1
            while j < n and lua[j] != c and lua[j] != "\n":
                j += 2 if lua[j] == "\\" else 1
            i = j + 1
            out.append(" ")
        elif c == "[" and (long := _LONG_BRACKET.match(lua, i)):
            end = lua.find("]" + long.group(1) + "]", long.end())
            i = n if end < 0 else end + len(long.group(0))
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def names_used(lua: str, keys: bool = True) -> set[str]:
    """The variable names ``lua`` mentions outside comments and strings: not keywords, not
    fields (after ``.`` or ``:``); with ``keys`` False not the keys of table constructors
    either (``{strict = 0}``)."""
    tokens = _TOKEN.findall(code_of(lua))
    names: set[str] = set()
    depth = 0
    for i, token in enumerate(tokens):
        if token == "{":  # noqa: S105 (a Lua token)
            depth += 1
        elif token == "}":  # noqa: S105
            depth -= 1
        elif _is_name(token):
            if i > 0 and tokens[i - 1] in (".", ":"):
                continue
            if not keys and depth > 0 and i + 1 < len(tokens) and tokens[i + 1] == "=":
                continue
            names.add(token)
    return names


def names_declared(lua: str) -> set[str]:
    """The names ``lua`` declares itself, in any scope: locals, function parameters and the
    variables of ``for`` loops (a file's own names, which hide any helper's)."""
    tokens = _TOKEN.findall(code_of(lua))
    names: set[str] = set()
    for i, token in enumerate(tokens):
        if token in ("local", "for"):
            j = i + 1
            if tokens[j:j + 1] == ["function"]:
                j += 1
            while j < len(tokens) and _is_name(tokens[j]):
                names.add(tokens[j])
                if tokens[j + 1:j + 2] != [","]:
                    break
                j += 2
        elif token == "function":  # noqa: S105
            j = i + 1
            while j < len(tokens) and tokens[j] != "(":
                j += 1
            while j < len(tokens) and tokens[j] != ")":
                if _is_name(tokens[j]):
                    names.add(tokens[j])
                j += 1
    return names


def includes(text: str, where: str = "") -> list[str]:
    """The paths ``text`` includes, in order. Include lines belong to the file's header: the
    comment lines it starts with.

    Raises:
        IncludeError: an include line after the header.
    """
    found, header = [], True
    for line in text.split("\n"):
        match = _INCLUDE.fullmatch(line)
        if match:
            if not header:
                raise IncludeError(f"{where}: include line after the header: {line!r}")
            found.append(match.group(1))
        elif not line.startswith("--"):
            header = False
    return found


def definitions(text: str, where: str = "") -> list[Definition]:
    """The top-level definitions of a ``lib/`` file, in order. Each starts at a line
    ``local ...`` (with the comment lines right above it, no blank line between) and runs to
    the next line that starts in its first column with ``local`` or ``--``: its other lines are
    indented, blank or ``end`` (blank lines inside a definition are fine). Comments that no
    definition follows at once (the file's header, section notes) are left out.

    Raises:
        IncludeError: the file holds top-level code that is no local definition.
    """
    units: list[list[str]] = []
    comment: list[str] = []
    current: list[str] | None = None
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("local "):
            current = [*comment, line]
            units.append(current)
            comment = []
        elif line.startswith("--"):
            current = None
            comment.append(line)
        elif not line.strip():
            if current is None:
                comment = []
            else:
                current.append(line)
        elif current is None or not (line[0].isspace() or line.rstrip() == "end"):
            raise IncludeError(f"{where}:{number}: code outside a local definition: {line!r}")
        else:
            current.append(line)
    out = []
    for unit in units:
        body = "\n".join(unit).rstrip()
        first = _LOCAL.match(next(line for line in unit if line.startswith("local ")))
        if first is None:
            raise IncludeError(f"{where}: not a local definition: {unit[0]!r}")
        if first.group(1):
            names = frozenset([first.group(1)])
        else:
            names = frozenset(name.strip() for name in first.group(2).split(","))
        out.append(Definition(body, names))
    return out


def libraries(folder: Traversable, path: str) -> list[str]:
    """The ``lib/`` files the file ``path`` (relative to ``folder``) includes, transitively:
    each once, each after the files it includes.

    Raises:
        IncludeError: the includes make a cycle.
        FileNotFoundError: an included file does not exist.
    """
    order: list[str] = []
    done: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        for included in includes(folder.joinpath(name).read_text(encoding="utf-8"), name):
            if included in chain:
                raise IncludeError("include cycle: " + " -> ".join((*chain, included)))
            if included not in done:
                visit(included, (*chain, included))
                done.add(included)
                order.append(included)

    visit(path, (path,))
    return order


def helpers(folder: Traversable, path: str, body: str) -> list[Definition]:
    """The definitions of the files ``path`` includes (transitively) that ``body`` uses,
    directly or through another kept definition, in their order. Redis runs a script's whole
    text on every call, making every helper's closure again, so a helper a script never calls
    costs it time (~45 ns each). A definition can only use those before it (Lua locals), so
    one pass from the last to the first finds them all."""
    found = [d for lib in libraries(folder, path)
             for d in definitions(folder.joinpath(lib).read_text(encoding="utf-8"), lib)]
    wanted = names_used(body)
    keep = []
    for definition in reversed(found):
        if definition.names & wanted:
            keep.append(definition)
            wanted |= names_used(definition.text)
    return keep[::-1]


@cache
def source(name: str, doorbell: bool = True, sharded: bool = False) -> str:
    """The full text of script ``name``: the helpers of its included ``lib/`` files that it
    uses, followed by the script's own text.

    Args:
        doorbell: ring the shard's pub/sub doorbell on changes; False for servers without
            pub/sub (Dynomite).
        sharded: ring with SPUBLISH (Redis Cluster: sharded pub/sub, Redis 7+), falling back
            to PUBLISH where the server lacks it.

    Raises:
        FileNotFoundError: there is no ``name.lua``, or it includes a file that does not exist.
        IncludeError: its includes make a cycle, or are not in its header.
    """
    folder = resources.files(__package__)
    path = f"{name}.lua"
    body = folder.joinpath(path).read_text(encoding="utf-8")
    first, marked, rest = body.partition(_PRELUDE_MARK)
    used = rest if marked else body  # a fast path that needs no helper goes before them
    prelude = "\n\n".join(d.text for d in helpers(folder, path, used))
    if marked:
        text = first + "\n" + prelude + "\n" + rest
    else:
        text = prelude + "\n" + body
    if not doorbell:
        text = text.replace(_DOORBELL_ON, "local DOORBELL = false")
    if sharded:
        text = text.replace(_UNSHARDED, "local SHARDED = true")
    return text


#: ``tick``: push.lua for a schedule pass's tick messages, each at most once per partition: a
#: tick whose id the partition's tick log (``P.TICKS.Q``) holds is left out, the others are
#: logged and pushed (keep mode), in one script, so a pass repeated after a crash between its
#: push and the record's move (two slots on a partitioned Cluster queue) queues none twice.
_TICK = """-- tick: push a schedule pass's tick messages that this partition has not queued before.
-- KEYS: [1] the tick log (P.TICKS.Q), then push.lua's KEYS (QueueKeys.lifecycle_keys()).
-- ARGV: [1] forget logged ticks below this ms (their schedules have moved past them), then
--       push.lua's ARGV (mode keep).
-- Returns: push.lua's reply for the ticks pushed ({now} when none was new).
local function push(KEYS, ARGV)
%s
end
local log = KEYS[1]
redis.call('ZREMRANGEBYSCORE', log, '-inf', '(' .. ARGV[1])
local keys, args = {}, {ARGV[2], ARGV[3]}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 4, #ARGV, 9 do
  if not redis.call('ZSCORE', log, ARGV[i]) then
    redis.call('ZADD', log, ARGV[i + 5], ARGV[i])
    for j = 0, 8 do args[#args + 1] = ARGV[i + j] end
  end
end
if #args == 2 then return {0} end
return push(keys, args)
"""

#: ``push_parts``: push.lua for several partitions of a queue whose keys are all on one server
#: (not a Cluster, not a proxy), in one call instead of one per partition: on one server a
#: partitioned queue's batched push paid each partition's call (~10 us of the server's and the
#: client's each) for a share of ~12 messages of a 100-message batch. Each partition takes
#: push.lua's fast path (``push_fast``, the text before its ``-- @fast-end`` line) in place on
#: the call's KEYS and ARGV; only one it does not serve gets copies of its own for push.lua's
#: general code (copying costs the server ~0.6 us a message).
_FAST_END = "\n-- @fast-end\n"
_PARTS = """-- push_parts: push.lua on each of several partitions of one queue, in one call.
-- KEYS: each partition's push.lua KEYS (QueueKeys.lifecycle_keys()) in turn, ARGV[3] each.
-- ARGV: [1] now override in epoch ms or '' for server TIME, [2] mode (push.lua's), [3] the
--       number of KEYS per partition, then per partition its message count n (> 0) and
--       push.lua's 9 values for each of its n messages.
-- Returns: each partition's push.lua reply, in turn; every partition after the first takes the
-- first's now (one clock for the call, as for one partition).
-- push.lua up to its fast path (push_fast), then push.lua whole (the general code):
%s
local function push(KEYS, ARGV)
%s
end
local width, out, now, mode = tonumber(ARGV[3]), {}, ARGV[1], ARGV[2]
local at, base = 4, 0
while at <= #ARGV do
  local n = tonumber(ARGV[at])
  local reply = push_fast(base, at + 1, at + 9 * n - 8, now, mode)
  if not reply then
    reply = push({unpack(KEYS, base + 1, base + width)},
                 {now, mode, unpack(ARGV, at + 1, at + 9 * n)})
  end
  now = reply[1]
  out[#out + 1] = reply
  at, base = at + 1 + 9 * n, base + width
end
return out
"""


def _parts(push: str) -> str:
    """push_parts' text from push.lua's (as :func:`source` made it)."""
    fast, marked, _ = push.partition(_FAST_END)
    if not marked:
        raise IncludeError("push.lua has no '-- @fast-end' line")
    return _PARTS % (fast, push)


@cache
def load(doorbell: bool = True, sharded: bool = False) -> dict[str, Script]:
    """Every script by name, with its SHA1, for one doorbell setting (see :func:`source`);
    also ``tick``, push.lua behind a schedule's tick log, and ``push_parts``, push.lua on
    several partitions in one call."""
    texts = {name: source(name, doorbell, sharded) for name in WRITE_SCRIPTS + READ_SCRIPTS}
    texts["tick"] = _TICK % texts["push"]
    texts["push_parts"] = _parts(texts["push"])
    out = {}
    for name, text in texts.items():
        sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
        out[name] = Script(name, text, sha)
    return out
