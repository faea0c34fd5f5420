"""Issue 11's data-safety items on real redis-server processes: names that would share keys are
refused, an eviction policy that deletes queue state is refused (and evicted payloads become
dead letters, never silent losses), and an ACL user without channel permissions never gets an
error for a write that was applied.

Each fault scenario prints one summary row (tests/faults.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from dynoqueue import (
    ConfigurationError,
    LocalOnlyStrategy,
    Message,
    RedisQueues,
    StaticShardSupplier,
)
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import RedisServer
from dynoqueue.model.keys import KEY_WORDS, QueueKeys, StreamKeys, scheduled_queues, youzan_index

from .apis import Bridge
from .faults import Ledger

SHARDS = ["a", "b", "c", "d"]


def _factory(api: str, bridge: Bridge, client: Any, **settings: Any) -> Any:
    """A factory of ``api`` ("sync" or "async", the latter behind ``bridge``) on ``client``."""
    options: dict[str, Any] = {"shard_supplier": StaticShardSupplier(SHARDS, "a"),
                               "unack_handler_interval_ms": 0, **settings}
    if api == "async":
        return bridge.wrap_factory(AsyncRedisQueues(client, client, **options))
    return RedisQueues(client, client, **options)


def _client(api: str, server: RedisServer, **kwargs: Any) -> Any:
    cls = redis.asyncio.Redis if api == "async" else redis.Redis
    return cls(host="127.0.0.1", port=server.port, **kwargs)


# ------------------------------------------------------------------ item 4: names never collide

def _two_tenants(server: RedisServer, api: str, bridge: Bridge, tenant_a: tuple[str, str],
                 tenant_b: tuple[str, str], ledger: Ledger) -> None:
    """Tenant B pushes 10 due messages; tenant A leases 10 of its own, lets the leases expire
    and runs its unack pass; then B drains its queue. What B lost is what A's pass took."""
    client = _client(api, server)
    try:
        (prefix_a, queue_a), (prefix_b, queue_b) = tenant_a, tenant_b
        with _factory(api, bridge, client, key_prefix=prefix_a, unack_timeout_ms=1) as qa, \
                _factory(api, bridge, client, key_prefix=prefix_b,
                         sharding_strategy=LocalOnlyStrategy("a")) as qb:
            a, b = qa.get(queue_a), qb.get(queue_b)
            mine = [Message(f"b{i}", f"tenant B {i}") for i in range(10)]
            ledger.attempt([m.id for m in mine], 0)
            ledger.acked(b.push(mine))
            a.push([Message(f"a{i}", f"tenant A {i}") for i in range(10)])
            a.pop(10, wait_ms=0)
            qa.process_unacks()  # A's leases (1 ms) have expired
            ledger.delivered([m.id for m in b.unsafe_pop_all_shards(20, wait_ms=0)])
    finally:
        if api == "async":
            bridge.call(client.aclose())
        else:
            client.close()


@pytest.mark.parametrize("api", ["sync", "async"])
def test_two_tenants_whose_keys_collided_are_refused_before_anything_is_written(
        redis_server: RedisServer, bridge: Bridge, api: str) -> None:
    # The pair: A's unack zsets P.UNACK.QUEUE.orders.S were B's queue zsets
    # (P.UNACK).QUEUE.orders.S, four keys over four shards, so A's unack pass took B's messages.
    base = f"t{uuid.uuid4().hex[:10]}"
    raw = redis_server.client(decode_responses=True)
    client = _client(api, redis_server)
    try:
        with _factory(api, bridge, client, key_prefix=base) as queues:
            with pytest.raises(ConfigurationError, match=r"queue name .*must not have 'QUEUE'"):
                queues.get("QUEUE.orders")
        with pytest.raises(ConfigurationError, match="shard name"):
            _factory(api, bridge, client, key_prefix=base,
                     shard_supplier=StaticShardSupplier(["a.b", "c"], "c"))
        assert raw.keys(f"{base}*") == []
    finally:
        raw.close()
        if api == "async":
            bridge.call(client.aclose())
        else:
            client.close()

    # B's names are legal, A's nearest legal name keeps the tenants apart: B loses nothing.
    ledger = Ledger(f"two tenants, one server ({api})")
    _two_tenants(redis_server, api, bridge, (base, "QUEUE-orders"),
                 (f"{base}.UNACK", "orders"), ledger)
    print(ledger.row())
    assert (ledger.attempts, len(ledger.acknowledged), len(ledger.deliveries)) == (10, 10, 10)
    assert not ledger.lost and ledger.duplicated == 0


