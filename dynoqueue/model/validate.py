"""The argument checks every layer shares: one rule per kind of value, one error type per caller.

Each check returns the value unchanged, so calls read ``x = int_at_least("count", count, 0)``.
``error`` picks the typed error: :class:`~dynoqueue.errors.InvalidArgumentError` for call
arguments (the default), :class:`~dynoqueue.errors.ConfigurationError` for settings. Both are
ValueErrors, raised before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import DynoQueueError, InvalidArgumentError

#: Longest duration or delay any call or setting accepts, ms: 100 years. A due time (now plus
#: at most this) stays below 2**43 ms (year 2248), where a double score still resolves the
#: priority fraction (1/100), and every wait fits threading's and asyncio's timeouts.
MAX_MS = 100 * 365 * 24 * 3600 * 1000
#: Latest absolute time accepted (``due_at_ms``), epoch ms: 2**43, in the year 2248.
MAX_EPOCH_MS = 2**43
#: Largest count any call or setting accepts (messages, deliveries, replicas): 2**31 - 1.
MAX_COUNT = 2**31 - 1


def is_int(value: object) -> bool:
    """True for an int that is not a bool (``True`` is no count of milliseconds)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_at_least(
    name: str, value: object, low: int, *, unit: str = "", high: int | None = None,
    error: type[DynoQueueError] = InvalidArgumentError,
) -> int:
    """``value`` if it is an int >= ``low`` (and <= ``high`` when given), else ``error``
    naming ``name`` (and ``unit``)."""
    if not is_int(value) or value < low or (  # type: ignore[operator]
            high is not None and value > high):  # type: ignore[operator]
        suffix = f" ({unit})" if unit else ""
        bound = "" if high is None else f" and <= {high}"
        raise error(f"{name} must be an int >= {low}{bound}{suffix}, got {value!r:.80}")
    return value  # type: ignore[return-value]


def count(name: str, value: object, low: int = 0, *,
          error: type[DynoQueueError] = InvalidArgumentError) -> int:
    """A count (messages, deliveries, replicas): an int in ``low``..:data:`MAX_COUNT`."""
    return int_at_least(name, value, low, high=MAX_COUNT, error=error)


def ms(name: str, value: object, *, low: int = 0,
       error: type[DynoQueueError] = InvalidArgumentError) -> int:
    """A duration or delay in milliseconds: an int in ``low``..:data:`MAX_MS` (100 years)."""
    return int_at_least(name, value, low, unit="ms", high=MAX_MS, error=error)


def text(name: str, value: object, *, empty: bool = True,
         error: type[DynoQueueError] = InvalidArgumentError) -> str:
    """A str that Redis can carry: valid Unicode text (no lone surrogates), non-empty unless
    ``empty``."""
    if not isinstance(value, str) or not (empty or value):
        kind = "a str" if empty else "a non-empty str"
        raise error(f"{name} must be {kind}, got {value!r:.80}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(f"{name} is not valid Unicode text (lone surrogate at {exc.start})"
                        ) from None
    return value


def message_id(value: object) -> str:
    """A message id: a non-empty str of valid Unicode text."""
    return text("message id", value, empty=False)


def pattern(value: object) -> str:
    """A Lua pattern for the predicate calls: a non-empty str of valid Unicode text, at most
    :data:`~dynoqueue.model.luapattern.MAX_PATTERN_BYTES` bytes, well formed (raises
    :class:`~dynoqueue.errors.InvalidPatternError`)."""
    from .luapattern import LuaPattern

    return LuaPattern(value).text  # type: ignore[arg-type]


def listed(what: str, value: object, *, single: tuple[type, ...] = (),
           error: type[DynoQueueError] = InvalidArgumentError) -> list[Any]:
    """The items of an iterable (list, tuple, set, generator, ...) as a list. A str, bytes,
    mapping, one of ``single`` (one item given alone), a non-iterable or an iterable whose
    iteration fails raises ``error``, whose message starts with ``what`` ("push takes a list
    of Message")."""
    if type(value) is list or type(value) is tuple:  # the usual: none of the checks below
        return list(value)
    refused = (str, bytes, bytearray, Mapping, *single)
    if isinstance(value, refused) or not isinstance(value, Iterable):
        raise error(f"{what}, got {type(value).__name__}: {value!r:.80}")
    try:
        return list(value)
    except Exception as exc:  # a broken iterable is bad input, not our failure
        raise error(f"{what}; reading it failed: {exc!r:.80}") from exc
