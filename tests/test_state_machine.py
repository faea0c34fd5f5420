"""Stateful property test: DynoQueue against a plain-Python model, on a real redis-server.

A hypothesis ``RuleBasedStateMachine`` drives push (a third of the messages in ordered groups),
pop, unsafe_pop_all_shards, ack, nack, remove, redrive, set_timeout, set_unack_timeout,
process_unacks and ensure, plus an injected clock that only moves
when the machine moves it (by small and large steps, and onto the ms around the next due time or
lease expiry), and after every step compares size, shard_sizes, get / contains of
every id of the pool, and the exact ordered lists peek and unsafe_peek_all_shards return.

The model encodes the library's contract:

* a waiting message's score is ``due_ms + priority / 100`` with ``due_ms = now + timeout``; it is
  deliverable iff ``due_ms <= now``; pops and peeks go in (due_ms, priority, id bytes) order
  (Redis breaks equal scores by member bytes, and UTF-8 bytes order is code point order), or,
  on a queue with strict priority (drawn at the start), in (priority, due_ms, id bytes) order;
* pushes go round robin over ["a", "b", "c"], incrementing first (b, c, a, ...); ensure advances
  the same counter even when it does not push;
* a pop leases in the shard the message waited in, until ``now + unack_timeout_ms``;
  process_unacks puts back only the local shard's expired leases, due at the lease expiry; a
  claim of a shard first puts back up to its count of that shard's expired leases (earliest
  expiry first; one at its last delivery dies), so they are delivered again at once; an
  expired lease's state is READY;
* grouped messages go to the group's crc32 shard (without moving the round robin); only the
  group's current message is deliverable; the others wait in line by (due ms, push sequence)
  and count as waiting (DELAYED/READY by their own due time); one due before a current message
  that waits and was never delivered becomes current; when the current one ends (ack, remove,
  dead letter) or is replaced, the first in line becomes current, due at its own due time; a
  nack or lease expiry keeps it current; set_timeout takes the message's place in line again
  by its new due time, keeping its sequence; redrive queues dead letters oldest first, each
  with a new sequence.

Each example gets a fresh key prefix on the session redis-server, and its RedisQueues is closed
(after clearing the queue) when the example ends. Runs once with a bytes client and, shorter,
once with a decode_responses=True client, each on the sync and on the asyncio API; and, with
fewer examples, on every other deployment of tests/deployments.py (ring, sentinel, cluster,
dynomite: built through ``RedisQueues.from_url`` as the contract suite does, so Cluster's hash
tags and Dynomite's profile, with scripts sent as text and no doorbell, are exercised), on both
APIs.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from dynoqueue import (
    DynoQueue,
    Message,
    MessageState,
    QueuePolicy,
    RedisQueues,
    StaticShardSupplier,
)
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import RedisServer

from .apis import Bridge
from .deployments import NAMES, Deployment

SHARDS = ["a", "b", "c"]
LOCAL = "a"
#: Small on purpose: re-pushes, ensure collisions and ties between equal scores happen often.
#: Chosen so that bytes order differs from naive expectations ("Z" < "a" < "m10" < "m2" < "é").
IDS = ["a", "m2", "m10", "Z", "é", 'q"1']
PEEK_ALL = 1000

ids = st.sampled_from(IDS)
payloads = st.one_of(
    st.none(),
    st.text(alphabet='ab "\\{}%é€😀\n\t\x00\u2028', max_size=6),
)
# Mostly 0 or a few ms (so that messages fall due in the same ms and tie), sometimes seconds.
delays = st.one_of(st.just(0), st.integers(0, 5), st.integers(0, 3000))
# Few distinct priorities, so that equal scores (same due ms and priority) are common.
priorities = st.one_of(st.sampled_from([0, 0, 1, 99]), st.integers(0, 99))
#: Ordered groups: crc32 puts "x" and "w" on the local shard a, "y" on b.
GROUPS = ["x", "y", "w"]
# A third of the messages are grouped, so groups meet every rule.
groups = st.one_of(st.none(), st.none(), st.sampled_from(GROUPS))
# Headers on some messages: they must come back as pushed through every transition.
headers = st.one_of(st.none(), st.none(), st.dictionaries(
    st.sampled_from(["traceparent", "tenant", "é"]), st.text(alphabet='a"é\n{', max_size=4),
    min_size=1, max_size=2))
messages = st.builds(Message, id=ids, payload=payloads, timeout=delays, priority=priorities,
                     group=groups, headers=headers)
# Due at once or within a few ms, with one of two priorities: pops and ties between equal scores.
due_messages = st.builds(
    Message, id=ids, payload=payloads, timeout=st.integers(0, 2), priority=st.sampled_from([0, 99]),
    group=groups, headers=headers,
)


@dataclass
class Entry:
    """The model of one stored message."""

    payload: str | None
    timeout: int
    priority: int
    shard: str
    leased: bool
    due_ms: int = 0  # waiting: visible from this ms on (score = due_ms + priority / 100)
    expiry_ms: int = 0  # leased: lease ends at this ms
    deliveries: int = 0  # claims so far (the lifecycle's delivery count)
    group: str | None = None
    headers: dict[str, str] | None = None
    group_key: tuple[int, int] = (0, 0)  # grouped: (due ms, push sequence), its place in line
    pending: bool = False  # grouped: waiting behind its group's current message
    died_at: int = 0  # dead letters: when it died (redrive takes the oldest first)

    def order_key(self, message_id: str, strict: bool = False) -> tuple[int, int, bytes]:
        """Delivery order within a shard: (due ms, priority, id bytes), or with strict
        priority (priority, due ms, id bytes)."""
        if strict:
            return (self.priority, self.due_ms, message_id.encode("utf-8"))
        return (self.due_ms, self.priority, message_id.encode("utf-8"))


def as_tuple(message: Message) -> tuple[Any, ...]:
    return (message.id, message.payload, message.timeout, message.priority, message.shard,
            message.group, message.headers)


class QueueMachine(RuleBasedStateMachine):
    """DynoQueue (3 shards, local "a", injected clock) against :class:`Entry` records."""

    #: Set by the pytest test before running the machine.
    client: ClassVar[redis.Redis | None] = None
    make_clock: ClassVar[Callable[[], Any] | None] = None
    bridge: ClassVar[Bridge | None] = None
    async_client: ClassVar[Any] = None
    #: Set instead of ``client`` to build the queues through a deployment's builder:
    #: ``build(**settings)`` returns a RedisQueues (or the asyncio one behind a bridge).
    build: ClassVar[Callable[..., Any] | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.queues: RedisQueues | None = None
        self.queue: DynoQueue
        self.clock: Any = None
        self.model: dict[str, Entry] = {}
        #: Dead letters: id -> the entry as it died (max deliveries reached).
        self.dead: dict[str, Entry] = {}
        self.max_deliveries = 0
        self.strict = False
        self.rr = 0
        #: Ordered groups: group -> its current message (waiting or leased); the push sequence.
        self.heads: dict[str, str] = {}
        self.seq = 0
        self.unack_timeout_ms = 1

    # ------------------------------------------------------------------------------- set-up

    @initialize(
        unack_timeout_ms=st.one_of(st.integers(1, 10), st.integers(1, 5000)),
        batch=st.lists(st.one_of(messages, due_messages), max_size=len(IDS)),
        max_deliveries=st.sampled_from([0, 0, 1, 2, 3]),
        strict=st.booleans(),
    )
    def start(self, unack_timeout_ms: int, batch: list[Message], max_deliveries: int,
              strict: bool) -> None:
        assert self.make_clock is not None
        self.clock = self.make_clock()
        self.unack_timeout_ms = unack_timeout_ms
        options: dict[str, Any] = dict(
            key_prefix=f"sm{uuid.uuid4().hex[:12]}",
            shard_supplier=StaticShardSupplier(SHARDS, LOCAL),
            unack_handler_interval_ms=0,
            unack_timeout_ms=unack_timeout_ms,
            clock=self.clock,
        )
        if self.build is not None:  # a deployment's builder (either API)
            self.queues = self.build(**options)
        elif self.bridge is not None:  # the asyncio API, through a blocking view
            self.queues = self.bridge.wrap_factory(AsyncRedisQueues(
                self.async_client, self.async_client, **options))
        else:
            assert self.client is not None
            self.queues = RedisQueues(self.client, self.client, **options)
        self.max_deliveries = max_deliveries
        self.strict = strict
        self.queue = self.queues.get("q", QueuePolicy(max_deliveries=max_deliveries,
                                                      strict_priority=strict))
        if batch:
            self.push(batch)

    def teardown(self) -> None:
        if self.queues is not None:
            try:
                self.queue.clear()
            finally:
                self.queues.close()

    # ------------------------------------------------------------------------------- model

    @property
    def now(self) -> int:
        return int(self.clock.now_ms)

    def next_shard(self) -> str:
        self.rr += 1
        if self.rr >= len(SHARDS):
            self.rr = 0
        return SHARDS[self.rr]

    def shard_for(self, message: Message) -> str:
        """Grouped messages go to the group's crc32 shard; the others round robin."""
        if message.group is not None:
            return SHARDS[zlib.crc32(message.group.encode()) % len(SHARDS)]
        return self.next_shard()

    def model_push(self, message: Message, shard: str, now: int) -> None:
        self.dead.pop(message.id, None)
        if message.id in self.model:  # replaced: it leaves its group first
            self.group_leave(message.id)
        entry = self.model[message.id] = Entry(
            payload=message.payload or None,  # an empty payload is not stored
            timeout=message.timeout,
            priority=message.priority,
            shard=shard,
            leased=False,
            due_ms=now + message.timeout,
            group=message.group,
            headers=message.headers or None,  # empty headers are not stored
        )
        if entry.group is not None:
            self.seq += 1
            entry.group_key = (entry.due_ms, self.seq)
            self.group_insert(message.id)

    def group_insert(self, mid: str) -> None:
        """A grouped entry (not leased) takes its place in line: current if its group has
        none, or if it comes before a current one that waits and was never delivered."""
        entry = self.model[mid]
        assert entry.group is not None
        entry.due_ms = entry.group_key[0]
        head = self.heads.get(entry.group)
        if head is None:
            self.heads[entry.group] = mid
            entry.pending = False
            return
        current = self.model[head]
        entry.shard = current.shard
        if (entry.group_key < current.group_key and not current.leased
                and current.deliveries == 0):
            current.pending = True
            current.due_ms = current.group_key[0]
            self.heads[entry.group] = mid
            entry.pending = False
        else:
            entry.pending = True

    def group_leave(self, mid: str) -> None:
        """The entry leaves its group (ended, replaced, rescheduled); if it was the current
        one, the first in line becomes current, due at its own due time."""
        entry = self.model[mid]
        group = entry.group
        entry.pending = False
        if group is None or self.heads.get(group) != mid:
            return
        waiting = [m for m, e in self.model.items() if e.group == group and e.pending]
        if not waiting:
            del self.heads[group]
            return
        nxt = min(waiting, key=lambda m: self.model[m].group_key)
        self.heads[group] = nxt
        self.model[nxt].pending = False
        self.model[nxt].due_ms = self.model[nxt].group_key[0]

    def end(self, mid: str) -> Entry:
        """The message leaves the queue (acked, removed, dead): its group moves on."""
        self.group_leave(mid)
        return self.model.pop(mid)

    def deliverable(self, shard: str) -> list[str]:
        due = [
            mid for mid, entry in self.model.items()
            if entry.shard == shard and not entry.leased and not entry.pending
            and entry.due_ms <= self.now
        ]
        return sorted(due, key=lambda mid: self.model[mid].order_key(mid, self.strict))

    def expected(self, mid: str, shard: str | None) -> tuple[Any, ...]:
        entry = self.model[mid]
        return (mid, entry.payload, entry.timeout, entry.priority, shard, entry.group,
                entry.headers)

    def expired_local_leases(self) -> list[str]:
        return self.expired_leases(LOCAL)

    def expired_leases(self, shard: str) -> list[str]:
        """The shard's leases that ended, in the order Redis lists them (expiry, id bytes)."""
        ended = [mid for mid, e in self.model.items()
                 if e.leased and e.shard == shard and e.expiry_ms <= self.now]
        return sorted(ended, key=lambda mid: (self.model[mid].expiry_ms, mid.encode()))

    def requeue_expired(self, shard: str, limit: int | None = None) -> list[str]:
        """Put back the shard's first ``limit`` expired leases (all: None), due at their
        expiry; one at its last delivery dies. Returns the ids put back."""
        requeued = []
        for mid in self.expired_leases(shard)[:limit]:
            if self.at_last_delivery(mid):
                self.kill(mid)
                continue
            entry = self.model[mid]
            entry.leased = False
            entry.due_ms = entry.expiry_ms
            requeued.append(mid)
        return requeued

    def next_deadline(self) -> int | None:
        """The earliest due time or lease expiry still in the future, if any."""
        times = [e.expiry_ms if e.leased else e.due_ms for e in self.model.values()]
        future = [t for t in times if t > self.now]
        return min(future) if future else None

    def lease(self, mids: list[str]) -> None:
        for mid in mids:
            entry = self.model[mid]
            entry.leased = True
            entry.expiry_ms = self.now + self.unack_timeout_ms
            entry.deliveries += 1

    def at_last_delivery(self, mid: str) -> bool:
        return 0 < self.max_deliveries <= self.model[mid].deliveries

    def kill(self, mid: str) -> None:
        """The lease ended at the last allowed delivery: a dead letter."""
        self.dead[mid] = self.end(mid)
        self.dead[mid].died_at = self.now

    # ------------------------------------------------------------------------------- rules

    @rule(ms=st.one_of(st.integers(0, 5), st.integers(0, 4000)))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(lambda self: self.next_deadline() is not None)
    @rule(offset=st.sampled_from([-1, 0, 0, 1]))
    def advance_to_next_deadline(self, offset: int) -> None:
        """Move the clock to just before, onto or just after the next due time or lease expiry."""
        deadline = self.next_deadline()
        assert deadline is not None
        self.clock.advance(max(0, deadline + offset - self.now))

    @rule(batch=st.lists(messages, min_size=1, max_size=4))
    def push(self, batch: list[Message]) -> None:
        now = self.now
        assert self.queue.push(batch) == [m.id for m in batch]
        for message in batch:
            self.model_push(message, self.shard_for(message), now)

    @rule(batch=st.lists(due_messages, min_size=1, max_size=6))
    def push_due(self, batch: list[Message]) -> None:
        self.push(batch)

    @rule(
        batch_ids=st.lists(ids, min_size=4, max_size=len(IDS), unique=True),
        payload=payloads,
        priority=st.sampled_from([0, 99]),
    )
    def push_same_score(self, batch_ids: list[str], payload: str | None, priority: int) -> None:
        """Due-now messages with one score: each shard gets ties broken by id bytes."""
        self.push([Message(mid, payload, 0, priority) for mid in batch_ids])

    @rule(group=st.sampled_from(GROUPS), batch_ids=st.lists(ids, min_size=2, max_size=4),
          delay=st.integers(0, 3))
    def push_group(self, group: str, batch_ids: list[str], delay: int) -> None:
        """Several messages of one group at once: ties in due time go by push order."""
        self.push([Message(mid, mid, delay, 0, group=group) for mid in batch_ids])

    @rule(message=messages)
    def ensure(self, message: Message) -> None:
        shard = self.shard_for(message)
        absent = message.id not in self.model
        assert self.queue.ensure(message) is absent
        if absent:
            self.model_push(message, shard, self.now)

    @rule(count=st.integers(1, 4))
    def pop(self, count: int) -> None:
        self.requeue_expired(LOCAL, count)  # the claim puts ended leases back first
        want = self.deliverable(LOCAL)[:count]
        expect = [self.expected(mid, LOCAL) for mid in want]
        popped = self.queue.pop(count, wait_ms=0)
        assert [as_tuple(m) for m in popped] == expect
        assert [m.deliveries for m in popped] == [self.model[mid].deliveries + 1 for mid in want]
        self.lease(want)

    @precondition(lambda self: bool(self.deliverable(LOCAL)))
    @rule(count=st.integers(1, 3))
    def pop_when_due(self, count: int) -> None:
        """Pop when something is due: plain pops mostly find the local shard empty."""
        self.pop(count)

    @rule(count=st.integers(1, 5))
    def unsafe_pop_all_shards(self, count: int) -> None:
        want: list[tuple[str, str]] = []
        for s in SHARDS:  # local first, then the others, each claim for what is still wanted
            if len(want) == count:
                break
            self.requeue_expired(s, count - len(want))
            want += [(mid, s) for mid in self.deliverable(s)[:count - len(want)]]
        expect = [self.expected(mid, s) for mid, s in want]
        got = [as_tuple(m) for m in self.queue.unsafe_pop_all_shards(count, wait_ms=0)]
        assert got == expect
        self.lease([mid for mid, _ in want])

    @rule(mid=ids)
    def ack(self, mid: str) -> None:
        leased = mid in self.model and self.model[mid].leased
        assert self.queue.ack(mid) is leased
        if leased:
            self.end(mid)

    @rule(mid=ids)
    def remove(self, mid: str) -> None:
        present = mid in self.model or mid in self.dead
        assert self.queue.remove(mid) is present
        if mid in self.model:
            self.end(mid)
        self.dead.pop(mid, None)

    @rule(mid=ids, delay=delays)
    def nack(self, mid: str, delay: int) -> None:
        leased = mid in self.model and self.model[mid].leased
        assert self.queue.nack(mid, delay) is leased
        if not leased:
            return
        if self.at_last_delivery(mid):
            self.kill(mid)
        else:
            entry = self.model[mid]
            entry.leased = False
            entry.due_ms = self.now + delay

    @precondition(lambda self: bool(self.dead))
    @rule(delay=st.integers(0, 3))
    def redrive(self, delay: int) -> None:
        assert self.queue.redrive(delay_ms=delay) == len(self.dead)
        oldest_first = sorted(self.dead, key=lambda m: (self.dead[m].died_at, m.encode()))
        for mid in oldest_first:
            entry = self.dead[mid]
            entry.leased, entry.deliveries, entry.due_ms = False, 0, self.now + delay
            self.model[mid] = entry
            if entry.group is not None:
                self.seq += 1
                entry.group_key = (entry.due_ms, self.seq)
                self.group_insert(mid)
        self.dead.clear()

    @rule(mid=ids, timeout=delays)
    def set_timeout(self, mid: str, timeout: int) -> None:
        waiting = mid in self.model and not self.model[mid].leased
        assert self.queue.set_timeout(mid, timeout) is waiting
        if waiting:
            entry = self.model[mid]
            entry.timeout = timeout
            entry.due_ms = self.now + timeout
            if entry.group is not None:  # it takes its place in line again, same sequence
                self.group_leave(mid)
                entry.group_key = (entry.due_ms, entry.group_key[1])
                self.group_insert(mid)

    @precondition(lambda self: any(e.pending for e in self.model.values()))
    @rule(data=st.data(), timeout=st.integers(0, 3))
    def reschedule_waiting_member(self, data: st.DataObject, timeout: int) -> None:
        """set_timeout on a grouped message waiting in line: it may now come first."""
        pending = sorted(mid for mid, e in self.model.items() if e.pending)
        self.set_timeout(data.draw(st.sampled_from(pending)), timeout)

    @rule(mid=ids, timeout=st.one_of(st.integers(0, 5), st.integers(0, 5000)))
    def set_unack_timeout(self, mid: str, timeout: int) -> None:
        leased = mid in self.model and self.model[mid].leased
        assert self.queue.set_unack_timeout(mid, timeout) is leased
        if leased:
            self.model[mid].expiry_ms = self.now + timeout

    @precondition(lambda self: any(e.leased for e in self.model.values()))
    @rule(data=st.data())
    def ack_leased(self, data: st.DataObject) -> None:
        """Ack or re-lease a leased id: ids from the pool miss leases more often than not."""
        leased = sorted(mid for mid, e in self.model.items() if e.leased)
        mid = data.draw(st.sampled_from(leased))
        if data.draw(st.booleans()):
            assert self.queue.ack(mid) is True
            self.end(mid)
        else:
            timeout = data.draw(st.integers(0, 10))
            assert self.queue.set_unack_timeout(mid, timeout) is True
            self.model[mid].expiry_ms = self.now + timeout

    @rule(via_factory=st.booleans())
    def process_unacks(self, via_factory: bool) -> None:
        assert self.queues is not None
        run = self.queues.process_unacks if via_factory else self.queue.process_unacks
        got = run()
        assert got == len(self.requeue_expired(LOCAL))

    @precondition(lambda self: bool(self.expired_local_leases()))
    @rule()
    def process_expired_unacks(self) -> None:
        """Process unacks when a local lease has expired (then it requeues something)."""
        self.process_unacks(via_factory=False)

    # ------------------------------------------------------------------------------- checks

    @invariant()
    def sizes_match(self) -> None:
        if self.queues is None:
            return
        expect = {s: {"size": 0, "uacked": 0} for s in SHARDS}
        for entry in self.model.values():
            expect[entry.shard]["uacked" if entry.leased else "size"] += 1
        assert self.queue.shard_sizes() == expect
        assert self.queue.size() == sum(v["size"] for v in expect.values())

    @invariant()
    def states_and_dead_letters_match(self) -> None:
        if self.queues is None:
            return
        assert self.queue.dead_size() == len(self.dead)
        for mid in IDS:
            state = self.queue.state(mid)
            if mid in self.dead:
                assert state is MessageState.DEAD
            elif mid not in self.model:
                assert state is None
            elif self.model[mid].leased:  # an ended lease is due again
                ended = self.model[mid].expiry_ms <= self.now
                assert state is (MessageState.READY if ended else MessageState.LEASED)
            else:
                due = self.model[mid].due_ms <= self.now
                assert state is (MessageState.READY if due else MessageState.DELAYED)

    @invariant()
    def stored_messages_match(self) -> None:
        if self.queues is None:
            return
        for mid in IDS:
            got = self.queue.get(mid)
            if mid in self.model:
                assert got is not None and as_tuple(got) == self.expected(mid, None)
            else:
                assert got is None
            assert self.queue.contains(mid) is (mid in self.model)

    @invariant()
    def groups_match(self) -> None:
        """group_info: waiting count, leased id, due time of the next delivery, shard; and
        never two messages of one group leased."""
        if self.queues is None:
            return
        for group in GROUPS:
            members = {m: e for m, e in self.model.items() if e.group == group}
            head = self.heads.get(group)
            leased = [m for m, e in members.items() if e.leased]
            assert len(leased) <= 1 and (not leased or leased[0] == head)
            nxt: int | None = None
            if head is not None and not members[head].leased:
                nxt = members[head].due_ms
            elif head is not None:
                waiting = [e.group_key for e in members.values() if e.pending]
                nxt = min(waiting)[0] if waiting else None
            home = members[head].shard if head else SHARDS[
                zlib.crc32(group.encode()) % len(SHARDS)]
            assert self.queue.group_info(group) == {
                "waiting": len(members) - len(leased), "leased": leased[0] if leased else None,
                "next_due_ms": nxt, "shard": home}

    @invariant()
    def deliverable_match(self) -> None:
        if self.queues is None:
            return
        local = [as_tuple(m) for m in self.queue.peek(PEEK_ALL)]
        assert local == [self.expected(mid, LOCAL) for mid in self.deliverable(LOCAL)]
        everywhere = [as_tuple(m) for m in self.queue.unsafe_peek_all_shards(PEEK_ALL)]
        assert everywhere == [
            self.expected(mid, s) for s in SHARDS for mid in self.deliverable(s)
        ]