def test_java_v1_names_of_ordinary_queues_are_unchanged() -> None:
    # Conductor's prefix is "<namespace>.<stack>", and its task names may have dots: both stay.
    keys = QueueKeys("conductor_queues.test", "_deciderQueue", ("a", "b"))
    assert keys.all_keys() == ["conductor_queues.test.MESSAGE._deciderQueue",
                               "conductor_queues.test.QUEUE._deciderQueue.a",
                               "conductor_queues.test.QUEUE._deciderQueue.b",
                               "conductor_queues.test.UNACK._deciderQueue.a",
                               "conductor_queues.test.UNACK._deciderQueue.b"]
    dotted = QueueKeys("conductor_queues.test", "com.acme.resize", ("a",))
    assert dotted.queue_shard("a") == "conductor_queues.test.QUEUE.com.acme.resize.a"
    for prefix, queue, shard in (("t", "x.QUEUE.y", "a"), ("t", "q", "a.b"),
                                 ("t", "SPARK", "a"), ("t", "UNACK.q", "a")):
        with pytest.raises(ConfigurationError):
            QueueKeys(prefix, queue, (shard,))


_WORD = st.sampled_from(["a", "x", "", "QUEUE", "UNACK", "MESSAGE", "LIFE", "GLINE", "SPARK",
                         "YOUZAN", "INDEX", "PENDING", "BATCH", "1"])
#: Names of one to four components: dotted names are where collisions hide.
_NAME = st.lists(_WORD, min_size=1, max_size=4).map(".".join).filter(bool)


def _owned_keys(prefix: str, queue: str, shard: str, tag: bool) -> dict[str, tuple[Any, ...]]:
    """Every key (and channel) of one (prefix, queue, shard) triple, each with its owner: the
    queue for keys all its shards share, the triple for a shard's own keys."""
    keys = QueueKeys(prefix, queue, (shard,), tag)
    per_shard = {keys.queue_shard(shard), keys.unack_shard(shard), keys.ready_shard(shard),
                 keys.doorbell(shard)}
    out: dict[str, tuple[Any, ...]] = {k: (prefix, queue, tag) for k in keys.every_key()}
    out.update({k: (prefix, queue, tag, shard) for k in per_shard})
    # The shard's name doubles as a group name, also dressed up as names a shard cannot have.
    for group in (shard, f"{shard}.{shard}", f"{{{shard}}}", f"%{shard}", f"{shard} é"):
        out[keys.group_line(group)] = (prefix, queue, tag, "group", group)
    stream = StreamKeys(prefix, queue, shard)  # the shard's name doubles as a consumer name
    out.update({k: (prefix, queue, "spark", shard)
                for k in (stream.pending, stream.last, stream.batch(1), stream.batch(12))})
    out[youzan_index(prefix)] = (prefix,)
    out[scheduled_queues(prefix)] = (prefix,)
    out.update({k: (prefix, queue, tag) for k in (keys.schedules, keys.ticks, keys.paused)})
    return out


def _resplits(key: str) -> list[tuple[str, str, str, bool]]:
    """Every triple whose keys could include ``key``: its components cut again into a prefix,
    a key word, a queue name and a shard name (collisions are too rare to hit by chance)."""
    parts = key.split(".")
    out = []
    for i in range(1, len(parts) - 1):
        if parts[i] not in KEY_WORDS:
            continue
        for j in range(i + 2, len(parts) + 1):
            queue = ".".join(parts[i + 1:j])
            tag = queue.startswith("{") and queue.endswith("}")
            out.append((".".join(parts[:i]), queue.strip("{}"), ".".join(parts[j:]) or "s", tag))
    return out


