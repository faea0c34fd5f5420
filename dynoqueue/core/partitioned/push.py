"""push over the partitions: each message routed to its partition, every partition's share sent
in one round trip; ensure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import Any, cast

from ...model.message import Message
from ...model.partitions import partition_of_message
from ..requests import QUORUM, Batch, Command, CommandOp, Op, Replay, Run
from ..together import together
from .shared import PartitionedState


class SplitPush(PartitionedState):
    """push (its one-command form and the general path), ensure."""

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Run[list[str]]:
        """push's operation: when each partition's share is one script call (see
        QueueCore.push_call), those calls in one :class:`~..requests.Batch` (one round trip per
        node), or the one call of a batch of one partition (a one-message push: the producer's
        usual call); else the general split push."""
        batch = self.base.prepare_push(messages, if_exists)
        if not batch:
            return self._nothing()
        self.base.check_open()
        shares = self._shares(batch)
        if self._checked:
            parts = self.parts
            calls = [parts[k].push_call(share[0], if_exists, share[1]) for k, share in shares]
            if None not in calls:
                ready = cast(list[CommandOp[list[str]]], calls)
                if len(ready) == 1:
                    return ready[0]
                commands = cast(list[Command], [call.command for call in ready])
                return CommandOp(Batch(QUORUM, commands),
                                 partial(self._pushed, batch, ready),
                                 partial(self._push_shares, batch, if_exists, shares))
        return self._checked_op("push", self._push_shares(batch, if_exists, shares))

    def push_validated(self, batch: list[Message], if_exists: str) -> Op[list[str]]:
        """The general split push of a validated batch."""
        if not batch:
            return self._nothing()
        self.base.check_open()
        return self._checked_op("push", self._push_shares(batch, if_exists,
                                                          self._shares(batch)))

    def _shares(self, batch: list[Message]) -> list[tuple[int, tuple[list[Message], list[int]]]]:
        """Each partition's messages and their shard indices, in partition order. Shards are
        chosen here, in input order and before anything is written, so the sharding strategy
        sees the batch as on a queue of one partition (round robin: m0 in a, m1 in b, ...)
        and an unknown shard it returns writes nothing."""
        place, count = self.base.shard_index, self.count
        shares: dict[int, tuple[list[Message], list[int]]] = {}
        for m in batch:
            k = partition_of_message(m, count)
            share = shares.get(k)
            if share is None:
                share = shares[k] = ([], [])
            share[0].append(m)
            share[1].append(place(m))
        return sorted(shares.items())

    @staticmethod
    def _nothing() -> Op[list[str]]:
        return []
        yield  # a generator: an operation that sends nothing

    @staticmethod
    def _pushed(batch: list[Message], calls: list[CommandOp[list[str]]],
                outcomes: list[tuple[Any, BaseException | None]]) -> list[str]:
        """The result of the partitions' calls sent as one Batch; any error: the general
        path takes the outcomes (Replay), before any reply is counted."""
        if any(error is not None for _, error in outcomes):
            raise Replay
        return _in_input_order(batch, [call.done(reply)
                                       for call, (reply, _) in zip(calls, outcomes, strict=True)])

    def _push_shares(self, batch: list[Message], if_exists: str,
                     shares: list[tuple[int, tuple[list[Message], list[int]]]]
                     ) -> Op[list[str]]:
        # Every share in one round trip. Each partition's share has one "now" (its server's
        # clock unless one is injected); shares of different partitions may differ by the
        # time between them, which no order observes: due order holds within a partition.
        replies = yield from together([
            self.parts[k].push_validated(messages, if_exists, shard_indices)
            for k, (messages, shard_indices) in shares])
        return _in_input_order(batch, replies)

    def ensure(self, message: Message) -> Op[bool]:
        (message,) = self.base.validate_batch([message])
        return self._checked_op("ensure", self.part_of(message.id, message.group).ensure(message))


def _in_input_order(batch: list[Message], replies: list[list[str]]) -> list[str]:
    """The ids the partitions' replies say were pushed, in input order (each id as often as it
    was pushed)."""
    if sum(len(ids) for ids in replies) == len(batch):  # all pushed: the usual reply
        return [m.id for m in batch]
    pushed: Counter[str] = Counter()
    for ids in replies:
        pushed.update(ids)
    out: list[str] = []
    for m in batch:
        if pushed[m.id]:
            pushed[m.id] -= 1
            out.append(m.id)
    return out
