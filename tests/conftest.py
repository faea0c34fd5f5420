"""Shared fixtures: real redis-server processes (never mocks), started once per test session.

A missing redis-server fails the session with the install advice of
:func:`dynoqueue.embedded.find_redis_server`; it is never a silent skip.

The contract suite: every test that uses ``make_queues`` (or ``deployment``, ``raw``) runs once
per deployment: single server, zone ring, Sentinel ring, Redis Cluster and a three-rack Dynomite
(see
``tests/deployments.py``). ``@pytest.mark.deployments("single", ...)`` narrows a test to the
deployments it applies to (e.g. the v1 key layout has no Cluster hash tags).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dynoqueue import RedisQueues, StaticShardSupplier
from dynoqueue.asyncio import RedisQueues as AsyncRedisQueues
from dynoqueue.embedded import RedisServer, ZoneRing, single, zone_ring

from .apis import API_NAMES, Bridge
from .deployments import NAMES, NEEDS_DYNOMITE, SLOW, ZONES, Deployment, DeploymentPool

__all__ = ["ZONES"]


#: The deployments this run may start: ``DYNOQUEUE_TEST_DEPLOYMENTS=single,cluster`` narrows
#: every contract test to those (tools/test-minimal.sh runs on ``single``); default: all.
ONLY = frozenset(os.environ.get("DYNOQUEUE_TEST_DEPLOYMENTS", "").replace(" ", "").split(",")
                 if os.environ.get("DYNOQUEUE_TEST_DEPLOYMENTS") else NAMES)

#: Modules whose tests run on both APIs (the public-API contract suite).
CONTRACT_MODULES = frozenset({"test_queue_api", "test_bad_input", "test_concurrency",
                              "test_state_machine", "test_lifecycle", "test_conductor",
                              "test_headers"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rpartition(".")[2]
    if "api" in metafunc.fixturenames and module in CONTRACT_MODULES:
        metafunc.parametrize("api", API_NAMES, indirect=True)
    if "deployment" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("deployments")
    names = [n for n in NAMES if (marker is None or n in marker.args) and n in ONLY]
    if metafunc.definition.get_closest_marker("one_partition") is not None:
        names = [n for n in names if n != "partitioned"]
    params = [pytest.param(n, id=n, marks=([pytest.mark.slow] if n in SLOW else [])
                           + ([NEEDS_DYNOMITE] if n == "dynomite" else []))
              for n in names]
    metafunc.parametrize("deployment", params, indirect=True, scope="session")


@pytest.fixture(scope="session")
def deployment_pool() -> Iterator[DeploymentPool]:
    pool = DeploymentPool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def deployment(request: pytest.FixtureRequest, deployment_pool: DeploymentPool) -> Deployment:
    """The deployment this run of a contract test is on (started once per session)."""
    return deployment_pool.get(request.param)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One stand-alone redis-server for the whole session; tests isolate by key prefix."""
    with single() as server:
        yield server


@pytest.fixture(scope="session")
def ring() -> Iterator[ZoneRing]:
    """A 3-zone ring: primary in us-east-1a, one replica in each of us-east-1b and us-east-1c."""
    with zone_ring(ZONES) as topology:
        yield topology


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def decode(request: pytest.FixtureRequest) -> bool:
    """Both client modes: without and with decode_responses."""
    return bool(request.param)


@pytest.fixture
def raw(deployment: Deployment) -> Iterator[Any]:
    """A plain decoding client of the deployment's primary, for looking at keys directly."""
    client = deployment.raw()
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix unique to the test, so tests never see each other's keys."""
    return f"t{uuid.uuid4().hex[:12]}"


class FakeClock:
    """An injected clock in epoch ms that only moves when a test moves it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def bridge() -> Iterator[Bridge]:
    """The event loop (in a thread) that drives the asyncio API in the contract tests."""
    loop = Bridge()
    yield loop
    loop.close()


@pytest.fixture
def api(request: pytest.FixtureRequest) -> str:
    """Which API a contract test runs on: "sync" or "async" (both, in the contract modules)."""
    return str(getattr(request, "param", "sync"))


@pytest.fixture
def make_queues(deployment: Deployment, prefix: str, api: str,
                bridge: Bridge) -> Iterator[Callable[..., RedisQueues]]:
    """Build RedisQueues on the deployment (through the builders); closed after the test.

    Defaults: shards a, b, c with a local; the reprocessor thread off (interval 0) so tests
    decide when unack processing runs. Keyword arguments override RedisQueues' arguments;
    ``decode=True`` makes the clients decode responses. On ``api == "async"`` the factory is
    ``dynoqueue.asyncio.RedisQueues`` seen through a blocking view (tests/apis.py).
    """
    built: list[RedisQueues] = []

    def build(**overrides: Any) -> RedisQueues:
        decode = bool(overrides.pop("decode", False))
        settings: dict[str, Any] = {
            "key_prefix": prefix,
            "shard_supplier": StaticShardSupplier(["a", "b", "c"], "a"),
            "unack_handler_interval_ms": 0,
        }
        settings.update(overrides)
        queues = deployment.build(decode=decode, api=api, bridge=bridge, **settings)
        built.append(queues)
        return queues

    yield build
    for queues in built:
        queues.close()


_counter = itertools.count()


def unique(name: str = "q") -> str:
    """A queue name unique within the session."""
    return f"{name}{next(_counter)}"


def eventually(check: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.02) -> bool:
    """Poll ``check`` until it is true or ``timeout_s`` passes (generous bound for replication)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Carry the fault rows a test wrote in its report, which pytest-xdist sends from the
    worker process that ran the test to the one that prints the summary."""
    outcome = yield
    from .faults import SUMMARY_ROWS

    if SUMMARY_ROWS:
        outcome.get_result().user_properties.append(("fault_rows", list(SUMMARY_ROWS)))
        SUMMARY_ROWS.clear()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Repeat the fault tests' summary rows at the end of the run (they are in the CI log)."""
    from .faults import HEADER

    rows = [row for reports in terminalreporter.stats.values() for report in reports
            for name, value in getattr(report, "user_properties", ())
            if name == "fault_rows" for row in value]
    if rows:
        terminalreporter.section("fault test summary")
        terminalreporter.write_line(HEADER)
        for row in rows:
            terminalreporter.write_line(row)


@pytest.fixture(params=["sync", "async"])
def factories(request: pytest.FixtureRequest, redis_server: RedisServer,
              bridge: Bridge) -> Iterator[Callable[..., Any]]:
    """Make factories of one key prefix on the session's redis-server, on the parametrised API
    (sync, or asyncio behind a blocking view): ``make(local="a", **options)`` gives one whose
    local zone is ``local`` of the shards a, b and c, its reprocessor off unless ``options``
    say otherwise. All are closed after the test (one the test closed already is skipped)."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    made: list[Any] = []

    def make(local: str = "a", **options: Any) -> Any:
        settings = {"key_prefix": prefix, "unack_handler_interval_ms": 0, **options}
        supplier = StaticShardSupplier(["a", "b", "c"], local)
        if request.param == "async":
            queues: Any = bridge.wrap_factory(AsyncRedisQueues.from_url(
                redis_server.url, shard_supplier=supplier, **settings))
        else:
            queues = RedisQueues.from_url(redis_server.url, shard_supplier=supplier, **settings)
        made.append(queues)
        return queues

    yield make
    for queues in made:
        try:
            queues.close()
        except Exception:  # closed by the test already
            pass