_TRIPLE = st.tuples(_NAME, _NAME, _NAME, st.booleans())


def _accepted(triple: tuple[str, str, str, bool]) -> dict[str, tuple[Any, ...]]:
    try:
        return _owned_keys(*triple)
    except ConfigurationError:
        return {}


@settings(max_examples=300, deadline=None)
@given(_TRIPLE, _TRIPLE)
def test_distinct_accepted_triples_never_share_a_key(
        first: tuple[str, str, str, bool], second: tuple[str, str, str, bool]) -> None:
    mine = _accepted(first)
    others = [second] + [t for key in mine for t in _resplits(key)]
    for other in others:
        for key, owner in _accepted(other).items():
            assert mine.get(key, owner) == owner, (key, owner, mine[key])


def test_every_key_word_is_reserved() -> None:
    keys = QueueKeys("p", "q", ("s",))
    words = {k.split(".")[1] for k in [*keys.every_key(), keys.group_line("g"),
                                          keys.schedules, keys.ticks, keys.paused]}
    words |= {StreamKeys("p", "q", "c").last.split(".")[1], youzan_index("p").split(".")[1],
              scheduled_queues("p").split(".")[1]}
    assert words == KEY_WORDS


# ------------------------------------------------------------------ item 6: ACL without channels

def _channelless_user(server: RedisServer) -> tuple[str, str]:
    """A Redis 7 ACL user with every key and command but no channel (new users' default)."""
    user, password = f"u{uuid.uuid4().hex[:8]}", "pw-" + uuid.uuid4().hex[:8]
    admin = server.client()
    try:
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all",
                              "resetchannels")
    finally:
        admin.close()
    return user, password


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_user_without_channel_permission_never_gets_an_error_for_an_applied_write(
        redis_server: RedisServer, bridge: Bridge, api: str,
        caplog: pytest.LogCaptureFixture) -> None:
    user, password = _channelless_user(redis_server)
    client = _client(api, redis_server, username=user, password=password)
    prefix = f"t{uuid.uuid4().hex[:10]}"
    ledger = Ledger(f"ACL user without channels ({api})")
    caplog.set_level("WARNING", logger="dynoqueue")
    try:
        with _factory(api, bridge, client, key_prefix=prefix, poll_interval_ms=200,
                      sharding_strategy=LocalOnlyStrategy("a")) as queues:
            q, other = queues.get("jobs"), queues.get("other")
            assert set(queues.ping()) == {"quorum", "non_quorum", "doorbell"}
            messages = [Message(f"m{i}", f"job {i}") for i in range(20)]
            for m in messages:  # one call each: every push rings (the shard was empty or later)
                ledger.attempt([m.id], 0)
                try:
                    ledger.acked(q.push([m]))
                except Exception as exc:
                    ledger.failed(exc)
                q.pop(1, wait_ms=0)  # empties the shard again, so the next push rings too
            assert not ledger.errors, ledger.errors[:1]
            leased = [m.id for m in q.pop(20, wait_ms=0)]
            assert leased == []  # all 20 were leased one by one above
            q.nack_many([f"m{i}" for i in range(20)])  # every one rings its shard
            got = q.pop(20, wait_ms=1000)
            ledger.delivered([m.id for m in got])
            assert q.set_unack_timeout(got[0].id, 0)
            queues.process_unacks()  # the expired lease is put back: rings
            again = q.pop(1, wait_ms=1000)
            assert [m.id for m in again] == [got[0].id]
            assert q.ack(again[0].id)
            assert q.dead_letter(got[1].id, "test")
            assert q.redrive([got[1].id]) == 1  # back to waiting: rings
            assert q.postpone(got[1].id, 0)
            assert q.set_timeout(got[1].id, 0)
            assert q.ack_many(got[2:]) == 18
            assert q.remove(got[1].id)
            # A waiting pop on another queue finds a message pushed meanwhile by polling.
            # Without a doorbell, each of its checks must not wait for a subscription first.
            other.push([Message("late", "x", timeout=300)])
            started = time.monotonic()
            assert [m.id for m in other.pop(1, wait_ms=3000)] == ["late"]
            assert time.monotonic() - started < 1.0
    finally:
        if api == "async":
            bridge.call(client.aclose())
        else:
            client.close()
    print(ledger.row())
    assert (ledger.attempts, len(ledger.acknowledged), len(ledger.deliveries)) == (20, 20, 20)
    assert not ledger.lost and ledger.duplicated == 0
    denied = [r for r in caplog.records if "doorbell unavailable" in r.getMessage()]
    assert len(denied) == 1, [r.getMessage() for r in caplog.records]


