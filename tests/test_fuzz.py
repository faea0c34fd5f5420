"""Issue 11 item 7: wild arguments to any public call raise a typed error and change nothing.

Every public method of DynoQueue and RedisQueues, on both APIs, against a real redis-server,
gets sane arguments with one or more replaced by a wild value (tests/fuzzing.py): huge ints
(10**400, 2**64), negatives, floats, NaN, inf, bools, None, lone surrogates, bytes, nested
objects, non-iterables. Only DynoQueueError subclasses may escape, and a refused call must leave
every key of the test byte-identical (DUMP and PTTL of each, before and after). The cases the
issue lists are explicit examples.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dynoqueue.asyncio
from dynoqueue import (
    ConfigurationError,
    DynoQueueError,
    InvalidArgumentError,
    InvalidMessageError,
    Message,
    QueuePolicy,
    QuorumNotReachedError,
    RedisQueues,
)

from . import fuzzing as fz
from .apis import API_NAMES
from .conftest import unique

pytestmark = pytest.mark.deployments("single")
FIXTURES_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
               HealthCheck.filter_too_much]


def seeded(queues: Any) -> Any:
    q = queues.get("fuzzq")
    q.push([Message(f"m{i}", f"payload {i}", priority=i) for i in range(6)]
           + [Message("later", "x", timeout=60_000), Message("g1", "y", group="g")])
    leased = q.unsafe_pop_all_shards(3)
    assert len(leased) == 3 and q.dead_letter(leased[0].id, "seeded")
    return q


def calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(method, {parameter: wild value}) with at least one parameter wild."""
    def wild_args(method: str) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        names = [p.name for p in fz.parameters(method)]
        return st.tuples(st.just(method), st.fixed_dictionaries(
            {}, optional={name: fz.wild for name in names}).filter(bool))
    return st.sampled_from(fz.queue_methods()).flatmap(wild_args)


def refused_or_done(call: Any, raw: Any, prefix: str) -> BaseException | None:
    """Run ``call``; an error must be a DynoQueueError and leave the prefix's keys unchanged.

    QuorumNotReachedError is no refusal: it reports a write that was applied but that too few
    replicas confirmed (a valid ``write_quorum`` on a server without replicas)."""
    before = fz.snapshot(raw, prefix)
    try:
        call()
    except QuorumNotReachedError as exc:
        return exc
    except DynoQueueError as exc:
        assert fz.snapshot(raw, prefix) == before, f"refused with {exc!r} but changed Redis"
        return exc
    return None


@pytest.mark.parametrize("api", API_NAMES, indirect=True)
@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURES_OK)
@given(call=calls())
@example(call=("pop", {"wait_ms": 10**400}))
@example(call=("pop", {"count": 10**400, "lease_ms": math.inf}))
@example(call=("ack_many", {"ids": 5}))
@example(call=("ack_many", {"ids": fz.NotIterable()}))
@example(call=("push", {"messages": [fz._broken_message("timeout", 10**30)]}))
@example(call=("push", {"messages": [fz._broken_message("due_at_ms", 2**64)]}))
@example(call=("get", {"id": "\ud800"}))
@example(call=("pop_with_msg_id", {"id": "m\udfff"}))
@example(call=("get_msg_with_predicate", {"pattern": "\ud800"}))
@example(call=("pop_msg_with_predicate", {"pattern": "x\udc80"}))
@example(call=("nack", {"delay_ms": 10**30}))
@example(call=("nack", {"error": "\udc80"}))
@example(call=("set_unack_timeout", {"receipt": "\ud813"}))
@example(call=("postpone", {"delay_ms": 10**18}))
@example(call=("redrive", {"ids": math.nan}))
@example(call=("dead_letters", {"count": 10**400}))
@example(call=("schedule", {"every_ms": 10**18}))
@example(call=("schedule", {"every_ms": 5, "timezone": "a" * 300}))
@example(call=("schedule", {"cron": "0 0 30 2 *"}))
@example(call=("unschedule", {"schedule_id": math.nan}))
def test_queue_calls_with_wild_arguments(make_queues, raw, prefix, api, call) -> None:
    if not hasattr(make_queues, "queue"):  # one seeded queue for every example of the test
        make_queues.queue = seeded(make_queues())
    q = make_queues.queue
    method, wild_args = call
    refused_or_done(lambda: fz.call_with(q, method, wild_args), raw, prefix)


