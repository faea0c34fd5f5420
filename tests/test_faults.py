"""Fault injection on real processes (loopback only, bounded in time): a consumer killed while it
holds leases, a Sentinel failover under load, a Redis Cluster primary killed under load, a
Dynomite rack's redis-server restarted under load.

Each test prints one summary row (see tests/faults.py); the terminal summary repeats them all.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from redis.crc import key_slot

from dynoqueue import DynoQueue, DynoQueueError, Message, QueuePolicy, RedisQueues
from dynoqueue.embedded import (
    ClusterTopology,
    RedisServer,
    SentinelRing,
    dynomite,
    find_redis_server,
)
from dynoqueue.embedded.ports import _free_cluster_port

from .deployments import NEEDS_DYNOMITE, ZONES, Deployment, rack_contents
from .faults import MAX_KEPT_ERRORS, Ledger, run_under_fault

pytestmark = pytest.mark.slow

LEASE_MS = 1500
REPROCESS_MS = 200


# ------------------------------------------------------------------ a consumer killed mid-flight

_VICTIM = """
import json, sys, time
from dynoqueue import RedisQueues
url, prefix, queue, count, lease, dynomite = sys.argv[1:7]
queues = RedisQueues.from_url(url, key_prefix=prefix, unack_timeout_ms=int(lease),
                              unack_handler_interval_ms=0, read_from_replicas=False,
                              dynomite=dynomite == "1")
got = queues.get(queue).pop(int(count), wait_ms=5000)
print(json.dumps([m.id for m in got]), flush=True)
time.sleep(120)  # holds its leases until SIGKILL
"""


def test_a_consumer_killed_holding_leases_loses_nothing(deployment: Deployment) -> None:
    prefix, name = f"f{uuid.uuid4().hex[:8]}", "jobs"
    ledger = Ledger(f"consumer SIGKILL ({deployment.name})")
    with deployment.build(key_prefix=prefix, unack_timeout_ms=LEASE_MS,
                          unack_handler_interval_ms=REPROCESS_MS) as queues:
        q = queues.get(name)
        messages = [Message(f"m{i}", f"job {i}") for i in range(200)]
        ledger.attempt([m.id for m in messages], 0)
        ledger.acked(q.push(messages))

        victim = subprocess.Popen(
            [sys.executable, "-c", _VICTIM, deployment.url, prefix, name, "40", str(LEASE_MS),
             "1" if deployment.name == "dynomite" else "0"],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert victim.stdout is not None
            held = json.loads(victim.stdout.readline())
            assert len(held) == 40
            ledger.delivered(held)
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
        finally:
            victim.kill()
            victim.wait()

        came_back_at: dict[str, float] = {}
        deadline = time.monotonic() + (LEASE_MS + REPROCESS_MS) / 1000 + 10
        while (ledger.lost or len(came_back_at) < len(held)) and time.monotonic() < deadline:
            got = q.pop(50, wait_ms=100)
            ledger.delivered([m.id for m in got])
            for m in got:
                if m.id in held:
                    came_back_at[m.id] = time.monotonic()
            q.ack_many(got)
        assert q.size() == 0
    print("\n" + ledger.row())
    assert not ledger.lost
    assert set(came_back_at) == set(held)  # every leased message was delivered again...
    slowest = max(came_back_at.values()) - killed_at
    assert slowest < (LEASE_MS + REPROCESS_MS) / 1000 + 3  # ...within lease + interval (+slack)
    assert ledger.early == 0


# ------------------------------------------------------------------ load with a fault in between



def test_sentinel_failover_under_load_loses_no_acknowledged_push() -> None:
    """write_quorum=1 + min-replicas-to-write 1: every acknowledged push survives the primary's
    SIGKILL; the sentinels promote a replica and the builders' connections follow it."""
    ledger = Ledger("sentinel failover (SIGKILL)")
    safe = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]
    with SentinelRing(ZONES, extra_args=safe, down_after_ms=1000) as ring:
        prefix = f"f{uuid.uuid4().hex[:8]}"
        zones = [
            RedisQueues.from_url(ring.url, zones=ZONES, local_zone=zone, key_prefix=prefix,
                                 write_quorum=1, write_quorum_timeout_ms=500,
                                 unack_timeout_ms=LEASE_MS,
                                 unack_handler_interval_ms=REPROCESS_MS)
            for zone in ZONES
        ]
        try:
            old = ring.current_primary()
            took: dict[str, float] = {}

            def kill_primary() -> None:
                started = time.monotonic()
                old.kill()
                ring.wait_for_new_primary(old, timeout_s=30)
                took["failover"] = time.monotonic() - started

            queues = [z.get("load") for z in zones]
            run_under_fault(ledger, [queues[0]], queues, kill_primary)
            assert ring.current_primary() is not old
        finally:
            for z in zones:
                z.close()
    print("\n" + ledger.row() + f"  (failover {took['failover']:.1f} s)")
    assert not ledger.lost, sorted(ledger.lost)[:10]
    assert ledger.early == 0
    assert not ledger.untyped_errors(), ledger.untyped_errors()[:3]
    assert len(ledger.acknowledged) > 100  # the run did real work on both sides of the fault


