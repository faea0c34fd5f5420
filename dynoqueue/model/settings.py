"""The settings of a RedisQueues factory and its queues: one typed, frozen, validated object.

:class:`QueueOptions` names the keyword arguments that :class:`~dynoqueue.RedisQueues`, its
asyncio twin and every builder accept; :meth:`QueueSettings.build` checks them once and the
queues share the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, Unpack

from ..errors import ConfigurationError
from .keys import check_key_part, check_name
from .message import DEFAULT_MAX_PAYLOAD_BYTES
from .policy import QueuePolicy
from .sharding import RoundRobinStrategy, ShardingStrategy, ShardSupplier
from .validate import count, int_at_least, ms

#: Largest max_payload_bytes: Redis' largest string (proto-max-bulk-len), 512 MiB.
MAX_PAYLOAD_LIMIT = 512 * 1024 * 1024


class QueueOptions(TypedDict, total=False):
    """Keyword arguments of RedisQueues and the builders (each optional; defaults below).

    Attributes:
        unack_timeout_ms: lease a pop takes on each message, ms, 1 .. 100 years
            (``validate.MAX_MS``; default 60 000).
        unack_handler_interval_ms: how often the unack reprocessor runs, ms, 1 .. 100 years; 0
            disables it (call ``process_unacks`` yourself). Default 60 000.
        sharding_strategy: where pushes go; default :class:`RoundRobinStrategy`.
        write_quorum: replicas that must confirm each write (``WAIT n``), 0 .. 2**31 - 1
            (default 0).
        write_quorum_timeout_ms: how long WAIT may block, ms, 1 .. 100 years (default 100).
        clock: callable returning epoch ms, replacing the Redis server's ``TIME``.
        max_payload_bytes: largest payload accepted, UTF-8 bytes, 1 .. 512 MiB (default 1 MiB).
        poll_interval_ms: longest a waiting pop sleeps between checks when no doorbell rings,
            ms, 1 .. 100 years (default 1 000).
        hash_tag: wrap queue names in a Cluster hash tag (a bool); None (default): on for
            Redis Cluster.
        doorbell: scripts PUBLISH a doorbell that wakes waiting pops (a bool; default True;
            False for servers without pub/sub, such as Dynomite).
        policy: the :class:`~dynoqueue.model.policy.QueuePolicy` of every queue of the factory
            (max deliveries, TTL, retention); None (default): whatever each queue has stored,
            else dyno-queues' behaviour (no limits).
        eval_scripts: send each script's text (EVAL), not its SHA1 (default False; True for
            Dynomite, whose racks lose scripts on a restart without telling the client).
        orphan_shard_grace_ms: how long a shard may go without a heartbeat of a factory whose
            local shard it is before the other zones' factories adopt it (put back its expired
            leases in their unack passes, pop its due messages after their own shard's), ms,
            >= 0 (default 30 000; 0: never adopt, and write no heartbeat). Each factory beats
            every ``min(unack_handler_interval_ms, orphan_shard_grace_ms / 3)``; see
            docs/semantics.md, "Zone loss".
        call_timeout_ms: the deadline of every call, ms, 100..3 600 000 (default 10 000):
            each call returns or raises a typed error within it, retries and reconnects
            included; a waiting pop gets its ``wait_ms`` plus this. Past it the call raises
            :class:`~dynoqueue.errors.CallTimeoutError` (a frozen or partitioned server).
            The builders derive their clients' socket timeouts from it (read: all of it,
            connect: a quarter, at most 2 s), so a call waits out a stall shorter than the
            deadline (``CLIENT PAUSE`` in a failover) and a frozen server fails it at the
            deadline; ``close()`` is bounded by it too.
        eviction_check: what the first call does when the server's ``maxmemory-policy`` may
            evict queue keys (``allkeys-*``: messages vanish without an error): ``"refuse"``
            (default: raise ConfigurationError), ``"warn"`` (log one warning) or ``"off"``.
            A server or user that refuses ``CONFIG GET`` is not checked (see
            :mod:`dynoqueue.core.preflight`).
        reply_spin_us: sync API only: how long a thread busy-polls its socket for a script
            call's reply before it sleeps in the kernel, microseconds, 0..10 000 (default 200;
            0: never poll). Waking a sleeping thread on an idle CPU can cost more than a
            loopback round trip itself (PING: ~80 us sleeping, ~30 us polling, in a VM), so
            polling quick replies makes one-message-per-call pushes ~35% faster there. Each
            kind of call (per script and size) polls only while that gets its replies
            sooner: slow calls, and machines whose CPUs are all busy, sleep at once. Only on
            Linux with two or more usable CPUs. The asyncio API ignores it (an event loop
            never busy-waits).
    """

    unack_timeout_ms: int
    unack_handler_interval_ms: int
    sharding_strategy: ShardingStrategy | None
    write_quorum: int
    write_quorum_timeout_ms: int
    clock: Callable[[], int] | None
    max_payload_bytes: int
    poll_interval_ms: int
    hash_tag: bool | None
    doorbell: bool
    policy: QueuePolicy | None
    eval_scripts: bool
    orphan_shard_grace_ms: int
    call_timeout_ms: int
    eviction_check: str
    reply_spin_us: int


#: Default and bounds of ``call_timeout_ms``.
DEFAULT_CALL_TIMEOUT_MS = 10_000
CALL_TIMEOUT_MS_RANGE = (100, 3_600_000)
#: Default and largest ``reply_spin_us``.
DEFAULT_REPLY_SPIN_US = 200
REPLY_SPIN_US_MAX = 10_000

@dataclass(frozen=True)
class QueueSettings:
    """What every queue of one factory shares, validated (see :class:`QueueOptions` for the
    options and their defaults). Make one with :meth:`build`.

    Attributes:
        key_prefix: prefix of every key.
        shards: every shard name, in the order the scripts receive them.
        local_shard: the shard pops, peeks and the unack reprocessor act on.
        cluster: the quorum connection is a Redis Cluster client (``hash_tag`` defaults on).
    """

    key_prefix: str
    shards: tuple[str, ...]
    local_shard: str
    cluster: bool = False
    unack_timeout_ms: int = 60_000
    unack_handler_interval_ms: int = 60_000
    sharding_strategy: ShardingStrategy | None = None
    write_quorum: int = 0
    write_quorum_timeout_ms: int = 100
    clock: Callable[[], int] | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    poll_interval_ms: int = 1000
    hash_tag: bool | None = None
    doorbell: bool = True
    policy: QueuePolicy | None = None
    eval_scripts: bool = False
    orphan_shard_grace_ms: int = 30_000
    call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS
    eviction_check: str = "refuse"
    reply_spin_us: int = DEFAULT_REPLY_SPIN_US

    @classmethod
    def build(cls, key_prefix: str, shard_supplier: ShardSupplier, *, cluster: bool,
              **options: Unpack[QueueOptions]) -> QueueSettings:
        """Check every option and fill in the defaults.

        Args:
            key_prefix: prefix of every key (no braces, whitespace or control characters).
            shard_supplier: names all shards and the local one.
            cluster: the quorum connection is a Redis Cluster client.
            **options: see :class:`QueueOptions`.

        Raises:
            ConfigurationError: (a ValueError) an option is unknown, out of range or
                inconsistent.
        """
        unknown = set(options) - set(QueueOptions.__annotations__)
        if unknown:
            raise ConfigurationError(f"unknown setting(s) {sorted(unknown)}; known: "
                                     f"{', '.join(QueueOptions.__annotations__)}")
        if not isinstance(shard_supplier, ShardSupplier):
            raise ConfigurationError("shard_supplier must provide get_queue_shards() and "
                                     "get_current_shard()")
        return cls(key_prefix, tuple(shard_supplier.get_queue_shards()),
                   shard_supplier.get_current_shard(), cluster, **options)

    def __post_init__(self) -> None:
        check_name("key prefix", self.key_prefix)
        for shard in self.shards:  # a custom ShardSupplier's names are checked here
            check_key_part("shard name", shard)
        if not self.shards or not isinstance(self.local_shard, str) \
                or self.local_shard not in self.shards:
            raise ConfigurationError(f"current shard {self.local_shard!r:.80} is not one of the "
                                     f"shards {list(self.shards)}")
        # Upper bounds: what a Redis score, WAIT, a thread's or a task's wait can hold (ms up
        # to validate.MAX_MS, 100 years) and the largest Redis string (payloads).
        for name, low in (("unack_timeout_ms", 1), ("unack_handler_interval_ms", 0),
                          ("write_quorum_timeout_ms", 1), ("poll_interval_ms", 1)):
            ms(name, getattr(self, name), low=low, error=ConfigurationError)
        count("write_quorum", self.write_quorum, error=ConfigurationError)
        int_at_least("max_payload_bytes", self.max_payload_bytes, 1, high=MAX_PAYLOAD_LIMIT,
                     error=ConfigurationError)
        for name in ("doorbell", "eval_scripts"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be a bool, got {getattr(self, name)!r:.80}")
        if self.hash_tag is not None and not isinstance(self.hash_tag, bool):
            raise ConfigurationError(f"hash_tag must be a bool or None, got {self.hash_tag!r:.80}")
        ms("orphan_shard_grace_ms", self.orphan_shard_grace_ms, low=0, error=ConfigurationError)
        check_call_timeout_ms(self.call_timeout_ms)
        if self.policy is not None and not isinstance(self.policy, QueuePolicy):
            raise ConfigurationError(f"policy must be a QueuePolicy, got {self.policy!r}")
        if self.eviction_check not in ("refuse", "warn", "off"):
            raise ConfigurationError(f"eviction_check must be 'refuse', 'warn' or 'off', "
                                     f"got {self.eviction_check!r}")
        int_at_least("reply_spin_us", self.reply_spin_us, 0, unit="us", high=REPLY_SPIN_US_MAX,
                     error=ConfigurationError)
        if self.clock is not None and not callable(self.clock):
            raise ConfigurationError("clock must be a callable returning epoch milliseconds")
        strategy = self.sharding_strategy
        if strategy is None:
            strategy = RoundRobinStrategy()
        elif not callable(getattr(strategy, "get_next_shard", None)):
            raise ConfigurationError("sharding_strategy must provide get_next_shard()")
        # Frozen: the defaults that depend on other fields are filled in once, here.
        object.__setattr__(self, "sharding_strategy", strategy)
        object.__setattr__(self, "hash_tag",
                           self.cluster if self.hash_tag is None else self.hash_tag)

    @property
    def call_timeout_s(self) -> float:
        """The deadline of one call, seconds."""
        return self.call_timeout_ms / 1000

    @property
    def strategy(self) -> ShardingStrategy:
        """The sharding strategy (never None after construction)."""
        assert self.sharding_strategy is not None
        return self.sharding_strategy


def check_call_timeout_ms(value: object) -> int:
    """``value`` if it is a valid ``call_timeout_ms``, else ConfigurationError."""
    low, high = CALL_TIMEOUT_MS_RANGE
    int_at_least("call_timeout_ms", value, low, error=ConfigurationError)
    if value > high:  # type: ignore[operator]
        raise ConfigurationError(f"call_timeout_ms must be <= {high} (one hour), got {value!r}")
    return value  # type: ignore[return-value]
