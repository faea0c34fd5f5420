"""Zone loss and unack coverage: every queue in Redis and every shard is covered.

The unit tests run on both APIs (``api``) over a single server and a Redis Cluster; the fault
test kills a whole zone (its consumers and its RedisQueues, in a subprocess, with SIGKILL) on a
3-zone ring under load.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.cluster import RedisCluster

from dynoqueue import (
    ConfigurationError,
    Message,
    MessageState,
    RedisQueues,
    RoundRobinStrategy,
    StaticShardSupplier,
    ZoneShardSupplier,
)

from .conftest import ZONES, eventually, unique
from .faults import Ledger

BOTH_APIS = pytest.mark.parametrize("api", ["sync", "async"], indirect=True)
SHARDS = ["a", "b", "c"]


def _in(shard: str) -> StaticShardSupplier:
    return StaticShardSupplier(SHARDS, shard)


@BOTH_APIS
@pytest.mark.deployments("single", "ring", "cluster", "dynomite")
def test_an_expired_lease_of_a_queue_another_zone_never_opened_is_put_back(make_queues) -> None:
    zone_a, zone_b = make_queues(), make_queues(shard_supplier=_in("b"))
    name = unique("unopened")
    q = zone_a.get(name)
    q.push([Message("m1", "x")])  # round robin: shard b
    [leased] = q.unsafe_pop_all_shards(1, lease_ms=50)
    assert leased.shard == "b"
    time.sleep(0.1)
    assert zone_a.process_unacks() == 0  # not zone a's shard
    # Zone b's factory never opened the queue: the registry tells its pass about it.
    assert name not in {queue.name for queue in zone_b.queues()}
    assert zone_b.process_unacks() == 1
    assert [m.id for m in q.unsafe_pop_all_shards(1)] == ["m1"]


@BOTH_APIS
@pytest.mark.deployments("single", "ring", "cluster", "dynomite")
def test_survivors_adopt_the_shard_of_a_zone_without_a_live_factory(make_queues,
                                                                    clock) -> None:
    grace = {"orphan_shard_grace_ms": 300, "clock": clock}  # heartbeats and leases: its time
    zone_a, zone_c = make_queues(**grace), make_queues(shard_supplier=_in("c"), **grace)
    name = unique("adopt")
    qa, qc = zone_a.get(name), zone_c.get(name)
    zone_c.process_unacks()  # zone c's first heartbeat
    zone_a.process_unacks()
    # Shard c: one leased message (its consumer dies with it), one waiting.
    qc.push([Message("b1"), Message("lost-lease"), Message("waiting")])  # b, c, a
    [leased] = qc.pop(1, lease_ms=100)
    assert (leased.id, leased.shard) == ("lost-lease", "c")
    qc.push([Message("b2"), Message("c2")])  # b, c
    zone_c.close()
    clock.advance(150)
    # Within the grace period zone c is still alive: its shard is its own.
    assert zone_a.process_unacks() == 0
    assert {m.id for m in qa.pop(10)} == {"waiting"}
    clock.advance(151)
    assert zone_a.process_unacks() == 1  # now orphaned: its expired lease is put back
    # Zone b never beat: silent since the first beat that found it missing, as long as c.
    assert zone_a.zones.orphaned == ("b", "c")
    got = qa.pop(10)
    assert {m.id for m in got} == {"lost-lease", "c2", "b1", "b2"}
    assert [m.shard for m in got[:2]] == ["b", "b"]  # adopted shards in shard order
    assert qa.ack_many(got) == 4
    assert qa.size() == 0


@BOTH_APIS
@pytest.mark.deployments("single", "cluster")
def test_a_zone_whose_process_died_before_its_first_beat_is_adopted(make_queues,
                                                                    clock) -> None:
    """Zone c's only process pops and dies before it ever beat (``P.ZONES`` holds a and b
    only): the survivors count c as silent from their first beat that found it missing."""
    grace = {"orphan_shard_grace_ms": 300, "clock": clock}
    zone_a, zone_b = make_queues(**grace), make_queues(shard_supplier=_in("b"), **grace)
    zone_c = make_queues(shard_supplier=_in("c"), **grace)  # no reprocessor: it never beats
    name = unique("unborn")
    sent = [f"m{i}" for i in range(30)]
    zone_a.get(name).push([Message(i) for i in sent])  # round robin: ten per shard
    leased = zone_c.get(name).pop(4, lease_ms=100)
    assert {m.shard for m in leased} == {"c"} and len(leased) == 4
    zone_c.close()  # killed: its leases are never acked
    assert zone_a.process_unacks() == 0 and zone_b.process_unacks() == 0
    clock.advance(200)
    assert zone_b.process_unacks() == 0 and zone_a.process_unacks() == 0
    assert zone_a.zones.orphaned == ()  # within the grace period: c is not adopted yet
    clock.advance(101)
    assert zone_b.process_unacks() + zone_a.process_unacks() == 4  # c's expired leases, once
    assert zone_a.zones.orphaned == zone_b.zones.orphaned == ("c",)
    got_a = zone_a.get(name).pop(30)  # its own shard first, then the adopted one
    got_b = zone_b.get(name).pop(30)  # shard c is drained already
    assert {m.shard for m in got_a} == {"a", "c"} and {m.shard for m in got_b} == {"b"}
    assert sorted(m.id for m in got_a + got_b) == sorted(sent)
    assert zone_a.get(name).ack_many(got_a + got_b) == 30
    assert zone_a.get(name).size() == 0


@BOTH_APIS
@pytest.mark.deployments("single")
def test_local_messages_come_before_an_adopted_shards(make_queues) -> None:
    grace = {"orphan_shard_grace_ms": 100}
    zone_a, zone_c = make_queues(**grace), make_queues(shard_supplier=_in("c"), **grace)
    name = unique("order")
    zone_c.process_unacks()
    zone_c.close()
    time.sleep(0.2)
    zone_a.process_unacks()
    q = zone_a.get(name)
    q.push([Message(f"m{i}") for i in range(6)])  # b, c, a, b, c, a
    first = q.pop(2)
    assert {m.shard for m in first} == {"a"}
    # c died; b never beat, so it is silent since zone c's beat found it missing
    assert {m.shard for m in q.pop(5)} == {"b", "c"}


@BOTH_APIS
@pytest.mark.deployments("single")
def test_round_robin_skips_orphaned_shards_only_when_asked(make_queues) -> None:
    grace = {"orphan_shard_grace_ms": 100}
    skip = make_queues(sharding_strategy=RoundRobinStrategy(skip_orphaned=True), **grace)
    keep = make_queues(**grace)
    for shard in "bc":
        gone = make_queues(shard_supplier=_in(shard), **grace)
        gone.process_unacks()
        gone.close()
    time.sleep(0.2)
    skip.process_unacks()
    keep.process_unacks()
    name = unique("skip")
    skip.get(name).push([Message(f"s{i}") for i in range(4)])
    keep.get(name).push([Message(f"k{i}") for i in range(3)])
    sizes = keep.get(name).shard_sizes()
    assert sizes["a"]["size"] == 4 + 1
    assert sizes["b"]["size"] == 1 and sizes["c"]["size"] == 1


@BOTH_APIS
@pytest.mark.deployments("single")
def test_discover_queues_registers_a_queue_written_like_the_java_client(make_queues, raw,
                                                                         prefix) -> None:
    zone_b = make_queues(shard_supplier=_in("b"))
    now_ms = int(raw.time()[0]) * 1000
    raw.hset(f"{prefix}.MESSAGE.java", "j1", '{"id":"j1","timeout":0,"priority":0}')
    raw.zadd(f"{prefix}.UNACK.java.b", {"j1": now_ms - 1000})
    assert zone_b.process_unacks() == 0  # Java v1 clients do not write the registry
    assert "java" in zone_b.discover_queues()
    assert raw.sismember(f"{prefix}.QUEUES", "java")
    assert zone_b.process_unacks() == 1
    assert raw.zscore(f"{prefix}.QUEUE.java.b", "j1") is not None


@pytest.mark.deployments("single")
def test_clear_takes_the_queue_out_of_the_registry(make_queues, raw, prefix) -> None:
    q = make_queues(unack_handler_interval_ms=0).get("gone")
    q.push([Message("m")])
    assert raw.smembers(f"{prefix}.QUEUES") == {"gone"}
    q.clear()
    assert raw.smembers(f"{prefix}.QUEUES") == set()
    q.push([Message("m")])  # registered again
    assert raw.smembers(f"{prefix}.QUEUES") == {"gone"}


@BOTH_APIS
@pytest.mark.deployments("single", "managed", "cluster")
def test_the_heartbeat_reloads_a_lost_script_with_script_load(make_queues, raw,
                                                              deployment) -> None:
    queues = make_queues(orphan_shard_grace_ms=60_000)
    queues.process_unacks()  # the first beat: the heartbeat script is loaded
    every = {"target_nodes": RedisCluster.ALL_NODES} if deployment.name == "cluster" else {}
    raw.execute_command("SCRIPT", "FLUSH", **every)
    raw.config_resetstat(**every)
    queues.process_unacks()
    queues.process_unacks()
    stats = raw.info("commandstats", **every)
    nodes = list(stats.values()) if deployment.name == "cluster" else [stats]
    assert not any("cmdstat_eval" in node for node in nodes)  # never EVAL: evicted on 7.4+
    assert sum(node.get("cmdstat_script|load", {}).get("calls", 0) for node in nodes) >= 1
    assert sum(node.get("cmdstat_evalsha", {}).get("calls", 0) for node in nodes) >= 3


@pytest.mark.parametrize("bad", [-1, 1.5, "30000", None, True])
def test_a_bad_grace_period_is_refused(redis_server, bad: Any) -> None:
    client = redis_server.client()
    try:
        with pytest.raises(ConfigurationError, match="orphan_shard_grace_ms"):
            RedisQueues(client, client, key_prefix="g", shard_supplier=_in("a"),
                        orphan_shard_grace_ms=bad)
        with pytest.raises(ConfigurationError, match="skip_orphaned"):
            RoundRobinStrategy(skip_orphaned=1)  # type: ignore[arg-type]
    finally:
        client.close()


def test_the_reprocessor_beats_more_often_than_the_grace_period(redis_server) -> None:
    client = redis_server.client(decode_responses=True)
    prefix = f"hb{uuid.uuid4().hex[:8]}"
    with RedisQueues(client, client, key_prefix=prefix, shard_supplier=_in("b"),
                     unack_handler_interval_ms=60_000, orphan_shard_grace_ms=150) as queues:
        assert queues.reprocess_tick_ms() == 50
        assert eventually(lambda: client.hget(f"{prefix}.ZONES", "b") is not None, 2)
        first = int(client.hget(f"{prefix}.ZONES", "b"))
        assert eventually(lambda: int(client.hget(f"{prefix}.ZONES", "b")) > first, 2)
    client.close()


# ------------------------------------------------------------------ fault test: a zone dies


@dataclass
class ZoneLedger(Ledger):
    """A Ledger whose *lost* means: acknowledged by the push, never acked by any consumer (a
    delivery to the zone that died, never acked, does not count as delivered)."""

    completed: dict[str, float] = field(default_factory=dict)
    # Acks zone c sent without saying "acked": the kill may fall between its ack and its line.
    acking: set[str] = field(default_factory=set)

    def done(self, ids: list[str], at: float | None = None) -> None:
        now = time.monotonic() if at is None else at
        with self._lock:
            for message_id in ids:
                self.completed.setdefault(message_id, now)

    @property
    def lost(self) -> set[str]:
        with self._lock:
            return {i for i in self.acknowledged if i not in self.completed}

    def settle_unconfirmed_acks(self, q: Any, died_at: float) -> set[str]:
        """Counts as done (at *died_at*) each message zone c was acking when it died that Redis
        no longer holds: its ack landed (the default policy keeps no ACKED record). Returns
        them."""
        with self._lock:
            unsure = {i for i in self.acking if i not in self.completed}
        landed = {i for i in unsure if q.state(i) in (None, MessageState.ACKED)}
        self.done(sorted(landed), at=died_at)
        return landed


_ZONE_C = textwrap.dedent("""
    import sys, threading, time
    from dynoqueue import Message, RedisQueues, ZoneShardSupplier
    url, replica, prefix, name, grace, lease = sys.argv[1:7]
    import redis
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    queues = RedisQueues(redis.Redis.from_url(url), redis.Redis.from_url(replica),
                         key_prefix=prefix,
                         shard_supplier=ZoneShardSupplier.from_zone_suffix(zones, zones[2]),
                         unack_timeout_ms=int(lease), unack_handler_interval_ms=200,
                         orphan_shard_grace_ms=int(grace))
    q = queues.get(name)
    lock = threading.Lock()
    def say(*words):
        with lock:
            print(*words, flush=True)
    def produce():
        for i in range(100000):
            ids = [f"c-{i}"]
            say("try", *ids)
            q.push([Message(m, "p") for m in ids])
            say("pushed", *ids)
            time.sleep(0.01)
    threading.Thread(target=produce, daemon=True).start()
    queues.process_unacks()
    say("ready")
    while True:
        got = q.pop(5, wait_ms=100)
        if got:
            say("delivered", *(m.id for m in got))
        # Half of what it takes is never acked: the survivors must put it back.
        done = [m.id for m in got if hash(m.id) % 2]
        if done:
            say("acking", *done)
            q.ack_many(done)
            say("acked", *done)
