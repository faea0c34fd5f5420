"""PartitionedCore: the groups below, composed (as :class:`~dynoqueue.core.queue.QueueCore`
is), for a queue of n partitions: :mod:`~dynoqueue.core.partitioned.push`,
:mod:`~dynoqueue.core.partitioned.pop`, :mod:`~dynoqueue.core.partitioned.messages` and
:mod:`~dynoqueue.core.partitioned.whole`, over what they share
(:mod:`~dynoqueue.core.partitioned.shared`: the partitions, routing, the first-call check).
"""

from __future__ import annotations

from .messages import OneMessage
from .pop import SpreadPop
from .push import SplitPush
from .whole import WholeQueue


class PartitionedCore(SplitPush, SpreadPop, OneMessage, WholeQueue):
    """The operations of one queue split into ``policy.partitions`` partitions; same methods,
    arguments and errors as :class:`~dynoqueue.core.queue.QueueCore`.

    Args:
        name, settings, quorum_cluster, replica_reads: as for QueueCore.
        policy: the queue's policy, ``partitions`` > 1.
        stored: the policy was read from Redis (a process given none): apply what is stored,
            check nothing.
    """

    def __repr__(self) -> str:
        return (f"DynoQueue({self.name!r}, shards={self.shards}, local={self.local_shard!r}, "
                f"partitions={self.count})")
