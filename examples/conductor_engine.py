"""A tiny Conductor-style workflow engine on dynoqueue's QueueDAO (see docs/conductor.md).

Run it with ``python examples/conductor_engine.py`` (it starts a local redis-server with
``dynoqueue.embedded``) or ``python examples/conductor_engine.py redis://host:6379/0``.

Three order workflows run ``charge`` then ``ship``. The engine keeps each workflow's state in
memory (Conductor keeps it in its ExecutionDAO); the queues only say *when* to look at what:

- task queues, one per task type: workers poll them and ack at poll time, as Conductor's
  ``ExecutionService.poll`` does (the task's state, not the queue, now says it is running);
- callbacks: a task that is not finished answers "in progress, call me back in N s"; the engine
  ``postpone``s its message, and ``reset_offset_time`` makes it due at once when the event it
  waits for arrives early (here, the carrier's pick-up);
- the decider queue, one message per running workflow: the sweeper pops it, decides (schedules
  the next task or completes the workflow), and leaves the message leased for a later sweep
  with ``set_unack_timeout``, as Conductor's WorkflowSweeper does; a finished task wakes its
  workflow's decision at once with ``reset_offset_time(..., release_leased=True)``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from dynoqueue import RedisQueues
from dynoqueue.conductor import DynoQueueDAO
from dynoqueue.embedded import single

DECIDER = "_deciderQueue"
TASKS = ("charge", "ship")
SWEEP_AGAIN_MS = 5_000  # look at a running workflow again after this long, if nothing happens
CALLBACK_S = 30  # "call me back" delay of the ship task while it waits for the carrier
CARRIER_DELAY_S = 0.3  # the carrier picks the parcel up this soon, far before the callback


@dataclass
class Workflow:
    id: str
    priority: int
    done: list[str] = field(default_factory=list)  # finished tasks, in order
    scheduled: str | None = None  # the task in flight


class Engine:
    def __init__(self, dao: DynoQueueDAO) -> None:
        self.dao = dao
        self.workflows: dict[str, Workflow] = {}
        self.carrier_calls: dict[str, float] = {}  # ship task id -> when the carrier calls
        self.picked_up: set[str] = set()  # ship tasks whose parcel the carrier has
        self.completed: list[str] = []

    def start(self, workflow_id: str, priority: int) -> None:
        self.workflows[workflow_id] = Workflow(workflow_id, priority)
        self.dao.push(DECIDER, workflow_id, offset_time_s=0, priority=priority)

    # -- the sweeper: one decision per due decider message
    def sweep(self) -> None:
        for workflow_id in self.dao.pop(DECIDER, count=10, timeout_ms=50):
            wf = self.workflows[workflow_id]
            if len(wf.done) == len(TASKS):
                self.dao.ack(DECIDER, workflow_id)  # no more decisions
                self.completed.append(workflow_id)
                print(f"{workflow_id} COMPLETED after {', '.join(wf.done)}")
                continue
            task = TASKS[len(wf.done)]
            if wf.scheduled is None:
                wf.scheduled = f"{workflow_id}:{task}"
                self.dao.push(f"task_{task}", wf.scheduled, offset_time_s=0,
                              priority=wf.priority)
                print(f"{workflow_id}: scheduled {task}")
            self.dao.set_unack_timeout(DECIDER, workflow_id, unack_timeout_ms=SWEEP_AGAIN_MS)

    # -- the workers: poll, ack at poll, run, report
    def work(self) -> None:
        for task in TASKS:
            for message in self.dao.poll_messages(f"task_{task}", count=5, timeout_ms=50):
                self.dao.ack(f"task_{task}", message.id)
                workflow_id = message.id.split(":")[0]
                if task == "ship" and message.id not in self.picked_up:
                    self.callback_later(message.id, workflow_id)
                else:
                    self.finish(workflow_id, task)

    def callback_later(self, task_id: str, workflow_id: str) -> None:
        """The task answered IN_PROGRESS with callbackAfterSeconds: poll it again later."""
        wf = self.workflows[workflow_id]
        self.dao.postpone("task_ship", task_id, wf.priority, postpone_s=CALLBACK_S)
        self.carrier_calls[task_id] = time.monotonic() + CARRIER_DELAY_S
        print(f"{workflow_id}: ship waits for the carrier (callback in {CALLBACK_S} s)")

    def finish(self, workflow_id: str, task: str) -> None:
        wf = self.workflows[workflow_id]
        wf.done.append(task)
        wf.scheduled = None
        print(f"{workflow_id}: {task} done")
        # Decide now rather than at the next sweep: the decider message is leased by the
        # sweeper, so release it (its priority is kept).
        self.dao.reset_offset_time(DECIDER, workflow_id, release_leased=True)

    # -- external events: the carrier picked up a parcel
    def deliver_events(self) -> None:
        now = time.monotonic()
        for task_id, at in list(self.carrier_calls.items()):
            if at <= now:
                del self.carrier_calls[task_id]
                self.picked_up.add(task_id)
                self.dao.reset_offset_time("task_ship", task_id)  # poll it now, not in 30 s
                print(f"{task_id.split(':')[0]}: the carrier called, ship is due now")


def run(dao: DynoQueueDAO) -> None:
    engine = Engine(dao)
    for i, priority in enumerate((5, 1, 9), start=1):
        engine.start(f"order-{i}", priority)
    deadline = time.monotonic() + 20
    shown = False
    while len(engine.completed) < len(engine.workflows):
        if time.monotonic() > deadline:
            raise SystemExit(f"not finished in time: {engine.workflows}")
        engine.sweep()
        engine.work()
        engine.deliver_events()
        if engine.carrier_calls and not shown:
            shown = True
            print("queues_detail_verbose while a ship task waits:", dao.queues_detail_verbose())
    print("queues_detail_verbose at the end:", dao.queues_detail_verbose())
    print(f"all {len(engine.completed)} workflows finished")


@contextlib.contextmanager
def redis_url(argv: list[str]) -> Iterator[str]:
    if len(argv) > 1:
        yield argv[1]
        return
    with single() as server:
        yield server.url


def main(argv: list[str]) -> None:
    with redis_url(argv) as url, RedisQueues.from_url(
            url, key_prefix=f"conductor-example-{int(time.time())}",
            unack_timeout_ms=60_000) as queues:
        run(DynoQueueDAO(queues))


if __name__ == "__main__":
    main(sys.argv)
