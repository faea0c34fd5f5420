"""Where the partitions of a partitioned queue live: their hash tags and which partition holds
a message.

A queue made with ``QueuePolicy(partitions=n)``, n > 1, is n copies of the one-partition layout
(:mod:`dynoqueue.model.keys`), each under a hash tag of its own, so each is one Redis Cluster
hash slot and every per-message script stays single-slot. A message id lives in partition
``crc32(id) % n`` (a message of an ordered group: ``crc32(group) % n``), as RMQ maps a slot basis
to a slot.

The tags are chosen so that the partitions' slots spread evenly: partition k's slot is the one
nearest ``base + k * 16384 / n``, ``base`` being the slot of the queue's one-partition tag
(``{Q}``). A Cluster's primaries own contiguous slot ranges, so even slots mean even shares;
twelve random tags often land 5/4/3 on three primaries.

A tag is ``k-XXXX`` (k the partition, XXXX four hex digits). Redis hashes a key by its tag with
CRC16-XMODEM, which is linear: for equal lengths, ``crc(a xor b) = crc(a) xor crc(b)``, so
``crc("k-" + X) = crc("k-\\0\\0\\0\\0") xor crc(X)``. A table of the CRCs of every four-hex-digit
X (built once, about 10 ms) then finds for any partition the X whose slot is nearest its target
without a search per tag.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import itertools
import zlib

from .keys import QueueKeys
from .message import Message

#: The most partitions a queue may have (each is a slot; more buys nothing on any cluster).
MAX_PARTITIONS = 1024
#: Redis Cluster's hash slots.
SLOTS = 16384
_HEX = "0123456789abcdef"


def slot_of_tag(tag: str) -> int:
    """The Redis Cluster hash slot of hash tag ``tag`` (the text between the braces)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


@functools.cache
def _suffixes() -> dict[int, str]:
    """CRC16 -> the first four-hex-digit text with that CRC (about a third of all values)."""
    table: dict[int, str] = {}
    for chars in itertools.product(_HEX, repeat=4):
        text = "".join(chars)
        table.setdefault(binascii.crc_hqx(text.encode(), 0), text)
    return table


def _tag_near(index: int, target: int) -> str:
    """Partition ``index``'s tag ``index-XXXX`` whose slot is nearest ``target``."""
    head = f"{index}-"
    zeroed = binascii.crc_hqx(head.encode() + b"\0\0\0\0", 0)
    table = _suffixes()
    for distance in range(SLOTS):
        for slot in ((target + distance) % SLOTS, (target - distance) % SLOTS):
            for high in range(4):  # the two CRC bits the slot drops
                suffix = table.get(zeroed ^ (high << 14 | slot))
                if suffix is not None:
                    return head + suffix
    raise AssertionError("unreachable: the table covers every slot")  # pragma: no cover


@functools.lru_cache(maxsize=256)
def partition_tags(queue: str, count: int) -> tuple[str, ...]:
    """The hash tags of a queue's ``count`` partitions (``count`` in 2..MAX_PARTITIONS), in
    partition order: partition k's slot is the one nearest ``slot({queue}) + k * 16384 /
    count``.

    Raises:
        ValueError: ``count`` out of range.
    """
    if not 2 <= count <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be in 2..{MAX_PARTITIONS}, got {count}")
    base = slot_of_tag(queue)
    return tuple(_tag_near(k, (base + k * SLOTS // count) % SLOTS) for k in range(count))


def partition_of(text: str, count: int) -> int:
    """The partition (0-based) of a message id or group name among ``count``: CRC32 of its
    UTF-8 bytes modulo ``count``. The routing rule; :func:`partitions_of_messages` writes it
    once more for a whole batch (a test checks that both agree)."""
    return zlib.crc32(text.encode()) % count if count > 1 else 0


def partition_of_id(id: str, group: str | None, count: int) -> int:
    """The partition of message ``id`` among ``count``: its ordered group's when it has one
    (a group's messages live together), else its id's (:func:`partition_of`)."""
    return partition_of(id if group is None else group, count)


def partition_of_message(message: Message, count: int) -> int:
    """:func:`partition_of_id` of ``message``."""
    return partition_of_id(message.id, message.group, count)


def partitions_of_messages(batch: list[Message], count: int) -> list[int]:
    """:func:`partition_of_message` of each message of ``batch``, in one pass (a producer's
    batched push routes every message: the calls of the function per message cost it ~0.2 us
    a message); ``tests/test_partitions.py`` checks that both agree."""
    if count <= 1:
        return [0] * len(batch)
    crc32 = zlib.crc32
    return [crc32((m.id if m.group is None else m.group).encode()) % count for m in batch]


def partition_keys(keys: QueueKeys, count: int) -> list[QueueKeys]:
    """The keys of each of a queue's ``count`` partitions, in partition order, given its
    one-partition keys (``[keys]`` itself when ``count`` is 1): what a reader that walks the
    layout (stats, the Spark reader, the ops CLI) reads instead of ``keys``.

    Raises:
        ValueError: ``count`` out of 1..MAX_PARTITIONS.
    """
    if count == 1:
        return [keys]
    return [dataclasses.replace(keys, tag=tag) for tag in partition_tags(keys.queue, count)]

