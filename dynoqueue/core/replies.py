"""Reply decoding: what the scripts and commands of a queue return, as messages and records.

Pure functions (and :class:`Claim`, which gathers one pop's claim replies): no I/O, no events.
The reply shapes are those the headers of ``dynoqueue/scripts/*.lua`` list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidMessageError
from ..model.message import Message, as_text
from ..model.states import DeadLetter, MessageInfo, MessageState, decode_record

#: How a queue names the shard a stored record gives by its 1-based index (None: none).
ShardAt = Callable[[Any], "str | None"]


class Claim:
    """What one pop has leased so far (by id: a message the reprocessor put back while this pop
    waited and that it claimed again is returned once), and its parameters."""

    __slots__ = ("count", "held", "lease_ms", "order")

    def __init__(self, order: list[int], count: int, lease_ms: int) -> None:
        self.order = order
        self.count = count
        self.lease_ms = lease_ms
        self.held: dict[str, tuple[Message, int]] = {}

    def take(self, result: Any, shard: str, lease_ms: int,
             lateness: bool = True) -> tuple[int, list[str], list[int]]:
        """Record a claim reply; return how many it leased, the ids that do not decode, and
        the lateness of each leased one (claim time - due ms, from the reply: no I/O; only
        when ``lateness``, else [])."""
        now = int(result[0])
        lease_until = now + lease_ms
        stamp = f":{now}"
        held = self.held
        from_json = Message.from_json
        undecodable: list[str] = []
        late: list[int] = []
        got = 0
        # One loop per message of a 500-message reply: the delivery count and the receipt
        # (deliveries:claim ms, as claim.lua stores it) are set here, not through a helper call.
        for i in range(4, len(result), 4):  # id, json, deliveries, due ms (see claim.lua)
            try:
                message = from_json(result[i + 1], shard)
            except InvalidMessageError:
                undecodable.append(as_text(result[i]))
                continue
            deliveries = int(result[i + 2])
            message.deliveries = deliveries
            message.receipt = f"{deliveries}{stamp}"
            held[message.id] = (message, lease_until)
            got += 1
            if lateness:
                late.append(max(0, now - int(float(result[i + 3]))))  # see claim.lua
        return got, undecodable, late

    def messages(self) -> list[Message]:
        return [m for m, _ in self.held.values()]

    def release_pairs(self) -> list[str]:
        """[id, receipt, ...] of every message held, which are then forgotten."""
        pairs = [part for message, _ in self.held.values()
                 for part in (message.id, message.receipt or "")]
        self.held.clear()
        return pairs


def ids_pushed(batch: list[Message], replies: list[Any]) -> list[str]:
    """The ids of ``batch`` that push.lua's ``replies`` (each: now, then a flag per message of
    its call, in order) say were pushed, in input order."""
    if len(batch) == 1 and len(replies) == 1 and len(replies[0]) == 2:
        # One message, the call producers make most: no loop (a comprehension and a zip
        # cost more than the rest of decoding it).
        return [batch[0].id] if int(replies[0][1]) else []
    flags = [flag for reply in replies for flag in reply[1:]]
    return [m.id for m, flag in zip(batch, flags, strict=True) if int(flag)]


def leased(raw: Any, shard: str, deliveries: int, claimed_ms: int) -> Message:
    """A claimed message with its delivery count and lease receipt, ``deliveries:claim ms``
    (the form ``receipt_of`` in ``scripts/lib/records.lua`` compares with)."""
    message = Message.from_json(raw, shard=shard)
    message.deliveries = deliveries
    message.receipt = f"{deliveries}:{claimed_ms}"
    return message


def decoded(raw: Any, shard: str | None) -> Message | None:
    """The message of stored JSON ``raw`` (None if there is none or it does not decode)."""
    if not raw:
        return None
    try:
        return Message.from_json(raw, shard=shard)
    except InvalidMessageError:
        return None


def hscan_page(reply: Any) -> tuple[int, list[tuple[Any, Any]]]:
    """(next cursor, [(field, value), ...]) of an HSCAN reply, parsed by redis-py (a dict) or
    not (a flat list)."""
    cursor, body = reply[0], reply[1]
    if isinstance(body, dict):
        return int(cursor), list(body.items())
    return int(cursor), list(zip(body[::2], body[1::2], strict=True))


def int_or_none(value: Any) -> int | None:
    if value is None or value == "" or value == b"":
        return None
    return int(float(value))


def max_deliveries(own: Any, stored: int) -> int | None:
    """A message's own max deliveries, else the queue's stored policy's (None: unlimited)."""
    if own is not None:
        return int(own)
    return stored or None


_ENDED = (MessageState.ACKED, MessageState.EXPIRED, MessageState.DELETED, MessageState.DEAD)


def message_info(id: str, reply: Any, shards: Sequence[str], shard_at: ShardAt) -> MessageInfo:
    """The record of inspect.lua's (non-empty) reply about message ``id``."""
    state = MessageState[as_text(reply[0])]
    index, json, score, life, expires, ended_at, record, stored_max = reply[1:9]
    shard = shards[int(index) - 1] if int(index) else None
    rec = decode_record(life or record)
    message = decoded(json or rec.get("j"), shard)
    is_leased = state is MessageState.LEASED
    due = None if is_leased or not score else int(float(score))
    if state in _ENDED:
        shard = shard_at(rec.get("sh"))
    return MessageInfo(
        id=id, state=state, shard=shard,
        priority=message.priority if message else 0,
        payload=message.payload if message else None,
        deliveries=int(rec.get("d") or 0),
        max_deliveries=max_deliveries(rec.get("m"), int(stored_max)),
        enqueued_at_ms=int_or_none(rec.get("e")),
        due_at_ms=due,
        lease_expires_at_ms=int(float(score)) if is_leased and score else None,
        expires_at_ms=int_or_none(expires),
        ended_at_ms=int_or_none(ended_at),
        last_error=rec.get("l"),
        group=message.group if message else None,
        headers=message.headers if message else None,
    )


def dead_letters(flat: Any, shard_at: ShardAt) -> list[DeadLetter]:
    """The dead letters of dead_list.lua's reply: id, died-at ms, record, for each."""
    out = []
    for i in range(0, len(flat), 3):
        rec = decode_record(flat[i + 2])
        shard = shard_at(rec.get("sh"))
        message = decoded(rec.get("j"), shard) or Message(as_text(flat[i]), shard=shard)
        message.deliveries = int(rec.get("d") or 0)
        out.append(DeadLetter(message=message, reason=str(rec.get("r", "")),
                              deliveries=message.deliveries, last_error=rec.get("l"),
                              died_at_ms=int(float(flat[i + 1]))))
    return out


def group_info(reply: Any, shards: Sequence[str]) -> dict[str, Any]:
    """The summary of group_info.lua's reply: waiting, leased, next due, shard index."""
    waiting, leased_id, due, index = reply
    return {"waiting": int(waiting), "leased": as_text(leased_id) if leased_id else None,
            "next_due_ms": int_or_none(due), "shard": shards[int(index) - 1]}


def shard_sizes(counts: Any, shards: Sequence[str]) -> dict[str, dict[str, int]]:
    """sizes.lua's reply (waiting, leased per shard) by shard."""
    return {shard: {"size": int(counts[2 * i]), "uacked": int(counts[2 * i + 1])}
            for i, shard in enumerate(shards)}
