"""push's two paths agree: its one-call form (``QueueCore.push_call``, a ``CommandOp`` the drivers
send without the operation's layers) exists exactly when the general path (``push_validated``) would
send that one script call and nothing else, and both decode its reply alike.

Each condition under which the one-call form must step aside (first-call checks, the queue
registry, a write quorum, over SCRIPT_BATCH messages, an empty batch) is set up on a real server;
the general path's generator is stepped by hand so that what it would send is compared, not
assumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dynoqueue import (
    Message,
    QueueClosedError,
    QueuePolicy,
    QuorumNotReachedError,
    RedisQueues,
    SingleShardSupplier,
)
from dynoqueue.core.requests import Batch, Command, CommandOp, Step
from dynoqueue.core.shared import SCRIPT_BATCH

from .conftest import unique


@pytest.fixture
def queues(redis_server: Any, prefix: str) -> Iterator[RedisQueues]:
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix, unack_handler_interval_ms=0,
                              shard_supplier=SingleShardSupplier("a")) as q:
        yield q


def _requests(queues: RedisQueues, core: Any, batch: list[Message],
              reply: Any = None) -> tuple[list[Any], Any]:
    """What the general path sends for ``batch`` and its result. Each request is answered by
    the factory's driver, except that ``reply`` (when given) answers a script call of push."""
    step = Step(core.push_validated(batch, "replace"))
    sent: list[Any] = []
    while step.pending:
        sent.append(step.request)
        if reply is not None and isinstance(step.request, Command):
            step.send(reply)
        else:
            step.send(*queues._driver._outcome(step.request))
    return sent, step.result


def _one_call_of(core: Any, batch: list[Message]) -> CommandOp[list[str]] | None:
    return core.push_call(batch, "replace")  # type: ignore[no-any-return]


def test_the_one_call_form_is_the_general_paths_only_request(queues: RedisQueues,
                                                              redis_server: Any) -> None:
    q = queues.get(unique())
    q.push([Message("first")])  # first-call checks done, queue registered
    core = q._core
    batch = [Message("a", "x"), Message("b", "y", timeout=500, priority=3)]
    call = _one_call_of(core, batch)
    assert isinstance(call, CommandOp)
    raw = redis.Redis.from_url(redis_server.url)
    reply = raw.execute_command(*call.command.args)
    sent, result = _requests(queues, core, batch, reply)
    assert len(sent) == 1 and isinstance(sent[0], Command)
    assert (sent[0].role, list(sent[0].args), sent[0].merge) == (
        call.command.role, list(call.command.args), call.command.merge)
    assert result == call.done(reply) == ["a", "b"]
    assert q.size() == 3


def _first_checks_pending(queues: RedisQueues) -> tuple[Any, list[Message]]:
    return queues.get(unique())._core, [Message("m")]


def _not_registered(queues: RedisQueues) -> tuple[Any, list[Message]]:
    q = queues.get(unique())
    q.size()  # first-call checks done by a read; no push has registered the queue yet
    return q._core, [Message("m")]


def _over_script_batch(queues: RedisQueues) -> tuple[Any, list[Message]]:
    q = queues.get(unique())
    q.push([Message("first")])
    return q._core, [Message(f"m{i}") for i in range(SCRIPT_BATCH + 1)]


def _empty(queues: RedisQueues) -> tuple[Any, list[Message]]:
    q = queues.get(unique())
    q.push([Message("first")])
    return q._core, []


@pytest.mark.parametrize("condition", [_first_checks_pending, _not_registered,
                                       _over_script_batch, _empty],
                         ids=["first-checks", "registry", "over-script-batch", "empty"])
def test_the_general_path_runs_where_it_sends_more(queues: RedisQueues, condition: Any) -> None:
    core, batch = condition(queues)
    assert _one_call_of(core, batch) is None
    sent, _ = _requests(queues, core, batch)
    # The general path sends something else than one script call, or nothing at all.
    assert len(sent) != 1 or not isinstance(sent[0], Command)


def test_a_write_quorum_takes_the_general_path(redis_server: Any, prefix: str) -> None:
    with RedisQueues.from_url(redis_server.url, key_prefix=prefix, unack_handler_interval_ms=0,
                              shard_supplier=SingleShardSupplier("a"), write_quorum=1,
                              write_quorum_timeout_ms=10) as queues:
        q = queues.get(unique())
        with pytest.raises(QuorumNotReachedError):  # no replica here; checks done, registered
            q.push([Message("first")])
        core = q._core
        batch = [Message("m")]
        assert _one_call_of(core, batch) is None
        # The script call pipelined with its WAIT (no replica here: the quorum fails after it).
        with pytest.raises(QuorumNotReachedError):
            _requests(queues, core, batch)
        step = Step(core.push_validated(batch, "replace"))
        assert not isinstance(step.request, Command)
        assert [c[0] for c in step.request.commands][-1] == "WAIT"


