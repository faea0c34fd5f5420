"""Every Redis key name dynoqueue uses, in one place.

For a queue ``Q`` under prefix ``P`` with shard ``S`` (the dyno-queues v1 layout):

* ``P.MESSAGE.Q``  hash: id -> message JSON
* ``P.QUEUE.Q.S``  zset: waiting ids, score = visibility time in epoch ms + priority / 100
* ``P.UNACK.Q.S``  zset: popped, unacknowledged ids, score = lease expiry in epoch ms

Beside them, with the same hash tag, the lifecycle keys (see :meth:`QueueKeys.lifecycle_keys`)
and the ordering keys: ``P.READY.Q.S`` (strict priority) and ``P.GROUPOF.Q``, ``P.GHEAD.Q``,
``P.GSEQ.Q``, ``P.GSWEEP.Q``, ``P.GWAIT.Q``, the limits' ``P.RATE.Q`` and ``P.LIMITED.Q``, and one
``P.GLINE.Q.G`` per ordered message group
``G`` with messages waiting behind its current one (:meth:`QueueKeys.group_line`: ``G`` is the
group name with every byte but ``0-9 A-Z a-z _ : -`` written ``%XX``, so it has no dot or
brace). The schedules: ``P.SCHED.Q`` (records) and ``P.TICKS.Q`` (ticks queued). The pause
flag: ``P.PAUSED.Q`` (configuration, as the policy: ``clear()`` keeps it). Per prefix,
not per queue: ``P.YOUZAN.INDEX`` (:func:`youzan_index`, ``dynoqueue serve``'s Youzan
protocol) and ``P.SCHEDULED.QUEUES`` (:func:`scheduled_queues`).

With ``hash_tag=True`` (Redis Cluster) the queue name is wrapped in braces, ``P.QUEUE.{Q}.S``, so
every key of one queue hashes to one slot and each Lua script stays single-slot.

Partition ``T`` of a partitioned queue (:mod:`dynoqueue.model.partitions`) is that whole layout
with ``{T}{Q}`` in place of ``Q``: ``P.QUEUE.{3-4ea0}{Q}.S``. Redis hashes a key by its first
braces, so each partition is one slot of its own, whatever the deployment. One partition
(``partitions=1``) keeps the layout above, byte for byte.

The doorbell a waiting pop listens on is a pub/sub channel named like the shard's queue key:
pub/sub channels and keys are separate namespaces, so the name needs no further prefix.

Names never collide: two different (prefix, queue, shard) triples never share a key. ``.`` joins
the parts; call the words between dots *components*. Every key is ``P.R`` where ``R`` starts
with a key word of :data:`KEY_WORDS`. The rules: shard and consumer names have no ``.``
(:func:`check_key_part`); a queue name may have dots (Conductor task names do), but none of its
components is a key word (:func:`check_queue_name`); a prefix may have any (Conductor's is
``<namespace>.<stack>``); no name has braces. Why no two keys coincide: say ``P1.R1 == P2.R2``
with ``P1`` longer, so ``P1 == P2.Y`` where ``Y`` is the first components of ``R2``; the
component after ``Y`` starts ``R1``, so it is a key word. But after ``R2``'s key word come the
queue name's components (no key words), a ``{Q}`` (a brace, not a key word), and last the
dot-free shard, encoded group or suffix, which would leave ``R1`` one component while every ``R``
has at least two. With equal prefixes, ``R1 == R2``: the key word is the same, the sharded (and
per-group) and unsharded key words differ, the shard (or encoded group: the encoding is
one-to-one) is the last component and the queue name (or ``{Q}``, up to its brace) the rest.
A partition's keys hold ``}{`` right after the tag, which no other key holds (no name has a
brace, and ``{Q}`` is followed by a dot or the end); two partitions' keys differ in the tag,
which ends at the first ``}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError

# Braces would break Cluster hash tags; whitespace and control characters make keys unreadable.
_FORBIDDEN = re.compile(r"[{}\s\x00-\x1f\x7f]")
#: What joins the parts of a key name.
SEPARATOR = "."
#: The word after the prefix of every key shape (this module's, ``P.SPARK.{Q}...`` of the Spark
#: streaming read, ``P.YOUZAN.INDEX`` of the HTTP server): no queue name has one between dots.
KEY_WORDS = frozenset({
    "MESSAGE", "QUEUE", "UNACK", "LIFE", "POLICY", "DEAD", "DEADINFO", "ENDED", "ENDEDAT",
    "EXPIRY", "SWEEP", "BORN", "READY", "GROUPOF", "GHEAD", "GSEQ", "GSWEEP", "GLINE", "GWAIT",
    "SPARK", "YOUZAN", "RATE", "LIMITED", "SCHED", "TICKS", "SCHEDULED", "PAUSED"})
#: Bytes a group name keeps in its line's key name (:meth:`QueueKeys.group_line`); any other
#: byte is written ``%XX`` (upper-case hex), as ``group_line()`` in
#: scripts/lib/group_records.lua does.
_LINE_SAFE = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_:-")
#: A partition's hash tag (dynoqueue.model.partitions): the partition, a dash, 4 hex digits.
_PARTITION_TAG = re.compile(r"[0-9]{1,4}-[0-9a-f]{4}")


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


def check_key_part(kind: str, value: object) -> str:
    """Validate a shard or consumer name: one component of key names, the last but one.

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigurationError: (a ValueError) what :func:`check_name` refuses, or a name with
            ``.`` (the key separator: queue ``a`` with shard ``b.c`` would share keys with
            queue ``a.b``'s shard ``c``).
    """
    check_name(kind, value)
    assert isinstance(value, str)
    if SEPARATOR in value:
        raise ConfigurationError(
            f"{kind} {value!r} must not contain {SEPARATOR!r}, the key separator (another "
            f"queue or shard would share its keys); use '-' or '_' instead")
    return value


def check_queue_name(value: object, kind: str = "queue name") -> str:
    """Validate a queue name: dots are allowed (``com.acme.resize``), but no ``.``-separated
    component may be a key word (prefix ``t.UNACK`` with queue ``orders`` would share keys with
    prefix ``t``'s queue ``QUEUE.orders``).

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigurationError: (a ValueError) what :func:`check_name` refuses, or a component of
            the name is one of :data:`KEY_WORDS`.
    """
    check_name(kind, value)
    assert isinstance(value, str)
    words = sorted(KEY_WORDS.intersection(value.split(SEPARATOR)))
    if words:
        raise ConfigurationError(
            f"{kind} {value!r} must not have {words[0]!r} between dots: its keys could be "
            f"another queue's (key words: {', '.join(sorted(KEY_WORDS))})")
    return value


@dataclass(frozen=True)
class QueueKeys:
    """The key names of one queue over its shards.

    Attributes:
        prefix: the key prefix (dyno-queues' ``redisKeyPrefix``).
        queue: the queue name.
        shards: all shard names, in the order scripts receive them.
        hash_tag: wrap the queue name in a Cluster hash tag.
        tag: a partition's hash tag (:func:`dynoqueue.model.partitions.partition_tags`), or
            "" for the one-partition layout.

    Raises:
        ConfigurationError: (a ValueError) a bad prefix (:func:`check_name`), queue name
            (:func:`check_queue_name`) or shard name (:func:`check_key_part`), no shards, or a
            shard named twice.
    """

    prefix: str
    queue: str
    shards: tuple[str, ...]
    hash_tag: bool = False
    tag: str = ""

    def __post_init__(self) -> None:
        if self.tag and not _PARTITION_TAG.fullmatch(self.tag):
            raise ConfigurationError(f"{self.tag!r} is no partition tag")
        check_name("key prefix", self.prefix)
        check_queue_name(self.queue)
        if not self.shards:
            raise ConfigurationError("a queue needs at least one shard")
        for shard in self.shards:
            check_key_part("shard name", shard)
        if len(set(self.shards)) != len(self.shards):
            raise ConfigurationError(f"shard names must be unique, got {list(self.shards)}")

    @property
    def _tagged(self) -> str:
        if self.tag:
            return f"{{{self.tag}}}{{{self.queue}}}"
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
        """``P.LIFE.Q``: hash id -> lifecycle record (deliveries, receipt, last error; records
        of older versions also hold the push-time fields that now live in :attr:`born`); made
        at the first delivery."""
        return self._extra("LIFE")

    @property
    def born(self) -> str:
        """``P.BORN.Q``: hash id -> ``"e:m:t"``, what a message was pushed with: enqueued at
        (epoch ms), its own max deliveries and TTL ms (empty when it has none); written at push
        only for a message with a TTL or limit, gone with the message. Kept apart from
        ``P.LIFE.Q`` so a claim neither reads nor rewrites it."""
        return self._extra("BORN")

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
        """``P.SWEEP.Q``: string, where the orphan sweeps of ``P.LIFE.Q`` and ``P.BORN.Q`` go on
        (their HSCAN cursors, ``life:born``)."""
        return self._extra("SWEEP")

    # Ordering keys (docs/semantics.md, "Ordering").

    def ready_shard(self, shard: str) -> str:
        """``P.READY.Q.S``: zset of due waiting ids of a strict-priority queue, scored
        ``priority * 2**42 + due ms`` (exact in a double), so the lowest score is the most
        urgent due message. Never used by queues without strict priority."""
        return f"{self.prefix}.READY.{self._tagged}.{shard}"

    @property
    def group_line_base(self) -> str:
        """``P.GLINE.Q``: what every group line's key name starts with (scripts take it and add
        the encoded group); never a key itself."""
        return self._extra("GLINE")

    def group_line(self, group: str) -> str:
        """``P.GLINE.Q.G``: zset of the messages of ordered group ``group`` that wait behind
        its current one (all in the group's shard), scored by due ms (0..10**16 - 1); member:
        the push sequence (16 digits), the priority (2 digits), the id: the earliest due, then
        the first pushed, comes first. An ack does not touch it (the group moves on to the
        successor in ``group_of``): the members up to the current message's own member, when
        that is there, were delivered already (stale); the next push into the group cuts them
        off, and the group's last ack deletes the key.

        ``G`` is ``group``'s UTF-8 bytes with every byte but ``0-9 A-Z a-z _ : -`` written
        ``%XX`` (upper-case hex): one-to-one, and never a dot or brace, so the key keeps the
        queue's hash tag first (Cluster: the slot of the queue's other keys) and the key
        names of different queues stay apart (see the module docstring)."""
        enc = "".join(chr(b) if b in _LINE_SAFE else f"%{b:02X}" for b in group.encode())
        return f"{self.group_line_base}.{enc}"

    @property
    def group_waiting(self) -> str:
        """``P.GWAIT.Q``: hash shard index (1-based, as text) -> how many grouped messages of
        that shard wait in group lines (behind their group's current message), for sizes; a
        field goes when its count drops to 0."""
        return self._extra("GWAIT")

    @property
    def group_of(self) -> str:
        """``P.GROUPOF.Q``: hash id -> the message's place in its group: due ms (16 digits),
        push sequence (16), shard index (3), priority (2), the group, then byte 255 and the
        successor, the message delivered after it (due ms (16), ``.``, priority (2), sequence
        (16), id), or nothing after the byte for the group's last one. Byte 255 is in no UTF-8
        text, so read these records as bytes; one without it (an earlier version's) has no
        successor, and the next message is looked up in the line."""
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

    @property
    def rate(self) -> str:
        """``P.RATE.Q``: zset of the deliveries started in the rate limit's window (member id
        and claim ms, score claim ms), for ``QueuePolicy.rate_limit``."""
        return self._extra("RATE")

    @property
    def limited(self) -> str:
        """``P.LIMITED.Q``: how many claims the queue's limits held back while a message was
        due (a counter the claim scripts increment; stats and the dashboard show it)."""
        return self._extra("LIMITED")

    @property
    def schedules(self) -> str:
        """``P.SCHED.Q``: hash schedule id -> its record (:mod:`dynoqueue.model.schedules`);
        kept in the queue's one-partition slot."""
        return self._extra("SCHED")

    @property
    def ticks(self) -> str:
        """``P.TICKS.Q``: zset of the tick messages a schedule pass queued here (member the
        message id, score the tick ms), so that a pass repeated after a crash queues none of
        them twice; trimmed as the schedules move on."""
        return self._extra("TICKS")

    @property
    def paused(self) -> str:
        """``P.PAUSED.Q``: string, present while the queue is paused (``DynoQueue.pause()``):
        the claim scripts then lease nothing. Configuration, like the policy: ``clear()``
        keeps it; on a partitioned queue every partition has its own."""
        return self._extra("PAUSED")

    def lifecycle_keys(self) -> list[str]:
        """What every lifecycle script takes, in this order: message hash, life, policy, dead,
        dead info, ended, ended at, expiry, sweep cursor, group of, group head, group sequence,
        group sweep cursor, born, group line base (a name, not a key), group waiting counts,
        then every queue shard, every unack shard, every ready shard, and last the rate log,
        the limited counter and the pause flag (the prelude's ``lifecycle_keys()`` names
        them). The group
        lines are not among them: scripts name them from the base (same hash tag, so same
        Cluster slot)."""
        return [self.message_hash, self.life, self.policy, self.dead, self.dead_info,
                self.ended, self.ended_at, self.expiry, self.sweep_cursor,
                self.group_of, self.group_head, self.group_seq, self.group_sweep_cursor,
                self.born, self.group_line_base, self.group_waiting,
                *self.all_queue_shards, *self.all_unack_shards,
                *(self.ready_shard(s) for s in self.shards), self.rate, self.limited,
                self.paused]

    def every_key(self) -> list[str]:
        """Every fixed key a queue may have: the v1 keys, then the lifecycle and ordering keys.
        Not the pause flag (:attr:`paused`: configuration, which ``clear()`` keeps), nor the
        group lines
        (:meth:`group_line`), which depend on the groups: ``clear()`` deletes the line of
        every group in ``P.GHEAD.Q`` too (a group with a line always has a current
        message)."""
        v1 = self.all_keys()
        return [*v1, *(k for k in self.lifecycle_keys()
                       if k not in v1 and k not in (self.group_line_base, self.paused))]


def youzan_index(prefix: str) -> str:
    """``P.YOUZAN.INDEX``: hash job id -> its topic and TTR, the index ``dynoqueue serve``'s
    Youzan protocol keeps beside the queues of prefix ``P`` (Youzan's calls name a job by id
    only).

    Raises:
        ConfigurationError: (a ValueError) a prefix :func:`check_name` refuses.
    """
    return f"{check_name('key prefix', prefix)}.YOUZAN.INDEX"


def scheduled_queues(prefix: str) -> str:
    """``P.SCHEDULED.QUEUES``: set of the queue names of prefix ``P`` that have schedules, which
    every factory's schedule pass covers.

    Raises:
        ConfigurationError: (a ValueError) a prefix :func:`check_name` refuses.
    """
    return f"{check_name('key prefix', prefix)}.SCHEDULED.QUEUES"


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
            control characters; a consumer name has ``.``; a queue name has a key word
            between dots (:func:`check_queue_name`).
    """

    prefix: str
    queue: str
    consumer: str

    def __post_init__(self) -> None:
        check_name("key prefix", self.prefix)
        check_queue_name(self.queue)
        check_key_part("consumer name", self.consumer)

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


@dataclass(frozen=True)
class PrefixKeys:
    """The key names one key prefix shares across its queues (no hash tag: one key each, so
    no script touches them together with a queue's keys).

    * ``P.QUEUES``  set: the name of every queue dynoqueue has pushed to or served under ``P``
      (the unack reprocessor's list of queues; Java v1 clients do not write it)
    * ``P.ZONES``   hash: shard -> the epoch ms a factory whose local shard it is last beat
      (for a configured shard that never beat: when a beat of another shard first saw it missing)

    Attributes:
        prefix: the key prefix.

    Raises:
        ConfigurationError: (a ValueError) a bad prefix.
    """

    prefix: str

    def __post_init__(self) -> None:
        check_name("key prefix", self.prefix)

    @property
    def queues(self) -> str:
        """``P.QUEUES``: set of the queue names known under the prefix."""
        return f"{self.prefix}.QUEUES"

    @property
    def zones(self) -> str:
        """``P.ZONES``: hash shard -> last heartbeat of a factory of that shard, epoch ms."""
        return f"{self.prefix}.ZONES"
