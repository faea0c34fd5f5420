"""What a factory checks of its server once, before the first call of any of its queues.

Under an ``allkeys-*`` ``maxmemory-policy`` Redis evicts whole keys when memory runs short: a
queue's message hash, its zsets, its dead letters. Messages vanish with no error (BullMQ and
Celery warn of the same). dynoqueue's keys never carry a TTL, so ``noeviction`` and the
``volatile-*`` policies never evict them. :class:`ServerCheck` reads the policy with ``CONFIG
GET`` (or, where that is refused or renamed, as managed services do, ``INFO memory``) and, per
the ``eviction_check`` setting, refuses to go on (``"refuse"``, the default), logs a warning
once (``"warn"``) or does not look (``"off"``). A user that may read neither (an ACL user
without ``@admin`` and ``@dangerous``) gets one warning that says what was refused and what to
make sure of; its calls go on. Dynomite's profile turns the check off.

Where the user allowed such a policy (``"warn"``), evictions must still never be silent:
:meth:`ServerCheck.watch_evictions` (each unack pass) reads ``evicted_keys`` from ``INFO
stats`` and, when it grew, logs an ERROR naming the deployment and tells the factory's events
(:data:`EVICTED`, counted as ``dynoqueue_evicted_keys_total``).

It is one operation (:data:`~dynoqueue.core.requests.Op`), so both APIs run the same check.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import ResponseError

from ..errors import ConfigurationError
from ..model.message import as_text
from .requests import QUORUM, Op, Pipeline, RefreshSlots

log = logging.getLogger("dynoqueue.queues")

#: The factory events' kind for keys the server evicted (the events' first argument is then
#: the deployment, not a queue).
EVICTED = "evicted_keys"


def eviction_safe(policy: str) -> bool:
    """Whether a ``maxmemory-policy`` never evicts dynoqueue's keys (none has a TTL)."""
    return policy == "noeviction" or policy.startswith("volatile-")


class ServerCheck:
    """The eviction-policy check of one factory, run before its first call (see the module).

    Args:
        eviction_check: ``"refuse"``, ``"warn"`` or ``"off"``.
        cluster: the quorum client is a Redis Cluster client: the check runs on the primary
            that owns the key of the first call (redis-py's asyncio Cluster client cannot
            route ``CONFIG GET`` by itself).

    Attributes:
        done: nothing is left to check (after a pass, a warning, a skip, or with ``"off"``).
            A refused policy is checked again at the next call, so fixing the server's setting
            is enough; an error reaching the server leaves it to the next call too.
    """

    def __init__(self, eviction_check: str, cluster: bool = False) -> None:
        self.eviction_check = eviction_check
        self.cluster = cluster
        self.done = eviction_check == "off"
        #: The evicting policy the user allowed (``"warn"``), watched by watch_evictions.
        self.evicting: str | None = None
        #: The key whose primary was checked (a Cluster), and its last ``evicted_keys``.
        self._owner: str | None = None
        self._evicted: int | None = None

    def run(self, key: str) -> Op[None]:
        """Read the server's ``maxmemory-policy`` and act on it.

        Args:
            key: a key of the call about to run (on a Cluster, its primary is checked).

        Raises:
            ConfigurationError: an ``allkeys-*`` (or unknown) policy with ``"refuse"``.
            redis.exceptions.RedisError: the server could not be reached (the caller wraps it).
        """
        if self.done:
            return
        if self.cluster:  # the asyncio Cluster client reads its slot map at first use only
            yield RefreshSlots(QUORUM)
        owner = key if self.cluster else None
        refused = []
        try:
            (reply,) = yield Pipeline(QUORUM, [("CONFIG", "GET", "maxmemory-policy")],
                                      owner_of=owner)
            policy = _policy_of(reply)
        except ResponseError as exc:  # no permission, renamed (managed services), proxies
            refused.append(f"CONFIG GET: {exc}")
            try:  # INFO says it too, and more users may read it
                (reply,) = yield Pipeline(QUORUM, [("INFO", "memory")], owner_of=owner)
                policy = _policy_in_info(reply)
            except ResponseError as exc:
                refused.append(f"INFO: {exc}")
                policy = None
        if policy is None:
            log.warning("the Redis server's maxmemory-policy was not checked (%s): make sure it "
                        "is noeviction or volatile-* (an allkeys-* policy evicts queue keys and "
                        "loses messages without an error), or pass eviction_check='off'",
                        "; ".join(refused) or f"unexpected reply {reply!r:.80}")
        elif not eviction_safe(policy):
            message = (f"the Redis server's maxmemory-policy is {policy}: under memory pressure "
                       f"it evicts queue keys and messages are lost without an error; set "
                       f"'CONFIG SET maxmemory-policy noeviction' (or a volatile-* policy)")
            if self.eviction_check == "refuse":
                raise ConfigurationError(f"{message}, or pass eviction_check='warn' or 'off'")
            log.warning("%s", message)
            self.evicting, self._owner = policy, owner
        self.done = True

    def watch_evictions(self, deployment: str) -> Op[int]:
        """Where an evicting policy was allowed: read ``evicted_keys`` (``INFO stats``) and,
        when it grew since the last read, log an ERROR naming ``deployment``. Returns how many
        keys were evicted since the last read (0 at the first, or with no evicting policy).

        Raises:
            redis.exceptions.RedisError: the server could not be read (the caller logs it).
        """
        if self.evicting is None:
            return 0
        (reply,) = yield Pipeline(QUORUM, [("INFO", "stats")], owner_of=self._owner)
        count = _int_in_info(reply, "evicted_keys")
        if count is None:
            return 0
        before, self._evicted = self._evicted, count
        grew = 0 if before is None else max(0, count - before)
        if grew:
            log.error("Redis at %s evicted %d keys since the last unack pass (evicted_keys %d "
                      "-> %d) under maxmemory-policy %s: queue messages, leases or dead "
                      "letters may be lost; set 'CONFIG SET maxmemory-policy noeviction' or "
                      "give Redis more memory", deployment, grew, before, count,
                      self.evicting)
        return grew


def _policy_in_info(reply: Any) -> str | None:
    """The policy in an ``INFO memory`` reply: a dict (redis-py's parsing) or its text."""
    policy = _in_info(reply, "maxmemory_policy")
    return None if policy is None else policy.strip().lower()


def _int_in_info(reply: Any, field: str) -> int | None:
    """An integer field of an ``INFO`` reply (None when absent or not a number)."""
    value = _in_info(reply, field)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _in_info(reply: Any, field: str) -> str | None:
    """A field of an ``INFO`` reply: a dict (redis-py's parsing) or its text."""
    if isinstance(reply, dict):
        value = reply.get(field)
        if value is None:
            return None
        return as_text(value) if isinstance(value, (bytes, str)) else str(value)
    for line in as_text(reply).splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return value.strip()
    return None


def _policy_of(reply: Any) -> str | None:
    """The policy in a ``CONFIG GET`` reply: a dict (redis-py's parsing, RESP2 or 3) or a flat
    [name, value] list."""
    if isinstance(reply, dict):
        values = list(reply.values())
    elif isinstance(reply, (list, tuple)):
        values = list(reply[1::2])
    else:
        return None
    return as_text(values[0]).strip().lower() if values else None
