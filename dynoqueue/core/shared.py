"""What every operation of one queue shares: its names, keys and shards, its send path, the
checks each call makes, and the first-call checks with typed errors around each call.

:class:`QueueState` is the base of the operation groups (:mod:`~dynoqueue.core.produce`,
:mod:`~dynoqueue.core.consume`, :mod:`~dynoqueue.core.leases`,
:mod:`~dynoqueue.core.inspection`, :mod:`~dynoqueue.core.upkeep`), which
:class:`~dynoqueue.core.queue.QueueCore` composes.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, QueueClosedError
from ..model import validate
from ..model.keys import QueueKeys
from ..model.policy import QueuePolicy
from ..model.settings import QueueSettings
from .failures import guarded
from .preflight import ServerCheck
from .requests import QUORUM, Merge, Op
from .sender import Sender

if TYPE_CHECKING:
    from .zones import ZoneWatch

log = logging.getLogger("dynoqueue.queue")

#: Most messages one script call pushes, claims or re-queues: bounds how long Redis is blocked.
SCRIPT_BATCH = 500
#: The predicate calls read messages in pages of at most this many ids and (for pops) about
#: this many JSON bytes, and match them in Python (dynoqueue.model.luapattern).
MATCH_PAGE_IDS = 100
MATCH_PAGE_BYTES = 1 << 20
#: The event kind that carries one delivery's lateness in ms as its count.
LATE = "late_ms"
#: The event kind of a claim that the queue's limits (max_in_flight, rate_limit) held back.
LIMITED = "limited"
#: What a queue made without a factory checks of its server: nothing.
_NO_SERVER_CHECK = ServerCheck("off")


def no_events(queue: str, kind: str, count: int) -> None:
    """The default of :attr:`QueueState.events`: nothing is observed."""


class QueueState:
    """The state and shared steps of one queue's operations over all shards.

    Args:
        name: the queue name.
        settings: the factory's validated settings.
        quorum_cluster: the quorum client is a Redis Cluster client.
        replica_reads: the read client is a Cluster client that reads from replicas (read
            scripts then run as ``EVALSHA_RO`` on a replica of the queue's slot).
        policy: the policy this process applies (None: the settings').
        tag: the hash tag of the partition this is (:mod:`dynoqueue.model.partitions`), or ""
            for a queue of one partition.

    Raises:
        ConfigurationError: a bad queue name.
    """

    def __init__(self, name: str, settings: QueueSettings, *, quorum_cluster: bool,
                 replica_reads: bool, policy: QueuePolicy | None = None, tag: str = "") -> None:
        self.keys = QueueKeys(settings.key_prefix, name, settings.shards, bool(settings.hash_tag),
                              tag)
        self.name = name
        self.settings = settings
        self.shards = list(settings.shards)
        self.local_shard = settings.local_shard
        self.unack_timeout_ms = settings.unack_timeout_ms
        #: The policy this process was configured with (None: whatever the queue has stored).
        self.policy = policy if policy is not None else settings.policy
        self.policy_checked = self.policy is None
        self.local_index = self.shards.index(self.local_shard)
        self._shard_pos: dict[str, int] = {}  # shard -> its first index
        for i, shard in enumerate(self.shards):
            self._shard_pos.setdefault(shard, i)
        self.shards_local_first = [self.local_index] + [i for i in range(len(self.shards))
                                             if i != self.local_index]
        self._strategy = settings.strategy
        self._life_keys = self.keys.lifecycle_keys()
        #: How this queue's requests reach Redis.
        self.sender = Sender(name, settings, self._life_keys, quorum_cluster=quorum_cluster,
                             replica_reads=replica_reads)
        self._clock = settings.clock
        #: Every shard's doorbell channel: what this queue's doorbell listener subscribes to.
        self.bell_channels = [self.keys.doorbell(s) for s in self.shards]
        #: No new pops or pushes (close()); acks, lease changes and removes still work.
        self.closed = False
        #: The factory closed its connections: every call is refused.
        self.detached = False
        #: Told ``events(queue, kind, count)`` after an operation succeeds, with kind one of
        #: pushed, delivered, acked, nacked, redelivered, dead_lettered, expired,
        #: payload_missing (dead-lettered: found without payload) (no I/O: see
        #: dynoqueue.metrics; set through the factory's ``set_events``); and, once per message
        #: a pop delivered, ``late_ms`` with count = its lateness (claim time - due ms, >= 0).
        self.events: Callable[[str, str, int], None] = no_events
        #: The factory's queue registry and zone heartbeat (None: this queue registers
        #: nothing and adopts no shard).
        self.zones: ZoneWatch | None = None
        #: The factory's server check, run before this queue's first call if not done yet.
        self.server_check = _NO_SERVER_CHECK

    # ----------------------------------------------------------------------------- checks

    def _now_arg(self) -> str:
        if self._clock is None:
            return ""
        now = self._clock()
        try:
            now_ms = int(now)
        except (TypeError, ValueError, OverflowError):
            now_ms = -1
        if not 0 <= now_ms <= validate.MAX_EPOCH_MS:
            raise ConfigurationError(f"clock must return epoch ms in 0..{validate.MAX_EPOCH_MS}, "
                                     f"returned {now!r:.80}")
        return str(now_ms)

    def check_attached(self) -> None:
        if self.detached:
            raise QueueClosedError(f"queue {self.name!r} is closed (its RedisQueues was closed)")

    def check_open(self) -> None:
        if self.closed or self.detached:
            raise QueueClosedError(f"queue {self.name!r} is closed")

    # ----------------------------------------------------------------------------- shards

    def adopted_shards(self) -> list[int]:
        """The indices of the orphaned shards this queue's factory adopts now."""
        return [] if self.zones is None else self.zones.adopted(self.shards)

    def _group_shard(self, group: str) -> int:
        """The index of the shard a group's messages live in: CRC32 of its UTF-8 bytes modulo
        the number of shards (as RMQ maps a slotBasis to a slot); the scripts keep a group
        with messages in the shard it already has."""
        return zlib.crc32(group.encode()) % len(self.shards)

    def _shard_at(self, index: Any) -> str | None:
        """The shard a stored record names by its 1-based index (None if it names none)."""
        if isinstance(index, (int, float)) and 1 <= int(index) <= len(self.shards):
            return self.shards[int(index) - 1]
        return None

    def _payload_missing(self, shard: str | None, count: int) -> None:
        """Report ``count`` ids a script found without payload and dead-lettered (reason
        ``payload-missing``): a warning per batch, and the events ``dead_lettered`` and
        ``payload_missing``. Evicted keys are the usual cause (or a payload deleted by hand,
        e.g. a Java client's remove of a grouped message waiting behind its group)."""
        if count <= 0:
            return
        log.warning("queue %s%s: %d ids had no payload (evicted? the server's "
                    "maxmemory-policy must be noeviction or volatile-*); dead-lettered with "
                    "reason payload-missing", self.name,
                    "" if shard is None else f" shard {shard}", count)
        self.events(self.name, "dead_lettered", count)
        self.events(self.name, "payload_missing", count)

    # ----------------------------------------------------------------------------- guarded calls

    def guard(self, operation: str, key: str, op: Op[Any]) -> Op[Any]:
        """Run ``op`` while the factory is open, with typed errors (see :func:`guarded`), after
        the policy check of this queue's first call. Raises QueueClosedError at once when the
        factory is closed."""
        self.check_attached()
        if self._first_checks_done():
            return guarded(operation, key, op)  # no generator layer of its own: every call
        return self._checked_first(operation, key, op)

    def _first_checks_done(self) -> bool:
        """Whether this queue's first-call checks (the server's, the stored policy) are done."""
        return self.server_check.done and self.policy_checked

    def _checked_first(self, operation: str, key: str, op: Op[Any]) -> Op[Any]:
        if not self.server_check.done:
            yield from guarded(operation, key, self.server_check.run(key))
        if not self.policy_checked:
            yield from guarded(operation, key, self._check_policy())
        return (yield from guarded(operation, key, op))

    def _check_policy(self) -> Op[None]:
        """At the first call with an explicit policy: store it unless the queue has one, and
        refuse to go on if what is stored differs (every process must apply the same)."""
        if self.policy_checked or self.policy is None:
            return
        stored = yield from self.sender.script(QUORUM, "policy", [self.keys.policy],
                                               [self.policy.to_json()], idempotent=True)
        if QueuePolicy.from_json(stored) != self.policy:
            raise ConfigurationError(
                f"queue {self.name!r} has policy {QueuePolicy.from_json(stored)} stored, but "
                f"this process was given {self.policy}; configure every process alike")
        self.policy_checked = True

    def _script(self, operation: str, key: str, name: str, keys: list[str], args: list[Any],
                *, idempotent: bool = True) -> Op[Any]:
        """Script ``name`` on the quorum connection, guarded (see :meth:`guard`)."""
        return self.guard(operation, key, self.sender.script(QUORUM, name, keys, args,
                                                              idempotent=idempotent))

    def _read(self, operation: str, key: str, name: str, keys: list[str],
              args: list[Any]) -> Op[Any]:
        """Read-only script ``name`` on the read connection, guarded."""
        return self.guard(operation, key, self.sender.read_script(name, keys, args))

    def _command(self, operation: str, key: str, role: str, *args: Any) -> Op[Any]:
        """One command on ``role``'s connection, guarded."""
        return self.guard(operation, key, self.sender.command(role, *args))

    # ----------------------------------------------------------------------------- writes

    def _write_one(self, operation: str, name: str, args: list[Any], *,
                   keys: list[str] | None = None, replicate: bool = True,
                   merge: Merge | None = None) -> Op[Any]:
        """The reply of one call of write script ``name`` (keys: the lifecycle keys unless
        given), guarded; with a write quorum (unless not ``replicate``) it is pipelined with
        its WAIT (see :meth:`_write`). Returns the call's own operation, with no generator
        layer of its own: every ack and one-message push runs through here."""
        keys = self._life_keys if keys is None else keys
        if replicate and self.settings.write_quorum:
            return self._one_of(self._write(operation, name, [(keys, args)]))
        return self.guard(operation, keys[0], self.sender.script(
            QUORUM, name, keys, args, idempotent=True, merge=merge))

    @staticmethod
    def _one_of(op: Op[list[Any]]) -> Op[Any]:
        (reply,) = yield from op
        return reply

    def _write(self, operation: str, name: str, calls: list[tuple[list[str], list[Any]]], *,
               replicate: bool = True) -> Op[list[Any]]:
        """Run write script ``name`` once per (keys, args), pipelined, then WAIT for the write
        quorum; the replies in order.

        Claims and unack re-queues pass ``replicate=False``: losing one of them in a failover
        can only cause a redelivery, never a lost message, so they do not pay for WAIT. Every
        write script run here is idempotent (repeating it with the same arguments changes
        nothing more), so Dynomite's error replies are retried (see :meth:`Sender.send`).

        Raises:
            QuorumNotReachedError: fewer replicas than ``write_quorum`` confirmed in time.
            RedisOperationError: Redis failed.
        """
        quorum = self.settings.write_quorum if replicate else 0
        if quorum == 0 and len(calls) == 1:
            keys, args = calls[0]
            return [(yield from self._write_one(operation, name, args, keys=keys,
                                                replicate=False))]
        replies: list[Any] = yield from self.guard(operation, calls[0][0][0], self.sender.write(
            operation, name, calls, quorum))
        return replies

    def _write_pairs(self, operation: str, name: str, head: list[Any],
                     pairs: list[str]) -> Op[list[Any]]:
        """Run write script ``name`` with ARGV ``head`` then [id, receipt, ...] ``pairs``, at
        most :data:`SCRIPT_BATCH` messages a call, all calls pipelined (see :meth:`_write`);
        returns that operation (no generator layer of its own)."""
        step = SCRIPT_BATCH * 2
        return self._write(operation, name, [
            (self._life_keys, [*head, *pairs[i:i + step]]) for i in range(0, len(pairs), step)])