# ------------------------------------------------------------------ item 3: eviction

@pytest.fixture(scope="module")
def lru_server() -> Any:
    """A redis-server that evicts any key under memory pressure (allkeys-lru, 24 MB)."""
    with RedisServer(extra_args=["--maxmemory", "24mb", "--maxmemory-policy", "allkeys-lru",
                                 "--maxmemory-samples", "10"]) as server:
        yield server


@pytest.mark.parametrize("api", ["sync", "async"])
def test_an_evicting_server_is_refused_by_default_and_warned_of_on_request(
        lru_server: RedisServer, bridge: Bridge, api: str,
        caplog: pytest.LogCaptureFixture) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    raw = lru_server.client(decode_responses=True)
    client = _client(api, lru_server)
    caplog.set_level("DEBUG", logger="dynoqueue")
    try:
        with _factory(api, bridge, client, key_prefix=prefix) as queues:
            with pytest.raises(ConfigurationError, match="maxmemory-policy is allkeys-lru"):
                queues.ping()
            with pytest.raises(ConfigurationError, match="eviction_check='warn' or 'off'"):
                queues.get("jobs").push([Message("m1", "x")])
            assert raw.keys(f"{prefix}*") == []
        with _factory(api, bridge, client, key_prefix=prefix, eviction_check="warn") as queues:
            q = queues.get("jobs")
            assert q.push([Message("m1", "x")]) == ["m1"]
            assert queues.get("other").push([Message("m2", "x")]) == ["m2"]
            assert [m.id for m in q.unsafe_pop_all_shards(1)] == ["m1"]
        warned = [r for r in caplog.records if "maxmemory-policy is allkeys-lru" in r.getMessage()]
        assert len(warned) == 1 and warned[0].levelname == "WARNING"
        # A user that may not CONFIG GET reads the policy in INFO: still refused.
        user = f"u{uuid.uuid4().hex[:8]}"
        raw.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all",
                            "-config")
        limited = _client(api, lru_server, username=user, password="pw")
        try:
            with _factory(api, bridge, limited, key_prefix=prefix) as queues:
                with pytest.raises(ConfigurationError, match="maxmemory-policy is allkeys-lru"):
                    queues.get("jobs").push([Message("m3", "x")])
        finally:
            bridge.call(limited.aclose()) if api == "async" else limited.close()
        # A user that may read neither is not checked: one warning says what was refused.
        raw.execute_command("ACL", "SETUSER", user, "-info")
        caplog.clear()
        limited = _client(api, lru_server, username=user, password="pw")
        try:
            with _factory(api, bridge, limited, key_prefix=prefix) as queues:
                assert queues.get("jobs").push([Message("m3", "x")]) == ["m3"]
                assert queues.get("other").push([Message("m4", "x")]) == ["m4"]
        finally:
            bridge.call(limited.aclose()) if api == "async" else limited.close()
        warned = [r.getMessage() for r in caplog.records
                  if "maxmemory-policy was not checked" in r.getMessage()]
        assert len(warned) == 1, warned
        assert "CONFIG GET" in warned[0] and "INFO" in warned[0]
    finally:
        raw.close()
        bridge.call(client.aclose()) if api == "async" else client.close()


