"""Leases and what ends or changes a message after its push: ack, nack, release, lease
changes, dead-lettering by hand, postpone, timeout changes, remove."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InvalidArgumentError, RedisOperationError
from ..model import validate
from ..model.message import Message
from .requests import QUORUM, Op
from .shared import QueueState

#: Attempts of postpone and set_timeout while another writer keeps changing the message.
_SET_TIMEOUT_ATTEMPTS = 5
#: Longest error text a nack records (longer ones are cut): it is kept with the message.
_MAX_ERROR_CHARS = 4096


class Leasing(QueueState):
    """ack, nack, release, set_lease, dead_letter, postpone, set_timeout, remove (and their
    many-id forms)."""

    def ack(self, id: str, receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        receipt = _receipt(receipt)
        self.check_attached()
        acked = yield from self._write_one("ack", "ack", [self._now_arg(), id, receipt])
        self.events(self.name, "acked", int(acked))
        return int(acked) == 1

    def ack_many(self, ids: Iterable[str | Message]) -> Op[int]:
        return (yield from self.ack_pairs(id_receipt_pairs("ack_many", ids)))

    def ack_pairs(self, pairs: list[str]) -> Op[int]:
        """:meth:`ack_many` of validated [id, receipt, ...] pairs (:func:`id_receipt_pairs`)."""
        self.check_attached()
        if not pairs:
            return 0
        replies = yield from self._write_pairs("ack", "ack", [self._now_arg()], pairs)
        acked = sum(int(n) for n in replies)
        self.events(self.name, "acked", acked)
        return acked

    def release(self, ids: Iterable[str | Message]) -> Op[int]:
        return (yield from self.release_pairs(id_receipt_pairs("release", ids)))

    def release_pairs(self, pairs: list[str]) -> Op[int]:
        """:meth:`release` of validated [id, receipt, ...] pairs."""
        self.check_attached()
        if not pairs:
            return 0
        replies = yield from self._write_pairs("release", "release", [self._now_arg()], pairs)
        return sum(int(n) for n in replies)

    def nack(self, id: str, delay_ms: int = 0, error: str | None = None,
             receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        ended = yield from self._nack("nack", [id, _receipt(receipt)], delay_ms, error)
        return ended == 1

    def nack_many(self, ids: Iterable[str | Message], delay_ms: int = 0,
                  error: str | None = None) -> Op[int]:
        pairs = id_receipt_pairs("nack_many", ids)
        return (yield from self.nack_pairs(pairs, delay_ms, error))

    def nack_pairs(self, pairs: list[str], delay_ms: int = 0,
                   error: str | None = None) -> Op[int]:
        """:meth:`nack_many` of validated [id, receipt, ...] pairs."""
        return (yield from self._nack("nack", pairs, delay_ms, error))

    def _nack(self, operation: str, pairs: list[str], delay_ms: int,
              error: str | None) -> Op[int]:
        validate.ms("delay_ms", delay_ms)
        if error is not None:
            validate.text("error", error)
        self.check_attached()
        if not pairs:
            return 0
        head = [self._now_arg(), delay_ms, (error or "")[:_MAX_ERROR_CHARS]]
        replies = yield from self._write_pairs(operation, "nack", head, pairs)
        again, dead, missing = (sum(int(reply[i]) for reply in replies) for i in (0, 1, 2))
        self.events(self.name, "nacked", again)
        self.events(self.name, "dead_lettered", dead - missing)
        self._payload_missing(None, missing)
        return again + dead

    def set_lease(self, operation: str, id: str, timeout_ms: int, *,
                  only_if_shorter: bool, receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        pairs = [id, _receipt(receipt)]
        return (yield from self._set_leases(operation, pairs, timeout_ms, only_if_shorter)) == 1

    def set_lease_many(self, ids: Iterable[str | Message], timeout_ms: int) -> Op[int]:
        pairs = id_receipt_pairs("set_unack_timeout_many", ids)
        return (yield from self.set_lease_pairs(pairs, timeout_ms))

    def set_lease_pairs(self, pairs: list[str], timeout_ms: int) -> Op[int]:
        """:meth:`set_lease_many` of validated [id, receipt, ...] pairs."""
        return (yield from self._set_leases("set_unack_timeout_many", pairs, timeout_ms, False))

    def _set_leases(self, operation: str, pairs: list[str], timeout_ms: int,
                    only_if_shorter: bool) -> Op[int]:
        validate.ms("timeout_ms", timeout_ms)
        self.check_attached()
        if not pairs:
            return 0
        head = [self._now_arg(), timeout_ms, "1" if only_if_shorter else "0"]
        replies = yield from self._write_pairs(operation, "set_unack_timeout", head, pairs)
        return sum(int(n) for n in replies)

    def dead_letter(self, id: str, reason: str, error: str | None = None,
                    receipt: str | None = None) -> Op[bool]:
        validate.message_id(id)
        validate.text("reason", reason, empty=False)
        if error is not None:
            validate.text("error", error)
        pairs = [id, _receipt(receipt)]
        self.check_attached()
        buried, missing = yield from self._write_one("dead_letter", "bury", [
            self._now_arg(), reason[:200], (error or "")[:_MAX_ERROR_CHARS], *pairs])
        self.events(self.name, "dead_lettered", int(buried))
        self._payload_missing(None, int(missing))
        return int(buried) == 1

    def postpone(self, id: str, delay_ms: int, priority: int | None) -> Op[bool]:
        validate.message_id(id)
        validate.ms("delay_ms", delay_ms)
        if priority is not None and (not validate.is_int(priority) or not 0 <= priority <= 99):
            raise InvalidArgumentError(f"priority must be None or an int in 0..99, "
                                       f"got {priority!r}")
        return (yield from self._retimed("postpone", id, delay_ms, priority))

    def set_timeout(self, id: str, timeout_ms: int) -> Op[bool]:
        validate.message_id(id)
        validate.ms("timeout_ms", timeout_ms)
        return (yield from self._retimed("set_timeout", id, timeout_ms, None))

    def _retimed(self, operation: str, id: str, timeout_ms: int,
                 priority: int | None) -> Op[bool]:
        """Give message ``id`` a new timeout (and ``priority`` unless None) with script
        ``operation`` (postpone.lua, set_timeout.lua): its JSON is read, changed here, and
        written only if still unchanged, again while another writer keeps changing it."""
        self.check_attached()
        key = self.keys.message_hash
        for _ in range(_SET_TIMEOUT_ATTEMPTS):
            raw = yield from self._command(operation, key, QUORUM, "HGET", key, id)
            if raw is None:
                return False
            stored = Message.from_json(raw)
            stored.timeout = timeout_ms
            if priority is not None:
                stored.priority = priority
            status = yield from self._write_one(operation, operation, [
                self._now_arg(), id, timeout_ms, stored.priority, raw, stored.to_json()])
            if int(status) >= 0:
                return int(status) == 1
        raise RedisOperationError(
            operation, key, f"message {id!r} kept changing during {_SET_TIMEOUT_ATTEMPTS} attempts")

    def remove(self, id: str) -> Op[bool]:
        validate.message_id(id)
        self.check_attached()
        removed = yield from self._write_one("remove", "remove", [self._now_arg(), id])
        return bool(removed)


def id_receipt_pairs(operation: str, ids: Iterable[str | Message]) -> list[str]:
    """[id, receipt, id, receipt, ...]: Message objects bring their receipt, ids none."""
    items = validate.listed(f"{operation} takes a list of ids, not a single id", ids,
                            single=(Message,))
    pairs: list[str] = []
    add = pairs.append
    # The usual item, a popped message or an id of ASCII text, needs none of the checks that
    # name what is wrong (a call per id and receipt: ~1/4 of a batched consumer's own CPU).
    for item in items:
        if isinstance(item, Message):
            id_, receipt = item.id, item.receipt
            if not (type(id_) is str and id_ and id_.isascii() and (receipt is None or (
                    type(receipt) is str and receipt and receipt.isascii()))):
                id_, receipt = validate.message_id(id_), _receipt(receipt)
            add(id_)
            add(receipt or "")
        else:
            add(item if type(item) is str and item and item.isascii()
                else validate.message_id(item))
            add("")
    return pairs


def _receipt(receipt: object) -> str:
    if receipt is None:
        return ""
    return validate.text("receipt", receipt, empty=False)
