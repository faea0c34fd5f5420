"""Every builder on every deployment it serves, both APIs, where a fresh factory's **first** call
is a read.

The non-quorum reads (size, peek, get, shard_sizes, state, dead_letters) take a path of their
own: on Redis Cluster they pick a replica from the client's slot map. redis.asyncio builds that
map lazily, on a client's first command, so a factory whose first call was such a read failed on
every read (``KeyError: <slot>``) until something else had sent a command. The contract suite
never starts with a read, and the reprocessor's first pass hid it in long-lived factories; here
nothing runs before the read (no reprocessor, no ``async with``), and the replica reads stay on
(the builders' default), so the read is the factory's very first command. Then a write, and the
same read sees it (eventually: replica reads lag).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynoqueue import Message, QueuePolicy, RedisQueues
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import ClusterTopology, SentinelRing

from .apis import Bridge
from .conftest import ZONES, eventually, unique
from .deployments import PARTITIONS, Deployment, DeploymentPool

pytestmark = pytest.mark.timeout(120)

#: (builder, deployment) pairs: each builder on every deployment it serves.
CASES = [("from_url", "single"), ("from_url", "ring"), ("from_url", "sentinel"),
         ("from_url", "cluster"), ("from_url", "partitioned"),
         ("from_sentinel", "sentinel"),
         ("from_cluster", "cluster"), ("from_cluster", "partitioned")]

#: Each kind of read, as (call on a queue, what it answers on an empty queue, a check of its
#: answer once the messages ``ids`` were pushed due now, one per shard: a peek reads only the
#: local shard).
READS: dict[str, tuple[Callable[[Any, list[str]], Any], Any, Callable[[Any, list[str]], bool]]] = {
    "size": (lambda q, ids: q.size(), 0, lambda answer, ids: answer == len(ids)),
    "peek": (lambda q, ids: q.peek(5), [],
             lambda answer, ids: len(answer) == 1 and answer[0].id in ids),
    "get": (lambda q, ids: q.get(ids[0]), None,
            lambda answer, ids: answer is not None and answer.id == ids[0]),
    "shard_sizes": (lambda q, ids: q.shard_sizes(), None,
                    lambda answer, ids: [s["size"] for s in answer.values()] == [1, 1, 1]),
    "state": (lambda q, ids: q.state(ids[0]), None, lambda answer, ids: answer is not None),
    "dead_letters": (lambda q, ids: q.dead_letters(5), [], lambda answer, ids: answer == []),
}

_names = itertools.count()


def _build(builder: str, deployment: Deployment, api: str, local_zone: str) -> Any:
    """A fresh factory through ``builder``: no reprocessor, replica reads on, three zones."""
    factory = AsyncRedisQueues if api == "async" else RedisQueues
    settings: dict[str, Any] = {"unack_handler_interval_ms": 0, "zones": ZONES,
                                "local_zone": local_zone}
    if deployment.partitions > 1:
        settings["policy"] = QueuePolicy(partitions=PARTITIONS)
    if builder == "from_url":
        return factory.from_url(deployment.url, **settings)
    if builder == "from_sentinel":
        assert isinstance(deployment.topology, SentinelRing)
        return factory.from_sentinel(deployment.topology.sentinel_addresses,
                                     deployment.topology.service_name, **settings)
    assert isinstance(deployment.topology, ClusterTopology)
    return factory.from_cluster(deployment.topology.startup_nodes, **settings)


@pytest.fixture(scope="module")
def pool() -> Iterator[DeploymentPool]:
    deployments = DeploymentPool()
    yield deployments
    deployments.close()


@pytest.fixture(scope="module")
def loop() -> Iterator[Bridge]:
    bridge = Bridge()
    yield bridge
    bridge.close()


@pytest.mark.slow
@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("api", ["sync", "async"])
@pytest.mark.parametrize(("builder", "name"), CASES, ids=[f"{b}-{n}" for b, n in CASES])
def test_first_call_is_a_read(pool: DeploymentPool, loop: Bridge, builder: str, name: str,
                              api: str, read: str) -> None:
    deployment = pool.get(name)
    call, empty, check = READS[read]
    queue_name = unique("first-read")
    ids = [f"m{next(_names)}-{shard}" for shard in range(len(ZONES))]
    # Each zone's factory in turn, so every zone's replica (or shard) serves a first read.
    zone = ZONES[next(_names) % len(ZONES)]
    queues = _build(builder, deployment, api, zone)
    try:
        if api == "async":
            answer = loop.call(call(queues.get(queue_name), ids))
            if read != "shard_sizes":
                assert answer == empty
            loop.call(queues.get(queue_name).push([Message(i, "x") for i in ids]))
            assert eventually(lambda: check(loop.call(call(queues.get(queue_name), ids)), ids))
        else:
            answer = call(queues.get(queue_name), ids)
            if read != "shard_sizes":
                assert answer == empty
            queues.get(queue_name).push([Message(i, "x") for i in ids])
            assert eventually(lambda: check(call(queues.get(queue_name), ids), ids))
        if read == "shard_sizes":  # one entry per shard, all empty before the push
            assert len(answer) == len(ZONES)
            assert all(sizes == {"size": 0, "uacked": 0} for sizes in answer.values())
    finally:
        if api == "async":
            loop.call(queues.aclose())
        else:
            queues.close()

