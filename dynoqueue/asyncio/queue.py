"""The asyncio DynoQueue: the same operations as :class:`dynoqueue.DynoQueue`, as coroutines.

Each call runs the operation of :class:`dynoqueue.core.queue.QueueCore` that the sync method
runs, on the asyncio driver; arguments, defaults, return shapes and errors are the sync ones,
and so are the docstrings (copied from the sync class at import).
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from ..core.facade import QueueBase
from ..core.layout import AnyCore
from ..core.requests import Run
from ..io.aio import AsyncDriver
from ..model.message import Message
from ..model.policy import QueuePolicy
from ..model.schedules import Schedule
from ..model.states import DeadLetter, MessageInfo, MessageState
from ..queue import DynoQueue as SyncDynoQueue

T = TypeVar("T")


class DynoQueue(QueueBase):
    """One named queue over all shards, for asyncio (see :class:`dynoqueue.DynoQueue`).

    Get instances from :meth:`dynoqueue.asyncio.RedisQueues.get`. Use them from the event loop
    that opened the factory. A waiting :meth:`pop` never blocks the loop and may be cancelled
    (``asyncio.wait_for``, ``Task.cancel``): what it had leased is put back at once.
    """

    def __init__(self, core: AnyCore, driver: AsyncDriver) -> None:
        super().__init__(core)
        self._driver = driver

    def _run(self, op: Run[T]) -> Coroutine[Any, Any, T]:
        return self._driver.run(op)  # awaited by the caller: no coroutine frame of its own

    async def push(self, messages: Iterable[Message], *,
                   if_exists: str = "replace") -> list[str]:
        return await self._run(self._core.push(messages, if_exists))

    async def ensure(self, message: Message) -> bool:
        return await self._run(self._core.ensure(message))

    async def pop(self, count: int, wait_ms: int = 0, *, lease_ms: int | None = None,
                  min_count: int | None = None) -> list[Message]:
        return await self._run(self._core.pop("pop", False, count, wait_ms, lease_ms,
                                              min_count))

    async def bulk_pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        return await self._run(self._core.pop("bulk_pop", False, count, wait_ms))

    async def unsafe_pop_all_shards(self, count: int, wait_ms: int = 0, *,
                                    lease_ms: int | None = None,
                                    min_count: int | None = None) -> list[Message]:
        return await self._run(self._core.pop("unsafe_pop_all_shards", True, count, wait_ms,
                                              lease_ms, min_count))

    async def unsafe_bulk_pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        return await self._run(self._core.pop("unsafe_bulk_pop", True, count, wait_ms))

    async def pop_with_msg_id(self, id: str) -> Message | None:
        return await self._run(self._core.claim_id("pop_with_msg_id", id, False))

    async def unsafe_pop_with_msg_id_all_shards(self, id: str) -> Message | None:
        return await self._run(self._core.claim_id("unsafe_pop_with_msg_id_all_shards", id, True))

    async def pop_msg_with_predicate(self, pattern: str,
                                     local_only: bool = False) -> Message | None:
        return await self._run(self._core.claim_match(pattern, local_only))

    async def ack(self, id: str, *, receipt: str | None = None) -> bool:
        return await self._run(self._core.ack(id, receipt))

    async def nack(self, id: str, delay_ms: int = 0, *, error: str | None = None,
                   receipt: str | None = None) -> bool:
        return await self._run(self._core.nack(id, delay_ms, error, receipt))

    async def nack_many(self, ids: Iterable[str | Message], delay_ms: int = 0, *,
                        error: str | None = None) -> int:
        return await self._run(self._core.nack_many(ids, delay_ms, error))

    async def release(self, ids: Iterable[str | Message]) -> int:
        return await self._run(self._core.release(ids))

    async def dead_letter(self, id: str, reason: str = "dead_letter_now", *,
                          error: str | None = None, receipt: str | None = None) -> bool:
        return await self._run(self._core.dead_letter(id, reason, error, receipt))

    async def set_unack_timeout_many(self, ids: Iterable[str | Message], timeout_ms: int) -> int:
        return await self._run(self._core.set_lease_many(ids, timeout_ms))

    async def postpone(self, id: str, delay_ms: int, *, priority: int | None = None) -> bool:
        return await self._run(self._core.postpone(id, delay_ms, priority))

    async def ack_many(self, ids: Iterable[str | Message]) -> int:
        return await self._run(self._core.ack_many(ids))

    async def set_unack_timeout(self, id: str, timeout_ms: int, *,
                                receipt: str | None = None) -> bool:
        return await self._run(self._core.set_lease(
            "set_unack_timeout", id, timeout_ms, only_if_shorter=False, receipt=receipt))

    async def set_unack_timeout_if_shorter(self, id: str, timeout_ms: int, *,
                                           receipt: str | None = None) -> bool:
        return await self._run(self._core.set_lease(
            "set_unack_timeout_if_shorter", id, timeout_ms, only_if_shorter=True,
            receipt=receipt))

    async def set_timeout(self, id: str, timeout_ms: int) -> bool:
        return await self._run(self._core.set_timeout(id, timeout_ms))

    async def remove(self, id: str) -> bool:
        return await self._run(self._core.remove(id))

    async def atomic_remove(self, id: str) -> bool:
        return await self._run(self._core.remove(id))

    async def peek(self, count: int) -> list[Message]:
        return await self._run(self._core.peek("peek", False, count))

    async def unsafe_peek_all_shards(self, count: int) -> list[Message]:
        return await self._run(self._core.peek("unsafe_peek_all_shards", True, count))

    async def contains(self, id: str) -> bool:
        return await self._run(self._core.contains(id))

    async def get(self, id: str) -> Message | None:
        return await self._run(self._core.get("get", id, False))

    async def local_get(self, id: str) -> Message | None:
        return await self._run(self._core.get("local_get", id, True))

    async def get_all_messages(self) -> list[Message]:
        return await self._run(self._core.get_all_messages())

    async def contains_predicate(self, pattern: str, local_only: bool = False) -> bool:
        return await self._run(self._core.contains_match(pattern, local_only))

    async def get_msg_with_predicate(self, pattern: str, local_only: bool = False) -> str | None:
        return await self._run(self._core.find_match(pattern, local_only))

    async def size(self) -> int:
        return await self._run(self._core.size())

    async def shard_sizes(self) -> dict[str, dict[str, int]]:
        return await self._run(self._core.shard_sizes())

    async def find_stale_messages(self) -> list[Message]:
        return await self._run(self._core.find_stale_messages())

    async def process_unacks(self) -> int:
        return await self._run(self._core.process_unacks())

    async def atomic_process_unacks(self) -> int:
        return await self._run(self._core.process_unacks())

    async def clear(self) -> None:
        return await self._run(self._core.clear())

    async def state(self, id: str) -> MessageState | None:
        return await self._run(self._core.state(id))

    async def info(self, id: str) -> MessageInfo | None:
        return await self._run(self._core.info(id))

    async def group_info(self, group: str) -> dict[str, Any]:
        return await self._run(self._core.group_info(group))

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return await self._run(self._core.dead_letters(count))

    async def dead_size(self) -> int:
        return await self._run(self._core.dead_size())

    async def redrive(self, ids: Iterable[str] | None = None, *, delay_ms: int = 0) -> int:
        return await self._run(self._core.redrive(ids, delay_ms))

    async def purge_dead(self) -> int:
        return await self._run(self._core.purge_dead())

    async def stored_policy(self) -> QueuePolicy | None:
        return await self._run(self._core.stored_policy())

    async def set_policy(self, policy: QueuePolicy) -> QueuePolicy | None:
        return await self._run(self._core.set_policy(policy))

    async def delete_policy(self) -> bool:
        return await self._run(self._core.delete_policy())

    async def pause(self) -> bool:
        return await self._run(self._core.pause())

    async def resume(self) -> bool:
        return await self._run(self._core.resume())

    async def is_paused(self) -> bool:
        return await self._run(self._core.is_paused())

    async def schedule(self, schedule_id: str, *, payload: str | None = None,
                       cron: str | None = None, every_ms: int | None = None,
                       timezone: str = "UTC", priority: int = 0, catch_up: str = "once",
                       start_at_ms: int | None = None) -> Schedule:
        return await self._run(self._core.schedule(
            schedule_id, payload=payload, cron=cron, every_ms=every_ms, timezone=timezone,
            priority=priority, catch_up=catch_up, start_at_ms=start_at_ms))

    async def schedules(self) -> list[Schedule]:
        return await self._run(self._core.schedules())

    async def unschedule(self, schedule_id: str) -> bool:
        return await self._run(self._core.unschedule(schedule_id))

    async def close(self) -> None:
        """See :meth:`dynoqueue.DynoQueue.close`."""
        self._core.closed = True
        for core in self._bell_cores():
            await self._driver.close_doorbell(core)


def _copy_docs() -> None:
    """One text per call: each coroutine shows the sync method's docstring."""
    for name, member in vars(DynoQueue).items():
        sync = getattr(SyncDynoQueue, name, None)
        if callable(member) and not name.startswith("_") and sync is not None and sync.__doc__:
            member.__doc__ = sync.__doc__


_copy_docs()
