"""The OpenAPI 3 description of both protocols (served at ``/openapi.json``)."""

from __future__ import annotations

from typing import Any

from .. import __version__
from .camellia import PREFIX
from .youzan import PATH


def _form(fields: dict[str, tuple[str, bool, str]]) -> dict[str, Any]:
    return {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": {
        "type": "object",
        "required": [name for name, (_, required, _) in fields.items() if required],
        "properties": {name: {"type": kind, "description": text}
                       for name, (kind, _, text) in fields.items()}}}}}


_DELAY_MSG = {"type": "object", "properties": {
    "topic": {"type": "string"}, "msgId": {"type": "string"}, "msg": {"type": "string"},
    "produceTime": {"type": "integer", "description": "epoch ms"},
    "triggerTime": {"type": "integer", "description": "epoch ms: when it falls due"},
    "expireTime": {"type": "integer", "description": "epoch ms: TTL end (0: none)"},
    "maxRetry": {"type": "integer"}, "retry": {"type": "integer",
                                               "description": "deliveries so far"},
    "status": {"type": "integer", "description": "1 waiting, 2 ready, 3 consuming, 4 acked, "
                                                 "5 expired, 6 dead (max retry or TTL), "
                                                 "7 deleted"}}}
_REPLY = {"type": "object", "properties": {
    "code": {"type": "integer", "description": "200 success, 400 bad input, 404 not exists, "
                                               "500/503 server error"},
    "msg": {"type": "string"}, "delayMsg": _DELAY_MSG,
    "delayMsgList": {"type": "array", "items": _DELAY_MSG}}}


def _post(summary: str, fields: dict[str, tuple[str, bool, str]]) -> dict[str, Any]:
    return {"post": {"summary": summary, "tags": ["camellia"], "requestBody": _form(fields),
                     "responses": {"200": {"description": "Camellia's reply", "content": {
                         "application/json": {"schema": _REPLY}}},
                                   "400": {"description": "bad input: {code: 400, msg}"}}}}


def _get(summary: str, query: dict[str, str]) -> dict[str, Any]:
    return {"get": {"summary": summary, "tags": ["camellia"],
                    "parameters": [{"name": n, "in": "query", "required": True,
                                    "schema": {"type": "string"}, "description": d}
                                   for n, d in query.items()],
                    "responses": {"200": {"description": "{code: 200, data}"}}}}


def spec() -> dict[str, Any]:
    """The OpenAPI document."""
    topic = ("string", True, "the topic (a dynoqueue queue name)")
    msg_id = ("string", True, "the message id")
    pull = {"topic": topic,
            "ackTimeoutMillis": ("integer", False, "lease of each message, ms (default 30000)"),
            "batch": ("integer", False, "most messages, 1..1000 (default 1)")}
    return {
        "openapi": "3.0.3",
        "info": {"title": "dynoqueue serve", "version": __version__,
                 "description": "Camellia's delay-queue protocol and Youzan's JSON command "
                                "protocol over dynoqueue queues. With --token, every route "
                                "needs Authorization: Bearer <token>."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            f"{PREFIX}/sendMsg": _post("send a delayed message (msgId dedup: the first wins)", {
                "topic": topic, "msgId": ("string", False, "default: made by the server"),
                "msg": ("string", True, "the message"),
                "delayMillis": ("integer", True, "delay, ms"),
                "ttlMillis": ("integer", False, "ms after falling due before it expires "
                                                "(default 1 h)"),
                "maxRetry": ("integer", False, "retries after the first delivery "
                                               "(default 10)")}),
            f"{PREFIX}/deleteMsg": _post("delete a message", {
                "topic": topic, "msgId": msg_id,
                "release": ("boolean", False, "accepted; retention frees memory")}),
            f"{PREFIX}/pullMsg": _post("lease due messages now", pull),
            f"{PREFIX}/longPollingMsg": _post("lease due messages, held until one is due", {
                **pull, "longPollingTimeoutMillis": ("integer", False,
                                                     "longest hold, ms (default 10000)")}),
            f"{PREFIX}/ackMsg": _post("end a lease", {
                "topic": topic, "msgId": msg_id,
                "ack": ("boolean", False, "true (default): consumed; false: retry now")}),
            f"{PREFIX}/getMsg": _post("a message and its status (ended ones during the "
                                      "retention)", {"topic": topic, "msgId": msg_id}),
            f"{PREFIX}/getMonitorData": _get("request counts and pull time gaps per topic", {}),
            f"{PREFIX}/getTopicInfo": _get("sizes and waiting-time buckets of a topic",
                                           {"topic": "the topic"}),
            f"{PREFIX}/getTopicInfoList": _get("every topic's info", {}),
            PATH: {"post": {
                "summary": "Youzan's commands: add, pop, finish, delete", "tags": ["youzan"],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["command"], "properties": {
                        "command": {"type": "string", "enum": ["add", "pop", "finish",
                                                               "delete"]},
                        "topic": {"type": "string"}, "id": {"type": "string"},
                        "delay": {"type": "integer", "description": "seconds"},
                        "TTR": {"type": "integer", "description": "seconds"},
                        "timeout": {"type": "integer", "description": "pop: longest wait, s"},
                        "body": {"type": "string"}}}}}},
                "responses": {"200": {"description": "{success, error, id, value}"},
                              "400": {"description": "bad input: success false"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "tags": ["ops"],
                                 "responses": {"200": {"description": "text format"}}}},
            "/healthz": {"get": {"summary": "pings Redis", "tags": ["ops"],
                                 "responses": {"200": {"description": "ok"},
                                               "503": {"description": "Redis down"}}}},
        },
    }