def build(deployment: Any, api: str, bridge: Any, options: dict[str, Any]) -> Any:
    return deployment.build(api=api, bridge=bridge, **options)


@pytest.mark.parametrize("api", API_NAMES, indirect=True)
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES_OK)
@given(option=st.sampled_from(fz.OPTION_NAMES + [f"policy.{f}" for f in fz.POLICY_FIELDS]),
       value=fz.wild, queue_name=st.one_of(st.just("fuzzq"), fz.wild))
@example(option="poll_interval_ms", value=10**400, queue_name="fuzzq")
@example(option="unack_handler_interval_ms", value=10**13, queue_name="fuzzq")
@example(option="write_quorum_timeout_ms", value=10**30, queue_name="fuzzq")
@example(option="write_quorum", value=1, queue_name="fuzzq")  # applied, then QuorumNotReachedError
@example(option="local_zone", value=fz.Unhashable(["z-a"]), queue_name="fuzzq")
@example(option="zones", value=5, queue_name="fuzzq")
@example(option="unack_timeout_ms", value=2**64, queue_name="\ud800")
@example(option="policy.message_ttl_ms", value=10**30, queue_name=["fuzzq"])
def test_factory_options_with_wild_values(deployment, raw, prefix, api, bridge, option, value,
                                          queue_name) -> None:
    options: dict[str, Any] = {"key_prefix": prefix, "zones": ["z-a", "z-b"],
                               "local_zone": "z-a", "unack_handler_interval_ms": 0}
    built: list[Any] = []

    def construct() -> None:
        if option.startswith("policy."):
            options["policy"] = QueuePolicy(**{option.partition(".")[2]: value})
        else:
            options[option] = value
        built.append(build(deployment, api, bridge, options))

    try:
        if refused_or_done(construct, raw, prefix) is not None:
            return
        queues = built[0]
        if options["unack_handler_interval_ms"] != 0:
            worker = queues._reprocessor  # a thread (sync) or a task (asyncio)
            assert worker.is_alive() if api == "sync" else not worker.done()
        refused_or_done(lambda: queues.get(queue_name), raw, prefix)
        q = queues.get("fuzzq")
        for step in (lambda: q.push([Message("a", "1")]), lambda: q.pop(1),
                     lambda: q.ack("a"), queues.process_unacks, queues.ping):
            refused_or_done(step, raw, prefix)
    finally:
        for queues in built:
            queues.close()


@settings(max_examples=300, deadline=None)
@given(fields=st.fixed_dictionaries(
    {"id": st.one_of(st.just("m"), fz.wild)},
    optional={name: fz.wild for name in ("payload", "timeout", "priority", "shard",
                                         "due_at_ms", "max_deliveries", "ttl_ms", "group")}))
@example(fields={"id": "m", "timeout": 10**30})
@example(fields={"id": "m", "due_at_ms": 10**400})
@example(fields={"id": "\ud800"})
def test_message_with_wild_fields(fields) -> None:
    try:
        message = Message(**fields)
    except InvalidMessageError:
        return
    assert Message.from_json(message.to_json()) == message  # it encodes, so push can store it


@settings(max_examples=150, deadline=None)
@given(raw=fz.wild, shard=st.one_of(st.none(), fz.wild))
@example(raw=1, shard=None)
@example(raw=b"\xff", shard=None)
@example(raw='{"id":"x"}', shard=["a"])
def test_message_from_json_with_wild_input(raw, shard) -> None:
    try:
        Message.from_json(raw, shard=shard)
    except InvalidMessageError:
        pass


