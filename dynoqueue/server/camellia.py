"""Camellia's delay-queue HTTP protocol (netease-im/camellia, ``/camellia/delayQueue/*``), on a
dynoqueue queue per topic.

Its SDKs and clients work unchanged: the same paths, form fields, defaults and JSON. The
mapping: ``msgId`` dedup is ``push(if_exists="keep")`` (the first wins); ``delayMillis`` is the
message's delay; ``ttlMillis`` its ``ttl_ms`` (counted from when it falls due);
``maxRetry`` n allows n + 1 deliveries (``max_deliveries``); ``ackTimeoutMillis`` is the pop's
lease; ``ackMsg`` with ``ack=false`` is a nack (due again at once); ``status`` is
``MessageState.code``. Camellia answers business outcomes with HTTP 200 and a ``code`` of 200,
404 (no such message; for ackMsg: none leased) or 500; bad input gets HTTP 400 with
``{"code": 400, "msg": ...}`` before anything is written (a negative delayMillis too, as the
Python API refuses a negative delay). Optional numbers <= 0 (maxRetry: < 0) mean the
server's default, as Camellia's SDKs send them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..asyncio.queue import DynoQueue
from ..model.keys import check_queue_name
from ..model.message import Message
from ..model.states import MessageInfo, MessageState
from ..model.stats import WAITING_BUCKETS, QueueStats
from ..model.validate import MAX_COUNT, MAX_MS
from .context import ServerState
from .http import JSON, BadRequest, boolean, client_of, headers_field, integer, params, text

PREFIX = "/camellia/delayQueue"
#: Most messages one pull may ask for.
MAX_BATCH = 1000
#: Largest maxRetry: its deliveries (maxRetry + 1) are a count.
MAX_RETRY = MAX_COUNT - 1


def ok(**fields: Any) -> JSON:
    return JSON({"code": 200, "msg": "success", **fields})


def not_found(what: str) -> JSON:
    return JSON({"code": 404, "msg": f"{what} not exists"})


def delay_msg(topic: str, info: MessageInfo, timeout_ms: int | None = None,
              delivered_at_ms: int | None = None) -> dict[str, Any]:
    """Camellia's ``delayMsg`` of one message from its lifecycle info.

    ``timeout_ms`` (the message's delay) places triggerTime when the message is no longer
    waiting; ``delivered_at_ms`` is when a pull leased it.
    """
    produce = info.enqueued_at_ms or 0
    trigger = info.due_at_ms
    if trigger is None:
        trigger = produce + (timeout_ms or 0) if produce else (delivered_at_ms or 0)
    state = info.state
    if delivered_at_ms is not None and state is MessageState.LEASED:
        trigger = min(trigger, delivered_at_ms)
    return {
        "topic": topic, "msgId": info.id, "msg": info.payload, "produceTime": produce,
        "triggerTime": trigger, "expireTime": info.expires_at_ms or 0,
        "maxRetry": (info.max_deliveries - 1) if info.max_deliveries else -1,
        "retry": info.deliveries, "status": state.code, "headers": info.headers or {},
    }


def topic_info(stats: QueueStats) -> dict[str, Any]:
    """Camellia's topic info: waiting (not due), its waiting-time buckets, ready, ack."""
    buckets = stats.buckets()
    return {"topic": stats.queue, "waitingQueueSize": stats.total("delayed"),
            "waitingQueueInfo": {name: buckets[name] for name, _, _ in WAITING_BUCKETS},
            "readyQueueSize": stats.total("ready"), "ackQueueSize": stats.total("leased")}


def routes(state: ServerState) -> list[Route]:
    """The Camellia routes over ``state``."""
    api = _Camellia(state)
    return [
        Route(f"{PREFIX}/sendMsg", api.send_msg, methods=["POST"]),
        Route(f"{PREFIX}/deleteMsg", api.delete_msg, methods=["POST"]),
        Route(f"{PREFIX}/pullMsg", api.pull_msg, methods=["POST"]),
        Route(f"{PREFIX}/longPollingMsg", api.long_polling_msg, methods=["POST"]),
        Route(f"{PREFIX}/ackMsg", api.ack_msg, methods=["POST"]),
        Route(f"{PREFIX}/getMsg", api.get_msg, methods=["POST"]),
        Route(f"{PREFIX}/getMonitorData", api.get_monitor_data, methods=["GET"]),
        Route(f"{PREFIX}/getTopicInfo", api.get_topic_info, methods=["GET"]),
        Route(f"{PREFIX}/getTopicInfoList", api.get_topic_info_list, methods=["GET"]),
    ]


def _topic_of(values: dict[str, str]) -> str:
    topic = text(values, "topic")
    assert topic is not None
    check_queue_name(topic, "topic")
    return topic


def _msg_id_of(values: dict[str, str]) -> str:
    msg_id = text(values, "msgId")
    assert msg_id is not None
    return msg_id


class _Camellia:
    """The Camellia endpoints over one server state, one method per route."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.settings = state.settings

    async def _values(self, request: Request) -> dict[str, str]:
        return await params(request, self.settings.max_body_bytes)

    async def send_msg(self, request: Request) -> JSON:
        values = await self._values(request)
        topic = _topic_of(values)
        msg = text(values, "msg")
        assert msg is not None
        msg_id = text(values, "msgId", required=False) or uuid.uuid4().hex
        delay = integer(values, "delayMillis", low=0, high=MAX_MS)
        ttl = integer(values, "ttlMillis", -1, high=MAX_MS)
        max_retry = integer(values, "maxRetry", -1, high=MAX_RETRY)
        message = Message(msg_id, msg, timeout=delay,
                          ttl_ms=ttl if ttl > 0 else self.settings.ttl_ms,
                          max_deliveries=(max_retry if max_retry >= 0
                                          else self.settings.max_retry) + 1,
                          headers=headers_field(values))
        message.validate(self.state.factory().settings.max_payload_bytes)  # before any write
        queue = await self.state.topic(topic)
        await queue.push([message], if_exists="keep")
        self.state.count(topic, "sendMsg")
        info = await queue.info(msg_id)
        if info is None:  # acked or removed in between, with no retention
            raise BadRequest(f"message {msg_id} ended at once", 409)
        return ok(delayMsg=delay_msg(topic, info, message.timeout))

    async def delete_msg(self, request: Request) -> JSON:
        values = await self._values(request)
        topic, msg_id = _topic_of(values), _msg_id_of(values)
        boolean(values, "release", False)  # accepted; retention decides when memory is freed
        queue = await self.state.topic(topic)
        self.state.count(topic, "deleteMsg")
        if not await queue.remove(msg_id):
            return not_found("msg")
        return JSON({"code": 200, "msg": "success"})

    async def _pulled(self, topic: str, queue: DynoQueue, messages: list[Message]) -> list[Any]:
        infos = await asyncio.gather(*(queue.info(m.id) for m in messages))
        out = []
        for message, info in zip(messages, infos, strict=True):
            delivered_at = int((message.receipt or "0:0").split(":")[1])
            if info is None:
                continue
            doc = delay_msg(topic, info, message.timeout, delivered_at)
            out.append(doc)
            if doc["triggerTime"]:
                self.state.gap(topic, max(0, delivered_at - doc["triggerTime"]))
        return out

    def _pull_args(self, values: dict[str, str]) -> tuple[int, int]:
        ack = integer(values, "ackTimeoutMillis", -1, high=MAX_MS)
        batch = integer(values, "batch", -1, high=MAX_BATCH)
        return (ack if ack > 0 else self.settings.ack_timeout_ms), (batch if batch > 0 else 1)

    async def pull_msg(self, request: Request) -> JSON:
        values = await self._values(request)
        topic = _topic_of(values)
        lease, batch = self._pull_args(values)
        queue = await self.state.topic(topic)
        messages = await queue.pop(batch, 0, lease_ms=lease)
        self.state.count(topic, "pullMsg")
        return ok(delayMsgList=await self._pulled(topic, queue, messages))

    async def long_polling_msg(self, request: Request) -> JSON:
        values = await self._values(request)
        topic = _topic_of(values)
        lease, batch = self._pull_args(values)
        hold = integer(values, "longPollingTimeoutMillis", -1, high=self.settings.max_long_poll_ms)
        hold = hold if hold > 0 else self.settings.default_hold_ms
        with self.state.long_poll_slot(client_of(request), hold):
            queue = await self.state.topic(topic)
            # Held until a message is due (woken by the doorbell) or the timeout; a client
            # that goes away keeps nothing (see dynoqueue.server.longpoll).
            messages = await self.state.polls.pull(topic, queue, batch, lease, hold,
                                              request.is_disconnected)
            self.state.count(topic, "pullMsg")
            return ok(delayMsgList=await self._pulled(topic, queue, messages))

    async def ack_msg(self, request: Request) -> JSON:
        values = await self._values(request)
        topic, msg_id = _topic_of(values), _msg_id_of(values)
        ack = boolean(values, "ack", True)
        queue = await self.state.topic(topic)
        if ack:
            found = await queue.ack(msg_id)
        else:  # Camellia: back to the ready queue at once
            found = await queue.nack(msg_id, 0)
        self.state.count(topic, "ackMsg")
        if not found:  # not leased: unknown, never pulled, or ended
            return not_found("msg")
        return JSON({"code": 200, "msg": "success"})

    async def get_msg(self, request: Request) -> JSON:
        values = await self._values(request)
        topic, msg_id = _topic_of(values), _msg_id_of(values)
        queue = await self.state.topic(topic)
        self.state.count(topic, "getMsg")
        info = await queue.info(msg_id)
        if info is None:
            return not_found("msg")
        stored = await queue.get(msg_id) if info.due_at_ms is None else None
        return ok(delayMsg=delay_msg(topic, info, stored.timeout if stored else None))

    async def get_monitor_data(self, request: Request) -> JSON:
        requests, gaps = [], []
        for topic, monitor in sorted(self.state.monitor.items()):
            requests.append({"topic": topic, **{name: monitor.requests.get(name, 0) for name in (
                "sendMsg", "pullMsg", "deleteMsg", "ackMsg", "getMsg", "triggerMsgReady",
                "triggerMsgEndLife", "triggerMsgTimeout")}})
            if monitor.gaps_ms:
                gaps.append({"topic": topic, "count": len(monitor.gaps_ms),
                             "avg": round(sum(monitor.gaps_ms) / len(monitor.gaps_ms), 2),
                             "max": max(monitor.gaps_ms)})
        # dynoqueue has no separate ready queue: the time a message waited after falling due
        # is its pull gap, so both lists carry it.
        return JSON({"code": 200, "data": {"requestStatsList": requests,
                                           "pullMsgTimeGapStatsList": gaps,
                                           "readyQueueTimeGapStatsList": gaps,
                                           "sinceTime": self.state.monitor_started_ms,
                                           "now": int(time.time() * 1000)}})

    async def get_topic_info(self, request: Request) -> JSON:
        values = await self._values(request)
        topic = _topic_of(values)
        (stats,) = await self.state.factory().stats([topic])
        return JSON({"code": 200, "data": topic_info(stats)})

    async def get_topic_info_list(self, request: Request) -> JSON:
        stats = await self.state.factory().stats()
        return JSON({"code": 200, "data": [topic_info(s) for s in stats]})
