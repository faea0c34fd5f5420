"""QueueDAO: the contract a Conductor-style workflow engine has with its task queues.

The names and units follow Conductor's ``com.netflix.conductor.dao.QueueDAO`` (a delay is an
offset in seconds, a wait or a lease in milliseconds); the meaning is dyno-queues', as
Conductor's ``DynoQueueDAO`` had it, with the known bugs of Conductor's Redis DAOs fixed (each
method says which). Every unit is in the parameter's name: ``*_s`` seconds, ``*_ms``
milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from ..model.message import Message


@runtime_checkable
class QueueDAO(Protocol):
    """The task-queue contract of a workflow engine (sync). :class:`DynoQueueDAO` implements it
    on :class:`dynoqueue.RedisQueues`; :class:`AsyncDynoQueueDAO` has the same methods as
    coroutines on :class:`dynoqueue.asyncio.RedisQueues`.

    Every method takes the queue's name first; a queue is created on first use. Bad input
    raises a ``ValueError`` subclass of :class:`~dynoqueue.errors.DynoQueueError` before
    anything is written: :class:`~dynoqueue.errors.InvalidArgumentError` for an argument,
    :class:`~dynoqueue.errors.InvalidMessageError` for a message,
    :class:`~dynoqueue.errors.ConfigurationError` for a queue name the factory rejects (empty,
    braces, whitespace). Redis failures raise :class:`~dynoqueue.errors.RedisOperationError`.
    """

    def push(self, queue_name: str, id: str, offset_time_s: int = 0,
             priority: int = 0) -> None:
        """Queue ``id`` (no payload), due ``offset_time_s`` seconds from now.

        Pushing an id that is already waiting or leased replaces it (dyno-queues' push): it
        then waits, due at the new offset, and any lease on it ends. Conductor's ``push``.

        Args:
            queue_name: the queue.
            id: the message id, a non-empty str (Conductor: a task or workflow id).
            offset_time_s: seconds until it is due, an int >= 0.
            priority: 0..99; orders messages due in the same millisecond, lower first.

        Raises:
            InvalidArgumentError: a bad id, offset_time_s or priority.
        """
        ...

    def push_messages(self, queue_name: str, messages: Iterable[Message]) -> None:
        """Queue messages with their payloads, each due ``message.timeout`` **milliseconds**
        from now (or at its ``due_at_ms``), with its own priority. Conductor's
        ``push(queueName, List<Message>)``; its DynoQueueDAO ignored each message's timeout
        (everything was due at once), this honours it.

        Args:
            queue_name: the queue.
            messages: :class:`dynoqueue.Message` objects. Their ``timeout`` is in ms
                (Conductor's own Message carried seconds: convert with ``seconds * 1000``).

        Raises:
            InvalidMessageError: an element is not a valid Message; nothing is written.
        """
        ...

    def push_if_not_exists(self, queue_name: str, id: str, offset_time_s: int = 0,
                           priority: int = 0) -> bool:
        """Queue ``id`` as :meth:`push` does, only if it is neither waiting nor leased, in one
        atomic step (Conductor's DAOs checked, then pushed: two racing callers both pushed).

        Args:
            queue_name, id, offset_time_s, priority: as for :meth:`push`.

        Returns:
            True if it was pushed, False if it was already there (nothing changed).

        Raises:
            InvalidArgumentError: a bad id, offset_time_s or priority.
        """
        ...

    def pop(self, queue_name: str, count: int, timeout_ms: int) -> list[str]:
        """Lease up to ``count`` due messages of the local shard and return their ids.

        Returns as soon as at least one message is leased (a due message is never held back
        to fill the batch), else waits up to ``timeout_ms`` for one to arrive or fall due.
        Each leased message is delivered again unless acked within the factory's
        ``unack_timeout_ms`` (see :meth:`set_unack_timeout`). Conductor's ``pop``.

        Args:
            queue_name: the queue.
            count: most ids to return, an int >= 0 (0 returns [] at once).
            timeout_ms: longest wait in milliseconds, an int >= 0 (0: no wait).

        Returns:
            The leased ids, earliest due first; [] if none was due in time.

        Raises:
            InvalidArgumentError: a bad count or timeout_ms.
        """
        ...

    def poll_messages(self, queue_name: str, count: int, timeout_ms: int) -> list[Message]:
        """:meth:`pop`, returning the leased messages (id, payload, priority, ``shard``,
        ``deliveries``, ``receipt``). Conductor's ``pollMessages``.

        Raises:
            InvalidArgumentError: a bad count or timeout_ms.
        """
        ...

    def remove(self, queue_name: str, id: str) -> None:
        """Delete a message, waiting or leased, with its payload; an unknown id is no error.
        Conductor's ``remove``.

        Raises:
            InvalidArgumentError: a bad id.
        """
        ...

    def get_size(self, queue_name: str) -> int:
        """How many messages wait in the queue over all shards, due or not; leased ones are
        not counted (dyno-queues' ``size``). Conductor's ``getSize``."""
        ...

    def ack(self, queue_name: str, id: str) -> bool:
        """End the lease of a popped message: it leaves the queue. Conductor's ``ack``.

        Returns:
            True only if the message was leased and is now gone; False if it was waiting,
            unknown, already acked, or put back after its lease ran out (orkes' DAO returned
            True whatever happened).

        Raises:
            InvalidArgumentError: a bad id.
        """
        ...

    def set_unack_timeout(self, queue_name: str, id: str, unack_timeout_ms: int) -> bool:
        """Set a leased message's lease to end ``unack_timeout_ms`` milliseconds from now
        (extend or shorten; 0: it is put back at the next unack pass). A waiting message is
        not changed. Conductor's ``setUnackTimeout`` (the workflow sweeper's "look again
        later").

        Returns:
            True if the message is leased and its lease was set.

        Raises:
            InvalidArgumentError: a bad id or unack_timeout_ms (an int >= 0).
        """
        ...

    def set_unack_timeout_if_shorter(self, queue_name: str, id: str,
                                     unack_timeout_ms: int) -> bool:
        """:meth:`set_unack_timeout`, only if the lease then ends earlier than it does now
        (never pushes an evaluation further out), atomically. Conductor's
        ``setUnackTimeoutIfShorter``.

        Returns:
            True if the message is leased and its lease was shortened.

        Raises:
            InvalidArgumentError: a bad id or unack_timeout_ms (an int >= 0).
        """
        ...

    def flush(self, queue_name: str) -> None:
        """Delete every message of the queue, waiting or leased. Conductor's ``flush``."""
        ...

    def queues_detail(self) -> dict[str, int]:
        """Every queue under the factory's key prefix, found in Redis (those this process
        never opened too; Conductor's DAOs listed only the queues they had opened) with its
        waiting count (:meth:`get_size`). Conductor's ``queuesDetail``.

        Lists with SCAN on the factory's quorum connection (every primary of a Cluster), so it
        is meant for dashboards, not hot paths; Dynomite does not forward SCAN. Each queue
        found is opened through the factory, whose settings (shards, policy) then apply.

        Returns:
            ``{queue name: waiting count}``, names sorted; a queue with only leased
            messages is listed with 0.

        Raises:
            RedisOperationError: Redis failed.
        """
        ...

    def queues_detail_verbose(self) -> dict[str, dict[str, dict[str, int]]]:
        """The queues of :meth:`queues_detail`, each with its waiting (``"size"``) and leased
        (``"uacked"``, dyno-queues' spelling) counts per shard; orkes' DAO reported 0 leased
        always. Conductor's ``queuesDetailVerbose``.

        Returns:
            ``{queue name: {shard: {"size": waiting, "uacked": leased}}}``.

        Raises:
            RedisOperationError: Redis failed.
        """
        ...

    def process_unacks(self, queue_name: str) -> None:
        """Put back the messages of the local shard whose lease ran out, due at once (what the
        factory's unack reprocessor does for every queue it opened). Conductor's
        ``processUnacks``."""
        ...

    def reset_offset_time(self, queue_name: str, id: str, *,
                          release_leased: bool = False) -> bool:
        """Make a waiting message due now, keeping its priority. Conductor's
        ``resetOffsetTime`` (used to run a callback or a sweep at once).

        A leased (in-flight) message is left alone unless ``release_leased`` is True: then its
        lease ends and it is due now, in one step. (dyno-queues' ``setTimeout`` dropped the
        priority; orkes' DAO re-scored in-flight messages too, so a worker's task was
        delivered a second time while it ran.)

        Args:
            queue_name: the queue.
            id: the message id.
            release_leased: also put a leased message back, due now.

        Returns:
            True if the message was waiting (or, with ``release_leased``, leased) and is now
            due; False if it is unknown (or leased, without ``release_leased``).

        Raises:
            InvalidArgumentError: a bad id, or release_leased not a bool.
        """
        ...

    def set_offset_time(self, queue_name: str, id: str, offset_time_s: int, *,
                        release_leased: bool = False) -> bool:
        """Make a waiting message due ``offset_time_s`` seconds from now, keeping its priority.
        Conductor 2.x's ``setOffsetTime``, which passed the seconds on as milliseconds (a
        message meant for 30 s was due after 30 ms); here they are seconds.

        Args:
            queue_name: the queue.
            id: the message id.
            offset_time_s: seconds until it is due, an int >= 0.
            release_leased: as for :meth:`reset_offset_time`.

        Returns:
            As for :meth:`reset_offset_time`.

        Raises:
            InvalidArgumentError: a bad id, offset_time_s or release_leased.
        """
        ...

    def postpone(self, queue_name: str, id: str, priority: int, postpone_s: int) -> bool:
        """Make a message wait, due ``postpone_s`` seconds from now with ``priority``, whether
        it was waiting, leased (its lease ends) or absent (it is pushed without payload, as
        Conductor's postpone did: an engine postpones a task it acked at poll time to call it
        back). A message that was there keeps its payload and delivery count.

        One atomic step: Conductor's default was ``remove`` then ``push``, so a crash between
        them lost the message and a reader in between saw it gone.

        Args:
            queue_name: the queue.
            id: the message id.
            priority: its new priority, 0..99.
            postpone_s: seconds until it is due, an int >= 0.

        Returns:
            True (the message now waits), as Conductor's.

        Raises:
            InvalidArgumentError: a bad id, priority or postpone_s.
            RedisOperationError: Redis failed, or other clients kept pushing and removing
                the id during every attempt.
        """
        ...

    def contains_message(self, queue_name: str, id: str) -> bool:
        """Whether the message is in the queue, waiting or leased. Conductor's
        ``containsMessage``.

        Raises:
            InvalidArgumentError: a bad id.
        """
        ...