@pytest.mark.parametrize("options", [
    {"poll_interval_ms": 10**400}, {"unack_handler_interval_ms": 10**13},
    {"write_quorum_timeout_ms": 10**30}, {"unack_timeout_ms": math.nan},
    {"max_payload_bytes": 2**40}, {"doorbell": "no"}, {"hash_tag": 2},
])
def test_issue_settings_are_refused_at_construction(redis_server, prefix, options) -> None:
    for factory in (RedisQueues, dynoqueue.asyncio.RedisQueues):
        with pytest.raises(ConfigurationError):
            factory.from_url(redis_server.url, key_prefix=prefix, **options)


def test_unhashable_local_zone_is_a_configuration_error(redis_server) -> None:
    with pytest.raises(ConfigurationError):
        RedisQueues.from_url(redis_server.url, zones=["z-a", "z-b"], local_zone=["z-a"])


def test_a_refused_call_writes_nothing_even_with_a_write_quorum(redis_server, prefix) -> None:
    raw = redis_server.client()
    with pytest.raises(ConfigurationError):
        RedisQueues.from_url(redis_server.url, key_prefix=prefix, write_quorum=1,
                             write_quorum_timeout_ms=10**30)
    assert list(raw.scan_iter(f"{prefix}*")) == []
    raw.close()


def test_bounds_are_inclusive(redis_server, prefix) -> None:
    from dynoqueue.model.validate import MAX_MS

    with RedisQueues.from_url(redis_server.url, key_prefix=prefix, unack_handler_interval_ms=0,
                              poll_interval_ms=MAX_MS, unack_timeout_ms=MAX_MS) as queues:
        q = queues.get(unique())
        assert q.push([Message("far", timeout=MAX_MS), Message("now")]) == ["far", "now"]
        assert [m.id for m in q.pop(2, wait_ms=0)] == ["now"]
        assert q.nack("now", delay_ms=MAX_MS)
        with pytest.raises(InvalidArgumentError):
            q.nack("now", delay_ms=MAX_MS + 1)


def test_an_unencodable_command_fails_alone_in_an_asyncio_batch(redis_server) -> None:
    """The asyncio driver pipelines what tasks send at once; a command that cannot be encoded
    (a lone surrogate slipped past every check) used to leave every caller of its batch
    waiting forever. Now it fails alone and the rest of the batch is answered."""
    import asyncio

    import redis.asyncio

    from dynoqueue.core.requests import QUORUM, Command
    from dynoqueue.io.aio import AsyncDriver

    def command(*args: Any) -> Any:
        return (yield Command(QUORUM, args))

    async def run() -> list[Any]:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        driver = AsyncDriver(client, client)
        try:
            return await asyncio.wait_for(asyncio.gather(
                driver.run(command("PING")), driver.run(command("ECHO", "bad \ud800")),
                driver.run(command("ECHO", "good")), return_exceptions=True), timeout=10)
        finally:
            await driver.aclose()
            await client.aclose()

    pong, bad, good = asyncio.run(run())
    assert pong in (True, b"PONG") and good == b"good"
    assert isinstance(bad, InvalidArgumentError)  # typed, with redis-py's error as the cause
    assert isinstance(bad.__cause__, UnicodeEncodeError)


def test_the_reprocessor_thread_outlives_a_failed_pass(redis_server, prefix, caplog) -> None:
    """An unack pass that raises is logged and the thread keeps running (it used to end, and
    expired leases were never put back again)."""
    from .conftest import eventually

    class FailsOnce(RedisQueues):
        passes = 0

        def _reprocess_tick(self):  # type: ignore[no-untyped-def]  # what each wake-up runs
            type(self).passes += 1
            if type(self).passes == 1:
                raise RuntimeError("the first pass fails")
            return super()._reprocess_tick()

    with FailsOnce.from_url(redis_server.url, key_prefix=prefix,
                            unack_handler_interval_ms=20) as queues:
        assert eventually(lambda: FailsOnce.passes >= 3)
        assert queues._reprocessor is not None and queues._reprocessor.is_alive()
    assert "unack pass failed" in caplog.text
