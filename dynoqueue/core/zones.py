"""Which queues exist under a prefix and which zones are alive: what makes the unack pass cover
every queue in Redis and every shard, not only the queues and the shard of one process.

* The queue registry ``P.QUEUES`` (a set): a queue's name is added once per process before
  its first push, and by any unack pass of a factory that has it open while the set lacks it;
  each unack pass reads the set (one SMEMBERS, no scan of the keyspace) and handles every
  queue in it. Java v1 clients do not write it: ``discover_queues`` (a SCAN) adds theirs.
* The zone heartbeat ``P.ZONES`` (a hash shard -> last beat, epoch ms): every factory beats
  for its local shard; a shard whose last beat is older than ``orphan_shard_grace_ms`` is
  orphaned, and every surviving factory adopts it: its unack pass puts back that shard's
  expired leases, and its pops take that shard's due messages once its own shard has none.

Every survivor reads the same hash, so all of them agree on which shards are orphaned; claims
are scripts, so two survivors draining one orphaned shard never deliver a message twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from .. import scripts
from ..model.keys import PrefixKeys
from ..model.message import as_text
from ..model.settings import QueueSettings
from .failures import guarded
from .requests import QUORUM, Command, Op
from .sender import script_load

log = logging.getLogger("dynoqueue.zones")

#: Queue names one SADD registers at most.
REGISTER_BATCH = 500


class ZoneWatch:
    """The registry and heartbeat of one factory (shared by its queues; thread-safe).

    Args:
        settings: the factory's settings (prefix, shards, local shard, grace, clock).

    Attributes:
        orphaned: the shards this factory adopts now (from its last heartbeat), in shard
            order; never the local shard; empty when adoption is off.
    """

    def __init__(self, settings: QueueSettings) -> None:
        self.keys = PrefixKeys(settings.key_prefix)
        self.settings = settings
        self.grace_ms = settings.orphan_shard_grace_ms
        self.orphaned: tuple[str, ...] = ()
        self._registered: set[str] = set()
        self._lock = threading.Lock()
        self._script = scripts.load(settings.doorbell, sharded=bool(settings.cluster))[
            "heartbeat"]

    def registered(self, name: str) -> bool:
        """True once this process has added ``name`` to the registry."""
        return name in self._registered

    def register(self, names: Iterable[str], *, again: bool = False) -> Op[int]:
        """Add the ``names`` this process has not registered yet (``again``: all of them) to
        ``P.QUEUES``.

        Returns:
            How many names were sent (0: none to send).
        """
        with self._lock:
            new = sorted(set(names) if again else set(names) - self._registered)
        for i in range(0, len(new), REGISTER_BATCH):
            chunk = new[i:i + REGISTER_BATCH]
            yield from guarded("register queues", self.keys.queues,
                               _command(("SADD", self.keys.queues, *chunk)))
            with self._lock:
                self._registered.update(chunk)
        return len(new)

    def forget(self, name: str) -> Op[None]:
        """Remove ``name`` from the registry (its queue was cleared)."""
        yield from guarded("clear", self.keys.queues,
                           _command(("SREM", self.keys.queues, name)))
        with self._lock:
            self._registered.discard(name)

    def known(self) -> Op[list[str]]:
        """Every queue name in the registry, sorted (one SMEMBERS on the quorum connection)."""
        members = yield from guarded("list queues", self.keys.queues,
                                     _command(("SMEMBERS", self.keys.queues)))
        return sorted(as_text(m) for m in members)

    def beat(self) -> Op[tuple[str, ...]]:
        """Write this factory's heartbeat and refresh :attr:`orphaned` (nothing when the grace
        period is 0).

        Returns:
            The orphaned shards, in shard order.
        """
        if self.grace_ms <= 0:
            return ()
        s = self.settings
        now = "" if s.clock is None else str(int(s.clock()))
        keys = [self.keys.zones]
        args = [now, s.local_shard, self.grace_ms, *s.shards]
        reply = yield from guarded("heartbeat", self.keys.zones, self._run(keys, args))
        orphaned = tuple(as_text(shard) for shard in reply[1:])
        if orphaned != self.orphaned:
            log.warning("shard %s: adopting orphaned shards %s (no heartbeat for %d ms), "
                        "before: %s", s.local_shard, list(orphaned), self.grace_ms,
                        list(self.orphaned))
        self.orphaned = orphaned
        return orphaned

    def adopted(self, shards: Sequence[str]) -> list[int]:
        """The indices in ``shards`` of the shards adopted now."""
        orphaned = self.orphaned
        return [i for i, shard in enumerate(shards) if shard in orphaned]

    def _run(self, keys: list[str], args: list[Any]) -> Op[Any]:
        """The heartbeat script; a server without it gets :func:`script_load` and the call
        again, as a queue's scripts do."""
        head = (("EVAL", self._script.text) if self.settings.eval_scripts
                else ("EVALSHA", self._script.sha))
        call = Command(QUORUM, (*head, len(keys), *keys, *args))
        try:
            return (yield call)
        except NoScriptError:
            yield script_load(QUORUM, self._script.text, keys, cluster=self.settings.cluster)
            return (yield call)


def _command(args: tuple[Any, ...]) -> Op[Any]:
    return (yield Command(QUORUM, args))
