"""Request parameters and JSON responses shared by the routes.

Camellia's server takes Spring ``@RequestParam`` s: form fields of an
``application/x-www-form-urlencoded`` body or the query string. They are parsed here with the
standard library (no multipart package needed); a bad value raises :class:`BadRequest`, which
the app answers with 400 in Camellia's shape before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.requests import Request
from starlette.responses import Response

#: Largest request body read, bytes (a message is at most 1 MiB; its form encoding grows it).
MAX_BODY_BYTES = 4 * 1024 * 1024


class BadRequest(Exception):
    """Bad input: answered with ``status`` and ``{"code": status, "msg": message}``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class JSON(Response):
    """A JSON response (orjson)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def params(request: Request) -> dict[str, str]:
    """The query string's parameters, then a form body's (the body wins)."""
    out = dict(request.query_params)
    if request.method == "POST":
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        body = await _body(request)
        if body and kind in ("application/x-www-form-urlencoded", ""):
            try:
                out.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                                     strict_parsing=False))
            except UnicodeDecodeError:
                raise BadRequest("the form body is not UTF-8") from None
        elif body and kind != "application/x-www-form-urlencoded":
            raise BadRequest(f"send form fields (application/x-www-form-urlencoded), "
                             f"not {kind}", 415)
    return out


async def json_body(request: Request) -> Any:
    """The request's JSON body.

    Raises:
        BadRequest: not JSON.
    """
    body = await _body(request)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is over {MAX_BODY_BYTES} bytes", 413)
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is over {MAX_BODY_BYTES} bytes", 413)
    return body


def text(values: Mapping[str, str], name: str, *, required: bool = True) -> str | None:
    """A non-empty text parameter (None when optional and absent or empty)."""
    value = values.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"{name} is empty")
        return None
    return value


def integer(values: Mapping[str, str], name: str, default: int | None = None, *,
            low: int | None = None, high: int | None = None) -> int:
    """An integer parameter (``default`` when absent; required when default is None)."""
    raw = values.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequest(f"{name} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {raw!r:.40}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadRequest(f"{name} must be in {low}..{high}, got {value}")
    return value


def boolean(values: Mapping[str, str], name: str, default: bool) -> bool:
    raw = values.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise BadRequest(f"{name} must be true or false, got {raw!r:.40}")
