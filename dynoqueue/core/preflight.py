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
        self.done = True


def _policy_in_info(reply: Any) -> str | None:
    """The policy in an ``INFO memory`` reply: a dict (redis-py's parsing) or its text."""
    if isinstance(reply, dict):
        policy = reply.get("maxmemory_policy")
        return None if policy is None else as_text(policy).strip().lower()
    for line in as_text(reply).splitlines():
        name, _, value = line.partition(":")
        if name == "maxmemory_policy":
            return value.strip().lower()
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