def _taken_over(topology: ClusterTopology, queue: DynoQueue, old: RedisServer) -> bool:
    try:
        return topology.owner_of(queue.keys.message_hash) is not old
    except DynoQueueError:
        return False


def test_cluster_primary_killed_under_load_keeps_the_queue_working() -> None:
    """Kill the primary that owns the queue's slot; its replica takes over, the queue keeps
    working and no acknowledged push is lost."""
    ledger = Ledger("cluster primary SIGKILL")
    with ClusterTopology(3, 1, node_timeout_ms=1000) as topology:
        prefix = f"f{uuid.uuid4().hex[:8]}"
        factories = [
            RedisQueues.from_url(topology.url, key_prefix=prefix, write_quorum=1,
                                 write_quorum_timeout_ms=500, unack_timeout_ms=LEASE_MS,
                                 unack_handler_interval_ms=REPROCESS_MS)
            for _ in range(2)
        ]
        try:
            queues = [f.get("load") for f in factories]
            owner = topology.owner_of(queues[0].keys.message_hash)

            def kill_owner() -> None:
                owner.kill()
                deadline = time.monotonic() + 30
                while not _taken_over(topology, queues[0], owner):
                    assert time.monotonic() < deadline, "no replica took over the slot"
                    time.sleep(0.1)
                # The promoted replica has no replica of its own, so WAIT 1 fails (typed)
                # until the old primary is back: it rejoins as the new primary's replica.
                owner.start()
                while owner.info("replication").get("master_link_status") != "up":
                    assert time.monotonic() < deadline, "the old primary did not rejoin"
                    time.sleep(0.1)

            run_under_fault(ledger, [queues[0]], queues, kill_owner)
            new_owner = topology.owner_of(queues[0].keys.message_hash)
            assert new_owner is not owner
            queues[0].push([Message("after")])  # and the queue still takes writes
            assert queues[0].contains("after")
        finally:
            for f in factories:
                f.close()
    print("\n" + ledger.row())
    assert not ledger.lost, sorted(ledger.lost)[:10]
    assert ledger.early == 0
    assert not ledger.untyped_errors(), ledger.untyped_errors()[:3]
    assert len(ledger.acknowledged) > 100


def test_cluster_write_after_a_manual_failover_follows_moved() -> None:
    """A graceful failover leaves the old primary up as a replica: a client whose slot map still
    names it gets MOVED on its pipelined write (write_quorum=1), re-reads the map and succeeds."""
    with ClusterTopology(3, 1, node_timeout_ms=1000) as topology, RedisQueues.from_url(
        topology.url, write_quorum=1, write_quorum_timeout_ms=2000,
        key_prefix=f"f{uuid.uuid4().hex[:8]}", unack_handler_interval_ms=0,
    ) as queues:
        q = queues.get("moved")
        q.push([Message("before")])  # caches the slot owner
        owner = topology.owner_of(q.keys.message_hash)
        replica = next(s for s in topology.servers()
                       if s.info("replication").get("master_port") == owner.port)
        replica._admin_client().execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + 30
        while topology.owner_of(q.keys.message_hash) is not replica:
            assert time.monotonic() < deadline, "the manual failover did not happen"
            time.sleep(0.1)
        q.push([Message("after")])  # first reaches the old owner, now a replica: MOVED
        assert q.contains("before") and q.contains("after")


