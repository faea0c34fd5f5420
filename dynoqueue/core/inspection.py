"""Inspecting: reads that change nothing (peek, get, contains, scans and matches, sizes, stale
ids, a message's state and record, a group, the dead letters)."""

from __future__ import annotations

from typing import Any

from ..model import validate
from ..model.luapattern import LuaPattern
from ..model.message import Message, as_text
from ..model.states import DeadLetter, MessageInfo, MessageState
from . import replies
from .requests import QUORUM, READ, Op
from .shared import MATCH_PAGE_IDS, QueueState

#: QueueKeys.lifecycle_keys() starts with this many keys that are not per shard.
_FIXED_LIFE_KEYS = 16
#: How many of a shard's earliest ids find_stale_messages checks.
STALE_CHECK_LIMIT = 1000


class Inspecting(QueueState):
    """peek, contains, get, get_all_messages, find_match, size, shard_sizes,
    find_stale_messages, state, info, group_info, dead_letters, dead_size."""

    def peek(self, operation: str, all_shards: bool, count: int) -> Op[list[Message]]:
        validate.count("count", count)
        self.check_attached()
        if count == 0:
            return []
        order = self.shards_local_first if all_shards else [self.local_index]
        keys = [self.keys.message_hash, self.keys.policy]
        for i in order:
            keys += [self.keys.queue_shard(self.shards[i]), self.keys.ready_shard(self.shards[i])]
        flat = yield from self._read(operation, keys[2], "peek", keys, [self._now_arg(), count])
        return [Message.from_json(flat[i + 1], shard=self.shards[order[int(flat[i]) - 1]])
                for i in range(0, len(flat), 2)]

    def contains(self, id: str) -> Op[bool]:
        validate.message_id(id)
        self.check_attached()
        key = self.keys.message_hash
        return bool((yield from self._command("contains", key, QUORUM, "HEXISTS", key, id)))

    def get(self, operation: str, id: str, local: bool) -> Op[Message | None]:
        validate.message_id(id)
        self.check_attached()
        key = self.keys.message_hash
        raw = yield from self._command(operation, key, READ if local else QUORUM, "HGET", key, id)
        return None if raw is None else Message.from_json(raw)

    def get_all_messages(self) -> Op[list[Message]]:
        self.check_attached()
        key = self.keys.message_hash
        pairs = yield from self.guard("get_all_messages", key, self.sender.scan(key))
        return [Message.from_json(raw) for _, raw in pairs]

    def find_match(self, pattern: str, local_only: bool) -> Op[str | None]:
        """The first message (in HSCAN order) whose JSON matches ``pattern``: the hash is read
        a page at a time on the read connection and matched here (no script runs a pattern);
        with ``local_only``, find_match.lua keeps the first match waiting in the local shard."""
        matcher = LuaPattern(validate.pattern(pattern))
        self.check_attached()
        local = self.local_shard
        keys = [self.keys.message_hash, self.keys.queue_shard(local), self.keys.ready_shard(local),
                self.keys.group_of, self.keys.group_line_base, self.keys.group_head]
        operation, cursor = "get_msg_with_predicate", 0
        while True:
            reply = yield from self._command(operation, keys[0], READ, "HSCAN", keys[0], cursor,
                                             "COUNT", MATCH_PAGE_IDS)
            cursor, pairs = replies.hscan_page(reply)
            hits = [as_text(field) for field, json in pairs if json and matcher.search(json)]
            if hits and not local_only:
                return hits[0]
            if hits:
                found = yield from self._read(operation, keys[0], "find_match", keys,
                                              [self.local_index + 1, *hits])
                if found:
                    return as_text(found)
            if cursor == 0:
                return None

    def contains_match(self, pattern: str, local_only: bool) -> Op[bool]:
        return (yield from self.find_match(pattern, local_only)) is not None

    def size(self) -> Op[int]:
        return sum(s["size"] for s in (yield from self.shard_sizes()).values())

    def shard_sizes(self) -> Op[dict[str, dict[str, int]]]:
        self.check_attached()
        # the shards' zsets: not the limits' rate log and counter after them
        keys = [*self._life_keys[_FIXED_LIFE_KEYS:-3], self.keys.group_waiting]
        counts = yield from self._read("shard_sizes", keys[0], "sizes", keys, [])
        return replies.shard_sizes(counts, self.shards)

    def find_stale_messages(self) -> Op[list[Message]]:
        self.check_attached()
        out: list[Message] = []
        for shard in self.shards:
            keys = [self.keys.message_hash, self.keys.queue_shard(shard),
                    self.keys.unack_shard(shard), self.keys.ready_shard(shard)]
            ids = yield from self._read("find_stale_messages", keys[1], "find_stale", keys,
                                        [STALE_CHECK_LIMIT])
            out += [Message(as_text(i), shard=shard) for i in ids]
        return out

    def state(self, id: str) -> Op[MessageState | None]:
        info = yield from self.info(id)
        return None if info is None else info.state

    def info(self, id: str) -> Op[MessageInfo | None]:
        validate.message_id(id)
        self.check_attached()
        reply = yield from self._script("info", self.keys.message_hash, "inspect",
                                        self._life_keys, [self._now_arg(), id])
        if not reply:
            return None
        return replies.message_info(id, reply, self.shards, self._shard_at)

    def group_info(self, group: str) -> Op[dict[str, Any]]:
        validate.text("group", group, empty=False)
        self.check_attached()
        reply = yield from self._script(
            "group_info", self.keys.group_head, "group_info", self._life_keys,
            [self._now_arg(), group, self._group_shard(group) + 1])
        return replies.group_info(reply, self.shards)

    def dead_letters(self, count: int) -> Op[list[DeadLetter]]:
        validate.count("count", count)
        self.check_attached()
        if count == 0:
            return []
        keys = [self.keys.dead, self.keys.dead_info]
        flat = yield from self._read("dead_letters", keys[0], "dead_list", keys, [count])
        return replies.dead_letters(flat, self._shard_at)

    def dead_size(self) -> Op[int]:
        self.check_attached()
        size = yield from self._command("dead_size", self.keys.dead, READ, "ZCARD",
                                        self.keys.dead)
        return int(size)
