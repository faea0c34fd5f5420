"""The transport options of the dynoqueue kombu transport: parsed and checked once.

kombu hands a transport the ``transport_options`` of its Connection (Celery's
``broker_transport_options``). :func:`parse_options` turns that mapping into a frozen
:class:`TransportOptions`, or raises :class:`~dynoqueue.errors.ConfigurationError` naming the
option that is wrong, before anything is written to Redis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..connect import DEFAULT_KEY_PREFIX
from ..errors import ConfigurationError
from ..model.keys import check_name
from ..model.partitions import MAX_PARTITIONS
from ..model.policy import DEFAULT_DEAD_LETTER_RETENTION_MS, QueuePolicy
from ..model.settings import MAX_PAYLOAD_LIMIT, REPLY_SPIN_US_MAX
from ..model.sharding import LocalOnlyStrategy

#: Options that kombu itself or its virtual transports read (connection retries, body
#: encoding, the undeliverable-message queue); accepted and left to kombu.
KOMBU_OPTIONS = frozenset({
    "max_retries", "interval_start", "interval_step", "interval_max", "body_encoding",
    "deadletter_queue", "connect_retries_timeout", "confirm_publish",
})

#: The values of the shard_affinity option.
SHARD_AFFINITIES = ("local_first", "local_only")
#: The values of the sharding option.
SHARDINGS = ("round_robin", "local")
#: Longest lease accepted, seconds (about 24 days: far more than any heartbeat gap).
MAX_VISIBILITY_TIMEOUT_S = 2_000_000.0


@dataclass(frozen=True)
class TransportOptions:
    """The dynoqueue transport's settings (see ``docs/celery.md`` for each one).

    Attributes:
        zones: every availability zone, or None for one shard.
        local_zone: this process's zone (one of ``zones``).
        key_prefix: prefix of every Redis key.
        partitions: partitions of each queue (1..1024; >1 spreads a queue over a Cluster).
        visibility_timeout: the lease a delivered message gets, seconds; heartbeats extend it
            while the consumer lives.
        heartbeat_interval: seconds between lease extensions of held messages.
        max_deliveries: deliveries before a message is dead-lettered (0: unlimited).
        dead_letters: ``reject(requeue=False)`` dead-letters (True) or deletes (False).
        dead_letter_retention: how long dead letters are kept, seconds.
        polling_interval: the longest a consumer of several queues (or of fanout exchanges)
            waits on one of them before looking at the others, seconds.
        pop_batch: most messages one pop leases when the prefetch allows more.
        unack_interval: seconds between the reprocessor's passes that put back expired leases.
        call_timeout: the deadline of each Redis call, seconds.
        write_quorum: replicas that must confirm each write (``WAIT n``).
        max_payload_bytes: largest stored message (the kombu message as JSON), bytes.
        reply_spin_us: how long a thread busy-polls for a Redis reply before sleeping, us
            (``RedisQueues``' setting; 0: never).
        orphan_shard_grace: seconds a zone may go without a live consumer before the other
            zones' consumers adopt its shard (0: never adopt, and write no zone heartbeat:
            for producer-only processes).
        client_options: extra keyword arguments for every redis-py client.
        shard_affinity: ``"local_first"`` (default): a consumer pops its zone's shard first,
            then the other zones' shards, so a queue whose consumers all sit in one zone
            (remote-control replies, a single worker) still gets every message.
            ``"local_only"``: dyno-queues' model: a consumer pops only its zone's shard (and
            the shards of zones without a live consumer, after ``orphan_shard_grace``), so
            every zone needs consumers of every queue; remote-control reply queues
            (``*.pidbox``) are still read from every shard.
        sharding: where a publish goes: ``"round_robin"`` (default: every zone's shard in
            turn, as dyno-queues) or ``"local"`` (this process's zone's shard: producers
            feed their own zone's consumers; with ``local_first`` the others help when idle).
    """

    zones: tuple[str, ...] | None = None
    local_zone: str | None = None
    key_prefix: str = DEFAULT_KEY_PREFIX
    partitions: int = 1
    visibility_timeout: float = 60.0
    heartbeat_interval: float | None = None
    max_deliveries: int = 0
    dead_letters: bool = True
    dead_letter_retention: float = DEFAULT_DEAD_LETTER_RETENTION_MS / 1000
    polling_interval: float = 0.1
    pop_batch: int = 20
    unack_interval: float = 1.0
    call_timeout: float = 10.0
    write_quorum: int = 0
    max_payload_bytes: int = 16 * 1024 * 1024
    reply_spin_us: int | None = None
    orphan_shard_grace: float = 30.0
    client_options: tuple[tuple[str, Any], ...] = ()
    shard_affinity: str = "local_first"
    sharding: str = "round_robin"

    @property
    def lease_ms(self) -> int:
        """The lease of a delivery, ms."""
        return max(1, int(self.visibility_timeout * 1000))

    @property
    def beat_s(self) -> float:
        """Seconds between heartbeats: the option, else a third of the lease."""
        if self.heartbeat_interval is not None:
            return self.heartbeat_interval
        return max(0.05, self.visibility_timeout / 3)

    def policy(self) -> QueuePolicy:
        """The policy of every queue this transport opens: strict priority (0 first, as
        kombu's Redis transport), the delivery limit, the partitions, the dead-letter
        retention."""
        return QueuePolicy(max_deliveries=self.max_deliveries, strict_priority=True,
                           partitions=self.partitions,
                           dead_letter_retention_ms=max(1, int(self.dead_letter_retention
                                                               * 1000)))

    def factory_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``RedisQueues.from_url`` these options name."""
        kwargs: dict[str, Any] = {
            "key_prefix": self.key_prefix, "policy": self.policy(),
            "unack_timeout_ms": self.lease_ms,
            "unack_handler_interval_ms": max(1, int(self.unack_interval * 1000)),
            "call_timeout_ms": int(self.call_timeout * 1000),
            "max_payload_bytes": self.max_payload_bytes,
        }
        if self.zones is not None:
            kwargs["zones"] = list(self.zones)
            kwargs["local_zone"] = self.local_zone
        if self.sharding == "local" and self.local_zone is not None:
            # A zone's shard is the last character of its name (the builders' rule).
            kwargs["sharding_strategy"] = LocalOnlyStrategy(self.local_zone[-1])
        kwargs["orphan_shard_grace_ms"] = int(self.orphan_shard_grace * 1000)
        if self.reply_spin_us is not None:
            kwargs["reply_spin_us"] = self.reply_spin_us
        if self.write_quorum:
            kwargs["write_quorum"] = self.write_quorum
        if self.client_options:
            kwargs["client_options"] = dict(self.client_options)
        return kwargs


_FIELDS = frozenset(TransportOptions.__dataclass_fields__)
KNOWN_OPTIONS = frozenset(_FIELDS | KOMBU_OPTIONS)


def parse_options(raw: Mapping[str, Any] | None) -> TransportOptions:
    """Check a ``transport_options`` mapping and return the transport's settings.

    Args:
        raw: the mapping kombu passes (Celery's ``broker_transport_options``); None is {}.

    Returns:
        The frozen :class:`TransportOptions`; kombu's own options (:data:`KOMBU_OPTIONS`)
        are accepted and left out.

    Raises:
        ConfigurationError: (a ValueError) an unknown option (the error lists the known
            ones), or a value of the wrong type or out of range.
    """
    raw = dict(raw or {})
    unknown = sorted(set(raw) - KNOWN_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"unknown dynoqueue transport option {unknown[0]!r}; known options: "
            f"{', '.join(sorted(KNOWN_OPTIONS))}")
    values = _zones(raw)
    if "key_prefix" in raw:
        if not isinstance(raw["key_prefix"], str) or not raw["key_prefix"]:
            raise ConfigurationError(
                f"transport option key_prefix must be a non-empty str, got {raw['key_prefix']!r}")
        values["key_prefix"] = check_name("transport option key_prefix", raw["key_prefix"])
    values.update(_numbers(raw))
    for name, choices in (("dead_letters", (True, False)), ("shard_affinity", SHARD_AFFINITIES),
                          ("sharding", SHARDINGS)):
        if name in raw:
            if not any(raw[name] is c or (isinstance(c, str) and raw[name] == c)
                       for c in choices):
                raise ConfigurationError(f"transport option {name} must be one of "
                                         f"{list(choices)}, got {raw[name]!r}")
            values[name] = raw[name]
    if raw.get("client_options") is not None:
        if not isinstance(raw["client_options"], Mapping):
            raise ConfigurationError("transport option client_options must be a mapping")
        values["client_options"] = tuple(sorted(raw["client_options"].items()))
    options = TransportOptions(**values)
    if options.beat_s >= options.visibility_timeout:
        raise ConfigurationError(
            f"transport option heartbeat_interval ({options.beat_s} s) must be shorter than "
            f"visibility_timeout ({options.visibility_timeout} s)")
    options.policy()  # a bad combination raises here, before any queue is opened
    return options


def _zones(raw: dict[str, Any]) -> dict[str, Any]:
    """The checked ``zones`` (a list, or a comma-separated str) and ``local_zone``."""
    zones = raw.get("zones")
    if zones is None:
        if raw.get("local_zone") is not None:
            raise ConfigurationError("transport option local_zone needs zones")
        return {}
    if isinstance(zones, str):
        zones = [z.strip() for z in zones.split(",") if z.strip()]
    if not isinstance(zones, list | tuple) or not zones or not all(
            isinstance(z, str) and z for z in zones):
        raise ConfigurationError(
            f"transport option zones must be a non-empty list of zone names, got {zones!r}")
    local = raw.get("local_zone")
    if local not in zones:
        raise ConfigurationError(
            f"transport option local_zone must be one of zones {list(zones)}, got {local!r}")
    return {"zones": tuple(zones), "local_zone": local}


def _numbers(raw: dict[str, Any]) -> dict[str, Any]:
    """The checked counts and durations (seconds) among ``raw``."""
    values: dict[str, Any] = {}
    for name, low, high in (("partitions", 1, MAX_PARTITIONS), ("max_deliveries", 0, 2**31 - 1),
                            ("pop_batch", 1, 1000), ("write_quorum", 0, 2**31 - 1),
                            ("max_payload_bytes", 1, MAX_PAYLOAD_LIMIT),
                            ("reply_spin_us", 0, REPLY_SPIN_US_MAX)):
        if name in raw:
            values[name] = _int(name, raw[name], low, high)
    for name, lowest, highest in (("visibility_timeout", 0.05, MAX_VISIBILITY_TIMEOUT_S),
                                  ("polling_interval", 0.001, 60.0),
                                  ("unack_interval", 0.01, 3600.0),
                                  ("call_timeout", 0.1, 3600.0),
                                  ("orphan_shard_grace", 0.0, 100 * 365 * 86400.0),
                                  ("dead_letter_retention", 0.001, 100 * 365 * 86400.0)):
        if name in raw:
            values[name] = _seconds(name, raw[name], lowest, highest)
    if raw.get("heartbeat_interval") is not None:
        values["heartbeat_interval"] = _seconds("heartbeat_interval", raw["heartbeat_interval"],
                                                0.01, MAX_VISIBILITY_TIMEOUT_S)
    return values


def _int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigurationError(
            f"transport option {name} must be an int in {low}..{high}, got {value!r}")
    return value


def _seconds(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and low <= value <= high):
        raise ConfigurationError(
            f"transport option {name} must be a number of seconds in {low}..{high}, "
            f"got {value!r}")
    return float(value)
