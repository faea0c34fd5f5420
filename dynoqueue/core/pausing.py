"""Pausing: stop a queue's deliveries and start them again (bullmq's ``Queue.pause()``).

The pause is stored configuration, a flag key of the queue (``P.PAUSED.Q``, under its hash
tag) that the claim scripts read: while it is set they lease nothing, so every consumer of
every process stops at once, whatever API or language it uses through these scripts. Pushes,
acks, lease changes and reads go on. ``resume`` deletes the flag and rings every shard's
doorbell, so waiting pops claim at once. A partitioned queue pauses each partition
(:class:`~dynoqueue.core.partitioned.PartitionedCore`).
"""

from __future__ import annotations

from .requests import QUORUM, Op
from .shared import QueueState


class Pausing(QueueState):
    """pause, resume, is_paused."""

    def pause(self) -> Op[bool]:
        """Set the pause flag (pause.lua). Returns True if the queue was running."""
        self.check_open()
        changed = yield from self._script("pause", self.keys.paused, "pause",
                                          [self.keys.paused], [])
        return bool(int(changed))

    def resume(self) -> Op[bool]:
        """Delete the pause flag and ring the doorbells (resume.lua). Returns True if the
        queue was paused."""
        self.check_open()
        changed = yield from self._script("resume", self.keys.paused, "resume",
                                          [self.keys.paused, *self.keys.all_queue_shards], [])
        return bool(int(changed))

    def is_paused(self) -> Op[bool]:
        """Whether the pause flag is set (read on the quorum connection, where claims read)."""
        self.check_attached()
        found = yield from self._command("is_paused", self.keys.paused, QUORUM, "EXISTS",
                                         self.keys.paused)
        return bool(int(found))
