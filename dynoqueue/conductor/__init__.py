"""A Conductor ``QueueDAO`` on dynoqueue: task queues for Python workflow engines.

Conductor (the workflow engine dyno-queues was written for) reaches its queues only through
one interface, ``QueueDAO``; this package is that contract with dyno-queues' meaning and the
known bugs of Conductor's Redis DAOs fixed (see docs/conductor.md)::

    from dynoqueue import RedisQueues
    from dynoqueue.conductor import DynoQueueDAO

    with RedisQueues.from_url("redis://localhost:6379") as queues:
        dao = DynoQueueDAO(queues)
        dao.push("SIMPLE_TASK", "task-1", offset_time_s=0, priority=0)
        for task_id in dao.pop("SIMPLE_TASK", count=10, timeout_ms=1_000):
            dao.ack("SIMPLE_TASK", task_id)

:class:`AsyncDynoQueueDAO` has the same methods as coroutines, on
:class:`dynoqueue.asyncio.RedisQueues`.
"""

from .dao import AsyncDynoQueueDAO, DynoQueueDAO
from .protocol import QueueDAO

__all__ = ["AsyncDynoQueueDAO", "DynoQueueDAO", "QueueDAO"]
