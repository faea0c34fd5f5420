"""Sentinel failovers that leave the demoted primary writable (issue 11, item 1).

A frozen primary (SIGSTOP) is failed over; when it resumes it is still a writable primary until
Sentinel converts it (~10 s later), and a replica restarted meanwhile points at it, so ``WAIT 1``
succeeds there. Connections opened before the failover must not have writes acknowledged by it:
everything it accepted is discarded when it resyncs from the new primary.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from dynoqueue import Message, RedisQueues
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import RedisServer, SentinelRing

from .apis import Bridge
from .deployments import ZONES
from .faults import Ledger, run_under_fault

pytestmark = pytest.mark.slow

SAFE = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]


def _build(ring: SentinelRing, api: str, bridge: Bridge, zone: str, prefix: str,
           **settings: Any) -> Any:
    if api == "async":
        return bridge.wrap_factory(AsyncRedisQueues.from_url(
            ring.url, zones=ZONES, local_zone=zone, key_prefix=prefix, **settings))
    return RedisQueues.from_url(ring.url, zones=ZONES, local_zone=zone, key_prefix=prefix,
                                **settings)


def _replicating_from(server: RedisServer, primary: RedisServer) -> bool:
    try:
        info = server.info("replication")
    except Exception:  # frozen, restarting
        return False
    return (info.get("role") == "slave" and int(info.get("master_port", 0)) == primary.port
            and info.get("master_link_status") == "up")


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_write_to_a_demoted_primary_still_writable_is_not_acknowledged(
        api: str, bridge: Bridge) -> None:
    """The connection opened before the failover still points at the old primary, which
    resumed as a writable primary: the push must land on the primary Sentinel names."""
    with SentinelRing(ZONES, down_after_ms=500, failover_timeout_ms=2000) as ring:
        queues = _build(ring, api, bridge, ZONES[0], f"s{uuid.uuid4().hex[:8]}",
                        unack_handler_interval_ms=0)
        try:
            q = queues.get("jobs")
            q.push([Message("before")])  # opens the connection to the first primary
            old = ring.current_primary()
            old.pause()
            try:
                new = ring.wait_for_new_primary(old, timeout_s=20)
            finally:
                old.resume()
            assert old.info("replication")["role"] == "master"  # demoted, still writable
            q.push([Message("after")])
            assert new.client(decode_responses=True).hexists(q.keys.message_hash, "after"), (
                "the push was acknowledged by the demoted primary, not the one Sentinel names")
        finally:
            queues.close()
    # Closing the factory ended its watcher thread.
    assert not [t for t in threading.enumerate() if t.name == "dynoqueue-sentinel-watcher"]


def test_frozen_primary_with_a_replica_down_loses_no_acknowledged_push() -> None:
    """Issue 11's reproduction: a replica down, the primary frozen until Sentinel fails over,
    then both back (the replica restarted towards the old primary, which satisfies WAIT 1
    there); 2 producers and a consumer per zone run throughout. With min-replicas-to-write 1
    and write_quorum=1, no acknowledged push may be lost."""
    ledger = Ledger("sentinel SIGSTOP + replica down")
    took: dict[str, float] = {}
    with SentinelRing(ZONES, extra_args=SAFE, down_after_ms=500,
                      failover_timeout_ms=2000) as ring:
        prefix = f"s{uuid.uuid4().hex[:8]}"
        zones = [RedisQueues.from_url(ring.url, zones=ZONES, local_zone=zone, key_prefix=prefix,
                                      write_quorum=1, write_quorum_timeout_ms=500,
                                      unack_timeout_ms=1500, unack_handler_interval_ms=200)
                 for zone in ZONES]
        try:
            queues = [z.get("load") for z in zones]
            old, down = ring.current_primary(), ring.replicas[ZONES[1]]

            def fault() -> None:
                started = time.monotonic()
                down.kill()
                old.pause()
                try:
                    new = ring.wait_for_new_primary(old, timeout_s=30)
                finally:
                    old.resume()
                took["failover"] = time.monotonic() - started
                down.start()  # replicates from the old primary: WAIT 1 succeeds there
                deadline = time.monotonic() + 45  # ~12 s here; generous for a loaded CI box
                while not (_replicating_from(old, new) and _replicating_from(down, new)):
                    assert time.monotonic() < deadline, "Sentinel did not convert the old nodes"
                    time.sleep(0.1)
                took["converted"] = time.monotonic() - started

            run_under_fault(ledger, queues[:2], queues, fault, drain_s=6.0)
        finally:
            for z in zones:
                z.close()
    print("\n" + ledger.row() + f"  (failover {took['failover']:.1f} s, old nodes converted "
          f"after {took['converted']:.1f} s)")
    assert len(ledger.acknowledged) > 300  # work on both sides of the fault
    assert ledger.early == 0
    assert not ledger.untyped_errors(), ledger.untyped_errors()[:3]
    assert not ledger.lost, f"{len(ledger.lost)} of {len(ledger.acknowledged)} acked pushes lost"

