"""What the finisher sends, and what each reply means: the worker's calls of its queue.

:class:`Sender` turns the finisher's work (:meth:`dynoqueue.worker.engine.WorkerEngine.finisher`)
into queue-level calls (:class:`~dynoqueue.core.calls.Call`): acks in one ``ack_many``, a nack
or dead letter per failed message, the release of messages leased but not started, one
``set_unack_timeout_many`` per heartbeat, the sweep of expired leases (``process_unacks``).
Each is a sub-program (``yield from``) that logs what its reply means and calls the hooks; a
failed call is logged, never raised: the messages concerned come back after their lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..core.calls import Call
from ..model.message import Message
from ..model.states import MessageState
from .outcomes import Decision, describe
from .program import Program
from .settings import WorkerSettings

log = logging.getLogger("dynoqueue.worker")


class Sender:
    """The finisher's calls for one worker.

    Args:
        settings: the worker's settings (its queue's name, lease, hooks).
        heartbeat_failed: called when a heartbeat failed, so the next comes soon.
    """

    def __init__(self, settings: WorkerSettings, heartbeat_failed: Callable[[], None]) -> None:
        self.settings = settings
        self._name = settings.queue_name
        self._heartbeat_failed = heartbeat_failed

    def acks(self, acks: list[Message]) -> Program:
        """Ack ``acks`` in one call."""
        try:
            acked = yield Call("ack_many", acks)
        except Exception as exc:
            log.error("queue %s: acking %d messages failed (%s); they will be delivered again",
                      self._name, len(acks), describe(exc))
            return
        if acked < len(acks):
            log.warning("queue %s: %d of %d acks found the lease gone (it had run out and the "
                        "message was put back: it is delivered again)", self._name,
                        len(acks) - acked, len(acks))
        if self.settings.hooks is not None:
            for message in acks:
                self.hook("on_acked", message)

    def decision(self, message: Message, decision: Decision) -> Program:
        """Nack or dead-letter ``message`` as its handler's end decided."""
        mid, n = message.id, message.deliveries
        try:
            if decision.action == "dead_letter":
                ended = yield Call("dead_letter", mid, decision.reason, receipt=message.receipt)
            else:
                ended = yield Call("nack", mid, decision.delay_ms, error=decision.error,
                                   receipt=message.receipt)
        except Exception as exc:
            log.error("queue %s: ending the lease of message %s failed (%s); it will be "
                      "delivered again after its lease", self._name, mid, describe(exc))
            return
        if not ended:
            log.warning("queue %s: message %s (delivery %d): its lease was gone (run out and "
                        "put back), so it is delivered again", self._name, mid, n)
        elif decision.action == "dead_letter":
            log.warning("queue %s: message %s (delivery %d) dead-lettered by its handler: %s",
                        self._name, mid, n, decision.reason)
            self.hook("on_dead_lettered", message, decision.reason, None)
        else:
            yield from self._nacked(message, decision)

    def _nacked(self, message: Message, decision: Decision) -> Program:
        """Report a nack: the queue dead-letters a nack of the last allowed delivery, and only
        it knows the limit, so ask it."""
        mid, n = message.id, message.deliveries
        state = None
        try:
            state = yield Call("state", mid)
        except Exception as exc:
            log.debug("queue %s: state of %s unknown after its nack: %s", self._name, mid, exc)
        if state is MessageState.DEAD:
            log.error("queue %s: message %s failed on delivery %d, its last allowed: "
                      "dead-lettered; %s", self._name, mid, n, decision.error)
            self.hook("on_dead_lettered", message, "max_deliveries", decision.error)
            return
        if decision.asked:
            log.info("queue %s: message %s (delivery %d) retries in %d ms%s", self._name, mid,
                     n, decision.delay_ms, f": {decision.error}" if decision.error else "")
        else:
            log.warning("queue %s: message %s failed on delivery %d: %s; due again in %d ms",
                        self._name, mid, n, decision.error, decision.delay_ms)
        self.hook("on_nacked", message, decision.delay_ms, decision.error)

    def releases(self, releases: list[Message]) -> Program:
        """Give back messages leased but not started (their delivery uncounted)."""
        try:
            ended = yield Call("release", releases)
        except Exception as exc:
            log.error("queue %s: giving back %d unstarted messages failed (%s); they come "
                      "back after their lease", self._name, len(releases), describe(exc))
            return
        log.info("queue %s: gave back %d messages leased but not started", self._name, ended)
        for message in releases:
            self.hook("on_nacked", message, 0, None)

    def heartbeat(self, messages: list[Message]) -> Program:
        """Extend the lease of every message in hand, in one call."""
        try:
            extended = yield Call("set_unack_timeout_many", messages, self.settings.lease_ms)
        except Exception as exc:
            self._heartbeat_failed()
            log.warning("queue %s: extending %d leases failed (%s); trying again soon",
                        self._name, len(messages), describe(exc))
            return
        if extended < len(messages):
            log.warning("queue %s: %d of %d leases in hand were gone at the heartbeat; those "
                        "messages are delivered again", self._name,
                        len(messages) - extended, len(messages))

    def sweep(self) -> Program:
        """Put back the expired leases of the local shard."""
        try:
            yield Call("process_unacks")
        except Exception as exc:
            log.warning("queue %s: putting back expired leases failed: %s", self._name,
                        describe(exc))

    def hook(self, name: str, *args: Any) -> None:
        """Call the hook ``name`` if the worker has hooks; what it raises is logged."""
        hooks = self.settings.hooks
        if hooks is None:
            return
        try:
            getattr(hooks, name)(*args)
        except Exception as exc:
            log.warning("worker hook %s raised %s", name, describe(exc))