def test_a_bad_eviction_check_value_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="eviction_check"):
        RedisQueues(redis.Redis(), redis.Redis(), key_prefix="p",
                    shard_supplier=StaticShardSupplier(["a"], "a"), eviction_check="maybe")


@pytest.mark.parametrize("api", ["sync", "async"])
def test_evicted_payloads_become_dead_letters_with_a_warning_never_silent_losses(
        lru_server: RedisServer, bridge: Bridge, api: str,
        caplog: pytest.LogCaptureFixture) -> None:
    # The run: 2,000 delayed messages, consumers polling (which keeps the queue zset
    # recently used), a cache filling the rest of memory: LRU evicts the message hash.
    prefix = f"t{uuid.uuid4().hex[:10]}"
    raw = lru_server.client(decode_responses=True)
    client = _client(api, lru_server)
    ledger = Ledger(f"allkeys-lru, check off ({api})")
    caplog.set_level("WARNING", logger="dynoqueue")
    payload = "p" * 2000
    try:
        with _factory(api, bridge, client, key_prefix=prefix, eviction_check="off",
                      shard_supplier=StaticShardSupplier(["a"], "a")) as queues:
            q = queues.get("jobs")
            messages = [Message(f"m{i}", payload, timeout=3000) for i in range(2000)]
            for i in range(0, 2000, 250):
                ledger.attempt([m.id for m in messages[i:i + 250]], 3000)
                ledger.acked(q.push(messages[i:i + 250]))
            # Make the hash and a cache the least recently used keys, the queue zset the most:
            # fill memory to just below the limit, let it all idle while the zset is read as a
            # polling consumer does (LRU clock: 1 s), then write on until the hash is evicted.
            # size() reads the zsets but cannot claim: a pop would touch the hash. Without the
            # idle cache the zset tied with fresh cache keys and was sometimes evicted first.
            memory, evicted = raw.info("memory"), raw.info("stats")["evicted_keys"]
            room = int(memory["maxmemory"]) - int(memory["used_memory"]) - 2_000_000
            cache = 0
            while cache < room // 130_000:  # a 100 kB value takes up to 128 kB (jemalloc)
                raw.set(f"{prefix}:cache:{cache}", "c" * 100_000)
                cache += 1
            assert raw.info("stats")["evicted_keys"] == evicted
            for _ in range(22):
                q.size()
                time.sleep(0.1)
            while raw.exists(q.keys.message_hash) and cache < 3000:
                raw.set(f"{prefix}:cache:{cache}", "c" * 100_000)
                cache += 1
                q.size()
            assert not raw.exists(q.keys.message_hash), "the message hash was never evicted"
            assert raw.zcard(q.keys.queue_shard("a")) == 2000, "the ids left the queue zset"
            raw.delete(*[f"{prefix}:cache:{i}" for i in range(cache)])
            time.sleep(max(0.0, max(ledger.due_ms.values()) / 1000 - time.time()))
            while got := q.pop(500, wait_ms=0):  # a pop goes on past ids without payload
                ledger.delivered([m.id for m in got])
                q.ack_many(got)
            assert q.size() == 0
            letters = q.dead_letters(5000)
    finally:
        raw.close()
        bridge.call(client.aclose()) if api == "async" else client.close()
    missing = {m.message.id for m in letters if m.reason == "payload-missing"}
    assert all(m.message.payload is None for m in letters if m.reason == "payload-missing")
    ledger.dead_lettered = missing
    print(ledger.row())
    warned = [r for r in caplog.records if "had no payload" in r.getMessage()]
    assert warned and sum(int(r.args[2]) for r in warned) == len(missing)  # type: ignore[index]
    assert len(missing) > 0
    assert not ledger.lost, f"{len(ledger.lost)} acknowledged ids neither delivered nor dead"


