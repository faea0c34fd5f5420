"""The OpenAPI 3 description of ``dynoqueue serve`` as configured (served at
``/openapi.json``): the clients other services generate from it are built on it.

It says exactly what the server does: each parameter carries the constraints the server
enforces (the queue-name rule as a pattern, the bounds of every number, the configured long-poll
maximum), so a request valid by the schema is never refused with 400 and one that breaks it
never accepted; each operation lists the statuses it answers with their bodies; bearer security
(and its 401) only when the server has a token. ``tests/test_openapi.py`` holds the server to
it with schemathesis.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .. import __version__
from ..errors import ConfigurationError
from ..model.keys import KEY_WORDS, SEPARATOR, check_queue_name
from ..model.message import DEFAULT_MAX_PAYLOAD_BYTES
from ..model.states import MessageState
from ..model.validate import MAX_MS
from .camellia import MAX_BATCH, MAX_RETRY, PREFIX
from .context import ServerSettings
from .youzan import MAX_SECONDS, PATH


@functools.cache
def queue_name_pattern() -> str:
    """A pattern (ECMA 262 and Python ``re`` alike) that matches exactly the names
    :func:`~dynoqueue.model.keys.check_queue_name` accepts: no brace, whitespace or control
    character, and no ``.``-separated component that is one of ``KEY_WORDS`` (a lookahead)."""
    refused = [c for c in range(0x10000)
               if not 0xD800 <= c <= 0xDFFF and not _accepted(chr(c))]
    ranges: list[list[int]] = []
    for c in refused:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    chars = "".join(f"\\u{low:04x}" if low == high else f"\\u{low:04x}-\\u{high:04x}"
                    for low, high in ranges)
    words = "|".join(sorted(KEY_WORDS))
    dot = re.escape(SEPARATOR)
    return f"^(?!(?:[^{dot}]*{dot})*(?:{words})(?:{dot}|$))[^{chars}]+$"


def _accepted(char: str) -> bool:
    try:
        check_queue_name(char)
    except ConfigurationError:
        return False
    return True


def _obj(properties: dict[str, Any], required: list[str] | None = None,
         **more: Any) -> dict[str, Any]:
    """An object schema; every property required unless ``required`` names them."""
    return {"type": "object", "required": list(properties) if required is None else required,
            "properties": properties, **more}


_INT = {"type": "integer"}
_STR = {"type": "string"}
_HEADERS = {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 64,
            "description": "the message's headers (Message.headers; empty: none)"}
_STATUS_CODES = ", ".join(f"{s.code} {s.name.lower()}" for s in MessageState)

_DELAY_MSG = _obj({
    "topic": _STR, "msgId": _STR,
    "msg": {**_STR, "nullable": True, "description": "the message (null: not kept, as for a "
                                                     "deleted one)"},
    "produceTime": {**_INT, "description": "epoch ms: when it was sent"},
    "triggerTime": {**_INT, "description": "epoch ms: when it falls due"},
    "expireTime": {**_INT, "description": "epoch ms: TTL end (0: none)"},
    "maxRetry": {**_INT, "description": "retries after the first delivery (-1: unlimited)"},
    "retry": {**_INT, "description": "deliveries so far"},
    "status": {**_INT, "description": f"MessageState.code: {_STATUS_CODES}"},
    "headers": _HEADERS})
_SUCCESS = {"code": {"type": "integer", "enum": [200]},
            "msg": {"type": "string", "enum": ["success"]}}
_NOT_FOUND = _obj({"code": {"type": "integer", "enum": [404]},
                   "msg": {"type": "string", "enum": ["msg not exists"]}})
_CAMELLIA_ERROR = _obj({"code": {**_INT, "description": "the HTTP status"}, "msg": _STR})
_YOUZAN = _obj({"success": {"type": "boolean"},
                "error": {**_STR, "description": "empty on success"},
                "id": {**_STR, "nullable": True, "description": "the job's id (null: none)"},
                "value": {**_STR, "nullable": True, "description": "pop: the job's body"},
                "headers": {**_HEADERS, "description": "pop: the job's headers"}},
               ["success", "error", "id", "value"])
_BUCKETS = ["sizeOf0To1min", "sizeOf1minTo10min", "sizeOf10minTo30min", "sizeOf30minTo1hour",
            "sizeOf1hourTo6hour", "sizeOf6hourTo1day", "sizeOf1dayTo7day",
            "sizeOf7dayTo30day", "sizeOf30dayToInfinite"]
_TOPIC_INFO = _obj({
    "topic": _STR, "waitingQueueSize": {**_INT, "description": "delayed (not due)"},
    "waitingQueueInfo": _obj({name: _INT for name in _BUCKETS},
                             description="delayed messages by time until due"),
    "readyQueueSize": _INT, "ackQueueSize": {**_INT, "description": "leased"}})
_GAPS = {"type": "array", "items": _obj({
    "topic": _STR, "count": _INT, "avg": {"type": "number", "description": "ms"},
    "max": {"type": "number", "description": "ms"}})}
_REQUEST_STATS = {"type": "array", "items": _obj({"topic": _STR, **{name: _INT for name in (
    "sendMsg", "pullMsg", "deleteMsg", "ackMsg", "getMsg", "triggerMsgReady",
    "triggerMsgEndLife", "triggerMsgTimeout")}})}

#: What each error status means (the body is the protocol's error shape).
_MEANING = {
    400: "bad input (nothing written)",
    401: "no or wrong bearer token",
    404: "no such job",
    409: "conflict",
    413: "the body is over the server's max_body_bytes",
    415: "the body is not form fields",
    429: "the client holds as many long polls as the server allows at once",
    500: "internal error (one line, no traceback)",
    503: "Redis unavailable or refused the server's credentials",
}
_RETRY_AFTER = {"Retry-After": {"required": True, "description": "seconds to wait",
                                "schema": {"type": "integer", "minimum": 1}}}
_WWW_AUTHENTICATE = {"WWW-Authenticate": {"required": True, "schema": {
    "type": "string", "enum": ["Bearer"]}}}


def _json(schema: dict[str, Any], description: str,
          headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description,
                           "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


def _errors(statuses: list[int], shape: dict[str, Any], secured: bool,
            meaning: dict[int, str] | None = None) -> dict[str, Any]:
    """The error responses ``statuses`` (and 401 when ``secured``) in ``shape``."""
    out = {}
    for status in sorted({*statuses, *([401] if secured else [])}):
        headers = (_RETRY_AFTER if status == 429 else _WWW_AUTHENTICATE if status == 401
                   else None)
        out[str(status)] = _json(shape, (meaning or {}).get(status, _MEANING[status]), headers)
    return out


class _Fields:
    """The parameters of one configured server, schema by name."""

    def __init__(self, settings: ServerSettings, max_payload_bytes: int) -> None:
        s = settings
        self.topic = {"type": "string", "minLength": 1, "pattern": queue_name_pattern(),
                      "description": "the topic: a dynoqueue queue name (no braces, "
                                     "whitespace or control characters; no .-separated "
                                     "component that is a key word: "
                                     f"{', '.join(sorted(KEY_WORDS))})"}
        self.msg_id = {"type": "string", "minLength": 1, "description": "the message id"}
        self.msg = {"type": "string", "minLength": 1, "maxLength": max_payload_bytes,
                    "description": f"the message: at most {max_payload_bytes} bytes of UTF-8"}
        self.delay = {"type": "integer", "minimum": 0, "maximum": MAX_MS,
                      "description": "delay, ms (at most 100 years)"}
        self.ttl = {"type": "integer", "maximum": MAX_MS,
                    "description": f"ms after falling due before it expires; <= 0 or absent: "
                                   f"the default {s.ttl_ms}"}
        self.max_retry = {"type": "integer", "maximum": MAX_RETRY,
                          "description": f"retries after the first delivery (0: one delivery); "
                                         f"< 0 or absent: the default {s.max_retry}"}
        self.ack_timeout = {"type": "integer", "maximum": MAX_MS,
                            "description": f"lease of each message, ms; <= 0 or absent: the "
                                           f"default {s.ack_timeout_ms}"}
        self.batch = {"type": "integer", "maximum": MAX_BATCH,
                      "description": "most messages; <= 0 or absent: 1"}
        self.hold = {"type": "integer", "maximum": s.max_long_poll_ms,
                     "description": f"longest hold, ms (at most the server's max_long_poll_ms,"
                                    f" {s.max_long_poll_ms}); <= 0 or absent: the default "
                                    f"{s.default_hold_ms}"}
        self.flag = {"type": "boolean"}
        self.pop_timeout_s = s.max_long_poll_ms // 1000
        self.ttr_default_s = s.youzan_ttr_s


def _form(fields: dict[str, tuple[dict[str, Any], bool, str]]) -> dict[str, Any]:
    """A form body: name -> (schema, required, description). An object field is one form
    field holding JSON (its encoding's contentType)."""
    body: dict[str, Any] = {
        "schema": _obj({name: {**schema, "description": text} if text else schema
                        for name, (schema, _, text) in fields.items()},
                       [name for name, (_, required, _) in fields.items() if required])}
    json_fields = {name: {"contentType": "application/json"}
                   for name, (schema, _, _) in fields.items() if schema.get("type") == "object"}
    if json_fields:
        body["encoding"] = json_fields
    return {"required": True, "content": {"application/x-www-form-urlencoded": body}}


def spec(settings: ServerSettings,
         max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """The OpenAPI 3.0 document of a server run with ``settings``.

    Args:
        settings: the server's settings: with a token, every operation but ``/healthz`` has
            bearer security and a 401 response; without, none has. The long-poll maximum and
            the defaults in the descriptions are these settings'.
        max_payload_bytes: the queues' payload limit, UTF-8 bytes (``msg`` and ``body``).
    """
    secured = settings.token is not None
    f = _Fields(settings, max_payload_bytes)
    hold_info = (f"; at most {settings.max_long_polls_per_client} held at once per client "
                 f"address")
    paths: dict[str, Any] = {
        **_camellia_paths(f, secured, hold_info),
        PATH: _youzan_path(f, secured, hold_info, max_payload_bytes),
        **_ops_paths(secured),
    }
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "dynoqueue serve", "version": __version__,
                 "description": "Camellia's delay-queue protocol and Youzan's JSON command "
                                "protocol over dynoqueue queues. " + (
                                    "Every route but /healthz (and the dashboard page) "
                                    "needs Authorization: Bearer <token>."
                                    if secured else "This server has no token.")},
        "paths": paths,
    }
    if secured:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http",
                                                            "scheme": "bearer"}}}
        doc["security"] = [{"bearer": []}]
    return doc


