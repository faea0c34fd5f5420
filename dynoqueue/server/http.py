"""Request parameters and JSON responses shared by the routes.

Camellia's server takes Spring ``@RequestParam`` s: form fields of an
``application/x-www-form-urlencoded`` body or the query string. They are parsed here with the
standard library (no multipart package needed); a bad value raises :class:`BadRequest`, which
the app answers with a 4xx in the protocol's shape before anything is written. Bodies are read
up to a limit (``ServerSettings.max_body_bytes``); a larger one is refused with 413 as soon as
its ``Content-Length`` or its bytes pass the limit, so it is never held whole in memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.requests import Request
from starlette.responses import Response

#: An integer parameter's text: optional sign, ASCII digits (as Java's Integer.parseInt).
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: Digits beyond which an integer is outside every bound the routes check (MAX_MS has 13).
_MOST_DIGITS = 18
#: What such an integer counts as (its sign kept): past every bound.
_HUGE: int = 10**_MOST_DIGITS
#: json_body's marker for "no value given for an empty body".
_NO_DEFAULT: Any = object()


class BadRequest(Exception):
    """Bad input (or a refused request): answered with ``status``, the protocol's error shape
    (Camellia: ``{"code": status, "msg": message}``) and ``headers`` (e.g. Retry-After)."""

    def __init__(self, message: str, status: int = 400,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


class JSON(Response):
    """A JSON response (orjson)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def client_of(request: Request) -> str:
    """The client's address (``unknown`` without one): the key of its long-poll slots."""
    return request.client.host if request.client else "unknown"


class Fields(dict[str, str]):
    """Form fields or query parameters by name (the last value of each), with the names given
    more than once in ``repeated``: the helpers below refuse a repeated field they read (which
    value is meant?) and ignore repeated fields no route reads."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__()
        self.repeated: set[str] = set()
        self.add(items)

    def add(self, items: Iterable[tuple[str, str]]) -> None:
        """Add ``items`` of one source (the query string, a form body): a name repeated
        within it is marked; a name this source gives replaces an earlier source's."""
        seen: set[str] = set()
        for name, value in items:
            if name in seen:
                self.repeated.add(name)
            else:
                seen.add(name)
                self.repeated.discard(name)
            self[name] = value


async def params(request: Request, limit: int) -> Fields:
    """The query string's parameters, then a form body's (the body wins).

    Args:
        request: the request.
        limit: the largest body read, bytes.

    Raises:
        BadRequest: 413 for a body over ``limit``; 415 for a body that is not form fields;
            400 for a form body that is not UTF-8.
    """
    out = Fields(request.query_params.multi_items())
    if request.method == "POST":
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        body = await read_body(request, limit)
        if body and kind in ("application/x-www-form-urlencoded", ""):
            try:
                out.add(parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                                  strict_parsing=False))
            except UnicodeDecodeError:
                raise BadRequest("the form body is not UTF-8") from None
        elif body:
            raise BadRequest(f"send form fields (application/x-www-form-urlencoded), "
                             f"not {kind}", 415)
    return out


def headers_field(values: Mapping[str, str]) -> dict[str, Any] | None:
    """The optional ``headers`` form field: a JSON object of string headers (Message.headers
    checks each one). None when absent or empty.

    Raises:
        BadRequest: not a JSON object.
    """
    raw = _value(values, "headers")
    if not raw:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise BadRequest(f"headers must be a JSON object of strings, got {raw!r:.60}")
    return doc


def _value(values: Mapping[str, str], name: str) -> str | None:
    if name in getattr(values, "repeated", ()):
        raise BadRequest(f"{name} is given more than once")
    return values.get(name)


async def json_body(request: Request, limit: int, empty: Any = _NO_DEFAULT) -> Any:
    """The request's JSON body (``empty`` for an empty body, when given).

    Args:
        request: the request.
        limit: the largest body read, bytes.
        empty: what an empty body means (default: it is refused as not JSON).

    Raises:
        BadRequest: 413 for a body over ``limit``; 400 for a body that is not JSON.
    """
    body = await read_body(request, limit)
    if not body and empty is not _NO_DEFAULT:
        return empty
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, read once, at most ``limit`` bytes.

    Raises:
        BadRequest: 413 when the declared ``Content-Length`` or the bytes received pass
            ``limit`` (reading stops there).
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(f"the body is over {limit} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(f"the body is over {limit} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def text(values: Mapping[str, str], name: str, *, required: bool = True) -> str | None:
    """A text parameter: non-empty when ``required``, else None when absent or empty.

    Raises:
        BadRequest: required and absent or empty; given more than once.
    """
    value = _value(values, name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"{name} is empty")
        return None
    return value


def integer(values: Mapping[str, str], name: str, default: int | None = None, *,
            low: int | None = None, high: int | None = None) -> int:
    """An integer parameter: ``[+-]digits`` in ``low``..``high`` (either bound optional);
    ``default`` when absent (required when ``default`` is None).

    Raises:
        BadRequest: absent with no ``default``; empty, not an integer, out of bounds, or
            given more than once.
    """
    raw = _value(values, name)
    if raw is None:
        if default is None:
            raise BadRequest(f"{name} is required")
        return default
    if not _INTEGER.fullmatch(raw):
        raise BadRequest(f"{name} must be an integer, got {raw!r:.40}")
    digits = raw.lstrip("+-").lstrip("0")
    if len(digits) > _MOST_DIGITS:  # past every bound: no int() of a huge string
        value = -_HUGE if raw.startswith("-") else _HUGE
    else:
        value = int(raw)
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} must be {_bounds(low, high)}, got {raw:.40}")
    return value


def _bounds(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"in {low}..{high}"
    return f">= {low}" if low is not None else f"<= {high}"


def boolean(values: Mapping[str, str], name: str, default: bool) -> bool:
    """A boolean parameter: ``true`` or ``false`` (what Camellia's SDKs and a form's
    boolean send); ``default`` when absent.

    Raises:
        BadRequest: any other text (an empty one too), or given more than once.
    """
    raw = _value(values, name)
    if raw is None:
        return default
    if raw in ("true", "false"):
        return raw == "true"
    raise BadRequest(f"{name} must be true or false, got {raw!r:.40}")
