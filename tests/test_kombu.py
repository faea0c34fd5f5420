"""The dynoqueue kombu transport through kombu's own API, on real redis-server processes.

Options and URLs, publish -> push (a queue of the same name), eta -> a delayed message,
expiration -> TTL, ack / reject / dead letters / redrive, heartbeat-extended leases, restore
on close, fanout across connections, bindings shared across connections, fair multi-queue
consumption, purge and size, and a Redis Cluster with partitioned queues.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

kombu = pytest.importorskip("kombu")

import dynoqueue.kombu  # noqa: E402
from dynoqueue import MessageState, RedisQueues  # noqa: E402
from dynoqueue.embedded import ClusterTopology, RedisServer  # noqa: E402
from dynoqueue.errors import ConfigurationError  # noqa: E402
from dynoqueue.kombu.options import parse_options  # noqa: E402
from dynoqueue.kombu.urls import redis_url  # noqa: E402


@pytest.fixture
def kprefix() -> str:
    return f"k{uuid.uuid4().hex[:10]}"


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    host, port = redis_server.address
    return f"dynoqueue://{host}:{port}/0"


@pytest.fixture
def connect(url: str, kprefix: str) -> Iterator[Any]:
    """Make Connections to the test server under the test's key prefix (closed at the end)."""
    made: list[Any] = []

    def make(**options: Any) -> Any:
        conn = kombu.Connection(url, transport_options={"key_prefix": kprefix, **options})
        made.append(conn)
        return conn
    yield make
    for conn in made:
        conn.release()


def queues_of(redis_server: RedisServer, prefix: str) -> RedisQueues:
    return RedisQueues.from_url(redis_server.url, key_prefix=prefix,
                                unack_handler_interval_ms=0, orphan_shard_grace_ms=0)


# -- options and URLs -------------------------------------------------------------------------

def test_unknown_option_names_it_and_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"'visibilty_timeout'.*visibility_timeout"):
        parse_options({"visibilty_timeout": 5})


