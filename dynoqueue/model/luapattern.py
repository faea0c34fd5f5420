"""Lua 5.1 patterns (``string.match``), matched in Python with a bounded amount of work.

The predicate calls (``pop_msg_with_predicate``, ``contains_predicate``,
``get_msg_with_predicate``) take a Lua pattern, as dyno-queues' Java client does, and match it
against each stored message's JSON. Matching used to run inside one Lua script: Lua's matcher
backtracks, a pattern such as ``.-x`` costs O(n**2) on an n-byte payload, and ``string.match``
is one C call that neither the script timeout nor ``SCRIPT KILL`` can interrupt, so one call
blocked Redis for seconds. The queue now reads messages page by page and matches them here;
Redis only serves short reads.

:class:`LuaPattern` follows the matching rules of Lua 5.1's ``lstrlib.c`` (Redis embeds Lua
5.1) on the bytes of the UTF-8 JSON: character classes in the C locale, sets, the ``*``, ``+``,
``-`` and ``?`` quantifiers, anchors, captures, back-references (``%1``), ``%b`` and ``%f``.
Two differences, both stricter: a malformed pattern is refused when it is compiled, even if
Lua would only have noticed at a position the subject never reaches; and each search is
limited to :data:`STEP_BUDGET` steps, past which it raises :class:`PatternTooCostlyError`
instead of running for minutes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import InvalidPatternError

#: Most matcher steps one search of one subject may take (about a second of CPU): a literal
#: search needs roughly one step per candidate start; a pattern that backtracks costs more.
STEP_BUDGET = 2_000_000
#: Longest pattern accepted, UTF-8 bytes.
MAX_PATTERN_BYTES = 512
_MAX_CAPTURES = 32  # LUA_MAXCAPTURES

# Tokens: (kind, ...). A single-character item carries its 256-entry table and quantifier.
_ITEM, _OPEN, _POSITION, _CLOSE, _BALANCE, _FRONTIER, _BACKREF, _END = range(8)
_Token = tuple[Any, ...]


class PatternTooCostlyError(InvalidPatternError):
    """A pattern needed more than :data:`STEP_BUDGET` steps on one subject (it backtracks too
    much on that message: write it with fewer ``*``, ``-`` and ``+`` items, or anchor it)."""


class _Exhausted(Exception):
    pass


def _class_table(letter: int) -> bytes:
    """The bytes that ``%<letter>`` matches, in the C locale (Lua's ``match_class``)."""
    tests: dict[str, Callable[[int], bool]] = {
        "a": lambda c: 65 <= c <= 90 or 97 <= c <= 122,
        "c": lambda c: c < 32 or c == 127,
        "d": lambda c: 48 <= c <= 57,
        "l": lambda c: 97 <= c <= 122,
        "p": lambda c: 33 <= c <= 47 or 58 <= c <= 64 or 91 <= c <= 96 or 123 <= c <= 126,
        "s": lambda c: 9 <= c <= 13 or c == 32,
        "u": lambda c: 65 <= c <= 90,
        "w": lambda c: 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122,
        "x": lambda c: 48 <= c <= 57 or 65 <= c <= 70 or 97 <= c <= 102,
        "z": lambda c: c == 0,
    }
    test = tests.get(chr(letter).lower())
    if test is None:  # not a class: the character itself
        return bytes(int(c == letter) for c in range(256))
    upper = 65 <= letter <= 90
    return bytes(int(test(c) != upper) for c in range(256))


_CLASSES = {c: _class_table(c) for c in range(256)}


class LuaPattern:
    """A compiled Lua pattern.

    Args:
        pattern: the pattern text (str: matched as its UTF-8 bytes), non-empty, at most
            :data:`MAX_PATTERN_BYTES` bytes. As in Lua 5.1, it ends at a NUL character.

    Raises:
        InvalidPatternError: the pattern is not a non-empty str of valid Unicode text, is too
            long, or is malformed (the error says how, in Lua's words).
    """

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidPatternError(f"pattern must be a non-empty str, got {pattern!r:.80}")
        try:
            raw = pattern.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidPatternError(
                f"pattern is not valid Unicode text (lone surrogate at {exc.start})") from None
        if len(raw) > MAX_PATTERN_BYTES:
            raise InvalidPatternError(f"pattern is {len(raw)} bytes, over the limit of "
                                      f"{MAX_PATTERN_BYTES}")
        self.text = pattern
        raw = raw.split(b"\0", 1)[0]
        self._anchor = raw.startswith(b"^")
        self._tokens = _compile(raw[1:] if self._anchor else raw)
        self._starts = _start_finder(self._tokens)
        self._captures: list[list[int]] = []
        self._steps = 0
        self._subject = b""

    def __repr__(self) -> str:
        return f"LuaPattern({self.text!r})"

    def search(self, subject: bytes | str, budget: int = STEP_BUDGET) -> bool:
        """Whether ``string.match(subject, pattern)`` would find a match.

        Args:
            subject: the text (str: its UTF-8 bytes).
            budget: most steps this search may take.

        Raises:
            PatternTooCostlyError: the search needed more than ``budget`` steps.
        """
        if isinstance(subject, str):
            subject = subject.encode("utf-8", "surrogateescape")
        self._subject = subject
        self._steps = -budget
        n = len(subject)
        starts = range(1) if self._anchor else self._starts(subject)
        try:
            for start in starts:
                self._captures = []
                if self._match(start, 0) is not None:
                    return True
                if start >= n:
                    break
        except (_Exhausted, RecursionError):
            raise PatternTooCostlyError(
                f"pattern {self.text!r:.80} needs more than {budget} matching steps on a "
                f"{n}-byte message; use fewer '*', '-' and '+' items or anchor it") from None
        finally:
            self._subject = b""
        return False

    # One function, as lstrlib.c's do_match: a helper for each recursive branch (-, *, +,
    # captures) would add a frame per pattern item and halve the depth the recursion limit allows.
    def _match(self, s: int, i: int) -> int | None:
        """Lua's ``do_match``: the end of a match of tokens[i:] at s, or None."""
        tokens, subject = self._tokens, self._subject
        n = len(subject)
        while True:
            self._steps += 1
            if self._steps > 0:
                raise _Exhausted
            if i == len(tokens):
                return s
            token = tokens[i]
            kind = token[0]
            if kind == _ITEM:
                table, quantifier = token[1], token[2]
                hit = s < n and table[subject[s]]
                if quantifier == "":
                    if not hit:
                        return None
                    s += 1
                    i += 1
                elif quantifier == "?":
                    if hit:
                        end = self._match(s + 1, i + 1)
                        if end is not None:
                            return end
                    i += 1
                elif quantifier == "-":
                    while True:
                        end = self._match(s, i + 1)
                        if end is not None:
                            return end
                        if s < n and table[subject[s]]:
                            s += 1
                        else:
                            return None
                else:  # "*" or "+": the longest run first, then shorter ones
                    if quantifier == "+":
                        if not hit:
                            return None
                        s += 1
                    run = token[3].match(subject, s)
                    last = run.end() if run else s
                    self._steps += (last - s) >> 4
                    for at in range(last, s - 1, -1):
                        end = self._match(at, i + 1)
                        if end is not None:
                            return end
                    return None
            elif kind == _OPEN or kind == _POSITION:
                self._captures.append([s, -2 if kind == _POSITION else -1])
                end = self._match(s, i + 1)
                if end is None:
                    self._captures.pop()
                return end
            elif kind == _CLOSE:
                capture = next(c for c in reversed(self._captures) if c[1] == -1)
                capture[1] = s - capture[0]
                end = self._match(s, i + 1)
                if end is None:
                    capture[1] = -1
                return end
            elif kind == _BALANCE:
                end = self._match_balance(s, token[1], token[2])
                if end is None:
                    return None
                s = end
                i += 1
            elif kind == _FRONTIER:
                table = token[1]
                before = subject[s - 1] if s > 0 else 0
                at = subject[s] if s < n else 0
                if table[before] or not table[at]:
                    return None
                i += 1
            elif kind == _BACKREF:
                start, length = self._captures[token[1]]
                if subject[s:s + length] != subject[start:start + length]:
                    return None
                s += length
                i += 1
            else:  # _END
                return s if s == n else None


    def _match_balance(self, s: int, opener: int, closer: int) -> int | None:
        """Lua's ``matchbalance`` (``%b``): the index after the balanced run at ``s``, or None."""
        subject, n = self._subject, len(self._subject)
        if s >= n or subject[s] != opener:
            return None
        depth, begin = 1, s
        s += 1
        while s < n:
            c = subject[s]
            if c == closer:
                depth -= 1
                if depth == 0:
                    break
            elif c == opener:
                depth += 1
            s += 1
        self._steps += (s - begin) >> 4
        if s >= n:
            return None
        return s + 1


def _compile(p: bytes) -> list[_Token]:
    """The tokens of pattern ``p`` (without its ``^`` anchor), read as Lua's do_match does."""
    tokens: list[_Token] = []
    opened: list[int] = []  # capture indexes not yet closed
    closed: set[int] = set()
    count = 0
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == 0x28:  # (
            if count >= _MAX_CAPTURES:
                raise InvalidPatternError("malformed Lua pattern: too many captures")
            position = i + 1 < n and p[i + 1] == 0x29
            if position:
                tokens.append((_POSITION,))
                closed.add(count)
                i += 2
            else:
                tokens.append((_OPEN,))
                opened.append(count)
                i += 1
            count += 1
            continue
        if c == 0x29:  # )
            if not opened:
                raise InvalidPatternError("malformed Lua pattern: invalid pattern capture")
            closed.add(opened.pop())
            tokens.append((_CLOSE,))
            i += 1
            continue
        if c == 0x24 and i == n - 1:  # $ at the end
            tokens.append((_END,))
            i += 1
            continue
        special = _percent_token(p, i, tokens, closed) if c == 0x25 and i + 1 < n else None
        token, i = special or _item_token(p, i)
        tokens.append(token)
    if opened:
        raise InvalidPatternError("malformed Lua pattern: unfinished capture")
    return tokens


def _percent_token(p: bytes, i: int, tokens: list[_Token],
                   closed: set[int]) -> tuple[_Token, int] | None:
    """The ``%b``, ``%f`` or back-reference token at ``p[i] == '%'`` and the index after it;
    None for a class (``%a``, ``%%``...), which is an item."""
    n, nxt = len(p), p[i + 1]
    if nxt == 0x62:  # %b
        if i + 3 >= n:
            raise InvalidPatternError("malformed Lua pattern: unbalanced pattern "
                                      "(%b needs two characters)")
        return (_BALANCE, p[i + 2], p[i + 3]), i + 4
    if nxt == 0x66:  # %f
        if i + 2 >= n or p[i + 2] != 0x5B:
            raise InvalidPatternError("malformed Lua pattern: missing '[' after '%f'")
        end = _class_end(p, i + 2)
        return (_FRONTIER, _set_table(p, i + 2, end - 1)), end
    if 0x30 <= nxt <= 0x39:  # %1 .. %9: a back-reference
        index = nxt - 0x31
        if index < 0 or index not in closed or _is_position(tokens, index):
            raise InvalidPatternError("malformed Lua pattern: invalid capture index "
                                      f"%{chr(nxt)}")
        return (_BACKREF, index), i + 2
    return None


def _item_token(p: bytes, i: int) -> tuple[_Token, int]:
    """The single-character item at ``i`` with its quantifier, and the index after them."""
    end = _class_end(p, i)
    table = _item_table(p, i, end)
    quantifier = chr(p[end]) if end < len(p) and p[end] in b"?*+-" else ""
    run = re.compile(_byte_class(table) + b"*") if quantifier in ("*", "+") else None
    return (_ITEM, table, quantifier, run), end + (1 if quantifier else 0)


def _is_position(tokens: list[_Token], index: int) -> bool:
    """Whether capture ``index`` is a position capture ``()`` (Lua would crash on a
    back-reference to one; it is refused)."""
    seen = -1
    for token in tokens:
        if token[0] in (_OPEN, _POSITION):
            seen += 1
            if seen == index:
                return bool(token[0] == _POSITION)
    return False


def _class_end(p: bytes, i: int) -> int:
    """Lua's ``classEnd``: the index after the single-character class starting at ``i``."""
    n = len(p)
    c = p[i]
    i += 1
    if c == 0x25:  # %
        if i >= n:
            raise InvalidPatternError("malformed Lua pattern (ends with '%')")
        return i + 1
    if c == 0x5B:  # [
        if i < n and p[i] == 0x5E:
            i += 1
        while True:  # the first character (even ']') belongs to the set
            if i >= n:
                raise InvalidPatternError("malformed Lua pattern (missing ']')")
            c = p[i]
            i += 1
            if c == 0x25 and i < n:
                i += 1
            if i < n and p[i] == 0x5D:
                return i + 1
            if i >= n:
                raise InvalidPatternError("malformed Lua pattern (missing ']')")
    return i


def _item_table(p: bytes, i: int, end: int) -> bytes:
    c = p[i]
    if c == 0x2E:  # .
        return b"\1" * 256
    if c == 0x25:
        return _CLASSES[p[i + 1]]
    if c == 0x5B:
        return _set_table(p, i, end - 1)
    return bytes(int(b == c) for b in range(256))


def _set_table(p: bytes, i: int, close: int) -> bytes:
    """Lua's ``matchbracketclass`` for every byte: the set from ``p[i] == '['`` to ``close``."""
    table = bytearray(256)
    sign = 1
    if p[i + 1] == 0x5E:  # ^
        sign = 0
        i += 1
    i += 1
    while i < close:
        c = p[i]
        if c == 0x25:
            i += 1
            cls = _CLASSES[p[i]]
            for b in range(256):
                table[b] |= cls[b]
        elif i + 2 < close and p[i + 1] == 0x2D:  # a range a-z
            for b in range(c, p[i + 2] + 1):
                table[b] = 1
            i += 2
        else:
            table[c] = 1
        i += 1
    return bytes(table) if sign else bytes(1 - b for b in table)


def _byte_class(table: bytes) -> bytes:
    """A ``re`` character class matching the bytes of ``table`` (never matching if none)."""
    members = b"".join(re.escape(bytes([b])) for b in range(256) if table[b])
    return b"[" + members + b"]" if members else b"(?!)"


def _start_finder(tokens: list[_Token]) -> Callable[[bytes], Iterable[int]]:
    """Where an unanchored search may start: every position, or, when the pattern begins with
    items that must each match one byte, the positions where those bytes are (found in C)."""
    lead = []
    for token in tokens:
        if token[0] in (_OPEN, _POSITION):
            continue
        if token[0] != _ITEM or token[2] not in ("", "+"):
            break
        lead.append(_byte_class(token[1]))
        if token[2] == "+":
            break
    if not lead:
        return lambda subject: range(len(subject) + 1)
    finder = re.compile(b"(?=" + b"".join(lead) + b")", re.DOTALL)
    return lambda subject: (m.start() for m in finder.finditer(subject))