_COMMON = [400, 413, 415, 500, 503]


def _camellia_post(secured: bool, summary: str,
                   fields: dict[str, tuple[dict[str, Any], bool, str]], ok: dict[str, Any],
                   extra: list[int] | None = None,
                   meaning: dict[int, str] | None = None) -> dict[str, Any]:
    return {"post": {
        "summary": summary, "tags": ["camellia"], "requestBody": _form(fields),
        "responses": {"200": _json(ok, "Camellia's reply"),
                      **_errors(_COMMON + (extra or []), _CAMELLIA_ERROR, secured,
                                meaning)}}}


def _camellia_get(secured: bool, summary: str, query: dict[str, dict[str, Any]],
                  ok: dict[str, Any], errors: list[int]) -> dict[str, Any]:
    return {"get": {
        "summary": summary, "tags": ["camellia"],
        "parameters": [{"name": n, "in": "query", "required": True, "schema": schema}
                       for n, schema in query.items()],
        "responses": {"200": _json(ok, "Camellia's reply"),
                      **_errors(errors, _CAMELLIA_ERROR, secured)}}}


def _camellia_paths(f: _Fields, secured: bool, hold_info: str) -> dict[str, Any]:
    """Camellia's routes, in the order of :func:`dynoqueue.server.camellia.routes`."""
    post = functools.partial(_camellia_post, secured)
    get = functools.partial(_camellia_get, secured)
    topic = (f.topic, True, "")
    msg_id = (f.msg_id, True, "")
    pull = {"topic": topic, "ackTimeoutMillis": (f.ack_timeout, False, ""),
            "batch": (f.batch, False, "")}
    found_or_not = {"oneOf": [_obj({**_SUCCESS}), _NOT_FOUND]}
    listed = _obj({**_SUCCESS, "delayMsgList": {"type": "array", "items": _DELAY_MSG}})
    return {
        f"{PREFIX}/sendMsg": post(
            "send a delayed message (msgId dedup: the first wins)", {
                "topic": topic,
                "msgId": (_STR, False, "the message id; empty or absent: made by the server "
                                       "(32 hex digits)"),
                "msg": (f.msg, True, ""), "delayMillis": (f.delay, True, ""),
                "ttlMillis": (f.ttl, False, ""), "maxRetry": (f.max_retry, False, ""),
                "headers": (_HEADERS, False, "one form field holding a JSON object of string "
                                             "headers (Message.headers: at most 64, 8 KiB as "
                                             "JSON)")},
            _obj({**_SUCCESS, "delayMsg": _DELAY_MSG}), [409],
            {409: "the message ended at once (acked or removed by another client)"}),
        f"{PREFIX}/deleteMsg": post("delete a message", {
            "topic": topic, "msgId": msg_id,
            "release": (f.flag, False, "accepted; retention frees memory")}, found_or_not),
        f"{PREFIX}/pullMsg": post("lease due messages now", pull, listed),
        f"{PREFIX}/longPollingMsg": post(
            "lease due messages, held until one is due or the hold ends" + hold_info,
            {**pull, "longPollingTimeoutMillis": (f.hold, False, "")}, listed, [429]),
        f"{PREFIX}/ackMsg": post(
            "end a lease (code 404: the message is not leased: unknown, not pulled, ended)", {
                "topic": topic, "msgId": msg_id,
                "ack": (f.flag, False, "true (default): consumed; false: due again now")},
            found_or_not),
        f"{PREFIX}/getMsg": post(
            "a message and its status (ended ones during the retention)",
            {"topic": topic, "msgId": msg_id},
            {"oneOf": [_obj({**_SUCCESS, "delayMsg": _DELAY_MSG}), _NOT_FOUND]}),
        f"{PREFIX}/getMonitorData": get(
            "request counts and pull time gaps per topic since the server started", {},
            _obj({"code": {"type": "integer", "enum": [200]}, "data": _obj({
                "requestStatsList": _REQUEST_STATS, "pullMsgTimeGapStatsList": _GAPS,
                "readyQueueTimeGapStatsList": _GAPS,
                "sinceTime": {**_INT, "description": "epoch ms"},
                "now": {**_INT, "description": "epoch ms"}})}), [500]),
        f"{PREFIX}/getTopicInfo": get(
            "sizes and waiting-time buckets of a topic", {"topic": f.topic},
            _obj({"code": {"type": "integer", "enum": [200]}, "data": _TOPIC_INFO}),
            [400, 500, 503]),
        f"{PREFIX}/getTopicInfoList": get(
            "every topic's info", {},
            _obj({"code": {"type": "integer", "enum": [200]},
                  "data": {"type": "array", "items": _TOPIC_INFO}}), [500, 503]),
    }


