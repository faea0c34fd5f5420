"""The send path of one queue: how a script call, a command or a pipelined write reaches Redis.

:class:`Sender` builds every script call (``EVALSHA``, or ``EVAL`` with its text when the
settings say so) and yields it as a request (:mod:`dynoqueue.core.requests`); it recovers what
a retry can recover and nothing else: a server that lacks a script is sent its text, Dynomite's
own error replies are retried for idempotent calls, a Cluster write is re-routed after a
failover, and a write awaits its quorum (``WAIT``). Typed errors and the first-call checks are
the caller's (:mod:`dynoqueue.core.shared`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import scripts
from ..errors import QuorumNotReachedError
from ..model.settings import QueueSettings
from .failures import dynomite_error
from .requests import QUORUM, READ, Command, Merge, Op, Pipeline, RefreshSlots, Request, Scan, Sleep

log = logging.getLogger("dynoqueue.queue")

#: Pauses between attempts of a pipelined Cluster write after a failover (MOVED, connection
#: lost): ~7 s in all, longer than a replica takes over with cluster-node-timeout up to ~5 s.
CLUSTER_RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0)
#: Cluster replies meaning the slot map is stale or the slot is changing hands (MOVED is an
#: AskError). Matched by type: a pipeline rewrites the message ("Command # 1 ... caused error").
SLOT_MOVED_ERRORS = (AskError, ClusterDownError, TryAgainError, ReadOnlyError)
_NODE_LOST = (RedisConnectionError, RedisTimeoutError, *SLOT_MOVED_ERRORS)
#: Pauses before repeating an idempotent call that Dynomite answered with its own error (no
#: quorum, a rack's redis unreachable): ~2.5 s in all, a quick redis-server restart plus the
#: second Dynomite waits before it reconnects to it.
DYNOMITE_RETRY_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0)


def script_load(role: str, text: str, keys: list[str], *, cluster: bool) -> Request:
    """``SCRIPT LOAD`` of ``text`` where a call on ``keys`` runs: on a Cluster, the primary
    that owns the first key's slot (the asyncio Cluster client cannot route a keyless SCRIPT
    LOAD). The answer to NOSCRIPT, for a queue's scripts and the zone heartbeat alike: not
    EVAL, whose scripts Redis 7.4+ and Valkey 8 evict."""
    load = ("SCRIPT", "LOAD", text)
    if cluster:
        return Pipeline(role, [load], owner_of=keys[0])
    return Command(role, load, idempotent=True)


class Sender:
    """The send path of one queue (see the module's docstring).

    Args:
        name: the queue name (for the log).
        settings: the factory's validated settings.
        life_keys: the queue's lifecycle keys (``QueueKeys.lifecycle_keys()``), which nearly
            every write takes: their calls' heads are made once per script.
        quorum_cluster: the quorum client is a Redis Cluster client.
        replica_reads: the read client is a Cluster client that reads from replicas.
    """

    def __init__(self, name: str, settings: QueueSettings, life_keys: list[str], *,
                 quorum_cluster: bool, replica_reads: bool) -> None:
        self.name = name
        self.settings = settings
        self.scripts = scripts.load(settings.doorbell, sharded=bool(settings.cluster))
        self.life_keys = life_keys
        self._life_heads: dict[str, tuple[Any, ...]] = {}  # see head
        self._quorum_cluster = quorum_cluster
        self._replica_reads = replica_reads
        self._ro_supported = True  # EVALSHA_RO exists (Redis >= 7)

    # ----------------------------------------------------------------------------- script calls

    def head(self, name: str, keys: list[str]) -> tuple[Any, ...]:
        """The args of a call of script ``name`` before its ARGV (script, key count, keys):
        ``EVALSHA``, or ``EVAL`` with its text when the settings say so (Dynomite: a rack whose
        redis restarted lost its scripts, and the other racks' quorum hides its NOSCRIPT
        replies). Made once per script for the lifecycle keys."""
        if keys is self.life_keys:
            head = self._life_heads.get(name)
            if head is None:
                head = self._life_heads[name] = self._make_head(name, keys)
            return head
        return self._make_head(name, keys)

    def _make_head(self, name: str, keys: list[str]) -> tuple[Any, ...]:
        script = self.scripts[name]
        if self.settings.eval_scripts:
            return ("EVAL", script.text, len(keys), *keys)
        return ("EVALSHA", script.sha, len(keys), *keys)

    def script_command(self, role: str, name: str, keys: list[str], args: list[Any], *,
                       idempotent: bool = True, merge: Merge | None = None) -> Command:
        """The command calling script ``name``: the first request :meth:`script` yields.
        ``merge`` (args after the keys: its head counts only those) lets the driver join this
        call with concurrent ones of the same script and keys (see :class:`Merge`)."""
        head = self.head(name, keys)
        return Command(role, (*head, *args), idempotent=idempotent,
                       merge=None if merge is None else merge.after(len(head)),
                       head=head if keys is self.life_keys else None)

    def script(self, role: str, name: str, keys: list[str], args: list[Any], *,
               idempotent: bool, merge: Merge | None = None) -> Op[Any]:
        """Run script ``name``: its command is this operation's first request; only when that
        fails does the recovery of :meth:`_script_again` run (one generator on the usual path:
        nearly every operation's calls go through here)."""
        command = self.script_command(role, name, keys, args, idempotent=idempotent,
                                      merge=merge)
        try:
            return (yield command)
        except ResponseError as exc:
            failed = exc
        return (yield from self._script_again(command, name, keys, failed))

    def _script_again(self, command: Command, name: str, keys: list[str],
                      failed: ResponseError) -> Op[Any]:
        """After ``command`` failed with ``failed``: Dynomite's own errors are retried (see
        :meth:`send`); a server that lacks the script (restarted, failed over, or that evicted
        it) is sent its text with ``SCRIPT LOAD``, then the call again (NOSCRIPT: nothing ran).
        Not with ``EVAL``: Redis 7.4+ and Valkey 8 keep at most 500 scripts sent that way and
        evict the oldest, so a busy server would answer NOSCRIPT again and again."""
        role, idempotent = command.role, command.idempotent
        try:
            return (yield from self.send(command, idempotent=idempotent, failed=failed))
        except NoScriptError:
            yield from self.send(script_load(role, self.scripts[name].text, keys,
                                             cluster=self._quorum_cluster), idempotent=True)
            return (yield from self.send(Command(role, command.args, idempotent=idempotent),
                                         idempotent=idempotent))

    def read_script(self, name: str, keys: list[str], args: list[Any]) -> Op[Any]:
        """A read-only script on the read connection. On a Cluster that reads from replicas it
        runs as ``EVALSHA_RO`` on a replica of the slot (redis-py would send EVALSHA to the
        primary); a lost replica or a stale slot map reads once through the client's own
        routing, and a server without ``EVALSHA_RO`` (Redis < 7) reads on the primary."""
        if self._replica_reads and self._ro_supported:
            script = self.scripts[name]
            tail = (len(keys), *keys, *args)
            try:
                try:
                    return (yield Command(READ, ("EVALSHA_RO", script.sha, *tail), keys[0]))
                except NoScriptError:
                    return (yield Command(READ, ("EVAL_RO", script.text, *tail), keys[0]))
            except _NODE_LOST:
                yield RefreshSlots(READ)
            except ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                self._ro_supported = False
        return (yield from self.script(READ, name, keys, args, idempotent=True))

    # ----------------------------------------------------------------------------- requests

    def send(self, request: Request, *, idempotent: bool,
             failed: ResponseError | None = None) -> Op[Any]:
        """Send ``request``; if it is ``idempotent``, repeat it after Dynomite's own error
        replies (which do not say whether some racks applied it), up to
        :data:`DYNOMITE_RETRY_PAUSES_S`. Claims are not idempotent: they lease other messages.
        ``failed``: the error of an attempt already made (the next attempt is a retry)."""
        pauses = iter((*DYNOMITE_RETRY_PAUSES_S, None))
        error = failed
        while True:
            if error is not None:
                pause_s = next(pauses)
                if not idempotent or pause_s is None or dynomite_error(error) is None:
                    raise error
                log.info("queue %s: %s; retrying in %.2f s", self.name, error, pause_s)
                yield Sleep(pause_s)
            try:
                return (yield request)
            except ResponseError as exc:
                error = exc

    def command(self, role: str, *args: Any) -> Op[Any]:
        """One command (idempotent: a read, or a write that may be repeated)."""
        return (yield from self.send(Command(role, args), idempotent=True))

    def scan(self, key: str) -> Op[list[tuple[Any, Any]]]:
        """Every (field, value) of hash ``key``, read on the read connection."""
        pairs: list[tuple[Any, Any]] = yield from self.send(Scan(READ, key, 500),
                                                            idempotent=True)
        return pairs

    # ----------------------------------------------------------------------------- pipelines

    def write(self, operation: str, name: str, calls: list[tuple[list[str], list[Any]]],
              quorum: int) -> Op[list[Any]]:
        """Run write script ``name`` once per (keys, args), pipelined, then ``WAIT`` for
        ``quorum`` replicas (0: no WAIT); the replies in order.

        Raises:
            QuorumNotReachedError: fewer replicas than ``quorum`` confirmed in time.
        """
        key = calls[0][0][0]
        commands: list[Sequence[Any]] = [(*self.head(name, keys), *args) for keys, args in calls]
        if quorum:
            commands.append(("WAIT", quorum, self.settings.write_quorum_timeout_ms))
        results = yield from self.pipelined(key, commands, self.scripts[name].text)
        if quorum:
            acknowledged = int(results.pop())
            if acknowledged < quorum:
                raise QuorumNotReachedError(operation, key, acknowledged, quorum)
        return list(results)

    def pipelined(self, key: str, commands: list[Sequence[Any]], text: str) -> Op[list[Any]]:
        """Send ``commands`` in one round trip; a server that lacks the script (a failover moved
        the connection to one that never loaded it) gets ``SCRIPT LOAD`` in front and the
        pipeline again: every EVALSHA of it failed, so nothing ran twice."""
        try:
            return (yield from self._on_owner(key, commands))
        except NoScriptError:
            results = yield from self._on_owner(key, [("SCRIPT", "LOAD", text), *commands])
            return list(results[1:])

    def _on_owner(self, key: str, commands: list[Sequence[Any]]) -> Op[list[Any]]:
        """Pipeline on the quorum client; on a Cluster, on the primary that owns ``key``'s slot,
        so a write and its WAIT reach one node. That bypasses the client's own routing, so
        this does what the routing would after a failover or resharding: re-read the slot map
        and try again."""
        replies: list[Any]
        if not self._quorum_cluster:
            replies = yield from self.send(Pipeline(QUORUM, commands), idempotent=True)
            return replies
        for attempt, pause_s in enumerate((*CLUSTER_RETRY_PAUSES_S, None)):
            try:
                replies = yield Pipeline(QUORUM, commands, owner_of=key)
                return replies
            except _NODE_LOST as exc:
                if pause_s is None:
                    raise
                log.info("cluster write for %s failed (%s); re-reading the slot map, retry %d",
                         key, exc, attempt + 1)
                yield Sleep(pause_s)
                yield RefreshSlots(QUORUM)
        raise AssertionError("unreachable")  # pragma: no cover
