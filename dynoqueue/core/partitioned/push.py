"""push over the partitions: each message routed to its partition, every partition's share sent
in one round trip; ensure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ...model.message import Message
from ...model.partitions import partition_of_message
from ..requests import Op, Run
from ..together import together
from .shared import PartitionedState


class SplitPush(PartitionedState):
    """push (its one-command form and the general path), ensure."""

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Run[list[str]]:
        """push's operation: the partition's one-call form when every message goes to one
        partition (a one-message push: the producer's usual call) and that partition's push is
        one script call (see QueueCore.push_call); else the split push."""
        batch = self.base.prepare_push(messages, if_exists)
        if self._checked and batch:
            first = partition_of_message(batch[0], self.count)
            if all(partition_of_message(m, self.count) == first for m in batch[1:]):
                call = self.parts[first].push_call(batch, if_exists)
                if call is not None:
                    return call
        return self.push_validated(batch, if_exists)

    def push_validated(self, batch: list[Message], if_exists: str) -> Op[list[str]]:
        if not batch:
            return self._nothing()
        self.base.check_open()
        # Shards are chosen here, in input order and before anything is written, so the
        # sharding strategy sees the batch as on a queue of one partition (round robin: m0
        # in a, m1 in b, ...) and an unknown shard it returns writes nothing.
        place, count = self.base.shard_index, self.count
        lists: list[tuple[list[Message], list[int]]] = [([], []) for _ in range(count)]
        for m in batch:
            messages, shard_indices = lists[partition_of_message(m, count)]
            messages.append(m)
            shard_indices.append(place(m))
        shares = {k: share for k, share in enumerate(lists) if share[0]}
        return self._checked_op("push", self._push_shares(batch, if_exists, shares))

    @staticmethod
    def _nothing() -> Op[list[str]]:
        return []
        yield  # a generator: an operation that sends nothing

    def _push_shares(self, batch: list[Message], if_exists: str,
                     shares: dict[int, tuple[list[Message], list[int]]]) -> Op[list[str]]:
        # Every share in one round trip. Each partition's share has one "now" (its server's
        # clock unless one is injected); shares of different partitions may differ by the
        # time between them, which no order observes: due order holds within a partition.
        replies = yield from together([
            self.parts[k].push_validated(messages, if_exists, shard_indices)
            for k, (messages, shard_indices) in sorted(shares.items())])
        if sum(len(ids) for ids in replies) == len(batch):  # all pushed: the usual reply
            return [m.id for m in batch]
        pushed: Counter[str] = Counter()
        for ids in replies:
            pushed.update(ids)
        out: list[str] = []
        for m in batch:  # in input order, each id as often as it was pushed
            if pushed[m.id]:
                pushed[m.id] -= 1
                out.append(m.id)
        return out

    def ensure(self, message: Message) -> Op[bool]:
        (message,) = self.base.validate_batch([message])
        return self._checked_op("ensure", self.part_of(message.id, message.group).ensure(message))
