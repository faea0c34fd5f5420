"""The argument checks every layer shares: one rule per kind of value, one error type per caller.

Each check returns the value unchanged, so calls read ``x = int_at_least("count", count, 0)``.
``error`` picks the typed error: :class:`~dynoqueue.errors.InvalidArgumentError` for call
arguments (the default), :class:`~dynoqueue.errors.ConfigurationError` for settings. Both are
ValueErrors, raised before anything is written.
"""

from __future__ import annotations

from ..errors import DynoQueueError, InvalidArgumentError


def is_int(value: object) -> bool:
    """True for an int that is not a bool (``True`` is no count of milliseconds)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_at_least(
    name: str, value: object, low: int, *, unit: str = "",
    error: type[DynoQueueError] = InvalidArgumentError,
) -> int:
    """``value`` if it is an int >= ``low``, else ``error`` naming ``name`` (and ``unit``)."""
    if not is_int(value) or value < low:  # type: ignore[operator]
        suffix = f" ({unit})" if unit else ""
        raise error(f"{name} must be an int >= {low}{suffix}, got {value!r}")
    return value  # type: ignore[return-value]


def ms(name: str, value: object, *, low: int = 0,
       error: type[DynoQueueError] = InvalidArgumentError) -> int:
    """A duration or delay in milliseconds: an int >= ``low`` (default 0)."""
    return int_at_least(name, value, low, unit="ms", error=error)


def message_id(value: object) -> str:
    """A message id: a non-empty str."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"message id must be a non-empty str, got {value!r}")
    return value


def pattern(value: object) -> str:
    """A Lua pattern for the predicate calls: a non-empty str of valid Unicode text, at most
    :data:`~dynoqueue.model.luapattern.MAX_PATTERN_BYTES` bytes, well formed (raises
    :class:`~dynoqueue.errors.InvalidPatternError`)."""
    from .luapattern import LuaPattern

    return LuaPattern(value).text  # type: ignore[arg-type]