def _youzan_path(f: _Fields, secured: bool, hold_info: str,
                 max_payload_bytes: int) -> dict[str, Any]:
    """Youzan's one route: a JSON command (add, pop, finish, delete)."""
    youzan_ok = ("the answer: add {success: true, id}; pop {success: true, id, value} "
                 "(id and value null when no job is due); finish and delete "
                 "{success: true, id}")
    seconds = {"type": "integer", "maximum": MAX_SECONDS}
    youzan_body = {"oneOf": [
        _obj({"command": {"type": "string", "enum": ["add"]}, "topic": f.topic,
              "id": {**f.msg_id, "description": "the job id, unique across topics"},
              "delay": {**seconds, "minimum": 0, "description": "delay, s (default 0)"},
              "TTR": {**seconds, "minimum": 1, "description": f"time to run: the lease of "
                                                              f"each pop, s (default "
                                                              f"{f.ttr_default_s})"},
              "body": {"type": "string", "maxLength": max_payload_bytes,
                       "description": f"the job (default empty): at most "
                                      f"{max_payload_bytes} bytes of UTF-8"},
              "headers": {**_HEADERS, "nullable": True,
                          "description": "the job's headers (Message.headers; null: none)"}},
             ["command", "topic", "id"], title="add"),
        _obj({"command": {"type": "string", "enum": ["pop"]}, "topic": f.topic,
              "timeout": {"type": "integer", "minimum": 0, "maximum": f.pop_timeout_s,
                          "description": "longest wait for a due job, s (default 0; at most "
                                         "the server's max_long_poll_ms)"}},
             ["command", "topic"], title="pop"),
        *(_obj({"command": {"type": "string", "enum": [name]},
                "id": {**f.msg_id, "description": "the job id"}},
               ["command", "id"], title=name) for name in ("finish", "delete"))]}
    return {"post": {
        "summary": "Youzan's commands: add, pop (long poll with a timeout" + hold_info
                   + "), finish, delete", "tags": ["youzan"],
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": youzan_body}}},
        "responses": {"200": _json(_YOUZAN, youzan_ok), **_errors(
            [400, 404, 409, 413, 429, 500, 503], _YOUZAN, secured, {
                404: "finish or delete: no such job",
                409: "add: the id is another topic's job; finish: the job is not "
                     "reserved"})}}}


def _ops_paths(secured: bool) -> dict[str, Any]:
    """The operators' routes: Prometheus metrics and the health check."""
    health_ok = _obj({"status": {"type": "string", "enum": ["ok"]},
                      "redis_ms": {"type": "object", "description": "ping round trips, ms",
                                   "additionalProperties": {"type": "number"}}})
    health_down = _obj({"status": {"type": "string", "enum": ["error"]}, "error": _STR})
    return {
        "/metrics": {"get": {
            "summary": "Prometheus metrics", "tags": ["ops"],
            "responses": {"200": {"description": "Prometheus text format", "content": {
                "text/plain": {"schema": _STR}}}, **_errors([500, 503], _CAMELLIA_ERROR,
                                                            secured)}}},
        "/healthz": {"get": {
            "summary": "liveness: pings Redis (open without the token)", "tags": ["ops"],
            "security": [],
            "responses": {"200": _json(health_ok, "Redis answers"),
                          "503": _json(health_down, "Redis does not answer")}}},
    }