""")


@pytest.mark.slow
def test_fault_a_killed_zone_loses_nothing(ring) -> None:
    grace_ms, lease_ms = 2000, 1000
    prefix, name = f"zl{uuid.uuid4().hex[:8]}", "orders"
    ledger = ZoneLedger("zone c killed (SIGKILL)")
    pushed_at: dict[str, float] = {}
    seen_lock = threading.Lock()

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen(
        [sys.executable, "-c", _ZONE_C, ring.primary.url, ring.node_for(ZONES[2]).url,
         prefix, name, str(grace_ms), str(lease_ms)],
        stdout=subprocess.PIPE, text=True, env=env)
    ready = threading.Event()

    def read_child() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            word, *ids = line.split()
            if word == "ready":
                ready.set()
            elif word == "try":
                ledger.attempt(ids, 0)
                with seen_lock:
                    pushed_at.update(dict.fromkeys(ids, time.monotonic()))
            elif word == "pushed":
                ledger.acked(ids)
            elif word == "delivered":
                ledger.delivered(ids)
            elif word == "acking":
                with ledger._lock:
                    ledger.acking.update(ids)
            elif word == "acked":
                ledger.done(ids)

    reader = threading.Thread(target=read_child, daemon=True)
    reader.start()
    survivors: dict[str, RedisQueues] = {}
    clients: list[Any] = []
    for zone in ZONES[:2]:
        quorum, local = ring.primary.client(), ring.node_for(zone).client()
        clients += [quorum, local]
        survivors[zone] = RedisQueues(
            quorum, local, key_prefix=prefix,
            shard_supplier=ZoneShardSupplier.from_zone_suffix(ZONES, zone),
            unack_timeout_ms=lease_ms, unack_handler_interval_ms=200,
            orphan_shard_grace_ms=grace_ms)
    stop_producing, stop_consuming = threading.Event(), threading.Event()

    def produce(zone: str) -> None:
        q = survivors[zone].get(name)
        for i in range(100_000):
            if stop_producing.is_set():
                return
            ids = [f"{zone[-1]}-{i}"]
            ledger.attempt(ids, 0)
            with seen_lock:
                pushed_at.update(dict.fromkeys(ids, time.monotonic()))
            try:
                q.push([Message(m, "p") for m in ids])
                ledger.acked(ids)
            except Exception as exc:
                ledger.failed(exc)
            time.sleep(0.01)

    def consume(zone: str) -> None:
        q = survivors[zone].get(name)
        while not stop_consuming.is_set():
            try:
                got = q.pop(10, wait_ms=100)
                if got:
                    ledger.delivered([m.id for m in got])
                    q.ack_many(got)
                    ledger.done([m.id for m in got])
            except Exception as exc:
                ledger.failed(exc)

    threads = [threading.Thread(target=f, args=(z,), daemon=True)
               for z in ZONES[:2] for f in (produce, consume)]
    try:
        assert ready.wait(15), "zone c's process did not start"
        for t in threads:
            t.start()
        time.sleep(2.0)  # all three zones under load
        child.send_signal(signal.SIGKILL)  # zone c: its consumers and its RedisQueues
        child.wait(5)
        killed_at = time.monotonic()
        reader.join(5)
        time.sleep(3.0)  # the survivors keep pushing round robin, a third into shard c
        stop_producing.set()
        budget_s = (grace_ms + lease_ms) / 1000 + 1.0  # + heartbeat tick and the pop's wait
        settled = ledger.settle_unconfirmed_acks(survivors[ZONES[0]].get(name), killed_at)
        eventually(lambda: not ledger.lost, timeout_s=budget_s + 2)
        # Where the lost ones are, for the failure message (None: no longer in Redis).
        where = {i: survivors[ZONES[0]].get(name).info(i) for i in sorted(ledger.lost)[:3]}
    finally:
        stop_producing.set()
        stop_consuming.set()
        for t in threads:
            t.join(5)
        if child.poll() is None:
            child.kill()
            child.wait(5)
        for queues in survivors.values():
            queues.close()
        for client in clients:
            client.close()
    print(ledger.row())
    assert not ledger.lost, f"{len(ledger.lost)} lost, e.g. {where}; zone c acking: " \
        f"{sorted(ledger.lost & ledger.acking)}"
    assert ledger.early == 0 and not ledger.untyped_errors()
    # Pushed before the kill: counted from the kill; after it: from the push.
    late = [ledger.completed[i] - max(pushed_at[i], killed_at) for i in ledger.acknowledged
            if ledger.completed[i] > killed_at]
    worst = max(late)
    assert worst <= budget_s, f"slowest delivery {worst:.2f} s > grace + lease ({budget_s} s)"
    print(f"completed after the kill: {len(late)}; slowest {worst:.2f} s after its push "
          f"(or the kill); budget {budget_s:.1f} s; acked by zone c as it died: {len(settled)}")


def test_the_ops_discover_command_registers_every_queue(redis_server, prefix, capsys) -> None:
    from dynoqueue.cli import main

    client = redis_server.client(decode_responses=True)
    try:
        client.hset(f"{prefix}.MESSAGE.java1", "j1", '{"id":"j1","timeout":0,"priority":0}')
        client.hset(f"{prefix}.MESSAGE.java2", "j2", '{"id":"j2","timeout":0,"priority":0}')
        code = main(["discover", "--url", redis_server.url, "--prefix", prefix, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert '"registered"' in out and "java1" in out and "java2" in out
        assert client.smembers(f"{prefix}.QUEUES") == {"java1", "java2"}
    finally:
        client.close()


@BOTH_APIS
@pytest.mark.deployments("single")
def test_the_reprocessor_of_either_api_beats_and_adopts_by_itself(make_queues, raw,
                                                                  prefix) -> None:
    ticking = {"unack_handler_interval_ms": 60_000, "orphan_shard_grace_ms": 150}
    zone_a = make_queues(**ticking)
    gone = make_queues(shard_supplier=_in("c"), orphan_shard_grace_ms=150)
    gone.process_unacks()  # zone c beats once, then stops
    gone.close()
    assert eventually(lambda: raw.hget(f"{prefix}.ZONES", "a") is not None, 2)
    # No unack pass is due for a minute: the heartbeat alone finds zone c orphaned (and b,
    # which never beat: silent since zone c's beat found it missing).
    assert eventually(lambda: zone_a.zones.orphaned == ("b", "c"), 2)
