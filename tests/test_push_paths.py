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


def test_a_partitioned_push_is_one_call_per_partition_in_one_batch(
        queues: RedisQueues, redis_server: Any) -> None:
    """Each partition's share is its one call; several go out as one Batch. A Batch whose
    outcomes hold an error (NOSCRIPT after SCRIPT FLUSH) is handed to the general path with
    those outcomes (Replay), which loads the script and sends only what failed again."""
    q = queues.get(unique(), QueuePolicy(partitions=4))
    spread = [Message(f"m{i}") for i in range(40)]  # 40 ids over 4 partitions
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
    again = [Message(f"n{i}") for i in range(40)]
    assert q.push(again) == [m.id for m in again]
    assert q.size() == 80
