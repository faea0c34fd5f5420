"""The asyncio RedisQueues: :class:`dynoqueue.RedisQueues` with coroutine calls and an unack
reprocessor task.

Same arguments, defaults and builders as the sync factory; its clients are ``redis.asyncio``
clients (standalone, Sentinel, Cluster, TLS, ACL users). ``async with`` opens it (starting the
reprocessor task) and closes it; ``await queues.aclose()`` closes it by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from redis.asyncio.cluster import RedisCluster

from ..connect import builders
from ..core import stats as stats_read
from ..core.calls import outcome_async, run_async
from ..core.factory import QueuesBase
from ..core.listing import queue_names
from ..core.requests import Step
from ..io.aio import AsyncDriver
from ..model.policy import QueuePolicy
from ..model.stats import QueueStats, ReadCost
from ..queues import RedisQueues as SyncRedisQueues
from .queue import DynoQueue

log = logging.getLogger("dynoqueue.queues")


class RedisQueues(QueuesBase[DynoQueue]):
    """Factory of named asyncio queues (see :class:`dynoqueue.RedisQueues` for the arguments).

    Args:
        quorum_conn: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client.
        non_quorum_conn: the same kind of client, for reads.
        key_prefix: as :class:`dynoqueue.RedisQueues`.
        shard_supplier: as :class:`dynoqueue.RedisQueues`.
        **options: as :class:`dynoqueue.RedisQueues`.

    Raises:
        ConfigurationError: (a ValueError) a sync client, or a bad setting.
    """

    queue_class = DynoQueue
    cluster_class = RedisCluster
    asynchronous = True
    driver_class = AsyncDriver
    _driver: AsyncDriver
    _reprocessor: asyncio.Task[None] | None = None

    @classmethod
    def from_url(cls, url: str, *, zones: Sequence[str] | None = None,
                 local_zone: str | None = None, replica_urls: Mapping[str, str] | None = None,
                 **kwargs: Any) -> RedisQueues:
        """See :meth:`dynoqueue.RedisQueues.from_url` (a plain call: it connects lazily)."""
        return builders.from_url(cls, url, zones=zones, local_zone=local_zone,
                                 replica_urls=replica_urls, **kwargs)

    @classmethod
    def from_sentinel(cls, sentinels: Any, service_name: str, **kwargs: Any) -> RedisQueues:
        """See :meth:`dynoqueue.RedisQueues.from_sentinel`."""
        return builders.from_sentinel(cls, sentinels, service_name, **kwargs)

    @classmethod
    def from_cluster(cls, nodes: Any, **kwargs: Any) -> RedisQueues:
        """See :meth:`dynoqueue.RedisQueues.from_cluster`."""
        return builders.from_cluster(cls, nodes, **kwargs)

    def get(self, queue_name: str, policy: QueuePolicy | None = None) -> DynoQueue:
        """See :meth:`dynoqueue.RedisQueues.get`; inside a running event loop, also starts the
        unack reprocessor task if ``async with`` has not."""
        queue = super().get(queue_name, policy)
        with contextlib.suppress(RuntimeError):  # no running loop: started by __aenter__
            self._start_reprocessor()
        return queue

    async def process_unacks(self) -> int:
        """See :meth:`dynoqueue.RedisQueues.process_unacks`."""
        return await self._driver.run(self._unack_pass())

    async def run_schedules(self) -> int:
        """See :meth:`dynoqueue.RedisQueues.run_schedules`."""
        return await self._driver.run(self._schedules_pass())

    async def ping(self) -> dict[str, float]:
        return await self._driver.run(self._ping())

    async def stats(self, names: Sequence[str] | None = None, *,
                    cost: ReadCost | None = None) -> list[QueueStats]:
        cost = ReadCost() if cost is None else cost
        started = time.perf_counter()
        if names is None:
            names = await run_async(stats_read.listing(self, cost))
        return await self._driver.run(stats_read.measure(self, names, cost, started))

    async def aclose(self) -> None:
        """Stop the reprocessor task, close every queue, then the connections a builder made.
        Idempotent, and bounded as :meth:`dynoqueue.RedisQueues.close`. Mirrors ``close``."""
        ends_at = time.monotonic() + self.settings.call_timeout_s + 1.0
        task, self._reprocessor = self._reprocessor, None
        if task is not None:
            task.cancel()  # a write in flight finishes first: bounded by the deadline
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, max(0.0, ends_at - time.monotonic()))
        queues = self.queues()
        owned = self._detach()
        for queue in queues:
            for core in queue._bell_cores():
                await self._driver.close_doorbell(core, max(0.1, ends_at - time.monotonic()))
        await self._driver.aclose()
        for client in owned:
            await client.aclose()

    async def __aenter__(self) -> RedisQueues:
        self._start_reprocessor()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    def _start_reprocessor(self) -> None:
        if self._reprocessor is None and self.unack_handler_interval_ms > 0 and not self._closed:
            self._reprocessor = asyncio.get_running_loop().create_task(
                self._reprocess_loop(), name="dynoqueue-unack-reprocessor")

    async def discover_queues(self) -> list[str]:
        """See :meth:`dynoqueue.RedisQueues.discover_queues`."""
        step = Step(queue_names(self, "discover_queues"))
        while step.pending:
            step.send(*(await outcome_async(step.request)))
        names: list[str] = await self._driver.run(self._register_found(step.result))
        return names

    async def _reprocess_loop(self) -> None:
        tick_s = self.reprocess_tick_ms() / 1000
        while True:
            await asyncio.sleep(tick_s)
            try:
                await self._driver.run(self._reprocess_tick())
            except Exception:  # the task must survive anything (dyno-queues #85)
                log.exception("unack pass failed")


for _name in ("process_unacks", "aclose", "ping", "stats"):
    vars(RedisQueues)[_name].__doc__ = getattr(SyncRedisQueues,
                                               "close" if _name == "aclose" else _name).__doc__
