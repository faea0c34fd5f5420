"""Producing: push and ensure (push.lua), and the one-command push the drivers send directly."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError, InvalidArgumentError, InvalidMessageError
from ..model import validate
from ..model.message import Message
from .replies import ids_pushed
from .requests import QUORUM, Command, Merge, Op
from .shared import SCRIPT_BATCH, QueueState

#: How concurrent pushes join into one push.lua call: its arguments are now and mode, then 9
#: per message; its reply is now, then a flag per message.
_PUSH_MERGE = Merge(head=2, per_item=9, shared=1, limit=SCRIPT_BATCH)


class Producing(QueueState):
    """push, ensure, and :meth:`push_call` (push's usual call without the operation)."""

    def push(self, messages: Iterable[Message], if_exists: str = "replace") -> Op[list[str]]:
        batch = self.prepare_push(messages, if_exists)
        return (yield from self.push_validated(batch, if_exists))

    def push_validated(self, batch: list[Message], if_exists: str,
                       shards: list[int] | None = None) -> Op[list[str]]:
        """:meth:`push` of a batch :meth:`push_call` has validated (not validated again).
        ``shards``: each message's shard index, when the caller placed them (a partitioned
        queue places a whole batch in input order before splitting it)."""
        if not batch:
            return []
        self.check_open()
        return (yield from self._push("push", if_exists, batch, shards))

    def push_call(self, messages: Iterable[Message],
                  if_exists: str = "replace") -> tuple[list[Message], Command | None]:
        """:meth:`push` without an operation when all it does is one script call (the usual
        producer's call): the validated batch and that call's command, the first request
        ``push_validated(batch, if_exists)`` would yield; :meth:`pushed` reads its reply. The
        command is None when the push needs more (an empty batch, over SCRIPT_BATCH messages,
        a write quorum, the first call's checks, the queue registry): run
        ``push_validated(batch, if_exists)``. A driver that fails to send the command throws
        that error into ``push_validated(batch, if_exists)`` at its first request and runs it
        on from there (NOSCRIPT, retries and typed errors as always). Raises as :meth:`push`
        does for bad input or a closed queue."""
        batch = self.prepare_push(messages, if_exists)
        return batch, self.push_command(batch, if_exists)

    def push_command(self, batch: list[Message], if_exists: str) -> Command | None:
        """:meth:`push_call`'s command for a validated batch (None: see push_call)."""
        # Kept beside push_validated because a one-message push is the call producers make
        # most: no generator runs on its way (each layer costs every call). It is not a second
        # push: the command is the one Sender.script would yield (script_command), its reply
        # is decoded as _push's, and each condition below is one that makes push_validated
        # yield something else first.
        if (not batch or len(batch) > SCRIPT_BATCH or self.settings.write_quorum
                or self.detached or not self._first_checks_done()
                or (self.zones is not None and not self.zones.registered(self.name))):
            return None
        self.check_open()
        return self.sender.script_command(QUORUM, "push", self._life_keys,
                                          self._push_args(if_exists, batch), merge=_PUSH_MERGE)

    def pushed(self, batch: list[Message], reply: Any) -> list[str]:
        """The result of :meth:`push_call`'s command: the ids pushed, in input order."""
        return self._pushed(batch, [reply])

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

    def _push_args(self, mode: str, batch: list[Message],
                   shards: list[int] | None = None) -> list[Any]:
        """push.lua's ARGV: now, mode, then 9 per message (``shards``: see push_validated)."""
        args: list[Any] = [self._now_arg(), mode]
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

    def _pushed(self, batch: list[Message], replies: list[Any]) -> list[str]:
        """The ids pushed, from push.lua's replies; tells the events."""
        ids = ids_pushed(batch, replies)
        self.events(self.name, "pushed", len(ids))
        return ids

    def _push(self, operation: str, mode: str, batch: list[Message],
              shards: list[int] | None = None) -> Op[list[str]]:
        """Push ``batch`` (push.lua, ``mode``: replace, keep or ensure); the ids pushed
        (``shards``: see :meth:`push_validated`)."""
        args = self._push_args(mode, batch, shards)
        if self.zones is not None and not self.zones.registered(self.name):
            # Before the data, so a queue that holds messages is always in the registry.
            yield from self.guard(operation, self.keys.message_hash,
                                   self.zones.register([self.name]))
        if len(batch) <= SCRIPT_BATCH:
            # Concurrent pushes may join into one script call (the asyncio driver's
            # auto-pipelining; up to SCRIPT_BATCH messages); each still gets its own flags.
            reply = yield from self._write_one(operation, "push", args, merge=_PUSH_MERGE)
            return self._pushed(batch, [reply])
        step = SCRIPT_BATCH * 9
        chunks = [args[i:i + step] for i in range(2, len(args), step)]
        # The first chunk fixes "now" for the whole batch; the rest reuse it.
        first = yield from self._write(
            operation, "push", [(self._life_keys, [args[0], mode, *chunks[0]])], replicate=False)
        now = first[0][0]
        replies = first + (yield from self._write(
            operation, "push", [(self._life_keys, [str(now), mode, *c]) for c in chunks[1:]]))
        return self._pushed(batch, replies)
