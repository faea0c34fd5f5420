"""A queue's stored configuration: its :class:`QueuePolicy` (how its messages end, how it is
partitioned, its queue-wide limits) and :class:`RateLimit`; the readers of a stored policy.
Stored in Redis with the queue, so every process applies the same one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import orjson

from ..errors import ConfigurationError
from .partitions import MAX_PARTITIONS
from .validate import count, int_at_least, ms

#: Dead letters are kept 7 days unless the policy says otherwise.
DEFAULT_DEAD_LETTER_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` deliveries start in any window of ``per_ms`` (a queue-wide limit,
    held across every consumer in every zone: enforced inside the claim script). Mirrors
    Conductor's ``rateLimitPerFrequency`` / ``rateLimitFrequencyInSeconds`` and bullmq's
    limiter ``{max, duration}``.

    Args:
        count: deliveries per window, 1..2**31-1.
        per_ms: the window, ms, 1..100 years.

    Raises:
        ConfigurationError: (a ValueError) a value that is not an int in range.
    """

    count: int
    per_ms: int

    def __post_init__(self) -> None:
        count("rate_limit count", self.count, 1, error=ConfigurationError)
        ms("rate_limit per_ms", self.per_ms, low=1, error=ConfigurationError)


@dataclass(frozen=True)
class QueuePolicy:
    """How a queue's messages end. Stored in Redis with the queue, so every producer, consumer
    and reprocessor applies the same one; a process configured with a different policy gets a
    :class:`~dynoqueue.errors.ConfigurationError` at its first call.

    Args:
        max_deliveries: 0 = unlimited (dyno-queues). n >= 1: a message is delivered at most n
            times; when its n-th lease ends without ack (expiry or nack) it is dead-lettered.
            Mirrors Camellia's maxRetry, SQS's maxReceiveCount, RMQ's 16 retries.
        message_ttl_ms: 0 = none. A message not acked within this many ms of falling due ends:
            EXPIRED if it was never delivered, dead-lettered (reason "ttl") if it was.
        retention_ms: how long an ended message (acked, expired, deleted) stays queryable
            through ``state()``/``info()``, payload included; 0 = deleted at once (dyno-queues).
        dead_letter_retention_ms: how long dead letters are kept, >= 1 (default 7 days).
        strict_priority: False (dyno-queues): priority only orders messages due in the same
            millisecond. True: a pop takes the due message with the lowest priority number
            first (0 = most urgent), the earliest due among equal priorities; a delayed
            message still waits until it is due (Alibaba RMQ's PriorityMessage, bullmq's
            priority). Part of the queue's stored configuration, like the rest.
        partitions: 1..1024 (default 1: dyno-queues' layout, byte for byte). n > 1 splits the
            queue into n partitions, each one Redis Cluster hash slot, so its throughput and
            backlog grow with the cluster's primaries (docs/deployments.md, "Scaling one
            queue"); a message lives in partition ``crc32(id) % n``. Fixed for the queue's
            life: a live queue cannot be repartitioned.
        max_in_flight: 0 = no cap (dyno-queues). n >= 1: at most n messages of the queue are
            leased at once, across every consumer in every zone (Conductor's
            ``concurrentExecLimit``, SQS's maximum concurrency); a pop takes what fits, a
            waiting pop sleeps until an ack, nack, release or lease expiry frees a place. On
            a partitioned queue each partition holds its share (n // partitions, the first
            n % partitions one more), so n must be at least ``partitions``.
        rate_limit: None = none. A :class:`RateLimit`: at most ``count`` deliveries start in
            any window of ``per_ms``, across every consumer (bullmq's limiter, Conductor's
            rate limit); a waiting pop sleeps until the window has room. On a partitioned
            queue each partition holds its share of ``count`` (as above), so ``count`` must be
            at least ``partitions``.

    Raises:
        ConfigurationError: (a ValueError) a value that is not an int in range, or a
            strict_priority that is not a bool.
    """

    max_deliveries: int = 0
    message_ttl_ms: int = 0
    retention_ms: int = 0
    dead_letter_retention_ms: int = DEFAULT_DEAD_LETTER_RETENTION_MS
    strict_priority: bool = False
    partitions: int = 1
    max_in_flight: int = 0
    rate_limit: RateLimit | None = None

    def __post_init__(self) -> None:
        count("max_deliveries", self.max_deliveries, error=ConfigurationError)
        for name, low in (("message_ttl_ms", 0), ("retention_ms", 0),
                          ("dead_letter_retention_ms", 1)):
            ms(name, getattr(self, name), low=low, error=ConfigurationError)
        if not isinstance(self.strict_priority, bool):
            raise ConfigurationError(
                f"strict_priority must be a bool, got {self.strict_priority!r}")
        int_at_least("partitions", self.partitions, 1, high=MAX_PARTITIONS,
                     error=ConfigurationError)
        count("max_in_flight", self.max_in_flight, error=ConfigurationError)
        if self.rate_limit is not None and not isinstance(self.rate_limit, RateLimit):
            raise ConfigurationError(
                f"rate_limit must be a RateLimit or None, got {self.rate_limit!r:.80}")
        n = self.partitions
        if 0 < self.max_in_flight < n:
            raise ConfigurationError(
                f"max_in_flight={self.max_in_flight} is below partitions={n}: each partition "
                "holds a share of it, so it must be at least the number of partitions")
        if self.rate_limit is not None and self.rate_limit.count < n:
            raise ConfigurationError(
                f"rate_limit count={self.rate_limit.count} is below partitions={n}: each "
                "partition holds a share of it, so it must be at least the number of partitions")

    def share(self, partition: int) -> QueuePolicy:
        """The policy partition ``partition`` (0-based) of a partitioned queue stores: this one
        as one partition, with its share of ``max_in_flight`` and of the rate limit's count
        (``n // partitions``, the first ``n % partitions`` partitions one more: the shares sum
        to the whole)."""
        def part(total: int) -> int:
            return total // self.partitions + (1 if partition < total % self.partitions else 0)

        limit = self.rate_limit
        return dataclasses.replace(
            self, partitions=1,
            max_in_flight=part(self.max_in_flight) if self.max_in_flight else 0,
            rate_limit=None if limit is None else RateLimit(part(limit.count), limit.per_ms))

    def to_json(self) -> str:
        """The stored form (short names the scripts read: max, ttl, ret, dret, strict; and
        parts, mif, rlc and rlp, each only when set, so a policy without them is stored as
        before)."""
        doc = {"max": self.max_deliveries, "ttl": self.message_ttl_ms,
               "ret": self.retention_ms, "dret": self.dead_letter_retention_ms,
               "strict": int(self.strict_priority)}
        if self.partitions != 1:
            doc["parts"] = self.partitions
        if self.max_in_flight:
            doc["mif"] = self.max_in_flight
        if self.rate_limit is not None:
            doc["rlc"], doc["rlp"] = self.rate_limit.count, self.rate_limit.per_ms
        return orjson.dumps(doc).decode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> QueuePolicy:
        """The policy a queue has stored.

        Raises:
            ConfigurationError: the stored text is not a policy.
        """
        try:
            doc = orjson.loads(raw)
            # Policies stored before strict priority existed have no "strict": not strict.
            limit = RateLimit(int(doc["rlc"]), int(doc["rlp"])) if "rlc" in doc else None
            # A partition stores its share of the limits, which may be below its partitions.
            return cls(int(doc["max"]), int(doc["ttl"]), int(doc["ret"]), int(doc["dret"]),
                       bool(int(doc.get("strict", 0))), int(doc.get("parts", 1)),
                       int(doc.get("mif", 0)), limit)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigurationError(f"the stored queue policy is unreadable: {raw!r:.80}") from exc


def readable_policy(raw_policy: bytes | str | None) -> QueuePolicy | None:
    """A queue's stored policy (the value of its policy key), or None when none is stored or
    it is unreadable (the queue's own calls say so): for readers that look, never fail."""
    if not raw_policy:
        return None
    try:
        return QueuePolicy.from_json(raw_policy)
    except ConfigurationError:
        return None


def stored_partitions(raw_policy: bytes | str | None) -> int:
    """The partition count a queue's stored policy names: 1 for none stored, one unreadable,
    or one without ``parts``."""
    policy = readable_policy(raw_policy)
    return 1 if policy is None else policy.partitions