def test_a_closed_queue_refuses_both_ways(queues: RedisQueues) -> None:
    q = queues.get(unique())
    q.push([Message("first")])
    queues.close()
    assert _one_call_of(q._core, [Message("m")]) is None
    with pytest.raises(QueueClosedError):
        _requests(queues, q._core, [Message("m")])
    with pytest.raises(QueueClosedError):
        q.push([Message("m")])


def test_a_partitioned_push_over_script_batch_is_one_call_per_partition_in_one_batch(
        queues: RedisQueues, redis_server: Any) -> None:
    """Each partition's share is its one call; several go out as one Batch (one call for them
    all on one server only up to SCRIPT_BATCH: see the next test). A Batch whose outcomes hold
    an error (NOSCRIPT after SCRIPT FLUSH) is handed to the general path with those outcomes
    (Replay), which loads the script and sends only what failed again."""
    q = queues.get(unique(), QueuePolicy(partitions=4))
    size = SCRIPT_BATCH + 100  # over 4 partitions: each share well under SCRIPT_BATCH
    spread = [Message(f"m{i}") for i in range(size)]
    first = q._core.push(spread, "replace")
    assert not isinstance(first, CommandOp)  # the layout is not checked yet
    first.close()
    assert q.push(spread) == [m.id for m in spread]  # each partition's first call done
    one = q._core.push([Message("one")], "replace")
    assert isinstance(one, CommandOp) and isinstance(one.command, Command)
    many = q._core.push(spread, "replace")
    assert isinstance(many, CommandOp) and isinstance(many.command, Batch)
    assert len(many.command.commands) == 4
    redis.Redis.from_url(redis_server.url).script_flush()
    again = [Message(f"n{i}") for i in range(size)]
    assert q.push(again) == [m.id for m in again]
    assert q.size() == 2 * size


def _payload(q: Any, id: str) -> str:
    message = q.get(id)
    assert message is not None, id
    return str(message.payload)


def _spread(q: Any, prefix: str, count: int = 40) -> list[Message]:
    return [Message(f"{prefix}{i}", f"payload {i}") for i in range(count)]


def test_a_partitioned_push_on_one_server_is_one_call_for_every_partition(
        queues: RedisQueues, redis_server: Any) -> None:
    """On one server (every partition's keys there) the shares go out as one ``push_parts``
    call: push.lua's fast path on each partition in place, its general code on a copy for a
    share the fast path does not serve. Its results and what it stores are those of one call
    per partition; after SCRIPT FLUSH the general path loads it and sends it again."""
    q = queues.get(unique(), QueuePolicy(partitions=4))
    other = queues.get(unique(), QueuePolicy(partitions=4))
    warm = _spread(q, "w")
    assert q.push(warm) == [m.id for m in warm] and other.push(warm) == [m.id for m in warm]
    batch = _spread(q, "m")
    together = q._core.push(batch, "replace")
    assert isinstance(together, CommandOp) and isinstance(together.command, Command)
    assert together.command.args[:2] == ("EVALSHA", q._core.base.sender.scripts["push_parts"].sha)
    together_ids = q.push(batch)
    # The same batch as one call per partition (the Batch form), on the other queue.
    split = other._core
    calls = [split.parts[k].push_call(share[0], "replace", share[1])
             for k, share in split._shares(batch)]
    assert len(calls) == 4 and all(isinstance(c, CommandOp) for c in calls)
    assert together_ids == [m.id for m in batch] == other.push(batch)
    assert q.size() == other.size() == 80
    assert sorted(_payload(q, m.id) for m in batch) == sorted(
        _payload(other, m.id) for m in batch)
    assert [s for s in q.shard_sizes().values()] == [s for s in other.shard_sizes().values()]
    # keep: the ids stored are left alone, the new ones pushed, flags in input order.
    mixed = [Message("m3", "changed"), Message("k1", "new"), Message("m7", "changed"),
             Message("k2", "new")]
    assert q.push(mixed, if_exists="keep") == ["k1", "k2"]
    assert _payload(q, "m3") == "payload 3" and _payload(q, "k1") == "new"
    # replace with ids that exist: their partitions' shares take push.lua's general code (the
    # fast path deleted what it had written there); the others stay on the fast path.
    replaced = [Message("m3", "replaced"), Message("r1", "r"), Message("m7", "replaced"),
                Message("r2", "r", ttl_ms=60_000)]
    assert q.push(replaced) == ["m3", "r1", "m7", "r2"]
    assert _payload(q, "m3") == "replaced" and _payload(q, "r2") == "r"
    assert q.size() == 84
    # NOSCRIPT: nothing ran; the general path loads push_parts and sends it again.
    redis.Redis.from_url(redis_server.url).script_flush()
    again = _spread(q, "n")
    assert q.push(again) == [m.id for m in again]
    assert q.size() == 124
    got = {m.id for m in q.pop(200)}
    assert got == {m.id for m in warm + batch + again} | {"k1", "k2", "r1", "r2"}
