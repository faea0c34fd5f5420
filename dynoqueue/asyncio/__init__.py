"""dynoqueue for asyncio: ``RedisQueues`` and ``DynoQueue`` with the sync API's names,
arguments, defaults, return shapes and errors, the way ``redis.asyncio`` mirrors ``redis``.

Every method that talks to Redis is a coroutine; ``get(name)``, ``queues()`` and the builders
(``from_url``, ``from_sentinel``, ``from_cluster``) stay plain calls::

    from dynoqueue import Message
    from dynoqueue.asyncio import RedisQueues

    async with RedisQueues.from_url("redis://localhost:6379") as queues:
        q = queues.get("reminders")
        await q.push([Message("m1", "hello", timeout=1_000)])
        for message in await q.pop(10, wait_ms=5_000):
            await q.ack(message.id)

``Worker`` consumes a queue with an ``async def`` handler (see :class:`dynoqueue.Worker`).

Both APIs run the same operations (:mod:`dynoqueue.core`) on the same keys and scripts, so a
sync and an async client share a queue.
"""

from ..model.message import Message
from ..model.policy import QueuePolicy, RateLimit
from ..model.states import DeadLetter, MessageInfo, MessageState
from ..model.stats import QueueStats
from ..worker.tasks import Worker
from .queue import DynoQueue
from .queues import RedisQueues

__all__ = ["DeadLetter", "DynoQueue", "Message", "MessageInfo", "MessageState", "QueuePolicy",
           "QueueStats", "RateLimit", "RedisQueues", "Worker"]
