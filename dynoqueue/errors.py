"""The DynoQueueError hierarchy.

Bad input raises an error that is also a ``ValueError`` before anything is written; failures of
Redis itself are wrapped in :class:`RedisOperationError`, with the operation and key in the
message and the redis-py exception chained as ``__cause__``.
"""

from __future__ import annotations


class DynoQueueError(Exception):
    """Base class of every error raised by dynoqueue."""


class InvalidMessageError(DynoQueueError, ValueError):
    """A message (or a batch of them) failed validation; nothing of the batch was written."""


class PayloadTooLargeError(InvalidMessageError):
    """A payload is larger than the queue's ``max_payload_bytes``."""


class InvalidArgumentError(DynoQueueError, ValueError):
    """An argument other than a message is out of range or of the wrong type."""


class InvalidPatternError(InvalidArgumentError):
    """A Lua pattern given to a predicate call is malformed."""


class ConfigurationError(DynoQueueError, ValueError):
    """A factory, shard supplier or sharding strategy was configured inconsistently."""


class QueueClosedError(DynoQueueError, RuntimeError):
    """The queue (or its RedisQueues factory) was closed."""


class RedisOperationError(DynoQueueError):
    """A Redis call failed.

    Attributes:
        operation (str): the dynoqueue operation that failed, e.g. ``"push"``.
        key (str): the Redis key (or first key) the operation was working on.
    """

    def __init__(self, operation: str, key: str, message: str) -> None:
        # An operation on no key (ping, listing queues) names none: the message names the
        # endpoint (redis-py's "Error 111 connecting to host:port").
        where = f" on key {key}" if key else ""
        super().__init__(f"operation {operation} failed{where}: {message}")
        self.operation = operation
        self.key = key


class ConnectionFailedError(RedisOperationError):
    """Redis could not be reached: the connection was refused or the host name does not
    resolve (a wrong port or host, a server that is down).

    A deployment that was never reached fails fast (``RetryBudget.refused_s``); one that
    answered before is retried within the whole retry budget (a restart, a failover). The
    message names the endpoint (credentials masked), not an operation or key; the redis-py
    error is the ``__cause__``.

    Attributes:
        endpoint (str): the deployment's URL (or description), credentials masked.
        operation (str): the dynoqueue operation that needed the connection (``"connect"``
            when a builder's first contact failed); kept for programs, not in the message.
        key (str): the key that operation was working on ("" if none); not in the message.
    """

    def __init__(self, endpoint: str, message: str, *, operation: str = "connect",
                 key: str = "") -> None:
        DynoQueueError.__init__(self, f"cannot reach Redis at {endpoint}: {message}")
        self.operation = operation
        self.key = key
        self.endpoint = endpoint


class CallTimeoutError(RedisOperationError):
    """A call did not end within its deadline (``call_timeout_ms``; a waiting pop: its wait
    plus that): the server did not answer in time (frozen, overloaded, behind a partition).

    Like any lost reply, the outcome of a write is unknown, not failed: a push or ack may have
    been applied (repeating it with the same ids is safe); what a timed-out pop leased comes
    back when its lease expires. The redis-py error, if any, is the ``__cause__``.
    """


class AccessDeniedError(RedisOperationError):
    """Redis refused the credentials or the ACL user's permissions (WRONGPASS, NOAUTH,
    NOPERM). Never retried: no retry can cure it. The redis-py error is the ``__cause__``."""


class QuorumNotReachedError(RedisOperationError):
    """Fewer replicas than ``write_quorum`` acknowledged a write within ``write_quorum_timeout_ms``.

    The write itself was applied on the primary and may still reach the replicas (or be lost on a
    failover): its outcome is unknown, not failed. Retrying with the same message ids is safe,
    because a push of an existing id replaces it instead of duplicating it.

    Attributes:
        acknowledged (int): how many replicas acknowledged.
        required (int): how many were asked for.
    """

    def __init__(self, operation: str, key: str, acknowledged: int, required: int) -> None:
        super().__init__(
            operation,
            key,
            f"{acknowledged} of {required} replicas acknowledged the write in time; "
            "the write was applied on the primary and its durability is unknown",
        )
        self.acknowledged = acknowledged
        self.required = required


class RedisServerNotFoundError(DynoQueueError, RuntimeError):
    """No redis-server binary could be found to start an embedded topology."""


class RedisServerStartError(DynoQueueError, RuntimeError):
    """A redis-server process (or a topology of them) did not become ready.

    The message includes the tail of the server's log file.
    """


class DynomiteNotFoundError(DynoQueueError, RuntimeError):
    """No dynomite binary could be found to start an embedded Dynomite topology."""


class DynomiteError(RedisOperationError):
    """Dynomite answered with its own error instead of the racks' reply (a subclass says which).

    These replies do not mean the call failed everywhere: some racks may have applied it. The
    idempotent operations (push, ensure, ack, remove, lease and delay changes, the unack pass,
    every read) are retried a few times before this is raised; claims (pops) are not, and
    what a failed claim leased on some racks comes back when the lease expires.
    """


class DynomiteQuorumError(DynomiteError):
    """``Failed to achieve Quorum``: too few racks gave the same reply at the consistency level
    (a rack down under ``DC_SAFE_QUORUM``, or racks whose data diverged)."""


class DynomiteStorageError(DynomiteError):
    """``Storage: ...`` or ``Peer: ...``: the node could not reach its own redis-server (e.g. it
    restarts) or a peer node."""
