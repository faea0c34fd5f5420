"""Message: the unit a queue carries, its validation, and its dyno-queues compatible JSON codec.

The stored JSON is exactly what the Java dyno-queues client writes (Jackson, non-empty fields),
``{"id":"x1","payload":"hi","timeout":20000,"priority":3}``, so Java and Python clients can
share a queue. ``payload`` is left out when it is None or empty; ``shard`` is never stored (it is
filled in on messages returned by a pop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import InvalidMessageError, PayloadTooLargeError
from .validate import MAX_COUNT, MAX_EPOCH_MS, MAX_MS, is_int

MIN_PRIORITY = 0
MAX_PRIORITY = 99
#: Default cap on a payload's UTF-8 size (1 MiB); RedisQueues(max_payload_bytes=...) changes it.
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20


@dataclass(eq=False, slots=True)
class Message:
    """One queue message. Mirrors ``com.netflix.dyno.queues.Message``.

    Args:
        id: the message id, a non-empty string, unique within a queue. Pushing an id that is
            already in the queue replaces that message.
        payload: any string (often JSON), or None.
        timeout: delay in milliseconds, 0 .. 100 years (``validate.MAX_MS``), before the
            message becomes visible to pops, counted from the push.
        priority: 0..99. Only orders messages that fall due in the same millisecond; the lower
            number is delivered first (score = due ms + priority / 100, as in dyno-queues).
        shard: the shard a popped message came from; ignored by push.
        due_at_ms: (keyword) absolute due time, epoch ms up to 2**43 (year 2248; RMQ's
            fixed-time messages); a time in the past means due now. Exclusive with
            ``timeout > 0``.
        max_deliveries: (keyword) deliver at most this many times, 1 .. 2**31 - 1, overriding
            the queue policy's ``max_deliveries`` (Camellia's maxRetry, SQS's maxReceiveCount).
        ttl_ms: (keyword) end the message if it is not acked within this many ms of falling
            due, 1 .. 100 years, overriding the policy's ``message_ttl_ms`` (Camellia's ttlMillis).
        group: (keyword) a non-empty str: messages with the same group form an ordered group
            (SQS FIFO's MessageGroupId, RMQ's slotBasis). At most one of them is leased at a
            time, across every consumer; they are delivered in due order (push order for equal
            due times), the next once the current one is acked, dead-lettered or removed; a
            nack or lease expiry redelivers the same one first. All of a group's messages
            live in one shard (see ``docs/semantics.md``, "Ordering"). Stored in the JSON as
            ``"group"``, which Java v1 clients ignore.
        headers: (keyword) application headers (SQS's message attributes): a dict of str to
            str, at most :data:`MAX_HEADERS` entries and :data:`MAX_HEADERS_BYTES` bytes as
            JSON. Kept with the message through every delivery, nack, lease expiry, postpone,
            dead letter and redrive; stored in the JSON as ``"headers"``, which Java v1
            clients ignore (Jackson skips unknown fields for dyno-queues). The OpenTelemetry
            trace context travels here (:mod:`dynoqueue.tracing`).

    Popped messages also carry ``deliveries`` (1 on the first delivery: SQS's
    ApproximateReceiveCount) and ``receipt`` (an opaque str, new on every delivery: pass it to
    ack/nack/set_unack_timeout to act only on that lease, as SQS's receipt handle).

    Raises:
        InvalidMessageError: (a ValueError) for an empty or non-string id, a non-string payload,
            a timeout that is not an int in range, a priority outside 0..99, a bad
            ``due_at_ms`` (or one given with a timeout), a ``max_deliveries``/``ttl_ms`` out of
            range, a group that is not None or a non-empty str, or text (id, payload, group)
            holding a lone surrogate.

    Messages compare equal, and hash, by id only, as in dyno-queues.
    """

    id: str
    payload: str | None = None
    timeout: int = 0
    priority: int = 0
    shard: str | None = None
    due_at_ms: int | None = field(default=None, kw_only=True)
    max_deliveries: int | None = field(default=None, kw_only=True)
    ttl_ms: int | None = field(default=None, kw_only=True)
    group: str | None = field(default=None, kw_only=True)
    headers: dict[str, str] | None = field(default=None, kw_only=True)
    deliveries: int = field(default=0, kw_only=True)
    receipt: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, max_payload_bytes: int | None = None) -> None:
        """Check every field; also the payload size when ``max_payload_bytes`` is given.

        Raises:
            InvalidMessageError: a field is invalid (see the class docstring), or the id or
                payload holds a lone surrogate (not encodable as UTF-8).
            PayloadTooLargeError: the payload's UTF-8 size exceeds ``max_payload_bytes``.
        """
        # The common message (ASCII id, payload and group, int fields in range, no shard or
        # receipt, no headers or a few plain ones) passes with a few comparisons; push runs
        # this once per message on top of the constructor's run. Anything else takes the full
        # checks below, which also name what is wrong.
        id_, payload, timeout, priority = self.id, self.payload, self.timeout, self.priority
        due, most, ttl, group = self.due_at_ms, self.max_deliveries, self.ttl_ms, self.group
        if (type(id_) is str and type(timeout) is int and type(priority) is int and id_
                and (payload is None or (type(payload) is str and payload.isascii()
                                         and (max_payload_bytes is None
                                              or len(payload) <= max_payload_bytes)))
                and 0 <= timeout <= MAX_MS and MIN_PRIORITY <= priority <= MAX_PRIORITY
                and (due is None or (type(due) is int and 0 <= due <= MAX_EPOCH_MS
                                     and not timeout))
                and (most is None or (type(most) is int and 1 <= most <= MAX_COUNT))
                and (ttl is None or (type(ttl) is int and 1 <= ttl <= MAX_MS))
                and (group is None or (type(group) is str and group and group.isascii()))
                and self.shard is None and self.receipt is None and id_.isascii()
                and (self.headers is None or plain_headers(self.headers))):
            return
        self._check_each_field(max_payload_bytes)

    def _check_each_field(self, max_payload_bytes: int | None) -> None:
        """validate()'s full checks, which name the field that is wrong."""
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessageError(f"message id must be a non-empty str, got {self.id!r:.80}")
        _utf8_size("id", self.id)
        if self.payload is not None and not isinstance(self.payload, str):
            raise InvalidMessageError(
                f"message {self.id!r}: payload must be str or None, "
                f"got {type(self.payload).__name__}"
            )
        if not is_int(self.timeout) or not 0 <= self.timeout <= MAX_MS:
            raise InvalidMessageError(
                f"message {self.id!r}: timeout must be an int >= 0 and <= {MAX_MS} (ms), "
                f"got {self.timeout!r:.80}"
            )
        if not is_int(self.priority) or not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise InvalidMessageError(
                f"message {self.id!r}: priority must be an int in {MIN_PRIORITY}..{MAX_PRIORITY}, "
                f"got {self.priority!r:.80}"
            )
        for name, low, high in (("due_at_ms", 0, MAX_EPOCH_MS), ("max_deliveries", 1, MAX_COUNT),
                                ("ttl_ms", 1, MAX_MS)):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or not low <= value <= high):
                raise InvalidMessageError(
                    f"message {self.id!r}: {name} must be None or an int >= {low} and "
                    f"<= {high}, got {value!r:.80}")
        if self.due_at_ms is not None and self.timeout:
            raise InvalidMessageError(
                f"message {self.id!r}: give either due_at_ms or a timeout, not both")
        if self.shard is not None and not isinstance(self.shard, str):
            raise InvalidMessageError(f"message {self.id!r}: shard must be str or None")
        if self.receipt is not None and not isinstance(self.receipt, str):
            raise InvalidMessageError(f"message {self.id!r}: receipt must be str or None")
        if self.headers is not None:
            check_headers(self.id, self.headers)
        if self.group is not None:
            if not isinstance(self.group, str) or not self.group:
                raise InvalidMessageError(
                    f"message {self.id!r}: group must be None or a non-empty str, "
                    f"got {self.group!r}")
            _utf8_size(f"message {self.id!r}: group", self.group)
        size = 0 if self.payload is None else _utf8_size(f"message {self.id!r}: payload",
                                                          self.payload)
        if max_payload_bytes is not None and size > max_payload_bytes:
            raise PayloadTooLargeError(
                f"message {self.id!r}: payload is {size} bytes, over the limit of "
                f"{max_payload_bytes} bytes"
            )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self.id == other.id

    def __hash__(self) -> int:
        return hash(self.id)

    def to_json(self) -> bytes:
        """Encode as dyno-queues JSON (UTF-8 bytes): id, payload if non-empty, timeout, priority,
        and group when there is one (Java v1 clients ignore unknown fields)."""
        doc: dict[str, Any] = {"id": self.id}
        if self.payload:
            doc["payload"] = self.payload
        doc["timeout"] = self.timeout
        doc["priority"] = self.priority
        if self.group is not None:
            doc["group"] = self.group
        if self.headers:
            doc["headers"] = self.headers
        return orjson.dumps(doc)

    @classmethod
    def from_json(cls, raw: bytes | str, shard: str | None = None) -> Message:
        """Decode a stored message, accepting whatever dyno-queues itself can store.

        Stored messages are not validated again (that costs more than the decode): a Java
        client may have written a negative ``timeout`` (its ``setTimeout`` takes any long) or
        a priority outside 0..99, and a pop must still deliver that message. Missing or null
        fields take their defaults and unknown fields are ignored, as Jackson does for
        dyno-queues.

        Args:
            raw: the JSON text, as stored in the message hash.
            shard: the shard to record on the returned message.

        Returns:
            The decoded Message.

        Raises:
            InvalidMessageError: ``raw`` is not str or bytes, or not a JSON object with a
                non-empty string id; ``shard`` is not a str or None.
        """
        if shard is not None and type(shard) is not str:
            raise InvalidMessageError(f"shard must be a str or None, got {shard!r:.80}")
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidMessageError(f"stored message is not valid JSON: {raw!r:.80}") from exc
        if type(doc) is not dict:
            raise InvalidMessageError(f"stored message is not a JSON object: {raw!r:.80}")
        id_ = doc.get("id")
        if type(id_) is not str or not id_:
            raise InvalidMessageError(f"stored message has no string id: {raw!r:.80}")
        payload = doc.get("payload")
        message = _new_message(cls)
        message.id = id_
        message.payload = payload if payload is None or type(payload) is str else str(payload)
        message.timeout = _stored_int(doc.get("timeout"))
        message.priority = _stored_int(doc.get("priority"))
        message.shard = shard
        message.due_at_ms = message.max_deliveries = message.ttl_ms = message.receipt = None
        group = doc.get("group")
        message.group = group if type(group) is str and group else None
        headers = doc.get("headers")
        message.headers = headers if type(headers) is dict and headers else None
        message.deliveries = 0
        return message


_new_message = object.__new__

#: Most entries and most JSON bytes of a message's headers.
MAX_HEADERS = 64
MAX_HEADERS_BYTES = 8192


#: A header set of at most this many ASCII pairs, each at most this many characters (name and
#: value), is within both limits whatever it holds: 8 * (160 * 6 + 6) < 8192, since JSON writes
#: an ASCII character in at most 6 bytes (``\u001f``).
_PLAIN_PAIRS = 8
_PLAIN_PAIR_CHARS = 160


def plain_headers(headers: Any) -> bool:
    """Whether ``headers`` is a small header set that is valid without encoding it (a trace
    context, a tenant): at most 8 pairs of non-empty ASCII names and ASCII values, each pair
    at most 160 characters. False says nothing: :func:`check_headers` decides."""
    if type(headers) is not dict or len(headers) > _PLAIN_PAIRS:
        return False
    for name, value in headers.items():
        if (type(name) is not str or type(value) is not str or not name
                or len(name) + len(value) > _PLAIN_PAIR_CHARS
                or not name.isascii() or not value.isascii()):
            return False
    return True


def check_headers(message_id: str, headers: Any) -> None:
    """Raise InvalidMessageError unless ``headers`` is a dict of str to str within the limits
    (:data:`MAX_HEADERS` entries, :data:`MAX_HEADERS_BYTES` bytes as JSON); ``message_id``
    names the message in the error."""
    if type(headers) is not dict:
        raise InvalidMessageError(f"message {message_id!r}: headers must be a dict of str to "
                                  f"str or None, got {headers!r:.80}")
    if len(headers) > MAX_HEADERS:
        raise InvalidMessageError(f"message {message_id!r}: {len(headers)} headers, over the "
                                  f"limit of {MAX_HEADERS}")
    for name, value in headers.items():
        if type(name) is not str or not name or type(value) is not str:
            raise InvalidMessageError(
                f"message {message_id!r}: a header must map a non-empty str to a str, got "
                f"{name!r:.40}: {value!r:.40}")
        _utf8_size(f"message {message_id!r}: header {name!r:.40}", name)
        _utf8_size(f"message {message_id!r}: header {name!r:.40}", value)
    size = len(orjson.dumps(headers))
    if size > MAX_HEADERS_BYTES:
        raise InvalidMessageError(f"message {message_id!r}: headers are {size} bytes as JSON, "
                                  f"over the limit of {MAX_HEADERS_BYTES}")


def _stored_int(value: Any) -> int:
    """A stored number field: Jackson writes longs; null or missing means 0."""
    if type(value) is int:
        return value
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        raise InvalidMessageError(
            f"stored message has a non-numeric field: {value!r:.40}") from None


def _utf8_size(what: str, text: str) -> int:
    """UTF-8 size of ``text``; Redis and JSON carry only valid Unicode, so no lone surrogates."""
    if text.isascii():  # the common case: its size is its length, without an encoded copy
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"{what} is not valid Unicode text (lone surrogate at {exc.start})"
        ) from None


def as_text(value: Any) -> str:
    """A Redis reply as str, whether the client decodes responses or returns bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


