"""Where a queue's partitions live: each one's Redis Cluster hash slot and the primary that
serves it (``host:port``), for ``dynoqueue stats --partitions``, ``/api/queues`` and the
dashboard.

No I/O: the slot is computed from the partition's hash tag, and the node is read from the
client's slot map (which a Cluster client loads at its first command; the stats read before
this one is such a command). Off a Cluster there is no slot, and the node is the one server
the quorum client talks to, when its connection settings name one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.crc import key_slot

from ..model.keys import QueueKeys
from ..model.partitions import partition_keys
from ..model.policy import QueuePolicy


@dataclass(frozen=True)
class Placement:
    """One partition's home.

    Attributes:
        node: ``host:port`` of the primary serving it, or None when the client cannot say
            (a Sentinel-managed or Dynomite connection, a slot map not loaded yet).
        slot: its Redis Cluster hash slot (0..16383), or None off a Cluster.
    """

    node: str | None
    slot: int | None


def placements(queues: Any, name: str, policy: QueuePolicy | None) -> list[Placement]:
    """The home of each partition of queue ``name`` of factory ``queues`` (either API), in
    partition order; one entry for a queue of one partition.

    Args:
        queues: a RedisQueues of either API (its settings and quorum client are read).
        name: the queue.
        policy: its stored policy (None: one partition).
    """
    count = 1 if policy is None else policy.partitions
    layout: list[QueueKeys] = partition_keys(queues.keys_of(name), count)
    client = queues.quorum_conn
    if not queues.settings.cluster:
        return [Placement(_plain_node(client), None) for _ in layout]
    out = []
    for keys in layout:
        slot = key_slot(keys.message_hash.encode())
        out.append(Placement(_cluster_node(client, slot), slot))
    return out


def _cluster_node(client: Any, slot: int) -> str | None:
    try:
        node = client.nodes_manager.get_node_from_slot(slot)
    except Exception:  # the slot map is not loaded (or moving): the node is unknown now
        return None
    return None if node is None else f"{node.host}:{node.port}"


def _plain_node(client: Any) -> str | None:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    host, port = kwargs.get("host"), kwargs.get("port")
    if host is None or port is None:
        return None
    return f"{host}:{port}"
