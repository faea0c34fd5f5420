"""Options of the ``dynoqueue`` Spark data source: parsing, validation, and the connection.

Every option is a string (Spark passes them so), keyed case-insensitively. :class:`SourceOptions`
parses them once, on the driver, so a typo fails ``load()`` / ``save()`` / ``start()`` with a
message naming the option, before any task runs. ``docs/spark.md`` is the one table of them.

This module does not import pyspark: executors and the CLI import it cheaply.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..connect.urls import redact_url
from ..errors import ConfigurationError
from ..model.keys import check_key_part, check_name, check_queue_name
from ..model.partitions import MAX_PARTITIONS
from ..model.policy import QueuePolicy
from ..model.validate import int_at_least
from ..queues import RedisQueues

#: Defaults, also quoted by docs/spark.md.
DEFAULT_KEY_PREFIX = "dynoqueue"
DEFAULT_BATCH_SIZE = 1000
DEFAULT_SPLIT_SIZE = 10_000
DEFAULT_MAX_MESSAGES_PER_TRIGGER = 1000
DEFAULT_LEASE_MS = 60_000
DEFAULT_CONSUMER = "spark"

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

#: Every option the source knows, lower-cased (Spark lower-cases option keys).
KNOWN_OPTIONS = frozenset({
    "url", "queue", "keyprefix", "zones", "localzone", "replicaurls", "writequorum",
    "batchsize", "splitsize", "maxmessagespertrigger", "leasems", "consumername",
    "processunacks", "claimshards", "deadletters", "partitions",
    # Spark's own, passed through to every source:
    "path", "paths", "checkpointlocation",
})


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of one read or write (see ``docs/spark.md`` for the table).

    Picklable (plain values only): the data source ships it to executors, which connect with
    :func:`open_queues` inside ``read()`` / ``write()``.

    Attributes:
        url: the Redis URL, given to ``RedisQueues.from_url``.
        queue: the queue name.
        key_prefix: the key prefix of the queue's keys.
        zones: the zones (shard = last character of each, as ``RedisQueues.from_url``), or
            None for the single shard ``"a"``.
        local_zone: the zone whose shard is claimed first; None: the first zone.
        replica_urls: zone -> URL of that zone's replica, for local reads.
        write_quorum: replicas each write WAITs for, >= 0.
        batch_size: messages per push call (one pipelined round trip per 500), >= 1; on a
            partitioned queue, per partition batch (at most 500: one script call).
        split_size: most messages one read partition holds, >= 1.
        max_messages_per_trigger: most messages a stream micro-batch claims, >= 1.
        lease_ms: the lease a stream claim takes (the processing budget of a batch), ms, >= 1.
        consumer_name: names the recorded batches of a stream query, no braces or whitespace.
        process_unacks: a stream reader puts back expired leases of every shard (once a second).
        claim_shards: ``"all"`` (every shard, the local one first) or ``"local"``.
        dead_letters: a batch read returns the queue's dead letters instead of its messages
            (other reads and writes refuse it).
        partitions: a write's queue has this many partitions (``QueuePolicy.partitions``,
            1..1024): stored as its policy when it has none, checked when it has one; None:
            whatever the queue has stored (reads always follow what is stored).
    """

    url: str
    queue: str
    key_prefix: str = DEFAULT_KEY_PREFIX
    zones: tuple[str, ...] | None = None
    local_zone: str | None = None
    replica_urls: dict[str, str] = field(default_factory=dict)
    write_quorum: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    split_size: int = DEFAULT_SPLIT_SIZE
    max_messages_per_trigger: int = DEFAULT_MAX_MESSAGES_PER_TRIGGER
    lease_ms: int = DEFAULT_LEASE_MS
    consumer_name: str = DEFAULT_CONSUMER
    process_unacks: bool = True
    claim_shards: str = "all"
    dead_letters: bool = False
    partitions: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's option map (case-insensitive keys, string values).

        Args:
            options: the options of ``.option(...)`` calls; keys in any case.

        Returns:
            The validated options.

        Raises:
            ConfigurationError: (a ValueError) ``url`` or ``queue`` is missing, an option is
                unknown (likely a typo), or a value is malformed or out of range; the message
                names the option.
        """
        # Spark hands a CaseInsensitiveDict (already lower-cased); a plain dict from Python
        # callers is lower-cased here, so both spellings work.
        opts = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - KNOWN_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"dynoqueue: unknown option(s) {unknown}; see docs/spark.md for the options"
            )
        url = _required(opts, "url")
        queue = check_queue_name(_required(opts, "queue"), "option 'queue'")
        zones, local_zone, replica_urls = _zones_of(opts)
        claim = opts.get("claimshards", "all").strip().lower()
        if claim not in {"all", "local"}:
            raise ConfigurationError(f"option 'claimShards' must be all or local, got {claim!r}")
        return cls(
            url=url,
            queue=queue,
            key_prefix=check_name("option 'keyPrefix'",
                                  opts.get("keyprefix", DEFAULT_KEY_PREFIX)),
            zones=zones,
            local_zone=local_zone,
            replica_urls=replica_urls,
            write_quorum=_int(opts, "writequorum", "writeQuorum", 0, low=0),
            batch_size=_int(opts, "batchsize", "batchSize", DEFAULT_BATCH_SIZE, low=1),
            split_size=_int(opts, "splitsize", "splitSize", DEFAULT_SPLIT_SIZE, low=1),
            max_messages_per_trigger=_int(opts, "maxmessagespertrigger",
                                          "maxMessagesPerTrigger",
                                          DEFAULT_MAX_MESSAGES_PER_TRIGGER, low=1),
            lease_ms=_int(opts, "leasems", "leaseMs", DEFAULT_LEASE_MS, low=1),
            consumer_name=check_key_part("option 'consumerName'",
                                         opts.get("consumername", DEFAULT_CONSUMER)),
            process_unacks=_bool(opts, "processunacks", "processUnacks", True),
            claim_shards=claim,
            dead_letters=_bool(opts, "deadletters", "deadLetters", False),
            partitions=_partitions(opts),
        )

    def describe(self) -> str:
        """A one-line description for messages: queue, prefix and the redacted URL."""
        return f"queue {self.queue!r} (prefix {self.key_prefix!r}) at {redact_url(self.url)}"


def _zones_of(
    opts: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, str | None, dict[str, str]]:
    """The options ``zones``, ``localZone`` and ``replicaUrls``, checked against each other."""
    zones = _zones(opts.get("zones"))
    local_zone = opts.get("localzone") or None
    if local_zone is not None and (zones is None or local_zone not in zones):
        raise ConfigurationError(
            f"option 'localZone' {local_zone!r} must be one of option 'zones' "
            f"({list(zones) if zones else 'not set'})"
        )
    replica_urls = _replica_urls(opts.get("replicaurls"))
    if replica_urls and zones is None:
        raise ConfigurationError("option 'replicaUrls' needs option 'zones'")
    strays = sorted(set(replica_urls) - set(zones or ()))
    if strays:
        raise ConfigurationError(f"option 'replicaUrls' names unknown zones {strays}")
    return zones, local_zone, replica_urls


def _required(opts: Mapping[str, str], key: str) -> str:
    value = (opts.get(key) or "").strip()
    if not value:
        raise ConfigurationError(f"dynoqueue: option {key!r} is required (see docs/spark.md)")
    return value


def _int(opts: Mapping[str, str], key: str, name: str, default: int, *, low: int) -> int:
    text = opts.get(key)
    if text is None or not str(text).strip():
        return default
    try:
        value: object = int(str(text).strip().replace("_", ""))
    except ValueError:
        value = text  # not a number: the shared check reports it
    return int_at_least(f"option {name!r}", value, low, error=ConfigurationError)


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    text = opts.get(key)
    if text is None or not str(text).strip():
        return default
    lowered = str(text).strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"option {name!r} must be true or false, got {text!r}")


def _partitions(opts: Mapping[str, str]) -> int | None:
    if not str(opts.get("partitions") or "").strip():
        return None
    count = _int(opts, "partitions", "partitions", 1, low=1)
    if count > MAX_PARTITIONS:
        raise ConfigurationError(f"option 'partitions' must be at most {MAX_PARTITIONS}, "
                                 f"got {count}")
    return count


def _zones(text: str | None) -> tuple[str, ...] | None:
    if text is None or not text.strip():
        return None
    zones = tuple(z.strip() for z in text.split(","))
    for zone in zones:
        check_name("a zone of option 'zones'", zone)
    if len(set(zones)) != len(zones):
        raise ConfigurationError(f"option 'zones' repeats a zone: {list(zones)}")
    return zones


def _replica_urls(text: str | None) -> dict[str, str]:
    if text is None or not text.strip():
        return {}
    out: dict[str, str] = {}
    for item in text.split(","):
        zone, sep, url = item.partition("=")
        if not sep or not zone.strip() or not url.strip():
            raise ConfigurationError(
                f"option 'replicaUrls' must be zone=url[,zone=url...], got {redact_url(item)!r}"
            )
        out[zone.strip()] = url.strip()
    return out


# ------------------------------------------------------------------------------- connection


def open_queues(
    options: SourceOptions,
    *,
    unack_timeout_ms: int | None = None,
    local_zone: str | None = None,
) -> RedisQueues:
    """Connect to the queue's Redis through ``RedisQueues.from_url``, with no background thread.

    Spark tasks and the driver-side stream reader call this; the unack reprocessor thread is
    always off (``unack_handler_interval_ms=0``): executors must not run threads that outlive a
    task, and the stream reader puts back expired leases itself (option ``processUnacks``).

    Args:
        options: the parsed options (URL, zones, prefix, replica URLs, write quorum).
        unack_timeout_ms: the lease of claims, ms; default :data:`DEFAULT_LEASE_MS`.
        local_zone: override the local zone (default ``localZone``, else the first zone).

    Returns:
        The factory; it owns its connections (``close()`` closes them).

    Raises:
        ConfigurationError: the URL is malformed or a setting is refused by the builder.
    """
    zones = list(options.zones) if options.zones else None
    return RedisQueues.from_url(
        options.url,
        zones=zones,
        local_zone=(local_zone or options.local_zone or zones[0]) if zones else None,
        replica_urls=dict(options.replica_urls) or None,
        key_prefix=options.key_prefix,
        unack_handler_interval_ms=0,
        unack_timeout_ms=unack_timeout_ms or DEFAULT_LEASE_MS,
        write_quorum=options.write_quorum,
    )


def ensure_partitions(options: SourceOptions) -> None:
    """With option ``partitions``: store ``QueuePolicy(partitions=n)`` as the queue's policy when
    it has none stored; with one stored, check its count. Runs on the driver before any task.

    Raises:
        ConfigurationError: the queue is stored with another partition count (or unreadable).
        RedisOperationError: Redis failed.
    """
    if options.partitions is None:
        return
    with connected(options) as queues:
        raw = queues.quorum_conn.get(queues.keys_of(options.queue).policy)
        if raw:
            stored = QueuePolicy.from_json(raw)
            if stored.partitions != options.partitions:
                raise ConfigurationError(
                    f"dynoqueue: option 'partitions' is {options.partitions}, but "
                    f"{options.describe()} is stored with {stored.partitions}; a queue's "
                    "partitions cannot change (write to a new queue, or drop the option)")
            return
        # Stores the policy (or refuses one another process stored meanwhile).
        queues.get(options.queue, QueuePolicy(partitions=options.partitions)).size()


@contextmanager
def connected(options: SourceOptions, **kwargs: Any) -> Iterator[RedisQueues]:
    """:func:`open_queues` for a ``with`` block; closed (connections too) on exit."""
    queues = open_queues(options, **kwargs)
    try:
        yield queues
    finally:
        queues.close()