def _cli(cli: str, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``redis-cli --cluster command args --cluster-yes``, its output captured."""
    return subprocess.run([cli, "--cluster", command, *args, "--cluster-yes"],
                          capture_output=True, text=True, timeout=240, check=False)


def _cluster_info_has(server: RedisServer, line: str) -> bool:
    """Whether ``server``'s CLUSTER INFO has ``line`` (e.g. ``cluster_state:ok``)."""
    with server.client() as admin:
        return line.encode() in admin.execute_command("CLUSTER", "INFO")


def _redis_cli() -> str | None:
    """redis-cli: beside the redis-server the tests run, or on PATH (None: neither)."""
    beside = os.path.join(os.path.dirname(find_redis_server()), "redis-cli")
    return beside if os.access(beside, os.X_OK) else shutil.which("redis-cli")


@pytest.mark.skipif(_redis_cli() is None, reason="resharding: no redis-cli beside redis-server "
                    "or on PATH (Debian: apt-get install redis-tools)")
def test_resharding_a_partitioned_queue_under_load_loses_nothing() -> None:
    """A 12-partition queue on 3 primaries under load; a 4th primary joins and redis-cli's
    rebalance moves a quarter of the slots to it (CLUSTER SETSLOT + MIGRATE, key by key) while
    producers and consumers run: nothing acknowledged is lost, nothing is delivered early, and
    calls ride over ASK, MOVED and TRYAGAIN with typed errors at worst."""
    cli = _redis_cli()
    assert cli is not None
    ledger = Ledger("cluster reshard, 12 partitions")
    node_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "1000", "--cluster-announce-ip", "127.0.0.1"]
    with ClusterTopology(3, 0, node_timeout_ms=1000) as topology, \
            RedisServer(port=_free_cluster_port(), extra_args=node_args) as joining:
        prefix = f"f{uuid.uuid4().hex[:8]}"
        factories = [RedisQueues.from_url(topology.url, key_prefix=prefix,
                                          policy=QueuePolicy(partitions=12),
                                          unack_timeout_ms=LEASE_MS,
                                          unack_handler_interval_ms=REPROCESS_MS)
                     for _ in range(2)]
        seed = f"127.0.0.1:{topology.primaries[0].port}"
        moved: list[int] = []
        try:
            queues = [f.get("load") for f in factories]
            tags = [part.keys.message_hash for part in queues[0]._core.parts]

            def reshard() -> None:
                subprocess.run([cli, "--cluster", "add-node", f"127.0.0.1:{joining.port}", seed],
                               check=True, capture_output=True, timeout=60)
                deadline = time.monotonic() + 30
                while not all(_cluster_info_has(n, "cluster_known_nodes:4")
                              for n in topology.primaries):
                    assert time.monotonic() < deadline, "the new node was not met"
                    time.sleep(0.1)
                # redis-cli refuses to rebalance until every node agrees on the config, and a
                # MIGRATE to a node that still sees the cluster down fails (CLUSTERDOWN).
                while _cli(cli, "check", seed).returncode != 0 or not all(
                        _cluster_info_has(n, "cluster_state:ok")
                        for n in (*topology.primaries, joining)):
                    assert time.monotonic() < deadline, "the cluster did not agree"
                    time.sleep(0.2)
                for _ in range(3):
                    run = _cli(cli, "rebalance", seed, "--cluster-use-empty-masters")
                    if run.returncode == 0:
                        break
                    # An interrupted rebalance leaves a slot open: fix closes it, then again.
                    print(f"rebalance failed, fixing: {run.stdout[-400:]!r} {run.stderr!r}")
                    _cli(cli, "fix", seed)
                else:
                    raise AssertionError(f"rebalance failed 3 times: {run.stdout[-800:]!r}")
                moved.extend(i for i, key in enumerate(tags)
                             if topology_owner(key) == joining.port)

            def topology_owner(key: str) -> int:
                slot = key_slot(key.encode())
                with joining.client() as admin:
                    for start, end, *nodes in admin.execute_command("CLUSTER", "SLOTS"):
                        if start <= slot <= end:
                            return int(nodes[0][1])
                return -1

            run_under_fault(ledger, queues, queues, reshard, after_s=3.0)
        finally:
            for f in factories:
                f.close()
    print("\n" + ledger.row())
    print(f"{len(moved)} of 12 partitions moved to the new primary; {ledger.failures} calls "
          f"failed (typed) meanwhile")
    assert moved, "no partition moved to the new primary"
    assert not ledger.lost, sorted(ledger.lost)[:10]
    assert ledger.early == 0
    assert not ledger.untyped_errors(), ledger.untyped_errors()[:3]
    assert len(ledger.acknowledged) > 100


