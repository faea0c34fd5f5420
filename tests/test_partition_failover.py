"""A partitioned queue while one Cluster primary is down: a pop serves the partitions it can
reach and fails (typed) only when it can serve none; a waiting pop waits out the failover.

A 12-partition queue on 3 primaries (one replica each): the primary holding the most
partitions is SIGKILLed and, before its replica is promoted, pops must go on with the others,
claiming partition by partition, and through a due round that asks every partition at once (a
sparse queue). Both APIs: the asyncio driver sends that round as one Cluster pipeline, which
fails as a whole when a node is down; the sync driver answers each partition's command alone.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis.exceptions import ClusterDownError, MaxConnectionsError

from dynoqueue import ConnectionFailedError, Message, QueuePolicy, RedisQueues
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.core.partitioned.pop import _as_connection_failed, unreachable
from dynoqueue.embedded import ClusterTopology, RedisServer
from dynoqueue.errors import RedisOperationError
from dynoqueue.model.partitions import partition_keys, partition_of_id

pytestmark = pytest.mark.slow

POLICY = QueuePolicy(partitions=12)
MESSAGES = 240
#: A queue holding MESSAGES due messages, and one holding a few that a pop found empty before
#: they were pushed: its next pop asks every partition what is due at once (sparse).
FULL, SPARSE = "full", "sparse"


@pytest.fixture
def topology() -> Iterator[ClusterTopology]:
    # Started from the main thread: a server started from a thread dies with it.
    with ClusterTopology(3, 1, node_timeout_ms=1000) as cluster:
        yield cluster


class _Layout:
    """Where the queues' partitions live, and the primary to kill (the one holding the most
    of FULL's partitions) with its replica."""

    def __init__(self, topology: ClusterTopology, keys: Any) -> None:
        self.owners = {name: [topology.owner_of(k.message_hash)
                              for k in partition_keys(keys[name], POLICY.partitions)]
                       for name in (FULL, SPARSE)}
        self.victim = max(topology.primaries,
                          key=lambda p: sum(o is p for o in self.owners[FULL]))
        self.replica = topology.replicas[topology.primaries.index(self.victim)][0]

    def dead(self, name: str, id: str) -> bool:
        """Whether message ``id`` of queue ``name`` is in a partition of the victim."""
        return self.owners[name][partition_of_id(id, None, POLICY.partitions)] is self.victim


class _Consumer:
    """The consumer's queues, of either API, through awaited calls."""

    def __init__(self, queues: Any) -> None:
        self.queue = {name: queues.get(name, POLICY) for name in (FULL, SPARSE)}

    async def pop(self, name: str, count: int, wait_ms: int = 0) -> list[Message]:
        got: list[Message] = await _done(self.queue[name].pop(count, wait_ms=wait_ms))
        return got

    async def size(self, name: str) -> int:
        return int(await _done(self.queue[name].size()))


