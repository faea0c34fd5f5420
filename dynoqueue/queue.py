"""DynoQueue: one named queue spread over all shards, with the dyno-queues operations (sync API).

A thin façade: each call runs one operation of :class:`dynoqueue.core.queue.QueueCore` on the
sync driver, which blocks the calling thread. :class:`dynoqueue.asyncio.DynoQueue` runs the same
operations on asyncio. Every state change is one Lua script run on the quorum connection, so a
crash between two round trips can never leave a half-moved message. Cheap reads (peek, size,
shard sizes, local_get, scans) go to the non-quorum connection, usually the local zone's replica.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from .core.facade import QueueBase
from .core.layout import AnyCore
from .core.requests import Run
from .io.sync import SyncDriver
from .model.message import Message
from .model.policy import QueuePolicy
from .model.schedules import Schedule
from .model.states import DeadLetter, MessageInfo, MessageState

T = TypeVar("T")

# Longer than the ~500-line house limit on purpose: three quarters of it are the public
# docstrings the API reference is built from; the code is one-line delegations to the core.


class DynoQueue(QueueBase):
    """One named queue over all shards. Mirrors dyno-queues' ``DynoQueue`` / ``RedisDynoQueue``.

    Get instances from :meth:`dynoqueue.RedisQueues.get`, which wires the connections, shards
    and settings; the constructor is not part of the stable API.

    Thread-safe: one instance may be shared by producer and consumer threads.

    Attributes:
        name (str): the queue name.
        unack_timeout_ms (int): the lease a pop takes on each message, in milliseconds.
        shards (list[str]): all shard names.
        local_shard (str): the shard pops and peeks act on.
    """

    def __init__(self, core: AnyCore, driver: SyncDriver) -> None:
        super().__init__(core)
        self._run_op = driver.run
        self._driver = driver

    def _run(self, op: Run[T]) -> T:
        return self._run_op(op)

    def push(self, messages: Iterable[Message], *, if_exists: str = "replace") -> list[str]:
        """Store messages and make each wait in the shard the sharding strategy picks.

        Each message becomes visible ``message.timeout`` ms after the push (or at its
        ``due_at_ms``); all messages of one call share one "now" (the Redis server's clock
        unless a clock was injected; on a partitioned queue, those of one partition). A
        message's ``max_deliveries``/``ttl_ms`` override the
        queue policy for it. A message with a ``group`` goes to its group's shard (CRC32 of the
        group, not the sharding strategy) and waits behind the group's current message (see
        ``docs/semantics.md``, "Ordering"). Mirrors ``push`` (Camellia ``sendMsg``, Youzan
        ``add``).

        Args:
            messages: the messages (a list, tuple or other iterable of :class:`Message`).
            if_exists: ``"replace"`` (dyno-queues): pushing an id that exists replaces its
                payload and moves it (it then waits in exactly one shard, is no longer leased,
                and its delivery count starts again). ``"keep"``: the first wins while the id
                is waiting, leased, retained as ended or dead-lettered (Camellia's msgId dedup,
                RMQ's merged duplicates), atomically even when producers race.

        Returns:
            The ids actually pushed, in input order.

        Raises:
            InvalidMessageError: (a ValueError) an element is not a valid Message, or its payload
                is over ``max_payload_bytes`` (PayloadTooLargeError). Nothing of the batch is
                written.
            InvalidArgumentError: if_exists is not "replace" or "keep".
            ConfigurationError: the sharding strategy returned an unknown shard, or the queue's
                stored policy differs from this process's; nothing written.
            QuorumNotReachedError: fewer replicas than ``write_quorum`` confirmed in time; the
                messages are stored on the primary (retrying with the same ids is safe).
            RedisOperationError: Redis failed. A batch larger than SCRIPT_BATCH may then be
                partly stored; pushing it again is safe.
        """
        return self._run(self._core.push(messages, if_exists))

    def ensure(self, message: Message) -> bool:
        """Push ``message`` only if its id is neither waiting nor leased, atomically.

        Mirrors ``ensure`` (which was a non-atomic check-then-push in dyno-queues).

        Returns:
            True if pushed, False if the id was already present (nothing changed).

        Raises:
            InvalidMessageError, ConfigurationError, QuorumNotReachedError, RedisOperationError:
                as for :meth:`push`.
        """
        return self._run(self._core.ensure(message))

    def pop(self, count: int, wait_ms: int = 0, *, lease_ms: int | None = None,
            min_count: int | None = None) -> list[Message]:
        """Lease up to ``count`` due messages from the local shard, oldest visibility first (with
        the policy's ``strict_priority``: the lowest priority number first, then the oldest).
        Of an ordered group only its current message is deliverable, and only while no other
        message of the group is leased. Once the local shard has none due, the orphaned shards
        this factory adopts (zones without a live factory for ``orphan_shard_grace_ms``) are
        drained too, local first (docs/semantics.md, "Zone loss").

        Each returned message is moved to the unack set with a lease of ``unack_timeout_ms``;
        ack it within the lease, extend it with :meth:`set_unack_timeout`, or it is delivered
        again once the unack reprocessor runs (at-least-once). The claim is one script that
        re-checks visibility, so a message is never returned early nor to two consumers while
        its lease holds. Returns early once ``min_count`` (default ``count``) messages are
        leased; messages that arrive or fall due while waiting are included. Waiting sends no
        commands except when a doorbell rings, a message falls due, or every
        ``poll_interval_ms``. Each delivery is counted: a message at its queue's (or its own)
        ``max_deliveries`` is dead-lettered when that lease ends without ack. Mirrors ``pop``
        (Camellia ``pullMsg``/``longPollingMsg``, Youzan ``pop``, SQS ``ReceiveMessage``).

        Args:
            count: most messages to return, >= 0 (0 returns [] at once).
            wait_ms: longest wait in milliseconds, >= 0. Keep it well below the lease: the
                leases of messages claimed early in a long wait run while the pop still waits.
            lease_ms: this call's lease in ms, >= 1, instead of ``unack_timeout_ms``
                (Camellia's ackTimeoutMillis, Youzan's TTR).
            min_count: return as soon as this many are leased, 1..``count`` (default
                ``count``: dyno-queues fills the batch); 1 returns as soon as anything is due
                (SQS long-poll semantics).

        Returns:
            The leased messages, each with ``shard``, ``deliveries`` and ``receipt`` set; [] if
            none was due in time. A stored message that cannot be decoded is dead-lettered
            ("undecodable") and the rest are returned.

        Raises:
            InvalidArgumentError: count, wait_ms, lease_ms or min_count out of range
                (``min_count`` above a ``count`` >= 1 included), before anything is sent.
            QueueClosedError: the queue was closed.
            CallTimeoutError: Redis did not answer within ``wait_ms`` plus the factory's
                ``call_timeout_ms`` (messages already leased by then are returned instead).
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.pop("pop", False, count, wait_ms, lease_ms, min_count))

    def bulk_pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        """Same as :meth:`pop` (every pop claims in batches in one script). Mirrors ``bulkPop``."""
        return self._run(self._core.pop("bulk_pop", False, count, wait_ms))

    def unsafe_pop_all_shards(self, count: int, wait_ms: int = 0, *, lease_ms: int | None = None,
                              min_count: int | None = None) -> list[Message]:
        """Like :meth:`pop`, over every shard: the local one first, then the others in order.

        "Unsafe" as in dyno-queues: it takes work queued for other zones. The leases live in
        each message's own shard, so the unack reprocessor of that shard's zone puts back
        what is not acked. Mirrors ``unsafePopAllShards``.
        """
        return self._run(self._core.pop("unsafe_pop_all_shards", True, count, wait_ms,
                                        lease_ms, min_count))

    def unsafe_bulk_pop(self, count: int, wait_ms: int = 0) -> list[Message]:
        """Same as :meth:`unsafe_pop_all_shards`. Mirrors ``unsafeBulkPop``."""
        return self._run(self._core.pop("unsafe_bulk_pop", True, count, wait_ms))

    def pop_with_msg_id(self, id: str) -> Message | None:
        """Lease one message by id if it waits in the local shard and is due.

        Mirrors ``popWithMsgId``, but respects the visibility time (dyno-queues did not).

        Returns:
            The leased message, or None if it is not waiting locally or not yet due.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.claim_id("pop_with_msg_id", id, False))

    def unsafe_pop_with_msg_id_all_shards(self, id: str) -> Message | None:
        """Like :meth:`pop_with_msg_id`, searching every shard (local first).

        Mirrors ``unsafePopWithMsgIdAllShards``.
        """
        return self._run(self._core.claim_id("unsafe_pop_with_msg_id_all_shards", id, True))

    def pop_msg_with_predicate(self, pattern: str, local_only: bool = False) -> Message | None:
        """Lease the earliest due message whose stored JSON matches a Lua pattern.

        Mirrors ``popMsgWithPredicate``, except that the returned message carries its real
        payload (dyno-queues returned the whole stored JSON as payload). Scans due messages:
        meant for administration, not the hot path. The pattern is matched in Python
        (:mod:`dynoqueue.model.luapattern`, Lua 5.1's rules) over pages of due messages, so it
        never blocks Redis; the match is then claimed by id if still due and unchanged.

        Args:
            pattern: a Lua pattern (``string.match``) matched against the message JSON,
                e.g. ``'"payload":"order%-42"'``; at most 512 UTF-8 bytes.
            local_only: search only the local shard instead of all shards.

        Returns:
            The leased message, or None if no due message matches.

        Raises:
            InvalidPatternError: (a ValueError) the pattern is empty, not valid Unicode text,
                too long or malformed, or needs more than 2,000,000 matching steps on one
                message (:class:`~dynoqueue.model.luapattern.PatternTooCostlyError`).
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.claim_match(pattern, local_only))

    def ack(self, id: str, *, receipt: str | None = None) -> bool:
        """End the lease of a popped message; it leaves the queue (kept queryable as ACKED
        during the policy's retention). Mirrors ``ack`` (Camellia ``ackMsg``, Youzan
        ``finish``, SQS ``DeleteMessage``).

        Args:
            id: the message id.
            receipt: the popped message's ``receipt``: ack only that lease (False if the
                message was delivered again since). None: any lease of the id (dyno-queues).

        Returns:
            True if the message was leased (by that receipt) and is now gone; False if it was
            not leased (never popped, already acked or removed, or put back after its lease
            expired).

        Raises:
            InvalidArgumentError: id is not a non-empty str, or a bad receipt.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.ack(id, receipt))

    def nack(self, id: str, delay_ms: int = 0, *, error: str | None = None,
             receipt: str | None = None) -> bool:
        """End a lease now instead of waiting for it to expire: the message is due again after
        ``delay_ms`` (retry with back-off), or dead-lettered (reason "max_deliveries") if this
        was its last allowed delivery. Mirrors SQS ``ChangeMessageVisibility(0)`` with a
        receive count, RMQ's retry with a delay level.

        Args:
            id: the message id.
            delay_ms: how long until it is due again, ms, >= 0.
            error: why it failed, recorded as ``last_error`` (kept up to 4096 chars).
            receipt: act only on that lease (see :meth:`ack`).

        Returns:
            True if the lease was ended; False if the message was not leased (by that receipt).

        Raises:
            InvalidArgumentError: a bad id, delay_ms, error or receipt.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.nack(id, delay_ms, error, receipt))

    def nack_many(self, ids: Iterable[str | Message], delay_ms: int = 0, *,
                  error: str | None = None) -> int:
        """:meth:`nack` for many messages in as few round trips as possible.

        Args:
            ids: message ids, or popped Message objects (then only each one's own lease).
            delay_ms: ms until they are due again, >= 0.
            error: recorded as each one's ``last_error``.

        Returns:
            How many leases were ended (due again or dead-lettered).

        Raises:
            InvalidArgumentError: a bad element, delay_ms or error; nothing is nacked.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.nack_many(ids, delay_ms, error))

    def release(self, ids: Iterable[str | Message]) -> int:
        """Give leases back uncounted: each message is due again at once, as if this delivery
        had not happened (its delivery count goes back down), for work a consumer never
        started, e.g. a Worker shutting down. Use :meth:`nack` for work that failed.

        Args:
            ids: message ids, or popped Message objects (then only each one's own lease).

        Returns:
            How many were given back.

        Raises:
            InvalidArgumentError: a bad element; nothing is released.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.release(ids))

    def dead_letter(self, id: str, reason: str = "dead_letter_now", *, error: str | None = None,
                    receipt: str | None = None) -> bool:
        """Dead-letter a leased message at once, whatever its delivery count (the Worker's
        ``DeadLetterNow``; SQS has no twin: there it takes maxReceiveCount receives).

        Args:
            id: the message id.
            reason: recorded as the dead letter's reason (up to 200 chars).
            error: recorded as its ``last_error``.
            receipt: act only on that lease (see :meth:`ack`).

        Returns:
            True if it was leased (by that receipt) and is now a dead letter; False also when
            its payload was gone (evicted): it became a dead letter ``payload-missing``.

        Raises:
            InvalidArgumentError: a bad id, reason, error or receipt.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.dead_letter(id, reason, error, receipt))

    def ack_many(self, ids: Iterable[str | Message]) -> int:
        """Ack many messages in as few round trips as possible. Mirrors ``ack(List<Message>)``.

        Args:
            ids: message ids, or popped Message objects (then only the lease of each one's
                ``receipt`` is acked).

        Returns:
            How many were leased and are now gone.

        Raises:
            InvalidArgumentError: an element is not a non-empty str or a Message; nothing acked.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.ack_many(ids))

    def set_unack_timeout(self, id: str, timeout_ms: int, *,
                          receipt: str | None = None) -> bool:
        """Set a leased message's lease to expire ``timeout_ms`` from now (extend or shorten).

        0 makes it eligible for the next unack processing run. ``receipt`` acts only on that
        lease (see :meth:`ack`). Mirrors ``setUnackTimeout`` (SQS ChangeMessageVisibility).

        Returns:
            True if the message is leased (and its lease was set), else False.

        Raises:
            InvalidArgumentError: bad id, or timeout_ms not an int >= 0.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.set_lease(
            "set_unack_timeout", id, timeout_ms, only_if_shorter=False, receipt=receipt))

    def set_unack_timeout_if_shorter(self, id: str, timeout_ms: int, *,
                                     receipt: str | None = None) -> bool:
        """Like :meth:`set_unack_timeout`, but only if that brings the expiry earlier.

        Mirrors Conductor's ``setUnackTimeoutIfShorter``.

        Returns:
            True if the lease was shortened; False if not leased or not shortened.
        """
        return self._run(self._core.set_lease(
            "set_unack_timeout_if_shorter", id, timeout_ms, only_if_shorter=True,
            receipt=receipt))

    def set_unack_timeout_many(self, ids: Iterable[str | Message], timeout_ms: int) -> int:
        """:meth:`set_unack_timeout` for many leases in one round trip (the Worker's heartbeat).

        Args:
            ids: message ids, or popped Message objects (then only each one's own lease).
            timeout_ms: each lease expires this many ms from now, >= 0.

        Returns:
            How many leases were set.

        Raises:
            InvalidArgumentError: a bad element or timeout_ms; nothing is changed.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.set_lease_many(ids, timeout_ms))

    def postpone(self, id: str, delay_ms: int, *, priority: int | None = None) -> bool:
        """Make a message waiting again, due ``delay_ms`` from now, with a new priority (kept
        when None), in one atomic step whether it was waiting or leased: its lease, if any,
        ends; its delivery count is kept. Mirrors Conductor's ``QueueDAO.postpone`` (a remove
        and a push there, so a crash between them lost the message).

        Returns:
            True if the message was waiting or leased, else False.

        Raises:
            InvalidArgumentError: a bad id, delay_ms or priority.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.postpone(id, delay_ms, priority))

    def set_timeout(self, id: str, timeout_ms: int) -> bool:
        """Make a waiting message due ``timeout_ms`` from now, keeping its priority.

        Also records the new delay in the stored message. A leased message is not changed.
        Mirrors ``setTimeout`` (without its bug of dropping the priority fraction).

        Returns:
            True if the message was waiting and was updated, else False.

        Raises:
            InvalidArgumentError: bad id, or timeout_ms not an int >= 0.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.set_timeout(id, timeout_ms))

    def remove(self, id: str) -> bool:
        """Delete a message wherever it is, waiting or leased, with its payload.

        One script, so it is also :meth:`atomic_remove`. Mirrors ``remove`` (fixing its leak of
        leased messages' payloads).

        Returns:
            True if anything was removed, False if the id was unknown.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.remove(id))

    def atomic_remove(self, id: str) -> bool:
        """Same as :meth:`remove`. Mirrors ``atomicRemove``."""
        return self._run(self._core.remove(id))

    def peek(self, count: int) -> list[Message]:
        """Read up to ``count`` due messages of the local shard without leasing them.

        Reads through the non-quorum connection (a replica may lag behind the primary).
        Mirrors ``peek``.

        Returns:
            Due messages in visibility order, each with ``shard`` set.

        Raises:
            InvalidArgumentError: count is not an int >= 0.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.peek("peek", False, count))

    def unsafe_peek_all_shards(self, count: int) -> list[Message]:
        """Like :meth:`peek` over every shard (local first); never more than ``count``.

        Mirrors ``unsafePeekAllShards`` (which could return more than asked).
        """
        return self._run(self._core.peek("unsafe_peek_all_shards", True, count))

    def contains(self, id: str) -> bool:
        """Whether a message is stored (waiting or leased), read on the quorum connection.

        Returns:
            True if the id is in the queue.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.contains(id))

    def get(self, id: str) -> Message | None:
        """The stored message (waiting or leased), read on the quorum connection. Mirrors ``get``.

        Returns:
            The message, or None if absent.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.get("get", id, False))

    def local_get(self, id: str) -> Message | None:
        """Like :meth:`get`, read on the non-quorum (local replica) connection.

        Mirrors ``localGet``.
        """
        return self._run(self._core.get("local_get", id, True))

    def get_all_messages(self) -> list[Message]:
        """Every stored message, waiting or leased, read with HSCAN on the non-quorum connection.

        Mirrors ``getAllMessages``, with real payloads. Best effort while the queue changes.

        Returns:
            The messages, in no particular order.

        Raises:
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.get_all_messages())

    def contains_predicate(self, pattern: str, local_only: bool = False) -> bool:
        """Whether a stored message's JSON matches a Lua pattern. Mirrors ``containsPredicate``.

        Args and Raises: as :meth:`get_msg_with_predicate`.
        """
        return self._run(self._core.contains_match(pattern, local_only))

    def get_msg_with_predicate(self, pattern: str, local_only: bool = False) -> str | None:
        """The id of the first stored message whose JSON matches a Lua pattern.

        Scans the whole message hash on the non-quorum connection in the worst case, a page
        (HSCAN) at a time, matching in Python: Redis is never blocked by a pattern.
        Mirrors ``getMsgWithPredicate``.

        Args:
            pattern: a Lua pattern, as for :meth:`pop_msg_with_predicate`.
            local_only: only messages waiting in the local shard.

        Returns:
            A matching id, or None.

        Raises:
            InvalidPatternError: the pattern is bad or too costly, as for
                :meth:`pop_msg_with_predicate`.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.find_match(pattern, local_only))

    def size(self) -> int:
        """Waiting messages over all shards (leased ones not counted). Mirrors ``size``.

        Reads through the non-quorum connection.
        """
        return self._run(self._core.size())

    def shard_sizes(self) -> dict[str, dict[str, int]]:
        """Per shard: waiting and leased counts. Mirrors ``shardSizes``.

        Returns:
            ``{shard: {"size": waiting, "uacked": leased}}`` (dyno-queues' spelling "uacked").
        """
        return self._run(self._core.shard_sizes())

    def find_stale_messages(self) -> list[Message]:
        """Ids waiting in some shard whose payload is gone and that are not leased.

        Checks the earliest STALE_CHECK_LIMIT ids of each shard; reports, never deletes
        (a pop drops such ids by itself). Mirrors ``findStaleMessages``.

        Returns:
            Messages with only ``id`` (and ``shard``) set.
        """
        return self._run(self._core.find_stale_messages())

    def process_unacks(self) -> int:
        """Put back messages of the local shard whose lease expired, so they are delivered again
        (and of the orphaned shards the factory adopts, at most 2 000 per shard and call).

        Each is due at its lease expiry plus its priority fraction (so at once, oldest first).
        Leased ids whose payload is gone are dropped. Runs as many batches as needed. The unack
        reprocessor thread calls this for every queue. Mirrors ``processUnacks`` (which is
        atomic here, so it is also ``atomicProcessUnacks``).

        Returns:
            How many messages were put back.

        Raises:
            RedisOperationError: Redis failed (the reprocessor thread logs it and carries on).
        """
        return self._run(self._core.process_unacks())

    def atomic_process_unacks(self) -> int:
        """Same as :meth:`process_unacks`. Mirrors ``atomicProcessUnacks``."""
        return self._run(self._core.process_unacks())

    def clear(self) -> None:
        """Delete every message of the queue, waiting, leased or dead, in all shards, with its
        lifecycle data. The stored policy stays: it is the queue's configuration, as SQS's
        PurgeQueue keeps the queue's attributes (:meth:`delete_policy` removes it). Mirrors
        ``clear``.

        Raises:
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.clear())

    def state(self, id: str) -> MessageState | None:
        """Where a message is in its lifecycle: DELAYED, READY, LEASED, or, during the
        policy's retention, ACKED, EXPIRED, DELETED; DEAD while it is a dead letter. Mirrors
        Camellia ``getMsg``'s status.

        Returns:
            The state (``.code`` is Camellia's 1..7), or None if unknown or its retention ended.

        Raises:
            InvalidArgumentError: id is not a non-empty str.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.state(id))

    def info(self, id: str) -> MessageInfo | None:
        """Everything known about one message: state, shard, priority, payload, deliveries,
        max deliveries, enqueued / due / lease expiry / TTL expiry / end times (epoch ms) and the
        last nack error. Mirrors Camellia ``getMsg``.

        Returns:
            A :class:`MessageInfo`, or None if unknown or its retention ended.

        Raises:
            InvalidArgumentError, RedisOperationError: as for :meth:`state`.
        """
        return self._run(self._core.info(id))

    def group_info(self, group: str) -> dict[str, Any]:
        """Where an ordered message group stands (see :class:`Message`'s ``group``), for
        operators. Mirrors nothing in dyno-queues; SQS FIFO and RMQ show no such view.

        Args:
            group: the group, a non-empty str.

        Returns:
            ``{"waiting": int, "leased": str | None, "next_due_ms": int | None, "shard": str}``:
            how many of the group's messages wait (not leased); the id of its leased message
            (at most one), or None; the due time (epoch ms) of the message it delivers next:
            the waiting current one, or, while one is leased, the first behind it (deliverable
            once the leased one is acked, dead-lettered or removed); None when nothing waits;
            the shard the group's messages live in (for a group without messages: the one its
            first message would go to).

        Raises:
            InvalidArgumentError: group is not a non-empty str.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.group_info(group))

    def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest dead letters, oldest first (kept ``dead_letter_retention_ms``).

        Args:
            count: most to return, >= 0.

        Returns:
            :class:`DeadLetter` items: message, reason ("max_deliveries", "ttl",
            "undecodable", "payload-missing": found without payload, e.g. evicted; its
            message has payload None and cannot be redriven, or the one given to
            :meth:`dead_letter`), deliveries, last_error, died_at_ms.

        Raises:
            InvalidArgumentError: count is not an int >= 0.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.dead_letters(count))

    def dead_size(self) -> int:
        """How many dead letters the queue holds (``size()`` counts waiting messages only)."""
        return self._run(self._core.dead_size())

    def redrive(self, ids: Iterable[str] | None = None, *, delay_ms: int = 0) -> int:
        """Put dead letters back to waiting, their delivery count reset, each in the shard it
        died in, due after ``delay_ms``. Mirrors SQS's dead-letter redrive.

        Args:
            ids: which dead letters; None: all of them (in batches, oldest first).
            delay_ms: ms until they are due, >= 0.

        Returns:
            How many were put back (ids that are not dead letters are skipped).

        Raises:
            InvalidArgumentError: a bad id or delay_ms.
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.redrive(ids, delay_ms))

    def purge_dead(self) -> int:
        """Delete every dead letter for good (the stored policy stays). Mirrors nothing in
        dyno-queues; SQS has PurgeQueue on the dead-letter queue.

        Returns:
            How many were deleted.

        Raises:
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.purge_dead())

    def stored_policy(self) -> QueuePolicy | None:
        """The policy the queue has stored in Redis (what every process's scripts apply).

        Returns:
            The stored :class:`QueuePolicy`, or None when none is stored yet (dyno-queues'
            behaviour applies: no delivery limit, TTL or retention).

        Raises:
            ConfigurationError: the stored policy is unreadable.
            RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.stored_policy())

    def delete_policy(self) -> bool:
        """Delete the queue's stored policy, its configuration (:meth:`clear` and
        :meth:`purge_dead` keep it): from their next call every process's scripts apply none,
        dyno-queues' behaviour (no delivery limit, TTL, retention or limits). A process that
        was given a policy stores it again at its next call, as at its first: give every
        process none, then delete. Mirrors the attributes' part of SQS's DeleteQueue.

        Returns:
            True if a policy was stored and is deleted, False if none was stored.

        Raises:
            ConfigurationError: the stored policy decides where messages wait
                (``strict_priority`` or ``partitions`` > 1) and the queue still holds
                messages or dead letters: :meth:`clear` or drain it first (nothing changed).
            QueueClosedError: the factory was closed.
            RedisOperationError: Redis failed.
        """
        return self._run(self._core.delete_policy())

    def set_policy(self, policy: QueuePolicy) -> QueuePolicy | None:
        """Replace the queue's stored policy, atomically, on a live queue: every process's
        next call applies it, no restart needed (their scripts read the stored policy). What
        it does to messages already there (docs/semantics.md, "Changing a stored policy"):
        ``max_deliveries`` counts at each lease's end, so leased and waiting messages get the
        new limit (a message's own ``max_deliveries`` still wins); a TTL is set at push, so
        ``message_ttl_ms`` applies to messages pushed after the change; ``retention_ms`` to
        messages that end after it; ``dead_letter_retention_ms`` to every dead letter at the
        next sweep; dead letters stay dead (``redrive`` them). Processes started later must be
        given the new policy (or none): a different one gets ConfigurationError at its first
        call, as always. Mirrors SQS's SetQueueAttributes (maxReceiveCount, retention).

        Args:
            policy: the new :class:`QueuePolicy`; its ``strict_priority`` must be the stored
                one's (the ordering mode cannot change on a live queue).

        Returns:
            The policy stored before, or None when there was none.

        Raises:
            InvalidArgumentError: ``policy`` is not a QueuePolicy.
            ConfigurationError: ``strict_priority`` differs from the stored one (nothing is
                changed).
            QuorumNotReachedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.set_policy(policy))

    def pause(self) -> bool:
        """Pause the queue: from now on no pop or claim of any process leases a message
        (waiting pops wait on, within their wait); pushes, acks, lease changes and reads go
        on. Stored in Redis (``P.PAUSED.Q``), so it holds for every process, survives
        :meth:`clear` and restarts, and on a partitioned queue pauses every partition.
        Mirrors bullmq's ``Queue.pause()``.

        Returns:
            True if the queue was running, False if it was paused already.

        Raises:
            QueueClosedError: the queue or its factory was closed.
            RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.pause())

    def resume(self) -> bool:
        """Let a paused queue deliver again; waiting pops are woken at once (the doorbells
        ring). Mirrors bullmq's ``Queue.resume()``.

        Returns:
            True if the queue was paused, False if it was running already.

        Raises:
            QueueClosedError: the queue or its factory was closed.
            RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.resume())

    def is_paused(self) -> bool:
        """Whether the queue is paused (:meth:`pause`). Mirrors bullmq's
        ``Queue.isPaused()``.

        Returns:
            True while the queue is paused.

        Raises:
            RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.is_paused())

    def schedule(self, schedule_id: str, *, payload: str | None = None, cron: str | None = None,
                 every_ms: int | None = None, timezone: str = "UTC", priority: int = 0,
                 catch_up: str = "once", start_at_ms: int | None = None) -> Schedule:
        """Create or replace (upsert) a recurring message of this queue: each tick ``t`` (epoch
        ms) becomes one message, id ``f"{schedule_id}@{t}"``, with ``payload`` and
        ``priority``, due at ``t``. Sent once per tick (docs/semantics.md, "Schedules"): at
        most the next two ticks not due yet are queued; the pop that claims a tick queues the
        schedule's next one, and the reprocessors' passes (any number, in any zones) queue
        the first ticks and those no claim chained. A replaced schedule's ticks not due yet
        are removed. Mirrors bullmq's ``upsertJobScheduler``.

        Args:
            schedule_id: the schedule's name: a message id without ``@``.
            payload: each tick's payload (str or None).
            cron: a 5-field cron expression (minute hour day month weekday) or a nickname
                (``@hourly``, ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``), read in
                ``timezone`` with DST handled (a skipped local time fires at the first minute
                after the change, a repeated one once). Exactly one of cron and every_ms.
            every_ms: an interval, ms, >= 1: ticks at ``start_at_ms + k * every_ms``.
            timezone: the IANA zone of ``cron`` (default "UTC").
            priority: each tick's priority, 0..99.
            catch_up: ticks that fell due while no factory ran: "skip" (none), "once" (the
                last one, due now; default), "all" (each, the latest 1,000).
            start_at_ms: epoch ms: an interval schedule's first tick (default now); no cron
                tick comes before it.

        Returns:
            The stored :class:`Schedule` (``next_due_ms``: the next tick to fall due;
            ``last_sent_ms``: the latest that fell due, None before the first).

        Raises:
            InvalidArgumentError: a bad id, not exactly one of cron and every_ms, a bad cron
                expression, time zone, interval, priority, catch_up or start (nothing written).
            QueueClosedError, RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.schedule(
            schedule_id, payload=payload, cron=cron, every_ms=every_ms, timezone=timezone,
            priority=priority, catch_up=catch_up, start_at_ms=start_at_ms))

    def schedules(self) -> list[Schedule]:
        """Every schedule of this queue, by id, as of now (the next tick to fall due, the
        latest that fell due).

        Raises:
            ConfigurationError: a stored record is unreadable.
            RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.schedules())

    def unschedule(self, schedule_id: str) -> bool:
        """Remove a schedule and the ticks it queued that are not due yet (ticks already due
        or leased are left to their consumers). Mirrors bullmq's ``removeJobScheduler``.

        Returns:
            True if the schedule existed.

        Raises:
            InvalidArgumentError: ``schedule_id`` is not a non-empty str.
            RedisOperationError: as for :meth:`push`.
        """
        return self._run(self._core.unschedule(schedule_id))

    def close(self) -> None:
        """Stop taking new work: later pushes and pops raise QueueClosedError, and waiting pops
        return what they have at once. Acks, lease changes (``set_unack_timeout``) and removes
        still work until the RedisQueues factory is closed, so messages being handled when a
        consumer shuts down are acked, not redelivered. Idempotent.

        Shutdown sequence: ``queue.close()`` (waiting pops return), finish and ack the messages
        in hand, then ``queues.close()``. Does not close the Redis connections (the factory
        does, if a builder made them). Mirrors ``close``.
        """
        self._core.closed = True
        for core in self._bell_cores():
            self._driver.close_doorbell(core)
