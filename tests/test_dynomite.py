"""Netflix Dynomite for real: the embedded topology, the Dynomite profile against it (both APIs),
several nodes per rack, a restarted rack, Dynomite's own error replies, fail-over to the next
node. The contract suite runs on Dynomite too (the ``dynomite`` deployment); this module holds
what is specific to it. The fault row (a rack restarted under load) is in test_faults."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from importlib import import_module
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dynoqueue import ConfigurationError, Message, RedisOperationError, RedisQueues
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.core.sender import DYNOMITE_RETRY_PAUSES_S
from dynoqueue.embedded import ENV_DYNOMITE, DynomiteTopology, dynomite, find_dynomite
from dynoqueue.embedded import server as embedded_server
from dynoqueue.errors import DynomiteNotFoundError, DynomiteQuorumError, DynomiteStorageError

from .apis import API_NAMES, Bridge
from .conftest import eventually, unique
from .deployments import NEEDS_DYNOMITE, ZONES, rack_contents

pytestmark = [pytest.mark.slow, NEEDS_DYNOMITE]
apis = pytest.mark.parametrize("api", API_NAMES)


@pytest.fixture(scope="module")
def topology() -> Iterator[DynomiteTopology]:
    """Three racks, one node each, DC_QUORUM reads and writes (tests restore what they break)."""
    with dynomite(ZONES) as started:
        yield started


def build(api: str, bridge: Bridge, url: str, **settings: Any) -> Any:
    """The Dynomite profile on ``url`` in the sync or the asyncio API (blocking view)."""
    settings = {"dynomite": True, "poll_interval_ms": 20, "unack_handler_interval_ms": 0,
                "key_prefix": f"d{uuid.uuid4().hex[:8]}", **settings}
    if api == "async":
        return bridge.wrap_factory(AsyncRedisQueues.from_url(url, **settings))
    return RedisQueues.from_url(url, **settings)


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


# ------------------------------------------------------------------ the binary and the topology


def test_the_binary_is_found_and_a_wrong_one_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_dynomite().endswith("/dynomite")  # $DYNOQUEUE_DYNOMITE or PATH
    monkeypatch.setenv(ENV_DYNOMITE, "/nonexistent/dynomite")
    with pytest.raises(DynomiteNotFoundError, match=r"github\.com/Netflix/dynomite"):
        find_dynomite()
    with pytest.raises(DynomiteNotFoundError):
        DynomiteTopology().start()


def test_a_peer_port_taken_before_start_moves_the_ring_to_free_ports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The CI failure this guards: a port picked free was bound by someone else before dynomite
    # listened on it ("Address already in use"), and the whole topology failed to start.
    picks: list[int] = []
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]

        def first_pick_taken() -> int:
            picks.append(taken if not picks else embedded_server.free_port())
            return picks[-1]

        # the submodule, not the dynomite() function that shadows its name in the package
        monkeypatch.setattr(import_module("dynoqueue.embedded.dynomite"), "free_port",
                            first_pick_taken)
        with dynomite(ZONES[:2]) as ring:
            assert taken not in [p for n in ring.nodes for p in (n.port, n.peer_port,
                                                                  n.stats_port)]
            assert len(picks) == 2 * 2 * 3  # two nodes, three ports each, picked twice
            with ring.nodes[0].client() as node:
                node.set("after-the-move", "1")
            assert eventually(lambda: all(n.backend.client().get("after-the-move") == b"1"
                                   for n in ring.nodes))


def test_every_write_reaches_every_rack(topology: DynomiteTopology) -> None:
    assert [n.rack for n in topology.nodes] == ZONES
    with topology.rack("us-east-1b")[0].client(decode_responses=True) as node:
        node.set("written-through-b", "1")
    assert eventually(lambda: all(n.backend.client().get("written-through-b") == b"1"
                                  for n in topology.nodes))
    assert topology.urls("us-east-1b").startswith(f"redis://127.0.0.1:{topology.nodes[1].port},")


# ------------------------------------------------------------------ the profile


def test_a_default_client_is_refused_and_the_profile_is_not(topology: DynomiteTopology) -> None:
    node = topology.nodes[0]
    # redis-py 8 opens with HELLO 3 and CLIENT SETINFO: Dynomite closes the connection.
    plain = redis.Redis(host=node.host, port=node.port, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        plain.ping()
    plain.close()
    with RedisQueues.from_url(node.url, dynomite=True, unack_handler_interval_ms=0) as queues:
        kwargs = queues.quorum_conn.connection_pool.connection_kwargs
        assert (kwargs["protocol"], kwargs["driver_info"]) == (2, None)
        assert queues.ping()["quorum"] >= 0


@apis
def test_the_profile_sends_scripts_as_text_and_no_command_dynomite_lacks(
        topology: DynomiteTopology, api: str, bridge: Bridge) -> None:
    queues = build(api, bridge, topology.url, zones=ZONES, local_zone="us-east-1a")
    try:
        for node in topology.nodes:
            node.backend.client().config_resetstat()
        q = queues.get(unique())
        q.push([Message(f"m{i}", priority=i) for i in range(3)])
        assert ids(q.pop(1, wait_ms=500)) == ["m2"] and q.ack("m2")
        assert q.size() == 2
    finally:
        queues.close()
    for node in topology.nodes:  # what every rack's redis-server received through Dynomite
        stats = node.backend.info("commandstats")
        assert "cmdstat_eval" in stats, node.rack
        for command in ("evalsha", "time", "publish", "subscribe", "wait", "client", "hello",
                        "select", "auth"):
            assert f"cmdstat_{command}" not in stats, (node.rack, command)


@apis
@pytest.mark.parametrize(("url", "settings", "says"), [
    ("redis://127.0.0.1:1/1", {}, "db 0"),
    ("redis://127.0.0.1:1/0", {"client_options": {"db": 2}}, "db 0"),
    ("redis://127.0.0.1:1/0?client_name=app", {}, "CLIENT SETNAME"),
    ("redis://127.0.0.1:1/0", {"client_options": {"client_name": "app"}}, "CLIENT SETNAME"),
    ("rediss://127.0.0.1:1/0", {}, "TLS"),
    ("redis://:pw@127.0.0.1:1/0", {}, "AUTH"),
    ("redis://app:pw@127.0.0.1:1/0", {}, "AUTH"),
    ("redis://127.0.0.1:1/0", {"write_quorum": 1}, "WAIT"),
    ("redis://127.0.0.1:1/0", {"doorbell": True}, "pub/sub"),
    ("redis://127.0.0.1:1/0", {"eval_scripts": False}, "scripts"),
    ("redis+sentinel://127.0.0.1:1/svc", {}, "redis://host:port"),
    ("redis+cluster://127.0.0.1:1", {}, "redis://host:port"),
])
def test_the_profile_refuses_what_dynomite_cannot_do(api: str, url: str, settings: Any,
                                                     says: str) -> None:
    factory = AsyncRedisQueues if api == "async" else RedisQueues
    with pytest.raises(ConfigurationError, match=says):
        factory.from_url(url, dynomite=True, **settings)


@apis
def test_a_node_list_fails_over_in_order(api: str, bridge: Bridge) -> None:
    url = "redis://127.0.0.1:7001,127.0.0.2:7002,127.0.0.1:7003/0?socket_timeout=1"
    queues = build(api, bridge, url)
    try:
        kwargs = queues.quorum_conn.connection_pool.connection_kwargs
        assert kwargs["addresses"] == [("127.0.0.1", 7001), ("127.0.0.2", 7002),
                                       ("127.0.0.1", 7003)]
        assert (kwargs["host"], kwargs["port"], kwargs["socket_timeout"]) == (
            "127.0.0.1", 7001, 1.0)
    finally:
        queues.close()
    for bad in ("redis://127.0.0.1:1,127.0.0.1:port", "redis://127.0.0.1:1,,127.0.0.1:2",
                "redis://:pw@127.0.0.1:1,127.0.0.1:2"):
        with pytest.raises(ConfigurationError):
            build(api, bridge, bad)


# ------------------------------------------------------------------ several nodes per rack


def test_two_nodes_per_rack_hold_a_queue_on_one_node_with_hash_tags(bridge: Bridge) -> None:
    """Dynomite checks that an EVAL's keys share a node (not an EVALSHA's): without hash tags
    a push is refused instead of splitting a queue over two nodes; with them, counts are right."""
    with dynomite(ZONES, nodes_per_rack=2) as topology:
        assert topology.hash_tag and len(topology.rack("us-east-1a")) == 2
        for api in API_NAMES:
            zoned = {"zones": ZONES, "local_zone": ZONES[0]}
            queues = build(api, bridge, topology.url, hash_tag=True, **zoned)
            untagged = build(api, bridge, topology.url, key_prefix=queues.key_prefix, **zoned)
            try:
                q = queues.get(unique())
                q.push([Message(f"m{i}") for i in range(6)])
                assert q.size() == 6
                assert len(q.pop(2)) == 2 and q.size() == 4  # the local shard held 2
                contents = rack_contents(topology, queues.key_prefix)
                for rack in ZONES:
                    assert len(contents[rack][q.keys.message_hash]) == 6, rack
                    homes = [n for n in topology.rack(rack)
                             if n.backend.client().exists(q.keys.message_hash)]
                    assert len(homes) == 1, rack  # the whole queue on one node of the rack
                # Untagged, a queue's 4 keys land on one node only by chance: every other
                # queue is refused whole, never split.
                refused = 0
                for _ in range(8):
                    other = untagged.get(unique())
                    try:
                        other.push([Message(f"m{i}") for i in range(6)])
                    except RedisOperationError as exc:
                        assert "span multiple nodes" in str(exc)
                        refused += 1
                        # Nothing written anywhere (size() is a script too, refused alike).
                        after = rack_contents(topology, untagged.key_prefix)
                        assert all(other.keys.message_hash not in after[rack] for rack in ZONES)
                    else:
                        assert other.size() == 6
                assert refused
            finally:
                queues.close()
                untagged.close()
        pids = [n.pid for n in topology.nodes] + [s.pid for s in topology.servers()]
    for pid in pids:  # nothing outlives the topology
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# ------------------------------------------------------------------ a restarted rack


@apis
def test_a_restarted_rack_gets_every_write_made_after_it_is_back(
        topology: DynomiteTopology, api: str, bridge: Bridge) -> None:
    """A restarted redis-server has lost its scripts; the other racks' quorum hides its NOSCRIPT
    replies, so with EVALSHA that rack would stay empty. The profile sends script text. (What
    a rack missed while down stays missing: Dynomite has no anti-entropy.)"""
    queues = build(api, bridge, topology.url)
    try:
        q = queues.get(unique())
        q.push([Message("warm-up")])  # the racks have run the scripts
        q.ack_many(q.pop(1))
        restarted = topology.rack("us-east-1c")[0].backend
        restarted.kill()
        restarted.start()
        topology.wait_until_replicating()  # Dynomite reconnects to it after ~1 s
        q.push([Message(f"after-{i}", "p", priority=i % 3) for i in range(9)])
        q.ack_many(q.pop(2, wait_ms=500))
        q.pop(2, wait_ms=500)  # leased, not acked

        def racks_agree() -> bool:
            contents = rack_contents(topology, queues.key_prefix)
            return contents["us-east-1a"] == contents["us-east-1b"] == contents["us-east-1c"]

        assert eventually(racks_agree)
        contents = rack_contents(topology, queues.key_prefix)["us-east-1c"]
        assert len(contents[q.keys.message_hash]) == 7
        assert sum(len(contents.get(k, [])) for k in q.keys.all_unack_shards) == 2
    finally:
        queues.close()


# ------------------------------------------------------------------ Dynomite's error replies


def _call_while_restarting(backend: Any, call: Any, down_s: float = 0.2) -> Any:
    """Run ``call`` in a thread while ``backend`` is down for ``down_s``; its result (or error).
    The restart happens here: a server started from a short-lived thread dies with it."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except Exception as exc:
            outcome["error"] = exc

    backend.kill()
    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(down_s)
    backend.start()
    worker.join(timeout=30)
    return outcome


