"""Upkeep: the unack pass (expired leases, the lifecycle sweep), the dead letters' redrive and
purge, clearing a queue, and its stored policy."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..errors import ConfigurationError, InvalidArgumentError
from ..model import validate
from ..model.message import Message
from ..model.policy import QueuePolicy
from .failures import guarded
from .requests import QUORUM, Op
from .shared import SCRIPT_BATCH, QueueState

log = logging.getLogger("dynoqueue.queue")

#: Most batches of expired leases one unack pass puts back per adopted (orphaned) shard: the
#: survivors share that work, and a pass must not stall on a dead zone's backlog.
ADOPTED_REQUEUE_BATCHES = 4


class Upkeep(QueueState):
    """process_unacks, redrive, purge_dead, clear, stored_policy, set_policy,
    delete_policy."""

    def process_unacks(self) -> Op[int]:
        """Put back expired leases of the local shard, then of the orphaned shards the factory
        adopts (at most :data:`ADOPTED_REQUEUE_BATCHES` batches each per pass), dead-lettering
        those at their max deliveries; then the lifecycle sweep: TTL expiry, retention ends,
        orphaned records."""
        self.check_attached()
        requeued = stale = dead = 0
        for index in [self.local_index, *self.adopted_shards()]:
            batches = 0
            while True:
                result = yield from self._write_one(
                    "process_unacks", "requeue_expired",
                    [self._now_arg(), index + 1, SCRIPT_BATCH], replicate=False)
                requeued += int(result[0])
                stale += int(result[1])
                dead += int(result[3])
                batches += 1
                if not int(result[2]) or (index != self.local_index
                                          and batches >= ADOPTED_REQUEUE_BATCHES):
                    break
        yield from self._sweep()
        self._payload_missing(self.local_shard, stale)
        self.events(self.name, "redelivered", requeued)
        self.events(self.name, "dead_lettered", dead)
        if requeued or dead:
            log.info("queue %s shard %s: %d expired leases put back, %d dead-lettered",
                     self.name, self.local_shard, requeued, dead)
        return requeued

    def _sweep(self) -> Op[None]:
        """The lifecycle sweep (sweep.lua), a batch a call until it is done."""
        while True:
            swept = yield from self._write_one(
                "process_unacks", "sweep", [self._now_arg(), SCRIPT_BATCH], replicate=False)
            self.events(self.name, "expired", int(swept[0]))
            self.events(self.name, "dead_lettered", int(swept[1]))
            if any(int(n) for n in swept[:5]):
                log.info("queue %s: %d expired, %d dead-lettered by TTL, %d ended and %d dead "
                         "letters past retention dropped, %d orphaned records swept",
                         self.name, *(int(n) for n in swept[:5]))
            if not int(swept[5]):
                return

    def redrive(self, ids: Iterable[str] | None, delay_ms: int) -> Op[int]:
        validate.ms("delay_ms", delay_ms)
        chosen = None if ids is None else [
            validate.message_id(i)
            for i in validate.listed("redrive takes a list of ids (or None for all)", ids,
                                     single=(Message,))]
        self.check_attached()
        moved = 0
        if chosen is not None:
            for i in range(0, len(chosen), SCRIPT_BATCH):
                n = yield from self._write_one("redrive", "redrive", [
                    self._now_arg(), delay_ms, SCRIPT_BATCH, *chosen[i:i + SCRIPT_BATCH]])
                moved += int(n)
            return moved
        while True:  # all of them, oldest first, a batch per script call
            n = yield from self._write_one("redrive", "redrive",
                                           [self._now_arg(), delay_ms, SCRIPT_BATCH])
            moved += int(n)
            if int(n) < SCRIPT_BATCH:
                return moved

    def purge_dead(self) -> Op[int]:
        self.check_attached()
        keys = [self.keys.dead, self.keys.dead_info]
        purged = 0
        while True:
            n = yield from self._write_one("purge_dead", "purge_dead", [SCRIPT_BATCH], keys=keys)
            purged += int(n)
            if int(n) < SCRIPT_BATCH:
                return purged

    def clear(self) -> Op[None]:
        self.check_open()
        # The stored policy is configuration, not data: it stays (see delete_policy).
        keys = [self.keys.group_head, self.keys.group_line_base,
                *(k for k in self.keys.every_key() if k != self.keys.policy)]
        yield from self._script("clear", keys[0], "clear", keys, [])
        if self.zones is not None:
            yield from self.guard("clear", keys[0], self.zones.forget(self.name))

    def stored_policy(self) -> Op[QueuePolicy | None]:
        self.check_attached()
        # guarded, not guard: no first-call policy check (this process's may be the old one)
        raw = yield from guarded("stored_policy", self.keys.policy, self.sender.command(
            QUORUM, "GET", self.keys.policy))
        return None if raw is None else QueuePolicy.from_json(raw)

    def delete_policy(self) -> Op[bool]:
        """Delete the stored policy (delete_policy.lua); this process, if it was given a
        policy, stores it again at its next call, as at its first."""
        self.check_attached()
        key = self.keys.policy
        # guarded, not guard: no first-call check (it would store the policy to delete)
        reply = yield from guarded("delete_policy", key, self.sender.script(
            QUORUM, "delete_policy", [key, self.keys.message_hash, self.keys.dead], [],
            idempotent=True))
        if isinstance(reply, list):
            raise ConfigurationError(
                f"queue {self.name!r} holds messages and its stored policy "
                f"{QueuePolicy.from_json(reply[1])} decides where they wait (strict_priority "
                f"or partitions); clear or drain the queue before deleting its policy")
        self.policy_checked = self.policy is None
        return bool(int(reply))

    def set_policy(self, policy: QueuePolicy) -> Op[QueuePolicy | None]:
        if not isinstance(policy, QueuePolicy):
            raise InvalidArgumentError(f"policy must be a QueuePolicy, got {policy!r:.80}")
        self.check_attached()
        layout = 1 if self.policy is None else self.policy.partitions
        if not self.keys.tag and layout == 1 and policy.partitions != 1:
            raise ConfigurationError(
                f"queue {self.name!r} has one partition; partitions cannot change on a live "
                f"queue (drain it into a new queue made with partitions={policy.partitions})")
        replaced, old = yield from guarded("set_policy", self.keys.policy, self.sender.script(
            QUORUM, "set_policy", [self.keys.policy], [policy.to_json()], idempotent=True))
        previous = QueuePolicy.from_json(old) if old else None
        if not int(replaced):
            raise ConfigurationError(
                f"queue {self.name!r}: strict_priority cannot change on a live queue (stored "
                f"{previous}); drain it into a new queue instead")
        # This process now asks for the new policy: its first-call check agrees with it.
        self.policy, self.policy_checked = policy, True
        return previous