@NEEDS_DYNOMITE
def test_dynomite_rack_restart_under_load_dc_quorum() -> None:
    """One producer and a consumer per zone, each on its own rack's node (DC_QUORUM reads and
    writes); rack c's redis-server is killed and restarted under load. It comes back empty and
    without scripts, and misses what is written until Dynomite reconnects (~1 s; no hinted
    handoff): the quorum of the other two racks carries the queue meanwhile.

    Dynomite replicates each script as a statement over separate peer links, so a push and a
    claim (or a claim and an ack) can apply in different orders on different racks, with or
    without a fault: a few ids end up leased or waiting on one rack only, where no quorum reply
    shows them (stranded), and rarely one is not delivered within the drain (lost). The test
    bounds them at 1% of the acknowledged pushes (DC_ONE strands about a quarter)."""
    ledger = Ledger("dynomite rack restart (DC_QUORUM)")
    with dynomite(ZONES) as topology:
        prefix = f"f{uuid.uuid4().hex[:8]}"
        zones = [
            RedisQueues.from_url(topology.urls(zone), dynomite=True, zones=ZONES,
                                 local_zone=zone, key_prefix=prefix, poll_interval_ms=50,
                                 unack_timeout_ms=LEASE_MS,
                                 unack_handler_interval_ms=REPROCESS_MS)
            for zone in ZONES
        ]
        took: dict[str, float] = {}
        try:
            queues = [z.get("load") for z in zones]
            restarted = topology.rack(ZONES[2])[0].backend

            def restart_rack() -> None:
                started = time.monotonic()
                restarted.kill()
                restarted.start()
                topology.wait_until_replicating()
                took["rack back"] = time.monotonic() - started

            def drained() -> bool:
                sizes = queues[0].shard_sizes().values()
                return not ledger.lost and not any(s["size"] or s["uacked"] for s in sizes)

            run_under_fault(ledger, [queues[0]], queues, restart_rack, before_s=3.0,
                            drain_s=20.0, drained=drained)
            left = {i for keys in rack_contents(topology, prefix).values()
                    for content in keys.values() for i in content}
            ledger.stranded = len(left)
        finally:
            for z in zones:
                z.close()
    print("\n" + ledger.row() + f"  (rack back in {took['rack back']:.1f} s)")
    assert ledger.early == 0
    assert not ledger.untyped_errors(), ledger.untyped_errors()[:3]
    assert len(ledger.acknowledged) > 500
    assert len(ledger.lost) + ledger.stranded <= len(ledger.acknowledged) // 100, (
        sorted(ledger.lost)[:10], sorted(left)[:10])


def test_a_fault_that_fails_stops_every_load_thread_and_keeps_errors_bounded(
        redis_server: RedisServer) -> None:
    """The harness itself: a fault that raises must not leave consumers running (they would
    spin on a closed queue for the rest of the session), and a call failing in a loop keeps
    a bounded number of errors."""
    ledger = Ledger("harness: failing fault")
    with RedisQueues.from_url(redis_server.url, key_prefix=f"h{uuid.uuid4().hex[:8]}",
                              unack_handler_interval_ms=0) as queues:
        q = queues.get("load")

        def fault() -> None:
            raise RuntimeError("the fault went wrong")

        with pytest.raises(RuntimeError, match="went wrong"):
            run_under_fault(ledger, [q], [q], fault, before_s=0.2, after_s=0)
    load = [t.name for t in threading.enumerate()
            if "pop_and_ack" in t.name or "push_batches" in t.name]  # "Thread-N (target)"
    assert load == []
    for _ in range(3 * MAX_KEPT_ERRORS):
        ledger.failed(DynoQueueError("x"))
    assert ledger.failures == 3 * MAX_KEPT_ERRORS and len(ledger.errors) == MAX_KEPT_ERRORS
    ledger.failed(ValueError("untyped"))  # still kept: the contract check reads these
    assert [type(e) for e in ledger.untyped_errors()] == [ValueError]