@apis
def test_dynomite_errors_are_typed_and_idempotent_calls_retried(
        topology: DynomiteTopology, api: str, bridge: Bridge,
        caplog: pytest.LogCaptureFixture) -> None:
    local = topology.nodes[0].backend  # the redis-server behind the node the client uses
    far = topology.nodes[2].backend
    prefix = f"d{uuid.uuid4().hex[:8]}"

    def factory() -> Any:
        return build(api, bridge, topology.url, key_prefix=prefix)

    caplog.set_level(logging.INFO, logger="dynoqueue.queue")
    try:
        # Dynomite applies a consistency level to the client connections made after it is set.
        topology.set_consistency("DC_ONE", "DC_ONE")  # the local rack answers alone
        with factory() as queues:
            q = queues.get("errors")
            q.push([Message("m1"), Message("m2")])
            local.kill()  # comes back empty: m1 and m2 stay on the other racks only
            started = time.monotonic()
            with pytest.raises(DynomiteStorageError, match="Storage: "):
                q.pop(1)  # a claim is not idempotent: not retried
            assert time.monotonic() - started < DYNOMITE_RETRY_PAUSES_S[0] + 0.5
            local.start()
            topology.wait_until_replicating()
            # Idempotent calls ride out a short restart (and Dynomite's reconnect).
            assert _call_while_restarting(local, q.size) == {"result": 0}
            assert "retrying in" in caplog.text
        # DC_SAFE_QUORUM needs the answering racks to agree: the restarted rack has no m1, and
        # with a third rack down no majority is left.
        topology.set_consistency("DC_SAFE_QUORUM", "DC_SAFE_QUORUM")
        with factory() as queues:
            q = queues.get("errors")
            far.kill()
            started = time.monotonic()
            with pytest.raises(DynomiteQuorumError, match="Failed to achieve Quorum"):
                q.contains("m1")
            assert time.monotonic() - started >= sum(DYNOMITE_RETRY_PAUSES_S)
    finally:
        local.start()
        far.start()
        topology.set_consistency("DC_QUORUM", "DC_QUORUM")
        topology.wait_until_replicating()


# ------------------------------------------------------------------ several addresses per zone


@apis
def test_a_dead_node_fails_over_to_the_next_address(topology: DynomiteTopology, api: str,
                                                    bridge: Bridge) -> None:
    local = topology.nodes[0]
    queues = build(api, bridge, topology.urls(local.rack))
    try:
        q = queues.get(unique())
        q.push([Message("before")])
        local.kill()
        q.push([Message("after")])  # through the next node of the list
        assert sorted(ids(q.pop(2, wait_ms=1000))) == ["after", "before"]
        assert q.ack("before") and q.ack("after")
    finally:
        local.start()
        queues.close()
