"""Producing: push and ensure (push.lua); push's usual call is one script call, returned as a
:class:`~dynoqueue.core.requests.CommandOp` the drivers send without the operation's layers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError, InvalidArgumentError, InvalidMessageError
from ..model import validate
from ..model.message import Message
from .replies import ids_pushed
from .requests import QUORUM, CommandOp, Merge, Op, Run
from .shared import SCRIPT_BATCH, QueueState

#: How concurrent pushes join into one push.lua call: its arguments are now and mode, then 9
#: per message; its reply is now, then a flag per message.
_PUSH_MERGE = Merge(head=2, per_item=9, shared=1, limit=SCRIPT_BATCH)


class Producing(QueueState):
    """push (its one-call form, :meth:`push_call`, and the general path), ensure."""

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Run[list[str]]:
        """push's operation: a :class:`CommandOp` when it is one script call (see
        :meth:`push_call`), else the general one. Raises at once for bad input."""
        batch = self.prepare_push(messages, if_exists)
        call = self.push_call(batch, if_exists)
        return call if call is not None else self.push_validated(batch, if_exists)

    def push_validated(self, batch: list[Message], if_exists: str,
                       shards: list[int] | None = None) -> Op[list[str]]:
        """The general :meth:`push` of a validated batch (not validated again). ``shards``:
        each message's shard index, when the caller placed them (a partitioned queue places a
        whole batch in input order before splitting it)."""
        if not batch:
            return []
        self.check_open()
        return (yield from self._push("push", if_exists, batch, shards))

    def push_call(self, batch: list[Message], if_exists: str,
                  shards: list[int] | None = None) -> CommandOp[list[str]] | None:
        """The push of a validated batch as one script call and its decoding, when that is all
        the general path would do (the usual producer's call); None otherwise: an empty batch,
        over SCRIPT_BATCH messages, a write quorum (WAIT), the first call's checks, or the queue
        not yet in the zone registry. The command is the general path's first request (the one
        ``Sender.script`` yields) and the reply is decoded as it decodes it;
        ``tests/test_push_paths.py`` runs both on each of these conditions. ``shards``: see
        :meth:`push_validated`. Raises QueueClosedError for a closed queue."""
        if not self.one_call(len(batch)):
            return None
        self.check_open()
        command = self.sender.script_command(QUORUM, "push", self.life_keys,
                                             self.push_args(if_exists, batch, shards),
                                             merge=_PUSH_MERGE)
        return CommandOp(command, lambda reply: self.pushed(batch, [reply]),
                         lambda: self.push_validated(batch, if_exists, shards))

    def one_call(self, count: int) -> bool:
        """Whether the general path's push of ``count`` validated messages is one push.lua
        call and nothing else (:meth:`push_call`'s conditions)."""
        return not (not count or count > SCRIPT_BATCH or self.settings.write_quorum
                    or self.detached or not self._first_checks_done()
                    or (self.zones is not None and not self.zones.registered(self.name)))

    def ensure(self, message: Message) -> Op[bool]:
        (message,) = self.validate_batch([message])
        self.check_open()
        return bool((yield from self._push("ensure", "ensure", [message])))

    def prepare_push(self, messages: Iterable[Message], if_exists: str) -> list[Message]:
        if if_exists not in ("replace", "keep"):
            raise InvalidArgumentError(f"if_exists must be 'replace' or 'keep', got {if_exists!r}")
        return self.validate_batch(messages)

    def validate_batch(self, messages: Iterable[Message]) -> list[Message]:
        batch = validate.listed("push takes a list of Message", messages, single=(Message,),
                                error=InvalidMessageError)
        limit = self.settings.max_payload_bytes
        for message in batch:
            if not isinstance(message, Message):
                raise InvalidMessageError(
                    f"push takes Message objects, got {type(message).__name__}: {message!r:.80}")
            message.validate(limit)
        return batch

    @property
    def life_keys(self) -> list[str]:
        """push.lua's KEYS (and every lifecycle script's): QueueKeys.lifecycle_keys()."""
        return self._life_keys

    def push_args(self, mode: str, batch: list[Message],
                  shards: list[int] | None = None) -> list[Any]:
        """push.lua's ARGV: now, mode, then 9 per message (``shards``: see push_validated)."""
        return self.push_values([self._now_arg(), mode], batch, shards)

    def push_values(self, args: list[Any], batch: list[Message],
                    shards: list[int] | None = None) -> list[Any]:
        """``args``, extended with push.lua's 9 values of each message of ``batch`` (after now
        and mode: see push_args)."""
        placed = iter(shards) if shards is not None else None
        for m in batch:
            shard = self.shard_index(m) if placed is None else next(placed)
            args += (m.id, m.to_json(), m.timeout, m.priority, shard + 1,
                     "" if m.due_at_ms is None else m.due_at_ms,
                     "" if m.max_deliveries is None else m.max_deliveries,
                     "" if m.ttl_ms is None else m.ttl_ms, m.group or "")
        return args

    def shard_index(self, message: Message) -> int:
        if message.group is not None:
            return self._group_shard(message.group)
        shards = self.shards
        if self.zones is not None and self.zones.orphaned and getattr(
                self._strategy, "skip_orphaned", False):
            shards = [s for s in shards if s not in self.zones.orphaned]
        shard = self._strategy.get_next_shard(shards, message)
        try:
            return self._shard_pos[shard]
        except (KeyError, TypeError):
            raise ConfigurationError(
                f"sharding strategy chose shard {shard!r}, not one of {self.shards}") from None

    def pushed(self, batch: list[Message], replies: list[Any]) -> list[str]:
        """The ids of ``batch`` pushed, from push.lua's replies to it; tells the events."""
        ids = ids_pushed(batch, replies)
        self.events(self.name, "pushed", len(ids))
        return ids

    def _push(self, operation: str, mode: str, batch: list[Message],
              shards: list[int] | None = None) -> Op[list[str]]:
        """Push ``batch`` (push.lua, ``mode``: replace, keep or ensure); the ids pushed
        (``shards``: see :meth:`push_validated`)."""
        args = self.push_args(mode, batch, shards)
        if self.zones is not None and not self.zones.registered(self.name):
            # Before the data, so a queue that holds messages is always in the registry.
            yield from self.guard(operation, self.keys.message_hash,
                                   self.zones.register([self.name]))
        if len(batch) <= SCRIPT_BATCH:
            # Concurrent pushes may join into one script call (the asyncio driver's
            # auto-pipelining; up to SCRIPT_BATCH messages); each still gets its own flags.
            reply = yield from self._write_one(operation, "push", args, merge=_PUSH_MERGE)
            return self.pushed(batch, [reply])
        step = SCRIPT_BATCH * 9
        chunks = [args[i:i + step] for i in range(2, len(args), step)]
        # The first chunk fixes "now" for the whole batch; the rest reuse it.
        first = yield from self._write(
            operation, "push", [(self._life_keys, [args[0], mode, *chunks[0]])], replicate=False)
        now = first[0][0]
        replies = first + (yield from self._write(
            operation, "push", [(self._life_keys, [str(now), mode, *c]) for c in chunks[1:]]))
        return self.pushed(batch, replies)
