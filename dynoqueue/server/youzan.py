"""Youzan's delay-queue JSON command protocol on one endpoint, ``POST /youzan/delayQueue``.

Requests: ``{"command": "add", "topic", "id", "delay" (s, >= 0), "TTR" (s, >= 1), "body"}``,
``{"command": "pop", "topic"[, "timeout" (s, at most the server's max_long_poll_ms)]}``,
``{"command": "finish", "id"}``, ``{"command": "delete", "id"}``; every answer is
``{"success", "error", "id", "value"}``. The seconds are JSON integers (5.0 counts as 5, as
JSON Schema's "integer" has it); bad input gets 400 before anything is written.

As in Youzan's design, job ids are unique across topics and finish and delete carry only the
id, so the server keeps an id -> (topic, TTR) index in Redis (a hash under the key prefix),
written before the job and dropped with it (finish, delete, and a periodic sweep of jobs that
ended through another client). A pop leases the job for its TTR; finish acks it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..model.keys import check_queue_name
from ..model.message import Message
from ..model.states import MessageState
from ..model.validate import MAX_MS
from .context import ServerState
from .http import JSON, BadRequest, client_of, json_body

PATH = "/youzan/delayQueue"
#: Largest delay and TTR, seconds (their milliseconds are at most MAX_MS, 100 years).
MAX_SECONDS = MAX_MS // 1000


def answer(success: bool, error: str = "", id: str | None = None, value: Any = None,
           status: int = 200, headers: dict[str, str] | None = None) -> JSON:
    """Youzan's answer ``{"success", "error", "id", "value"}`` with HTTP ``status``; a popped
    job's answer also carries its ``headers`` (an object, empty when none)."""
    doc: dict[str, Any] = {"success": success, "error": error, "id": id, "value": value}
    if headers is not None:
        doc["headers"] = headers
    return JSON(doc, status_code=status)


def _seconds(doc: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An integer field (a JSON number with no fraction: 5 or 5.0), ``default`` when absent."""
    value = doc.get(name, default)
    if value is None:
        raise BadRequest(f"{name} must be an integer number of seconds, got null")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer number of seconds, got {value!r:.40}")
    if not low <= value <= high:
        raise BadRequest(f"{name} must be in {low}..{high} (seconds), got {value}")
    return value


def _text(doc: dict[str, Any], name: str) -> str:
    value = doc.get(name)
    if value is None:
        raise BadRequest(f"{name} is required")
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name} must be a non-empty string, got {value!r:.40}")
    return value


def routes(state: ServerState) -> list[Route]:
    """The Youzan endpoint over ``state``."""
    return [Route(PATH, _Youzan(state).endpoint, methods=["POST"])]


class _Youzan:
    """The Youzan endpoint over one server state: one method per command."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.settings = state.settings
        self.handlers = {"add": self.add, "pop": self.pop, "finish": self.finish,
                         "delete": self.delete}

    async def endpoint(self, request: Request) -> JSON:
        doc = await json_body(request, self.settings.max_body_bytes)
        if not isinstance(doc, dict):
            raise BadRequest("the body must be a JSON object with a command")
        command = doc.get("command")
        handler = self.handlers.get(command) if isinstance(command, str) else None
        if handler is None:
            raise BadRequest(f"command must be one of {', '.join(self.handlers)}, "
                             f"got {doc.get('command')!r:.40}")
        return await handler(doc, request)

    async def add(self, doc: dict[str, Any], request: Request) -> JSON:
        topic = check_queue_name(_text(doc, "topic"), "topic")
        job_id = _text(doc, "id")
        delay = _seconds(doc, "delay", 0, 0, MAX_SECONDS)
        ttr = _seconds(doc, "TTR", self.settings.youzan_ttr_s, 1, MAX_SECONDS)
        body = doc.get("body", "")
        if not isinstance(body, str):
            raise BadRequest(f"body must be a string, got {body!r:.40}")
        headers = doc.get("headers")
        if headers is not None and not isinstance(headers, dict):
            raise BadRequest(f"headers must be an object of strings, got {headers!r:.40}")
        message = Message(job_id, body, timeout=delay * 1000, headers=headers or None)
        message.validate(self.state.factory().settings.max_payload_bytes)  # before any write
        queue = await self.state.topic(topic)
        known = await self.state.index_get(job_id)
        if known is not None and known.get("topic") != topic:
            return answer(False, f"job {job_id} exists in topic {known.get('topic')}", job_id,
                          status=409)
        await self.state.index_set(job_id, topic, ttr)
        await queue.push([message])
        return answer(True, "", job_id)

    async def pop(self, doc: dict[str, Any], request: Request) -> JSON:
        topic = check_queue_name(_text(doc, "topic"), "topic")
        wait_s = _seconds(doc, "timeout", 0, 0, self.settings.max_long_poll_ms // 1000)
        slot = (self.state.long_poll_slot(client_of(request), wait_s * 1000) if wait_s
                else contextlib.nullcontext())
        with slot:
            queue = await self.state.topic(topic)
            got = await self.state.polls.pull(topic, queue, 1, self.settings.youzan_ttr_s * 1000,
                                         wait_s * 1000, request.is_disconnected)
        if not got:
            return answer(True, "", None, None)
        job = got[0]
        known = await self.state.index_get(job.id)
        ttr = int(known["ttr"]) if known and "ttr" in known else self.settings.youzan_ttr_s
        if ttr != self.settings.youzan_ttr_s:
            await queue.set_unack_timeout(job.id, ttr * 1000, receipt=job.receipt)
        return answer(True, "", job.id, job.payload, headers=job.headers or {})

    async def finish(self, doc: dict[str, Any], request: Request) -> JSON:
        job_id = _text(doc, "id")
        known = await self.state.index_get(job_id)
        if known is None:
            return answer(False, f"job {job_id} not found", job_id, status=404)
        queue = await self.state.topic(str(known["topic"]))
        if not await queue.ack(job_id):
            now = await queue.state(job_id)
            if now is None or now in (MessageState.ACKED, MessageState.DELETED,
                                      MessageState.EXPIRED):
                await self.state.index_drop(job_id)
                return answer(False, f"job {job_id} not found", job_id, status=404)
            return answer(False, f"job {job_id} is not reserved ({now.name.lower()})", job_id,
                          status=409)
        await self.state.index_drop(job_id)
        return answer(True, "", job_id)

    async def delete(self, doc: dict[str, Any], request: Request) -> JSON:
        job_id = _text(doc, "id")
        known = await self.state.index_get(job_id)
        if known is None:
            return answer(False, f"job {job_id} not found", job_id, status=404)
        queue = await self.state.topic(str(known["topic"]))
        removed = await queue.remove(job_id)
        await self.state.index_drop(job_id)
        if not removed:
            return answer(False, f"job {job_id} not found", job_id, status=404)
        return answer(True, "", job_id)
