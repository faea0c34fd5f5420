"""How a Dramatiq message travels as a dynoqueue message, and back.

The dramatiq message is encoded with dramatiq's own encoder (``dramatiq.get_encoder()``, the
one :meth:`dramatiq.Message.encode` uses) and stored as the dynoqueue payload; the dynoqueue
id is the dramatiq ``message_id``. A payload must be text: the encoder's bytes are stored as
they are when they are UTF-8 (the JSON encoder's always are), else in base64 with the header
:data:`ENCODING_HEADER` saying so (the pickle encoder's).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import dramatiq
from dramatiq.common import q_name
from dramatiq.errors import DecodeError

from ..model.message import MAX_PRIORITY, MIN_PRIORITY, Message

#: The header of a message whose payload is the encoder's bytes in base64.
ENCODING_HEADER = "dramatiq-encoding"
BASE64 = "base64"


def to_dynoqueue(message: dramatiq.Message[Any], *, timeout_ms: int = 0,
                 due_at_ms: int | None = None, priority: int = 0) -> Message:
    """The dynoqueue message that carries ``message``.

    Args:
        message: the dramatiq message (already without an ``eta`` option).
        timeout_ms: its delay, ms, >= 0.
        due_at_ms: instead of a delay, an absolute due time (epoch ms).
        priority: the actor's priority, clamped to dynoqueue's 0..99.

    Returns:
        A :class:`dynoqueue.Message` with id ``message.message_id``.

    Raises:
        InvalidMessageError: the dramatiq message id is not a usable dynoqueue id.
    """
    data = message.encode()
    headers: dict[str, str] | None = None
    try:
        payload = data.decode("utf-8")
    except UnicodeDecodeError:
        payload = base64.b64encode(data).decode("ascii")
        headers = {ENCODING_HEADER: BASE64}
    return Message(message.message_id, payload, timeout_ms,
                   min(MAX_PRIORITY, max(MIN_PRIORITY, priority)),
                   due_at_ms=due_at_ms, headers=headers)


def to_dramatiq(delivered: Message) -> dramatiq.Message[Any]:
    """The dramatiq message a popped dynoqueue message carries, due now.

    An ``eta`` option (a message written by dramatiq's RedisBroker into a delay queue and
    moved here) is dropped: the dynoqueue message was due when it was popped, and the worker
    would otherwise hold it in memory until that time. The queue name is the canonical one
    (without ``.DQ``/``.XQ``).

    Raises:
        DecodeError: (dramatiq's) the payload is not a message of this encoder.
    """
    payload = delivered.payload or ""
    try:
        if (delivered.headers or {}).get(ENCODING_HEADER) == BASE64:
            data = base64.b64decode(payload.encode("ascii"), validate=True)
        else:
            data = payload.encode("utf-8")
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise DecodeError(  # type: ignore[no-untyped-call]
            "payload is not valid base64", payload, exc) from exc
    message = dramatiq.Message.decode(data)
    if "eta" in message.options or q_name(message.queue_name) != message.queue_name:
        options = {k: v for k, v in message.options.items() if k != "eta"}
        message = message._replace(queue_name=q_name(message.queue_name), options=options)
    return message