@pytest.mark.parametrize(
    ("decode_responses", "max_examples"), [(False, 100), (True, 25)], ids=["bytes", "decoded"]
)
def test_queue_matches_model(
    redis_server: RedisServer, clock: Any, decode_responses: bool, max_examples: int,
    api: str, bridge: Bridge,
) -> None:
    client = redis_server.client(decode_responses=decode_responses)
    clock_type = type(clock)  # conftest's FakeClock: a fresh one per example
    QueueMachine.client = client
    QueueMachine.make_clock = clock_type
    QueueMachine.bridge = bridge if api == "async" else None
    QueueMachine.async_client = redis.asyncio.Redis(port=redis_server.port,
                                                    decode_responses=decode_responses)
    try:
        run_state_machine_as_test(
            QueueMachine,
            settings=settings(
                max_examples=max_examples,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        QueueMachine.client = None
        QueueMachine.make_clock = None
        QueueMachine.bridge = None
        client.close()
        bridge.call(QueueMachine.async_client.aclose())


@pytest.mark.deployments(*(name for name in NAMES if name != "single"))
def test_queue_matches_model_on_every_deployment(
    deployment: Deployment, clock: Any, api: str, bridge: Bridge,
) -> None:
    """The same machine on the multi-process deployments (single is the test above), through
    the builders, fewer and shorter examples: the deployments differ in how commands travel
    (replicas' WAIT, Cluster slots and hash tags, Dynomite's racks), not in the model."""
    QueueMachine.make_clock = type(clock)

    def build(**settings: Any) -> Any:
        return deployment.build(api=api, bridge=bridge, **settings)

    QueueMachine.build = staticmethod(build)
    try:
        run_state_machine_as_test(
            QueueMachine,
            settings=settings(
                max_examples=6,
                stateful_step_count=20,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        QueueMachine.build = None
        QueueMachine.make_clock = None
