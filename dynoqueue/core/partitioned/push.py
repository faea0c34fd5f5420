"""push over the partitions: each message routed to its partition, every partition's share sent
in one round trip; ensure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import Any, cast

from ...model.message import Message
from ...model.partitions import partitions_of_messages
from ..requests import QUORUM, Batch, Command, CommandOp, Op, Replay, Run
from ..shared import SCRIPT_BATCH
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
            if (self._one_server and len(shares) > 1 and len(batch) <= SCRIPT_BATCH
                    and all(parts[k].one_call(len(share[0])) for k, share in shares)):
                return self._push_together(batch, if_exists, shares)
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

    @property
    def _one_server(self) -> bool:
        """Whether every partition's keys are on one server, so one script may touch several
        partitions: not a Cluster (each partition has its own slot), not a proxy that routes
        each call by its first key (Dynomite: ``eval_scripts``)."""
        return not self.settings.cluster and not self.settings.eval_scripts

    def _push_together(self, batch: list[Message], if_exists: str,
                       shares: list[tuple[int, tuple[list[Message], list[int]]]]
                       ) -> CommandOp[list[str]]:
        """Every partition's share as one ``push_parts`` call (push.lua on each partition in
        turn, one server, one round trip, one clock): when each share would be one push.lua
        call (Producing.one_call) and the batch is at most SCRIPT_BATCH messages."""
        parts = self.parts
        first = parts[shares[0][0]]
        keys: list[str] = []
        args = first.push_args(if_exists, [])
        args.append(len(first.life_keys))
        for k, (messages, shard_indices) in shares:
            part = parts[k]
            keys += part.life_keys
            args.append(len(messages))
            part.push_values(args, messages, shard_indices)
        command = first.sender.script_command(QUORUM, "push_parts", keys, args)

        def done(replies: list[Any]) -> list[str]:
            # The replies' flags follow the shares' messages in turn: decoded as one call's.
            return _in_input_order(batch, [first.pushed(
                [m for _, (messages, _) in shares for m in messages], replies)])

        def op() -> Op[list[str]]:
            # The command first (CommandOp's contract); NOSCRIPT, retries and typed errors as
            # for any write script of the first share's partition (its first call is done).
            return done((yield from first.guard("push", keys[0], first.sender.script(
                QUORUM, "push_parts", keys, args, idempotent=True))))

        return CommandOp(command, done, op)

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
        place = self.base.shard_index
        shares: dict[int, tuple[list[Message], list[int]]] = {}
        for m, k in zip(batch, partitions_of_messages(batch, self.count), strict=True):
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
