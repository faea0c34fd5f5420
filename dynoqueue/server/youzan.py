"""Youzan's delay-queue JSON command protocol on one endpoint, ``POST /youzan/delayQueue``.

Requests: ``{"command": "add", "topic", "id", "delay" (s), "TTR" (s), "body"}``,
``{"command": "pop", "topic"[, "timeout" (s)]}``, ``{"command": "finish", "id"}``,
``{"command": "delete", "id"}``; every answer is ``{"success", "error", "id", "value"}``.

As in Youzan's design, job ids are unique across topics and finish and delete carry only the
id, so the server keeps an id -> (topic, TTR) index in Redis (a hash under the key prefix),
written before the job and dropped with it (finish, delete, and a periodic sweep of jobs that
ended through another client). A pop leases the job for its TTR; finish acks it.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..model.message import Message
from ..model.states import MessageState
from .http import JSON, BadRequest, json_body
from .state import ServerState

PATH = "/youzan/delayQueue"
#: Longest pop wait, seconds.
MAX_POP_TIMEOUT_S = 60


def answer(success: bool, error: str = "", id: str | None = None, value: Any = None,
           status: int = 200) -> JSON:
    return JSON({"success": success, "error": error, "id": id, "value": value},
                status_code=status)


def _field(doc: dict[str, Any], name: str, kind: type, *, default: Any = None,
           low: int | None = None) -> Any:
    value = doc.get(name, default)
    if value is None:
        raise BadRequest(f"{name} is required")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequest(f"{name} must be an integer number of seconds, got {value!r:.40}")
        if low is not None and value < low:
            raise BadRequest(f"{name} must be >= {low}, got {value}")
    elif not isinstance(value, str) or not value:
        raise BadRequest(f"{name} must be a non-empty string, got {value!r:.40}")
    return value


def routes(state: ServerState) -> list[Route]:
    """The Youzan endpoint over ``state``."""

    async def add(doc: dict[str, Any], request: Request) -> JSON:
        topic = _field(doc, "topic", str)
        job_id = _field(doc, "id", str)
        delay = _field(doc, "delay", int, default=0, low=0)
        ttr = _field(doc, "TTR", int, default=state.settings.youzan_ttr_s, low=1)
        body = doc.get("body", "")
        if not isinstance(body, str):
            raise BadRequest("body must be a string")
        message = Message(job_id, body, timeout=delay * 1000)  # checked before any write
        queue = await state.topic(topic)
        message.validate(state.factory().settings.max_payload_bytes)
        known = await state.index_get(job_id)
        if known is not None and known.get("topic") != topic:
            return answer(False, f"job {job_id} exists in topic {known.get('topic')}", job_id,
                          status=409)
        await state.index_set(job_id, topic, ttr)
        await queue.push([message])
        return answer(True, "", job_id)

    async def pop(doc: dict[str, Any], request: Request) -> JSON:
        topic = _field(doc, "topic", str)
        wait_s = _field(doc, "timeout", int, default=0, low=0)
        if wait_s > MAX_POP_TIMEOUT_S:
            raise BadRequest(f"timeout must be <= {MAX_POP_TIMEOUT_S}, got {wait_s}")
        queue = await state.topic(topic)
        got = await state.polls.pull(topic, queue, 1, state.settings.youzan_ttr_s * 1000,
                                     wait_s * 1000, request.is_disconnected)
        if not got:
            return answer(True, "", None, None)
        job = got[0]
        known = await state.index_get(job.id)
        ttr = int(known["ttr"]) if known and "ttr" in known else state.settings.youzan_ttr_s
        if ttr != state.settings.youzan_ttr_s:
            await queue.set_unack_timeout(job.id, ttr * 1000, receipt=job.receipt)
        return answer(True, "", job.id, job.payload)

    async def finish(doc: dict[str, Any], request: Request) -> JSON:
        job_id = _field(doc, "id", str)
        known = await state.index_get(job_id)
        if known is None:
            return answer(False, f"job {job_id} not found", job_id, status=404)
        queue = await state.topic(str(known["topic"]))
        if not await queue.ack(job_id):
            now = await queue.state(job_id)
            if now is None or now in (MessageState.ACKED, MessageState.DELETED,
                                      MessageState.EXPIRED):
                await state.index_drop(job_id)
                return answer(False, f"job {job_id} not found", job_id, status=404)
            return answer(False, f"job {job_id} is not reserved ({now.name.lower()})", job_id,
                          status=409)
        await state.index_drop(job_id)
        return answer(True, "", job_id)

    async def delete(doc: dict[str, Any], request: Request) -> JSON:
        job_id = _field(doc, "id", str)
        known = await state.index_get(job_id)
        if known is None:
            return answer(False, f"job {job_id} not found", job_id, status=404)
        queue = await state.topic(str(known["topic"]))
        removed = await queue.remove(job_id)
        await state.index_drop(job_id)
        if not removed:
            return answer(False, f"job {job_id} not found", job_id, status=404)
        return answer(True, "", job_id)

    handlers = {"add": add, "pop": pop, "finish": finish, "delete": delete}

    async def endpoint(request: Request) -> JSON:
        doc = await json_body(request)
        if not isinstance(doc, dict):
            raise BadRequest("the body must be a JSON object with a command")
        handler = handlers.get(doc.get("command"))  # type: ignore[arg-type]
        if handler is None:
            raise BadRequest(f"command must be one of {', '.join(handlers)}, "
                             f"got {doc.get('command')!r:.40}")
        return await handler(doc, request)

    return [Route(PATH, endpoint, methods=["POST"])]
