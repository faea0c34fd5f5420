"""Run several operations as one: their commands share round trips.

A partitioned queue's batch calls (a push split over partitions, the acks of many messages,
sizes, sweeps) are one operation per partition. Run one after another they would cost a round
trip each; :func:`together` steps them side by side instead, and whenever several wait for a
plain command of the same connection role it sends those as one :class:`~.requests.Batch`: a
pipeline, one round trip per node. Any other request (a pipelined write with its WAIT, a
sleep, a slot-map refresh) is answered for its operation alone, so each operation's own
recovery (NOSCRIPT, Dynomite retries, Cluster re-routing) runs as it would alone.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .requests import Batch, Command, Op, Step

T = TypeVar("T")


def together(ops: list[Op[T]]) -> Op[list[T]]:
    """The results of ``ops``, in order, their commands batched (see the module docstring).

    The first operation to raise ends the whole (the others stop where they are: a partitioned
    call then failed part-way, as a large batch of one partition may). An error thrown in at a
    request of one operation alone is that operation's; at a Batch (a cancellation) it ends
    them all: run only writes that may be repeated and reads here, never claims.
    """
    if len(ops) == 1:
        return [(yield from ops[0])]
    steps = [Step(op) for op in ops]
    while True:
        pending = [step for step in steps if step.pending]
        if not pending:
            return [step.result for step in steps]
        batched = _batchable(pending)
        if batched:
            answers: list[tuple[Any, BaseException | None]] = yield Batch(
                batched[0].request.role, [step.request for step in batched])
            for step, (reply, error) in zip(batched, answers, strict=True):
                step.send(reply, error)
            continue
        step = pending[0]
        try:
            reply = yield step.request
        except BaseException as error:  # the step's own to handle (or to raise from here)
            step.send(None, error)
        else:
            step.send(reply)


def _batchable(pending: list[Step[Any]]) -> list[Step[Any]]:
    """The pending steps that wait for plain commands of the first such one's role (two or
    more), or [] when fewer than two do."""
    role = None
    batch: list[Step[Any]] = []
    for step in pending:
        request = step.request
        if type(request) is Command and request.replica_of is None:
            if role is None:
                role = request.role
            if request.role == role:
                batch.append(step)
    return batch if len(batch) > 1 else []
