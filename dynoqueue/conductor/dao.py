"""DynoQueueDAO (sync) and AsyncDynoQueueDAO (asyncio): the QueueDAO on dynoqueue.

Both are thin: each method runs the same operation of :class:`~.core.DaoCore`; the sync class
makes its calls, the asyncio class awaits them. The docstrings are :class:`QueueDAO`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from ..asyncio import RedisQueues as AsyncRedisQueues
from ..core import calls
from ..core.calls import CallOp
from ..errors import ConfigurationError
from ..model.message import Message
from ..queues import RedisQueues
from .core import DaoCore
from .protocol import QueueDAO

T = TypeVar("T")


def _check_factory(queues: Any, expected: type, dao: str) -> DaoCore:
    if not isinstance(queues, expected):
        raise ConfigurationError(f"{dao} needs a {expected.__module__}.{expected.__name__}, "
                                 f"got {type(queues).__name__}")
    return DaoCore(queues)


class DynoQueueDAO(QueueDAO):
    """The :class:`QueueDAO` on a :class:`dynoqueue.RedisQueues` (Conductor's DynoQueueDAO).

    Thread-safe, as the factory is. Leases last the factory's ``unack_timeout_ms``; its unack
    reprocessor puts back expired leases of the queues it opened (also those that
    :meth:`queues_detail` opened).

    Args:
        queues: the factory; the DAO does not close it.

    Raises:
        ConfigurationError: ``queues`` is not a sync RedisQueues.
    """

    def __init__(self, queues: RedisQueues) -> None:
        self._core = _check_factory(queues, RedisQueues, "DynoQueueDAO")
        self.queues = queues

    def _run(self, op: CallOp[T]) -> T:
        return calls.run(op)

    def push(self, queue_name: str, id: str, offset_time_s: int = 0,
             priority: int = 0) -> None:
        self._run(self._core.push(queue_name, id, offset_time_s, priority))

    def push_messages(self, queue_name: str, messages: Iterable[Message]) -> None:
        self._run(self._core.push_messages(queue_name, messages))

    def push_if_not_exists(self, queue_name: str, id: str, offset_time_s: int = 0,
                           priority: int = 0) -> bool:
        return self._run(self._core.push_if_not_exists(queue_name, id, offset_time_s, priority))

    def pop(self, queue_name: str, count: int, timeout_ms: int) -> list[str]:
        return self._run(self._core.pop(queue_name, count, timeout_ms))

    def poll_messages(self, queue_name: str, count: int, timeout_ms: int) -> list[Message]:
        return self._run(self._core.poll_messages(queue_name, count, timeout_ms))

    def remove(self, queue_name: str, id: str) -> None:
        self._run(self._core.by_id(queue_name, "remove", id))

    def get_size(self, queue_name: str) -> int:
        return int(self._run(self._core.on_queue(queue_name, "size")))

    def ack(self, queue_name: str, id: str) -> bool:
        return bool(self._run(self._core.by_id(queue_name, "ack", id)))

    def set_unack_timeout(self, queue_name: str, id: str, unack_timeout_ms: int) -> bool:
        return self._run(self._core.set_unack_timeout(queue_name, id, unack_timeout_ms, False))

    def set_unack_timeout_if_shorter(self, queue_name: str, id: str,
                                     unack_timeout_ms: int) -> bool:
        return self._run(self._core.set_unack_timeout(queue_name, id, unack_timeout_ms, True))

    def flush(self, queue_name: str) -> None:
        self._run(self._core.on_queue(queue_name, "clear"))

    def queues_detail(self) -> dict[str, int]:
        return self._run(self._core.queues_detail("size"))

    def queues_detail_verbose(self) -> dict[str, dict[str, dict[str, int]]]:
        return self._run(self._core.queues_detail("shard_sizes"))

    def process_unacks(self, queue_name: str) -> None:
        self._run(self._core.on_queue(queue_name, "process_unacks"))

    def reset_offset_time(self, queue_name: str, id: str, *,
                          release_leased: bool = False) -> bool:
        return self._run(self._core.set_offset_time(queue_name, id, 0, release_leased))

    def set_offset_time(self, queue_name: str, id: str, offset_time_s: int, *,
                        release_leased: bool = False) -> bool:
        return self._run(self._core.set_offset_time(queue_name, id, offset_time_s,
                                                    release_leased))

    def postpone(self, queue_name: str, id: str, priority: int, postpone_s: int) -> bool:
        return self._run(self._core.postpone(queue_name, id, priority, postpone_s))

    def contains_message(self, queue_name: str, id: str) -> bool:
        return bool(self._run(self._core.by_id(queue_name, "contains", id)))


class AsyncDynoQueueDAO:
    """The :class:`QueueDAO`'s methods as coroutines, on a :class:`dynoqueue.asyncio.RedisQueues`
    (same arguments, units, results and errors). Use it from the factory's event loop.

    Args:
        queues: the asyncio factory; the DAO does not close it.

    Raises:
        ConfigurationError: ``queues`` is not a dynoqueue.asyncio RedisQueues.
    """

    def __init__(self, queues: AsyncRedisQueues) -> None:
        self._core = _check_factory(queues, AsyncRedisQueues, "AsyncDynoQueueDAO")
        self.queues = queues

    async def _run(self, op: CallOp[T]) -> T:
        return await calls.run_async(op)

    async def push(self, queue_name: str, id: str, offset_time_s: int = 0,
                   priority: int = 0) -> None:
        await self._run(self._core.push(queue_name, id, offset_time_s, priority))

    async def push_messages(self, queue_name: str, messages: Iterable[Message]) -> None:
        await self._run(self._core.push_messages(queue_name, messages))

    async def push_if_not_exists(self, queue_name: str, id: str, offset_time_s: int = 0,
                                 priority: int = 0) -> bool:
        return await self._run(self._core.push_if_not_exists(queue_name, id, offset_time_s,
                                                             priority))

    async def pop(self, queue_name: str, count: int, timeout_ms: int) -> list[str]:
        return await self._run(self._core.pop(queue_name, count, timeout_ms))

    async def poll_messages(self, queue_name: str, count: int,
                            timeout_ms: int) -> list[Message]:
        return await self._run(self._core.poll_messages(queue_name, count, timeout_ms))

    async def remove(self, queue_name: str, id: str) -> None:
        await self._run(self._core.by_id(queue_name, "remove", id))

    async def get_size(self, queue_name: str) -> int:
        return int(await self._run(self._core.on_queue(queue_name, "size")))

    async def ack(self, queue_name: str, id: str) -> bool:
        return bool(await self._run(self._core.by_id(queue_name, "ack", id)))

    async def set_unack_timeout(self, queue_name: str, id: str, unack_timeout_ms: int) -> bool:
        return await self._run(self._core.set_unack_timeout(queue_name, id, unack_timeout_ms,
                                                            False))

    async def set_unack_timeout_if_shorter(self, queue_name: str, id: str,
                                           unack_timeout_ms: int) -> bool:
        return await self._run(self._core.set_unack_timeout(queue_name, id, unack_timeout_ms,
                                                            True))

    async def flush(self, queue_name: str) -> None:
        await self._run(self._core.on_queue(queue_name, "clear"))

    async def queues_detail(self) -> dict[str, int]:
        return await self._run(self._core.queues_detail("size"))

    async def queues_detail_verbose(self) -> dict[str, dict[str, dict[str, int]]]:
        return await self._run(self._core.queues_detail("shard_sizes"))

    async def process_unacks(self, queue_name: str) -> None:
        await self._run(self._core.on_queue(queue_name, "process_unacks"))

    async def reset_offset_time(self, queue_name: str, id: str, *,
                                release_leased: bool = False) -> bool:
        return await self._run(self._core.set_offset_time(queue_name, id, 0, release_leased))

    async def set_offset_time(self, queue_name: str, id: str, offset_time_s: int, *,
                              release_leased: bool = False) -> bool:
        return await self._run(self._core.set_offset_time(queue_name, id, offset_time_s,
                                                          release_leased))

    async def postpone(self, queue_name: str, id: str, priority: int, postpone_s: int) -> bool:
        return await self._run(self._core.postpone(queue_name, id, priority, postpone_s))

    async def contains_message(self, queue_name: str, id: str) -> bool:
        return bool(await self._run(self._core.by_id(queue_name, "contains", id)))


def _copy_docs() -> None:
    """One text per method: both classes show the QueueDAO contract's docstrings."""
    for cls in (DynoQueueDAO, AsyncDynoQueueDAO):
        for name, member in vars(cls).items():
            contract = getattr(QueueDAO, name, None)
            if callable(member) and not name.startswith("_") and contract is not None:
                member.__doc__ = contract.__doc__


_copy_docs()
