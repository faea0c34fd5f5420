"""Shard suppliers (which shards exist and which is local) and sharding strategies (where a push
goes). Pure Python, no Redis.

A shard is usually one availability zone: producers spread messages over all shards, consumers pop
from the shard of their own zone.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ConfigurationError
from .keys import check_key_part, check_name

if TYPE_CHECKING:
    from .message import Message


@runtime_checkable
class ShardSupplier(Protocol):
    """Names all shards and the local one. Mirrors dyno-queues' ``ShardSupplier``."""

    def get_queue_shards(self) -> list[str]:
        """All shard names, in a stable order. Mirrors ``getQueueShards``."""
        ...

    def get_current_shard(self) -> str:
        """The local shard, where pops and peeks act. Mirrors ``getCurrentShard``."""
        ...


class StaticShardSupplier:
    """A fixed list of shards and the local one.

    Args:
        shards: all shard names (non-empty, unique, no braces or whitespace).
        current: the local shard; must be one of ``shards``.

    Raises:
        ConfigurationError: (a ValueError) for an empty or duplicated list, a bad name, or a
            ``current`` that is not in ``shards``.
    """

    def __init__(self, shards: Sequence[str], current: str) -> None:
        if isinstance(shards, str) or not shards:
            raise ConfigurationError(f"shards must be a non-empty list of names, got {shards!r}")
        self._shards = [check_key_part("shard name", s) for s in shards]
        if len(set(self._shards)) != len(self._shards):
            raise ConfigurationError(f"shard names must be unique, got {self._shards}")
        if not isinstance(current, str) or current not in self._shards:
            raise ConfigurationError(f"current shard {current!r} is not one of {self._shards}")
        self._current = current

    def get_queue_shards(self) -> list[str]:
        return list(self._shards)

    def get_current_shard(self) -> str:
        return self._current

    def __repr__(self) -> str:
        return f"StaticShardSupplier({self._shards!r}, current={self._current!r})"


class SingleShardSupplier(StaticShardSupplier):
    """One shard, which is also the local one. Mirrors dyno-queues' ``SingleShardSupplier``."""

    def __init__(self, name: str) -> None:
        super().__init__([name], name)


class ZoneShardSupplier(StaticShardSupplier):
    """Maps availability zones to shard names; the local zone's shard is the current one.

    Mirrors dyno-queues' ``ConsistentDynoShardSupplier`` (explicit zone -> shard map). Use
    :meth:`from_zone_suffix` for the older ``DynoShardSupplier`` rule, shard = last character of
    the zone ("us-east-1c" -> "c"), which keeps Java clients on the same shard names.

    Args:
        zone_to_shard: zone name -> shard name; shard names must be unique.
        local_zone: the caller's zone; must be a key of ``zone_to_shard``.

    Raises:
        ConfigurationError: (a ValueError) for an empty map, duplicate shards, a bad name, or an
            unknown ``local_zone``.
    """

    def __init__(self, zone_to_shard: Mapping[str, str], local_zone: str) -> None:
        if not zone_to_shard:
            raise ConfigurationError("zone_to_shard must map at least one zone")
        if not isinstance(local_zone, str) or local_zone not in zone_to_shard:
            raise ConfigurationError(
                f"local zone {local_zone!r:.80} is not one of {sorted(zone_to_shard)}"
            )
        self.zone_to_shard = dict(zone_to_shard)
        self.local_zone = local_zone
        super().__init__(list(zone_to_shard.values()), zone_to_shard[local_zone])

    @classmethod
    def from_zone_suffix(cls, zones: Sequence[str], local_zone: str) -> ZoneShardSupplier:
        """Shard = last character of each zone name, as dyno-queues' ``DynoShardSupplier``.

        Raises:
            ConfigurationError: two zones end in the same character, or ``local_zone`` is unknown.
        """
        if isinstance(zones, str):
            raise ConfigurationError(f"zones must be a list of zone names, got {zones!r}")
        for zone in zones:
            check_name("zone name", zone)
        return cls({zone: zone[-1] for zone in zones}, local_zone)

    def shard_for_zone(self, zone: str) -> str:
        """The shard of ``zone``. Raises ConfigurationError for an unknown zone."""
        try:
            return self.zone_to_shard[zone]
        except KeyError:
            raise ConfigurationError(f"unknown zone {zone!r}") from None

    def __repr__(self) -> str:
        return f"ZoneShardSupplier({self.zone_to_shard!r}, local_zone={self.local_zone!r})"


@runtime_checkable
class ShardingStrategy(Protocol):
    """Chooses the shard a pushed message goes to. Mirrors dyno-queues' ``ShardingStrategy``."""

    def get_next_shard(self, all_shards: list[str], message: Message) -> str:
        """Return one of ``all_shards`` for ``message``. Mirrors ``getNextShard``.

        A strategy whose attribute ``skip_orphaned`` is True is passed only the shards that
        are not orphaned (see :class:`RoundRobinStrategy`); others get every shard.
        """
        ...


class RoundRobinStrategy:
    """Spreads pushes evenly: increments first, so shards [s0, s1, s2] get s1, s2, s0, s1, ...

    Thread-safe. The default strategy, as in dyno-queues.

    Args:
        skip_orphaned: leave out the shards the factory found orphaned (no live factory in
            their zone for ``orphan_shard_grace_ms``): pushes then go to live zones only.
            Default False: pushes keep going to every shard, as in dyno-queues, and the
            survivors drain an orphaned shard (docs/semantics.md, "Zone loss").
    """

    def __init__(self, *, skip_orphaned: bool = False) -> None:
        if not isinstance(skip_orphaned, bool):
            raise ConfigurationError(f"skip_orphaned must be a bool, got {skip_orphaned!r}")
        #: Read by the queue: a strategy with ``skip_orphaned = True`` is given only the
        #: shards that are not orphaned (any strategy may set it).
        self.skip_orphaned = skip_orphaned
        # next() of a C counter is one step under the GIL: thread-safe without a lock (at
        # worst, without a GIL, two pushes share a shard: only the spread suffers); the
        # lock cost ~5% of the client's CPU of one-message pushes from 100 asyncio tasks.
        self._calls = itertools.count(1)

    def get_next_shard(self, all_shards: list[str], message: Message) -> str:
        return all_shards[next(self._calls) % len(all_shards)]


class LocalOnlyStrategy:
    """Always the local shard (Conductor's ``LocalOnlyStrategy``).

    Args:
        local: the shard supplier whose current shard to use, or the shard name itself.
    """

    def __init__(self, local: ShardSupplier | str) -> None:
        self._shard = local if isinstance(local, str) else local.get_current_shard()

    def get_next_shard(self, all_shards: list[str], message: Message) -> str:
        return self._shard
