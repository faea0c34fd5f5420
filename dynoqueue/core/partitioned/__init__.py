"""PartitionedCore: the operations of a queue split into partitions (``QueuePolicy.partitions``).

Each partition is a :class:`~dynoqueue.core.queue.QueueCore` over the whole one-partition
layout under its own hash tag (:mod:`dynoqueue.model.partitions`), so it is one Redis Cluster
slot and every script stays single-slot. This class only routes:

* a call about one message (ack, nack, get, state, remove, postpone, ...) goes to the partition
  that holds it, ``crc32(id) % n`` (an ordered group's: ``crc32(group) % n``): one script, as on
  a queue of one partition;
* a call about many ids (push, ack_many, ...) validates them all first, then calls each
  partition concerned once with its share;
* a call about the whole queue (pop, size, peek, clear, process_unacks, ...) fans out: pops
  fill one batch from the partitions in turn, starting one further on each call so none
  starves, and stop as soon as the batch is full.

Beside the partitions, the queue's one-partition keys hold its stored policy (with its
``parts``: how processes that were given no policy find the partitions) and nothing else.

The wing, one module per group, as :class:`~dynoqueue.core.queue.QueueCore` is composed:
:mod:`.shared` (the partitions, routing, the first-call check), :mod:`.push`, :mod:`.pop`
(the fanned-out pop), :mod:`.messages` (calls routed to a message's partition),
:mod:`.whole` (whole-queue calls, fanned out), composed in :mod:`.core`.
"""

from __future__ import annotations

from .core import PartitionedCore
from .pop import Spread

__all__ = ["PartitionedCore", "Spread"]