async def _done(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def _scenario(topology: ClusterTopology, prefix: str, consumer: _Consumer, *,
                    full_sparse: bool) -> None:
    """``full_sparse``: a pop finds FULL empty before the push too, so that its first pop after
    the kill asks every partition at once (and meets the victim by a refused connection)."""
    pop = consumer.pop
    with RedisQueues.from_url(topology.url, key_prefix=prefix, write_quorum=1,
                              write_quorum_timeout_ms=2000,
                              unack_handler_interval_ms=0) as producer:  # on a replica too
        full, sparse = producer.get(FULL, POLICY), producer.get(SPARSE, POLICY)
        layout = _Layout(topology, {FULL: full.keys, SPARSE: sparse.keys})
        # The consumer's first calls (which check the queues' layout) before the kill.
        assert await pop(SPARSE, 10) == []
        assert (await pop(FULL, 10) == []) if full_sparse else await consumer.size(FULL) == 0
        ids = [f"m{i}" for i in range(MESSAGES)]
        full.push([Message(i, "x") for i in ids])
        few = [f"s{i}" for i in range(100) if not layout.dead(SPARSE, f"s{i}")][:5]
        sparse.push([Message(i, "y") for i in few])
    dead_ids = {i for i in ids if layout.dead(FULL, i)}
    assert dead_ids and any(layout.dead(SPARSE, f"s{i}") for i in range(100))
    # The replica takes over only once the checks of an unreachable partition are done
    # (however long they take on a loaded machine).
    _replica_may_fail_over(layout.replica, False)
    layout.victim.kill()
    # The sparse queue's pop asks every partition at once, the victim's too: the others answer.
    assert {m.id for m in await pop(SPARSE, 10)} == set(few)
    # Healthy partitions hold due messages: every pop is served in full from them.
    healthy_left = MESSAGES - len(dead_ids)
    while healthy_left:
        got = await pop(FULL, 10)
        assert not {m.id for m in got} & dead_ids, "a message of an unreachable partition"
        assert len(got) == min(10, healthy_left), (len(got), healthy_left)
        healthy_left -= len(got)
    # Only the victim's partitions hold messages: the pop says so, typed.
    for _ in range(2):
        with pytest.raises(ConnectionFailedError):
            await pop(FULL, 10)
    # A waiting pop waits for them, and fails only if they are still unreachable at its end.
    began = time.monotonic()
    with pytest.raises(ConnectionFailedError):
        await pop(FULL, 10, 300)
    assert time.monotonic() - began >= 0.25, "the waiting pop did not wait"
    # Once the replica is promoted, a waiting pop gets them.
    _replica_may_fail_over(layout.replica, True)
    got = await pop(FULL, 10, 20_000)
    assert got and {m.id for m in got} <= dead_ids
    rest = {m.id for m in got}
    while len(rest) < len(dead_ids):
        more = await pop(FULL, 10, 2000)
        assert more, f"{len(dead_ids) - len(rest)} messages never came back"
        rest |= {m.id for m in more}
    assert rest == dead_ids


def _replica_may_fail_over(replica: RedisServer, allowed: bool) -> None:
    with replica.client() as admin:
        admin.config_set("cluster-replica-no-failover", "no" if allowed else "yes")
        # However long ago it last heard from its primary (by default a replica whose data is
        # over ~20 s old, with this node timeout, never takes over).
        admin.config_set("cluster-replica-validity-factor", "0")


def test_sync_pop_serves_the_reachable_partitions_while_a_primary_is_down(
        topology: ClusterTopology) -> None:
    prefix = f"pf{uuid.uuid4().hex[:8]}"
    with RedisQueues.from_url(topology.url, key_prefix=prefix,
                              unack_handler_interval_ms=0) as queues:
        asyncio.run(_scenario(topology, prefix, _Consumer(queues), full_sparse=True))


async def _async_scenario(topology: ClusterTopology, full_sparse: bool) -> None:
    prefix = f"pf{uuid.uuid4().hex[:8]}"
    async with AsyncRedisQueues.from_url(topology.url, key_prefix=prefix,
                                         unack_handler_interval_ms=0) as queues:
        await _scenario(topology, prefix, _Consumer(queues), full_sparse=full_sparse)


def test_async_pop_serves_the_reachable_partitions_while_a_primary_is_down(
        topology: ClusterTopology) -> None:
    asyncio.run(_async_scenario(topology, full_sparse=False))


def test_async_sparse_pop_serves_the_reachable_partitions_while_a_primary_is_down(
        topology: ClusterTopology) -> None:
    asyncio.run(_async_scenario(topology, full_sparse=True))


@pytest.mark.parametrize("cause", [ClusterDownError("CLUSTERDOWN The cluster is down"),
                                   MaxConnectionsError()])
def test_a_pop_that_reached_no_partition_raises_connection_failed_whatever_the_node_said(
        cause: Exception) -> None:
    # A node's slots failing over (CLUSTERDOWN), or its pool used up by connections to a dead
    # node, are what a refused connection is to a consumer: the pop raises one type.
    error = RedisOperationError("pop", "p.QUEUE.{3-ab}{q}.a", "")
    error.__cause__ = cause
    assert unreachable(error)
    failed = _as_connection_failed(error)
    assert isinstance(failed, ConnectionFailedError)
    assert (failed.operation, failed.key, failed.__cause__) == ("pop", error.key, cause)
    assert "p.QUEUE.{3-ab}{q}.a" in str(failed)
    assert (str(cause) or type(cause).__name__) in str(failed)
    refused = ConnectionFailedError("redis://h:1", "refused", operation="pop")
    assert _as_connection_failed(refused) is refused
