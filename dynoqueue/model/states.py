"""The message lifecycle: the seven states, and what state()/info() and dead_letters() return
(how a queue's messages end is its policy: model/policy.py).

States follow Camellia's delay queue (its codes 1..7); Youzan's delay/ready/reserved/deleted and
SQS's visible/in-flight map onto them (see ``docs/semantics.md``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

import orjson

from .message import Message


class MessageState(enum.Enum):
    """Where a message is in its lifecycle; ``.code`` is Camellia's number for it."""

    DELAYED = 1  #: waiting, not yet due
    READY = 2  #: waiting and due: the next pop may take it
    LEASED = 3  #: popped, not acked yet (SQS in-flight, Youzan reserved)
    ACKED = 4  #: acked (kept only during the retention)
    EXPIRED = 5  #: its TTL ran out before it was ever delivered (kept during the retention)
    DEAD = 6  #: dead-lettered: max deliveries, TTL after delivery, or undecodable
    DELETED = 7  #: removed (kept only during the retention)

    @property
    def code(self) -> int:
        """Camellia's state code, 1..7."""
        return int(self.value)


@dataclass(frozen=True)
class MessageInfo:
    """What :meth:`DynoQueue.info` tells about one message. Times are epoch ms, None when they
    do not apply (or were not recorded: a message without limits of its own, pushed under a
    policy with no TTL, has no record until its first delivery, so no ``enqueued_at_ms``).
    ``group`` is the message's ordered group, if any; ``headers`` its application headers.
    """

    id: str
    state: MessageState
    shard: str | None
    priority: int
    payload: str | None
    deliveries: int
    max_deliveries: int | None
    enqueued_at_ms: int | None
    due_at_ms: int | None
    lease_expires_at_ms: int | None
    expires_at_ms: int | None
    ended_at_ms: int | None
    last_error: str | None
    group: str | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message (:meth:`DynoQueue.dead_letters`).

    Attributes:
        message: the message as it was pushed (``deliveries`` set); only its id (payload
            None) for "payload-missing".
        reason: "max_deliveries", "ttl", "undecodable", "payload-missing" (its id was found
            without payload: evicted), or the reason given to ``dead_letter``.
        deliveries: how many times it was delivered.
        last_error: the error text of its last nack, or None.
        died_at_ms: when it was dead-lettered, epoch ms.
    """

    message: Message
    reason: str
    deliveries: int
    last_error: str | None
    died_at_ms: int


def decode_record(raw: Any, born: Any = None) -> dict[str, Any]:
    """A lifecycle, ended or dead record stored by the scripts ({} when absent or unreadable).

    ``born`` is the message's ``P.BORN.Q`` entry (``"e:m:t"`` text, or None): its enqueued at
    (``e``), own max deliveries (``m``) and TTL (``t``) count when the record holds none of
    them (``with_born`` in ``scripts/lib/records.lua``).

    Lifecycle records are stored as text (see ``parse_life`` in ``scripts/lib/records.lua``):
    ``"deliveries:claim_ms"`` when that is all they hold, else
    ``"deliveries:claim_ms:enqueued_ms:max_deliveries:ttl_ms"`` with absent numbers empty,
    followed by ``":last_error"`` when there is one. Ended and dead records are JSON objects.
    """
    rec = _decode(raw)
    if born and not any(rec.get(name) is not None for name in "emt"):
        text = born.decode() if isinstance(born, bytes) else str(born)
        match = _BORN_TEXT.fullmatch(text)
        if match is not None:
            for name, value in zip("emt", match.groups(), strict=True):
                if value:
                    rec[name] = int(value)
    return rec


#: A born entry: e:m:t, absent numbers empty.
_BORN_TEXT = re.compile(r"([0-9]*):([0-9]*):([0-9]*)")


def _decode(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    if isinstance(raw, bytes):
        try:
            text = raw.decode()
        except UnicodeDecodeError:  # a dead letter keeps what another client stored, which
            raw = text = raw.decode(errors="replace")  # may not be UTF-8; the record is ours
    else:
        text = str(raw)
    if not text.startswith("{"):
        return _life_text(text)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


#: The lifecycle record's text form: d:c, then optionally :e:m:t and :l (l: the rest).
_LIFE_TEXT = re.compile(r"([0-9]*):([0-9]*)(?::([0-9]*):([0-9]*):([0-9]*)(?::(.*))?)?", re.DOTALL)


def _life_text(text: str) -> dict[str, Any]:
    """The fields of a lifecycle record in its text form ({} when it is not one)."""
    match = _LIFE_TEXT.fullmatch(text)
    if match is None:
        return {}
    rec: dict[str, Any] = {}
    for name, value in zip("dcemt", match.groups()[:5], strict=True):
        if value:
            rec[name] = int(value)
    if match.group(6):
        rec["l"] = match.group(6)
    return rec