@pytest.mark.parametrize("api", ["sync", "async"])
def test_every_script_that_finds_an_id_without_payload_dead_letters_it(
        redis_server: RedisServer, bridge: Bridge, api: str,
        caplog: pytest.LogCaptureFixture) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    raw = redis_server.client(decode_responses=True)
    client = _client(api, redis_server)
    caplog.set_level("WARNING", logger="dynoqueue")
    events: list[tuple[str, int]] = []
    try:
        with _factory(api, bridge, client, key_prefix=prefix,
                      shard_supplier=StaticShardSupplier(["a"], "a")) as queues:
            queues.set_events(lambda queue, kind, n: events.append((kind, n)) if n else None)
            q = queues.get("jobs")
            q.push([Message(f"m{i}", "x") for i in range(700)])
            lost = [f"m{i}" for i in range(601)] + ["m650", "m660", "m670"]
            raw.hdel(q.keys.message_hash, *lost[:601])  # 601 before any claim
            assert q.pop_with_msg_id("m600") is None  # claim_id
            got = q.pop(99, wait_ms=0)  # claim: goes on past the 600 without payload
            assert sorted(m.id for m in got) == [f"m{i}" for i in range(601, 700)]
            assert q.pop(10, wait_ms=0) == []  # the rest, after m699 in member order
            assert q.size() == 0
            raw.hdel(q.keys.message_hash, "m650", "m660", "m670")  # leased, then gone
            assert q.nack("m650")  # nack
            assert q.set_unack_timeout("m660", 0)
            queues.process_unacks()  # requeue_expired
            assert not q.dead_letter("m670", "test")  # bury: no payload to keep
            letters = {m.message.id: m for m in q.dead_letters(1000)}
            assert set(letters) == set(lost)
            assert {m.reason for m in letters.values()} == {"payload-missing"}
            assert letters["m650"].deliveries == 1 and letters["m650"].message.payload is None
            # redrive() moves what can come back, past the letters that cannot.
            assert q.dead_letter(got[0].id, "test")
            assert q.redrive() == 1
            assert q.dead_size() == len(lost)
    finally:
        raw.close()
        bridge.call(client.aclose()) if api == "async" else client.close()
    counted = sum(n for kind, n in events if kind == "payload_missing")
    warned = sum(int(r.args[2]) for r in caplog.records  # type: ignore[index]
                 if "had no payload" in r.getMessage())
    assert counted == warned == len(lost)


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_cluster_whose_nodes_evict_is_refused(deployment_pool: Any, bridge: Bridge,
                                                api: str) -> None:
    cluster = deployment_pool.get("cluster")
    servers = cluster.topology.servers()
    for server in servers:
        with server.client() as node:
            node.config_set("maxmemory-policy", "allkeys-lfu")
    try:
        with cluster.build(api=api, bridge=bridge, key_prefix=f"t{uuid.uuid4().hex[:10]}",
                           unack_handler_interval_ms=0) as queues:
            with pytest.raises(ConfigurationError, match="maxmemory-policy is allkeys-lfu"):
                queues.get("jobs").push([Message("m1", "x")])
    finally:
        for server in servers:
            with server.client() as node:
                node.config_set("maxmemory-policy", "noeviction")


def test_group_line_names_are_one_to_one_and_keep_the_hash_tag_first() -> None:
    keys = QueueKeys("p", "q", ("s",), hash_tag=True)
    groups = ["A", "%41", "%2541", "a.b", "a%2Eb", "{q}", "}", "{", "x y", "\x00", "é", "%C3%A9",
              "a:b-c_d", "QUEUE", ".", ""]
    lines = [keys.group_line(g) for g in groups]
    assert len(set(lines)) == len(groups)
    for line in lines:
        head, enc = line.rsplit(".", 1)
        assert head == "p.GLINE.{q}" and "{" not in enc and "}" not in enc
        assert enc.isascii() and " " not in enc
    assert keys.group_line("a:b-c_d") == "p.GLINE.{q}.a:b-c_d"
    assert keys.group_line("é.{") == "p.GLINE.{q}.%C3%A9%2E%7B"
