"""Every Redis key name dynoqueue uses, in one place.

For a queue ``Q`` under prefix ``P`` with shard ``S`` (the dyno-queues v1 layout):

* ``P.MESSAGE.Q``  hash: id -> message JSON
* ``P.QUEUE.Q.S``  zset: waiting ids, score = visibility time in epoch ms + priority / 100
* ``P.UNACK.Q.S``  zset: popped, unacknowledged ids, score = lease expiry in epoch ms

Beside them, with the same hash tag, the lifecycle keys (see :meth:`QueueKeys.lifecycle_keys`)
and the ordering keys: ``P.READY.Q.S`` (strict priority) and ``P.GQ.Q.S``, ``P.GROUPOF.Q``,
``P.GHEAD.Q``, ``P.GSEQ.Q``, ``P.GSWEEP.Q`` (ordered message groups).

With ``hash_tag=True`` (Redis Cluster) the queue name is wrapped in braces, ``P.QUEUE.{Q}.S``, so
every key of one queue hashes to one slot and each Lua script stays single-slot.

The doorbell a waiting pop listens on is a pub/sub channel named like the shard's queue key:
pub/sub channels and keys are separate namespaces, so the name needs no further prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError

# Braces would break Cluster hash tags; whitespace and control characters make keys unreadable.
_FORBIDDEN = re.compile(r"[{}\s\x00-\x1f\x7f]")


def check_name(kind: str, value: object) -> str:
    """Validate a key prefix, queue name or shard name.

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigurationError: (a ValueError) for a non-string, empty string, or one containing
            braces, whitespace or control characters.
    """
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{kind} must be a non-empty str, got {value!r:.80}")
    if _FORBIDDEN.search(value):
        raise ConfigurationError(
            f"{kind} {value!r} must not contain braces, whitespace or control characters"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigurationError(f"{kind} {value!r} is not valid Unicode text") from None
    return value


@dataclass(frozen=True)
class QueueKeys:
    """The key names of one queue over its shards.

    Attributes:
        prefix: the key prefix (dyno-queues' ``redisKeyPrefix``).
        queue: the queue name.
        shards: all shard names, in the order scripts receive them.
        hash_tag: wrap the queue name in a Cluster hash tag.
    """

    prefix: str
    queue: str
    shards: tuple[str, ...]
    hash_tag: bool = False

    def __post_init__(self) -> None:
        check_name("key prefix", self.prefix)
        check_name("queue name", self.queue)
        if not self.shards:
            raise ConfigurationError("a queue needs at least one shard")
        for shard in self.shards:
            check_name("shard name", shard)
        if len(set(self.shards)) != len(self.shards):
            raise ConfigurationError(f"shard names must be unique, got {list(self.shards)}")

    @property
    def _tagged(self) -> str:
        return f"{{{self.queue}}}" if self.hash_tag else self.queue

    @property
    def message_hash(self) -> str:
        """``P.MESSAGE.Q``: the hash of message JSON by id, shared by all shards."""
        return f"{self.prefix}.MESSAGE.{self._tagged}"

    def queue_shard(self, shard: str) -> str:
        """``P.QUEUE.Q.S``: waiting ids of one shard, scored by visibility time."""
        return f"{self.prefix}.QUEUE.{self._tagged}.{shard}"

    def unack_shard(self, shard: str) -> str:
        """``P.UNACK.Q.S``: leased ids of one shard, scored by lease expiry."""
        return f"{self.prefix}.UNACK.{self._tagged}.{shard}"

    def doorbell(self, shard: str) -> str:
        """The pub/sub channel rung when a shard's earliest visibility time moves earlier."""
        return self.queue_shard(shard)

    @property
    def all_queue_shards(self) -> list[str]:
        return [self.queue_shard(s) for s in self.shards]

    @property
    def all_unack_shards(self) -> list[str]:
        return [self.unack_shard(s) for s in self.shards]

    def all_keys(self) -> list[str]:
        """The message hash, then every queue shard, then every unack shard."""
        return [self.message_hash, *self.all_queue_shards, *self.all_unack_shards]

    # Lifecycle keys: additions beside the v1 keys, never inside their formats, so Java v1
    # clients keep working on the queue. Same hash tag, so one script reaches them all.

    def _extra(self, name: str) -> str:
        return f"{self.prefix}.{name}.{self._tagged}"

    @property
    def life(self) -> str:
        """``P.LIFE.Q``: hash id -> lifecycle record (deliveries, receipt, limits, last error);
        made at the first delivery, or at push when the message has limits of its own."""
        return self._extra("LIFE")

    @property
    def policy(self) -> str:
        """``P.POLICY.Q``: string, the queue's QueuePolicy as JSON (every process agrees)."""
        return self._extra("POLICY")

    @property
    def dead(self) -> str:
        """``P.DEAD.Q``: zset of dead-lettered ids, scored by when they died (epoch ms)."""
        return self._extra("DEAD")

    @property
    def dead_info(self) -> str:
        """``P.DEADINFO.Q``: hash id -> the dead letter (message JSON, reason, deliveries)."""
        return self._extra("DEADINFO")

    @property
    def ended(self) -> str:
        """``P.ENDED.Q``: hash id -> a retained ended message (acked, expired, deleted)."""
        return self._extra("ENDED")

    @property
    def ended_at(self) -> str:
        """``P.ENDEDAT.Q``: zset of retained ended ids, scored by when they ended."""
        return self._extra("ENDEDAT")

    @property
    def expiry(self) -> str:
        """``P.EXPIRY.Q``: zset of ids with a TTL, scored by when they expire (epoch ms)."""
        return self._extra("EXPIRY")

    @property
    def sweep_cursor(self) -> str:
        """``P.SWEEP.Q``: string, where the orphan sweep of ``P.LIFE.Q`` goes on (HSCAN)."""
        return self._extra("SWEEP")

    # Ordering keys (docs/semantics.md, "Ordering").

    def ready_shard(self, shard: str) -> str:
        """``P.READY.Q.S``: zset of due waiting ids of a strict-priority queue, scored
        ``priority * 2**42 + due ms`` (exact in a double), so the lowest score is the most
        urgent due message. Never used by queues without strict priority."""
        return f"{self.prefix}.READY.{self._tagged}.{shard}"

    def group_queue_shard(self, shard: str) -> str:
        """``P.GQ.Q.S``: zset (all scores 0, ordered by member bytes) of the grouped messages of
        a shard that wait behind their group's current message. Member: the group's length,
        ``:``, the group, the due ms (16 digits), the push sequence (16 digits), the priority
        (2 digits), the id."""
        return f"{self.prefix}.GQ.{self._tagged}.{shard}"

    @property
    def group_of(self) -> str:
        """``P.GROUPOF.Q``: hash id -> the message's place in its group: due ms (16 digits),
        push sequence (16), shard index (3), priority (2), then the group."""
        return self._extra("GROUPOF")

    @property
    def group_head(self) -> str:
        """``P.GHEAD.Q``: hash group -> the id of its current message, the only one of the group
        in a queue, ready or unack zset (leased there: the group is locked)."""
        return self._extra("GHEAD")

    @property
    def group_seq(self) -> str:
        """``P.GSEQ.Q``: string, the counter that orders grouped messages due in the same ms."""
        return self._extra("GSEQ")

    @property
    def group_sweep_cursor(self) -> str:
        """``P.GSWEEP.Q``: string, where the sweep of ``P.GROUPOF.Q`` goes on (HSCAN)."""
        return self._extra("GSWEEP")

    def lifecycle_keys(self) -> list[str]:
        """What every lifecycle script takes, in this order: message hash, life, policy, dead,
        dead info, ended, ended at, expiry, sweep cursor, group of, group head, group sequence,
        group sweep cursor, then every queue shard, every unack shard, every ready shard, every
        group queue shard (the prelude's ``lifecycle_keys()`` names them)."""
        return [self.message_hash, self.life, self.policy, self.dead, self.dead_info,
                self.ended, self.ended_at, self.expiry, self.sweep_cursor,
                self.group_of, self.group_head, self.group_seq, self.group_sweep_cursor,
                *self.all_queue_shards, *self.all_unack_shards,
                *(self.ready_shard(s) for s in self.shards),
                *(self.group_queue_shard(s) for s in self.shards)]

    def every_key(self) -> list[str]:
        """Every key a queue may have (what ``clear()`` deletes): the v1 keys, then the
        lifecycle and ordering keys."""
        v1 = self.all_keys()
        return [*v1, *(k for k in self.lifecycle_keys() if k not in v1)]


@dataclass(frozen=True)
class StreamKeys:
    """The key names a Spark streaming read (``dynoqueue.spark``) adds to a queue.

    For consumer ``C`` of queue ``Q`` under prefix ``P``:

    * ``P.SPARK.{Q}.C.PENDING``  zset: recorded, not yet acked batch numbers (member = score =
      the number)
    * ``P.SPARK.{Q}.C.LAST``     string: the highest batch number ever recorded
    * ``P.SPARK.{Q}.C.BATCH.n``  list: the claimed messages of batch n (JSON)

    The queue name always carries the Cluster hash tag, also on a server where the queue's own
    keys have none: the names stay the same whatever the deployment, and on Cluster they share
    the slot of the queue's keys (``P.QUEUE.{Q}.S``), so a batch's bookkeeping is one
    MULTI/EXEC.

    Attributes:
        prefix: the queue's key prefix.
        queue: the queue name.
        consumer: the stream query's consumer name (Spark option ``consumerName``).

    Raises:
        ConfigurationError: (a ValueError) a name is empty or has braces, whitespace or
            control characters.
    """

    prefix: str
    queue: str
    consumer: str

    def __post_init__(self) -> None:
        check_name("key prefix", self.prefix)
        check_name("queue name", self.queue)
        check_name("consumer name", self.consumer)

    @property
    def _base(self) -> str:
        return f"{self.prefix}.SPARK.{{{self.queue}}}.{self.consumer}"

    @property
    def pending(self) -> str:
        """``P.SPARK.{Q}.C.PENDING``: zset of the recorded, not yet acked batch numbers."""
        return f"{self._base}.PENDING"

    @property
    def last(self) -> str:
        """``P.SPARK.{Q}.C.LAST``: the highest batch number ever recorded."""
        return f"{self._base}.LAST"

    def batch(self, number: int) -> str:
        """``P.SPARK.{Q}.C.BATCH.n``: list of the claimed messages (JSON) of batch ``number``."""
        return f"{self._base}.BATCH.{number}"
