"""The calls about one message, routed to the partition that holds it, and about many ids,
split by partition: leases (ack, nack, ...), remove, and the per-message reads."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...model import validate
from ...model.message import Message
from ...model.states import MessageInfo, MessageState
from ..requests import Op
from .shared import PartitionedState


class OneMessage(PartitionedState):
    """ack, nack, lease changes, dead_letter, postpone, set_timeout, remove (one id, or many
    split by partition); contains, get, state, info, group_info."""

    # ----------------------------------------------------------------------------- leases

    def ack(self, id: str, receipt: str | None = None) -> Op[bool]:
        return self._one("ack", id, lambda part: part.ack(id, receipt))

    def ack_many(self, ids: Iterable[str | Message]) -> Op[int]:
        shares = self._split_pairs("ack_many", ids)
        return self._checked_op("ack", self._sum([p.ack_pairs(s) for p, s in shares]))

    def release(self, ids: Iterable[str | Message]) -> Op[int]:
        shares = self._split_pairs("release", ids)
        return self._checked_op("release", self._sum([p.release_pairs(s) for p, s in shares]))

    def nack(self, id: str, delay_ms: int = 0, error: str | None = None,
             receipt: str | None = None) -> Op[bool]:
        return self._one("nack", id, lambda part: part.nack(id, delay_ms, error, receipt))

    def nack_many(self, ids: Iterable[str | Message], delay_ms: int = 0,
                  error: str | None = None) -> Op[int]:
        shares = self._split_pairs("nack_many", ids)
        validate.ms("delay_ms", delay_ms)
        if error is not None:
            validate.text("error", error)
        return self._checked_op("nack", self._sum(
            [p.nack_pairs(s, delay_ms, error) for p, s in shares]))

    def set_lease(self, operation: str, id: str, timeout_ms: int, *,
                  only_if_shorter: bool, receipt: str | None = None) -> Op[bool]:
        return self._one(operation, id, lambda part: part.set_lease(
            operation, id, timeout_ms, only_if_shorter=only_if_shorter, receipt=receipt))

    def set_lease_many(self, ids: Iterable[str | Message], timeout_ms: int) -> Op[int]:
        shares = self._split_pairs("set_unack_timeout_many", ids)
        validate.ms("timeout_ms", timeout_ms)
        return self._checked_op("set_unack_timeout_many", self._sum(
            [p.set_lease_pairs(s, timeout_ms) for p, s in shares]))

    def dead_letter(self, id: str, reason: str, error: str | None = None,
                    receipt: str | None = None) -> Op[bool]:
        return self._one("dead_letter", id,
                         lambda part: part.dead_letter(id, reason, error, receipt))

    def postpone(self, id: str, delay_ms: int, priority: int | None) -> Op[bool]:
        return self._one("postpone", id, lambda part: part.postpone(id, delay_ms, priority))

    def set_timeout(self, id: str, timeout_ms: int) -> Op[bool]:
        return self._one("set_timeout", id, lambda part: part.set_timeout(id, timeout_ms))

    def remove(self, id: str) -> Op[bool]:
        return self._one("remove", id, lambda part: part.remove(id))

    # ----------------------------------------------------------------------------- inspection

    def contains(self, id: str) -> Op[bool]:
        return self._one("contains", id, lambda part: part.contains(id))

    def get(self, operation: str, id: str, local: bool) -> Op[Message | None]:
        return self._one(operation, id, lambda part: part.get(operation, id, local))

    def state(self, id: str) -> Op[MessageState | None]:
        return self._one("state", id, lambda part: part.state(id))

    def info(self, id: str) -> Op[MessageInfo | None]:
        return self._one("info", id, lambda part: part.info(id))

    def group_info(self, group: str) -> Op[dict[str, Any]]:
        validate.text("group", group, empty=False)
        return self._checked_op("group_info", self.part_of("", group).group_info(group))