@pytest.mark.parametrize("options", [
    {"visibility_timeout": 0}, {"visibility_timeout": "5"}, {"partitions": 0},
    {"max_deliveries": -1}, {"zones": ["a", "b"]}, {"zones": ["us-a"], "local_zone": "x"},
    {"local_zone": "a"}, {"dead_letters": "yes"}, {"polling_interval": float("nan")},
    {"shard_affinity": "any"}, {"sharding": "random"}, {"reply_spin_us": -1},
    {"max_payload_bytes": 0}, {"client_options": "ssl"}, {"key_prefix": ""},
    {"key_prefix": "a{b}"},
    {"visibility_timeout": 1, "heartbeat_interval": 2},
])
def test_bad_options_raise_before_any_io(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        parse_options(options)
    # kombu builds the transport on first use: the error comes before any connection.
    conn = kombu.Connection("dynoqueue://127.0.0.1:1/0", transport_options=options)
    with pytest.raises(ConfigurationError):
        conn.transport  # noqa: B018


def test_options_build_a_strict_priority_policy() -> None:
    options = parse_options({"max_deliveries": 3, "partitions": 4, "visibility_timeout": 9,
                             "zones": "us-1a,us-1b", "local_zone": "us-1b",
                             "max_retries": 2})  # kombu's own option: accepted
    policy = options.policy()
    assert policy.strict_priority and policy.max_deliveries == 3 and policy.partitions == 4
    assert options.lease_ms == 9000 and options.beat_s == 3.0
    assert options.factory_kwargs()["zones"] == ["us-1a", "us-1b"]


@pytest.mark.parametrize(("broker", "expected"), [
    ("dynoqueue://h:1/2", "redis://h:1/2"),
    ("dynoqueues://u:p@h:1/0", "rediss://u:p@h:1/0"),
    ("dynoqueue+sentinel://h:1,h:2/svc", "redis+sentinel://h:1,h:2/svc"),
    ("dynoqueues+sentinel://h:1/svc", "rediss+sentinel://h:1/svc"),
    ("dynoqueue+cluster://h:1,h:2", "redis+cluster://h:1,h:2"),
    ("dynoqueues+cluster://h:1", "rediss+cluster://h:1"),
])
def test_urls_map_to_redis_urls(broker: str, expected: str) -> None:
    assert redis_url(kombu.Connection(broker)) == expected
    assert redis_url(kombu.Connection(broker, transport="dynoqueue.kombu:Transport")) in (
        expected, expected.replace("redis", "rediss", 1) if broker.startswith("dynoqueues")
        else expected)


def test_uri_masks_the_password() -> None:
    conn = kombu.Connection("dynoqueue+cluster://u:secret@h:1,h:2")
    assert "secret" not in conn.as_uri()
    assert conn.as_uri().startswith("dynoqueue+cluster://u:")


def test_broker_transport_works_without_the_import(redis_server: RedisServer) -> None:
    """``broker_transport="dynoqueue.kombu:Transport"`` in a fresh interpreter: kombu imports
    the transport itself."""
    host, port = redis_server.address
    code = f"""
import sys
from contextlib import closing
from celery import Celery
assert "dynoqueue.kombu" not in sys.modules
app = Celery("t", broker="dynoqueue://{host}:{port}/0")
app.conf.broker_transport = "dynoqueue.kombu:Transport"
app.conf.broker_transport_options = {{"key_prefix": "noimport{uuid.uuid4().hex[:6]}"}}
with app.connection_for_write() as conn, closing(conn.SimpleQueue("q")) as q:
    q.put({{"x": 1}})
    message = q.get(timeout=5)
    message.ack()
    assert message.payload == {{"x": 1}}
print("ok", type(conn.transport).__module__)
"""
    pytest.importorskip("celery")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ok dynoqueue.kombu.transport" in done.stdout


# -- messages ---------------------------------------------------------------------------------

def test_publish_is_a_push_to_the_queue_of_the_same_name(connect: Any, kprefix: str,
                                                         redis_server: RedisServer) -> None:
    conn = connect()
    with closing(conn.SimpleQueue("orders")) as q:
        q.put({"n": 1}, priority=4)
    with queues_of(redis_server, kprefix) as queues:
        queue = queues.get("orders")
        assert queue.size() == 1
        [message] = queue.peek(1)
        assert message.priority == 4
        assert queue.stored_policy() is not None and queue.stored_policy().strict_priority


def test_eta_is_a_delayed_message(connect: Any, kprefix: str,
                                  redis_server: RedisServer) -> None:
    conn = connect()
    eta = datetime.now(UTC) + timedelta(seconds=1.5)
    with closing(conn.SimpleQueue("later")) as q:
        q.put({"n": 1}, headers={"eta": eta.isoformat()})
        with queues_of(redis_server, kprefix) as queues:
            [message] = queues.get("later").get_all_messages()
            assert queues.get("later").state(message.id) is MessageState.DELAYED
        with pytest.raises(q.Empty):
            q.get(timeout=0.8)
        got = q.get(timeout=3)
        assert datetime.now(UTC) >= eta
        assert got.headers["eta"] is None  # due: Celery runs it at once
        got.ack()


def test_expiration_is_a_ttl(connect: Any) -> None:
    conn = connect()
    with closing(conn.SimpleQueue("ttl")) as q:
        q.put({"n": 1}, expiration=0.3)
        q.put({"n": 2})
        time.sleep(0.5)
        assert q.get(timeout=1).payload == {"n": 2}
        with pytest.raises(q.Empty):
            q.get(timeout=0.3)


def test_reject_without_requeue_is_a_dead_letter_and_redrivable(
        connect: Any, kprefix: str, redis_server: RedisServer) -> None:
    conn = connect()
    with closing(conn.SimpleQueue("dl")) as q:
        q.put({"n": 1})
        q.get(timeout=1).reject(requeue=False)
        with pytest.raises(q.Empty):
            q.get(timeout=0.3)
        with queues_of(redis_server, kprefix) as queues:
            [letter] = queues.get("dl").dead_letters()
            assert letter.reason == "rejected"
            assert queues.get("dl").redrive() == 1
        again = q.get(timeout=2)
        assert again.payload == {"n": 1}
        again.ack()


def test_max_deliveries_dead_letters_after_requeues(connect: Any, kprefix: str,
                                                    redis_server: RedisServer) -> None:
    conn = connect(max_deliveries=2)
    with closing(conn.SimpleQueue("md")) as q:
        q.put({"n": 1})
        first = q.get(timeout=1)
        first.requeue()
        second = q.get(timeout=1)
        assert second.delivery_info["redelivered"] is True
        second.requeue()
        with pytest.raises(q.Empty):
            q.get(timeout=0.3)
    with queues_of(redis_server, kprefix) as queues:
        [letter] = queues.get("md").dead_letters()
        assert letter.reason == "max_deliveries" and letter.deliveries == 2


def test_reject_without_dead_letters_deletes(connect: Any, kprefix: str,
                                             redis_server: RedisServer) -> None:
    conn = connect(dead_letters=False)
    with closing(conn.SimpleQueue("nodl")) as q:
        q.put({"n": 1})
        q.get(timeout=1).reject(requeue=False)
    with queues_of(redis_server, kprefix) as queues:
        assert queues.get("nodl").dead_size() == 0
        assert queues.get("nodl").size() == 0


def test_heartbeats_keep_a_held_message_past_its_lease(connect: Any) -> None:
    holder = connect(visibility_timeout=0.6, unack_interval=0.1)
    other = connect(visibility_timeout=0.6, unack_interval=0.1)
    with closing(holder.SimpleQueue("hb")) as mine, closing(other.SimpleQueue("hb")) as theirs:
        mine.put({"n": 1})
        held = mine.get(timeout=1)
        with pytest.raises(theirs.Empty):
            theirs.get(timeout=2.0)  # more than 3 leases: the heartbeat kept it
        held.ack()


def test_closing_a_channel_gives_its_messages_back(connect: Any, kprefix: str,
                                                   redis_server: RedisServer) -> None:
    first = connect()
    with closing(first.SimpleQueue("back")) as q:
        q.put({"n": 1})
        q.get(timeout=1)  # never acked
    first.release()
    with closing(connect().SimpleQueue("back")) as q:
        again = q.get(timeout=1)
        assert again.payload == {"n": 1}
        again.ack()


# -- exchanges --------------------------------------------------------------------------------

def test_fanout_reaches_every_live_consumer(connect: Any) -> None:
    exchange = kombu.Exchange("bcast", type="fanout")
    got: dict[str, list[Any]] = {"one": [], "two": []}
    consumers = []
    for name in got:
        conn = connect()
        queue = kombu.Queue(f"bcast.{name}", exchange=exchange)
        consumer = kombu.Consumer(conn, [queue], accept=["json"],
                                  callbacks=[lambda body, m, name=name: got[name].append(body)])
        consumer.consume()
        for _ in range(3):  # read the subscription confirmation
            with _noop():
                conn.drain_events(timeout=0.2)
        consumers.append((conn, consumer))
    publisher = connect()
    kombu.Producer(publisher, exchange=exchange).publish({"hi": 1}, declare=[exchange])
    deadline = time.monotonic() + 3
    while (not got["one"] or not got["two"]) and time.monotonic() < deadline:
        for conn, _ in consumers:
            try:
                conn.drain_events(timeout=0.1)
            except TimeoutError:
                pass
    assert got == {"one": [{"hi": 1}], "two": [{"hi": 1}]}


class _noop:
    """Let a drain_events time out quietly."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is socket.timeout


def test_bindings_are_shared_across_connections(connect: Any) -> None:
    exchange = kombu.Exchange("routes", type="direct")
    queue = kombu.Queue("routed", exchange=exchange, routing_key="rk")
    declarer = connect()
    queue(declarer.default_channel).declare()
    producer_conn = connect()  # a fresh transport: knows no binding of its own
    kombu.Producer(producer_conn, exchange=exchange).publish({"r": 1}, routing_key="rk")
    with closing(connect().SimpleQueue(queue)) as q:
        message = q.get(timeout=1)
        assert message.payload == {"r": 1}
        message.ack()


def test_several_queues_are_consumed_fairly(connect: Any) -> None:
    conn = connect(pop_batch=10)
    busy, quiet = kombu.Queue("busy"), kombu.Queue("quiet")
    producer = kombu.Producer(conn)
    for n in range(60):
        producer.publish({"q": "busy", "n": n}, routing_key="busy", declare=[busy])
    order: list[str] = []
    consumer = kombu.Consumer(conn, [busy, quiet], accept=["json"],
                              callbacks=[lambda body, m: (order.append(body["q"]), m.ack())])
    with consumer:
        producer.publish({"q": "quiet"}, routing_key="quiet", declare=[quiet])
        while "quiet" not in order:
            conn.drain_events(timeout=2)
    assert order.index("quiet") <= 20, order  # not behind the busy queue's backlog
    with consumer:  # latency on an idle queue while the other is waited on
        while len(order) < 61:
            conn.drain_events(timeout=2)
        sent = time.monotonic()
        producer.publish({"q": "quiet"}, routing_key="quiet")
        conn.drain_events(timeout=2)
        assert time.monotonic() - sent < 0.5


def test_purge_and_size(connect: Any) -> None:
    conn = connect()
    with closing(conn.SimpleQueue("sized")) as q:
        for n in range(5):
            q.put({"n": n})
        assert q.qsize() == 5
        assert q.clear() == 5
        assert q.qsize() == 0


# -- Redis Cluster ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterTopology]:
    topology = ClusterTopology(3, 0).start()
    try:
        yield topology
    finally:
        topology.stop()


@pytest.mark.slow
def test_cluster_partitioned_queue_and_fanout(cluster: ClusterTopology, kprefix: str) -> None:
    broker = "dynoqueue" + cluster.url[len("redis"):]
    options = {"key_prefix": kprefix, "partitions": 3}
    with kombu.Connection(broker, transport_options=options) as conn:
        with closing(conn.SimpleQueue("parts")) as q:
            for n in range(12):
                q.put({"n": n}, priority=n % 3)
            got = []
            for _ in range(12):
                message = q.get(timeout=2)
                got.append(message.payload["n"])
                message.ack()
            assert sorted(got) == list(range(12))
        exchange = kombu.Exchange("cbcast", type="fanout")
        received: list[Any] = []
        queue = kombu.Queue("cbcast.one", exchange=exchange)
        with kombu.Consumer(conn, [queue], accept=["json"],
                            callbacks=[lambda body, m: received.append(body)]):
            deadline = time.monotonic() + 5
            sent = False
            while not received and time.monotonic() < deadline:
                with _noop():
                    conn.drain_events(timeout=0.2)
                if not sent:
                    with kombu.Connection(broker, transport_options=options) as pub:
                        kombu.Producer(pub, exchange=exchange).publish(
                            {"c": 1}, declare=[exchange])
                    sent = True
        assert received == [{"c": 1}]
    assert dynoqueue.kombu.Transport.implements.exchange_type >= {"fanout"}


# -- Sentinel and TLS -------------------------------------------------------------------------

def _roundtrip(broker: str, **options: Any) -> None:
    with kombu.Connection(broker, transport_options={"key_prefix": f"k{uuid.uuid4().hex[:8]}",
                                                     **options}) as conn:
        with closing(conn.SimpleQueue("there")) as q:
            q.put({"n": 1}, priority=2)
            message = q.get(timeout=3)
            assert message.payload == {"n": 1}
            message.ack()


@pytest.mark.slow
def test_sentinel_url(tmp_path: Any) -> None:
    from dynoqueue.embedded import sentinel_ring

    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    with sentinel_ring(zones) as ring:
        broker = "dynoqueue" + ring.url[len("redis"):]
        assert broker.startswith("dynoqueue+sentinel://")
        _roundtrip(broker, zones=zones, local_zone=zones[1])


@pytest.mark.slow
def test_tls_url_with_an_acl_user(tmp_path: Any) -> None:
    from dynoqueue.embedded import make_tls_files
    from dynoqueue.errors import RedisServerStartError

    files = make_tls_files(tmp_path)
    try:
        server = RedisServer(tls=files, acl_users={"app": "s3cret"}).start()
    except RedisServerStartError as exc:
        if "tls" not in str(exc).lower():
            raise
        pytest.skip(f"this redis-server was built without TLS support: {str(exc)[-200:]}")
    try:
        _roundtrip(f"dynoqueues://app:s3cret@{server.host}:{server.port}/0{files.url_query()}")
    finally:
        server.stop()


def test_a_refused_login_is_not_retried(tmp_path: Any) -> None:
    """A wrong password fails at once with a ConfigurationError (kombu retries only
    connection errors), naming the cause."""
    server = RedisServer(acl_users={"app": "s3cret"}).start()
    try:
        started = time.monotonic()
        conn = kombu.Connection(f"dynoqueue://app:wrong@{server.host}:{server.port}/0")
        with pytest.raises(ConfigurationError, match="login"):
            conn.ensure_connection(max_retries=3)
        assert time.monotonic() - started < 5
    finally:
        server.stop()


def test_shard_affinity_with_zones(connect: Any) -> None:
    """Round-robin publishes reach every zone's shard; a ``local_first`` consumer gets them
    all, a ``local_only`` one only its zone's (the other zones have live consumers)."""
    zones = {"zones": ["us-1a", "us-1b", "us-1c"], "orphan_shard_grace": 0}
    producer = connect(local_zone="us-1a", **zones)
    with closing(producer.SimpleQueue("zoned")) as q:
        for n in range(6):
            q.put({"n": n})
    strict = connect(local_zone="us-1b", shard_affinity="local_only", **zones)
    with closing(strict.SimpleQueue("zoned")) as q:
        mine = [q.get(timeout=0.5) for _ in range(2)]
        with pytest.raises(q.Empty):
            q.get(timeout=0.3)
        for message in mine:
            message.ack()
    helpful = connect(local_zone="us-1b", **zones)
    with closing(helpful.SimpleQueue("zoned")) as q:
        rest = [q.get(timeout=0.5) for _ in range(4)]
        for message in rest:
            message.ack()
    assert sorted(m.payload["n"] for m in mine + rest) == list(range(6))
