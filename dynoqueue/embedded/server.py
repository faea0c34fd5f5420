"""One ``redis-server`` process on 127.0.0.1 (:class:`RedisServer`, :func:`single`).

Also the process bookkeeping every embedded server shares: the registry of live servers that an
:mod:`atexit` hook stops, ``PR_SET_PDEATHSIG`` so that servers die with this process on Linux,
free-port picking and the log tail that start-up errors quote.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import itertools
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dynoqueue.embedded.binary import _parse_version, executable_path, find_redis_server
from dynoqueue.embedded.tls import TlsFiles
from dynoqueue.errors import InvalidArgumentError, RedisServerStartError

logger = logging.getLogger("dynoqueue.embedded")

_LOCALHOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
_PORT_ATTEMPTS = 5
_LOG_TAIL_LINES = 25

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


def with_parent(command: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``command`` and the ``preexec_fn`` (or None) that make its process get SIGKILL when
    this one dies (Linux; elsewhere the command as it is).

    setpriv (util-linux) sets the signal and execs the command when it can, so the child runs
    no Python between fork and exec. With a ``preexec_fn``, CPython's after-fork work runs in
    the child, and in a process with other threads it can hang there before the exec, and
    Popen with it: seen once in a CI run, in a fault test with a dozen threads, where the
    child waited forever on a lock in a ``__del__`` of an object another thread had left
    behind. Without setpriv, the ``preexec_fn`` of :func:`_die_with_parent`. The process
    keeps its pid: setpriv execs the command in place.
    """
    setpriv = _setpriv()
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "KILL", "--", *command], None
    return list(command), _die_with_parent(os.getpid())


@functools.cache
def _setpriv() -> str | None:
    """The path of a setpriv that takes ``--pdeathsig`` (tried once per process), or None."""
    path = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if path is None:
        return None
    probe = [path, "--pdeathsig", "KILL", "--", sys.executable, "-c", ""]
    try:
        done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if done.returncode == 0 else None


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


def _listening_ports() -> range:
    """Ports for our servers to listen on: below the kernel's ephemeral range, so that no
    client connection's source port can take a port between our pick and the server's bind."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768  # Linux's default
    return range(10_000, max(low, 20_000))


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_LOCALHOST, port))
        except OSError:
            return False
    return True


def free_port(offset: int = 0) -> int:
    """A port on 127.0.0.1 that nothing listens on now, for a server about to be started.

    It lies below the kernel's ephemeral port range (``ip_local_port_range``), so no outgoing
    connection can take it before the server binds it; only another process that picks ports
    this way can, and the embedded servers move to a new port when that happens. It is none of
    the last 512 ports it handed out in this process (nor their offset ports), which may not be
    bound yet.

    Args:
        offset: with ``offset > 0``, ``port + offset`` is free too (a cluster bus port).

    Returns:
        The port number.

    Raises:
        RedisServerStartError: no free port found in 200 random tries.
    """
    ports = _listening_ports()
    with _picked_lock:
        for _ in range(200):
            port = random.randrange(ports.start, ports.stop - offset)
            wanted = (port, port + offset) if offset else (port,)
            if not any(p in _picked for p in wanted) and all(_bindable(p) for p in wanted):
                _picked.extend(wanted)
                return port
    raise RedisServerStartError(f"no free port in {ports.start}-{ports.stop - 1}")


#: The ports free_port handed out lately (with their offset ports). A topology picks the ports
#: of all its nodes before it starts any, and a port picked but not bound yet is free to the
#: next pick: a cluster node (whose port is fixed: it cannot move) found its port taken in a
#: CI run.
_picked: collections.deque[int] = collections.deque(maxlen=512)
_picked_lock = threading.Lock()


def _free_cluster_port() -> int:
    """A free port p whose cluster bus port p + 10000 is free too."""
    return free_port(offset=10_000)


def _requirepass(extra_args: Sequence[str]) -> str | None:
    """The value of the last ``--requirepass`` in a command line (Redis keeps the last)."""
    found = None
    for name, value in itertools.pairwise(extra_args):
        if name == "--requirepass":
            found = value
    return found


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


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
            (``~* &* +@all``); the ``default`` user is left as it is (open unless ``extra_args``
            has ``--requirepass``).
        username: the ACL user this module's own connections (start-up probe, :meth:`info`,
            shutdown), :meth:`client` and :attr:`url` log in as; ``None`` is the ``default``
            user. Only with ``password``. It must have ``+@all``, e.g. from ``--aclfile`` or a
            ``--user`` directive in ``extra_args``.
        password: that user's password. ``None`` (default) takes the value of
            ``--requirepass`` in ``extra_args`` if there is one, else connects without a
            password. Only says how to log in; the server's configuration (``--requirepass``,
            ``--user``, ``--aclfile``) decides what it accepts. A replica also uses its
            primary's credentials as ``--masterauth``/``--masteruser`` (a primary its own, for
            when a failover makes it a replica).

    Raises:
        InvalidArgumentError: ``port`` is out of range, ``startup_timeout_s`` is not positive,
            ``username`` is given without ``password``, or a credential is empty.
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
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise InvalidArgumentError(f"port must be in 1..65535, got {port}")
        if startup_timeout_s <= 0:
            raise InvalidArgumentError(f"startup_timeout_s must be > 0, got {startup_timeout_s}")
        if isinstance(extra_args, str):
            raise InvalidArgumentError("extra_args must be a sequence of arguments, not a string")
        if password is None:
            password = _requirepass(extra_args)
        if username is not None and password is None:
            raise InvalidArgumentError("username needs a password (pass password=...)")
        if username == "" or password == "":
            raise InvalidArgumentError("username and password must not be empty strings")
        self._fixed_port = port is not None
        self._port = port if port is not None else free_port()
        self._extra_args = list(extra_args)
        self._replicaof = replicaof
        if executable is not None and os.sep not in executable:
            executable = shutil.which(executable) or executable
        # Absolute, because the process runs with its temporary directory as working directory.
        self._executable = os.path.abspath(executable) if executable is not None else None
        self._startup_timeout_s = startup_timeout_s
        self.tls = tls
        self.acl_users = dict(acl_users or {})
        self.username = username
        self.password = password
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
        """A redis-py URL for database 0, ``redis://127.0.0.1:<port>/0`` (``rediss`` with TLS).

        With a password it carries the credentials: ``redis://[user]:password@127.0.0.1:...``
        (URL-quoted), so ``RedisQueues.from_url(server.url)`` logs in.
        """
        return f"{'rediss' if self.tls else 'redis'}://{self.userinfo}{self.host}:{self.port}/0"

    @property
    def userinfo(self) -> str:
        """The credentials as a URL's ``[user]:password@`` part (URL-quoted), ``""`` without."""
        if self.password is None:
            return ""
        user = quote(self.username, safe="") if self.username is not None else ""
        return f"{user}:{quote(self.password, safe='')}@"

    def credentials(self) -> dict[str, str]:
        """redis-py keyword arguments that log in as :attr:`username` (``{}`` without password)."""
        found: dict[str, str] = {}
        if self.username is not None:
            found["username"] = self.username
        if self.password is not None:
            found["password"] = self.password
        return found

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
                ``socket_timeout`` in seconds, ...). ``host`` and ``port`` are set here; the
                server's credentials and TLS options are defaults they may override (e.g.
                ``password=None`` for a client that does not log in).

        Returns:
            A :class:`redis.Redis` the caller owns (close it when done).
        """
        if self.tls is not None:
            redis_kwargs = {**self.tls.client_options(), **redis_kwargs}
        redis_kwargs = {**self.credentials(), **redis_kwargs}
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
        args += self._primary_auth_args()
        for name, password in self.acl_users.items():
            args += ["--user", name, "on", f">{password}", "~*", "&*", "+@all"]
        args += self._extra_args
        return args

    def _primary_auth_args(self) -> list[str]:
        # How this server logs in to its primary: as the primary's user when it is one of ours,
        # else with its own credentials (the nodes of a topology share them), which also lets a
        # primary that a failover turns into a replica sync from its successor.
        source = self._replicaof if isinstance(self._replicaof, RedisServer) else self
        if source.password is None:
            return []
        args = ["--masterauth", source.password]
        if source.username is not None:
            args += ["--masteruser", source.username]
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
                        old_port, self._port = self._port, free_port()
                        logger.info("port %d was taken, retrying on port %d", old_port, self._port)
            except BaseException:
                self.stop()  # nothing half-started survives a failed start, not even the directory
                raise
            raise AssertionError("unreachable")  # pragma: no cover

    def _spawn_and_wait(self) -> None:
        line = self._command_line()
        executable = line[0]
        if executable_path(executable) is None:  # Popen said so itself before setpriv
            raise RedisServerStartError(f"could not run {executable}: not an executable file")
        command, preexec = with_parent(line)
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
                    preexec_fn=preexec,  # None where setpriv does it (see with_parent)
                    start_new_session=True,  # Ctrl-C in a terminal must not race our clean-up
                )
            except OSError as exc:
                raise RedisServerStartError(f"could not run {executable}: {exc}") from exc
        self._process = process
        self._last_pid = process.pid
        self._paused = False
        self._version = None
        _register(self)
        # The port, not the URL: the URL may carry a password.
        logger.info("started redis-server pid %d on port %d (%s)", process.pid, self.port,
                    directory)
        deadline = time.monotonic() + self._startup_timeout_s
        # A short timeout: something else listening on the port (a clash) must not stall us.
        probe = self._internal_client(0.25, decode_responses=True)
        last_error: redis.RedisError | None = None
        try:
            while True:
                code = process.poll()
                if code is not None:
                    tail = self._log_tail()
                    self._reap()
                    if "Address already in use" in tail.split("--- dynoqueue: starting")[-1]:
                        raise _PortInUseError
                    raise RedisServerStartError(
                        f"redis-server ({executable}) on port {self.port} exited with code "
                        f"{code} during start-up.\n{tail}"
                    )
                try:
                    # Check it is our process answering, not whoever else holds the port.
                    if int(probe.info("server")["process_id"]) == process.pid:
                        return
                except redis.RedisError as exc:
                    last_error = exc
                if time.monotonic() > deadline:
                    tail = self._log_tail()
                    self._terminate()
                    raise RedisServerStartError(
                        f"redis-server ({command[0]}) on port {self.port} did not answer PING "
                        f"within {self._startup_timeout_s:g} s (last error: {last_error!r})."
                        f"\n{tail}"
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
                except redis.AuthenticationError:
                    break  # a subclass of ConnectionError, but the server is not going down
                except redis.ResponseError:
                    continue
                except (redis.RedisError, OSError):
                    return  # the connection closed: the server is going down
                return
        finally:
            client.close()
        # Refused (wrong credentials, no permission): SIGTERM shuts it down too, without the
        # 5 s wait for a SHUTDOWN that never came.
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()

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
            ``startup_timeout_s``, ``tls``, ``acl_users``, ``username``, ``password``).

    Yields:
        The running :class:`RedisServer`; it is stopped and its directory removed on exit, also
        when the block raises.

    Raises:
        RedisServerNotFoundError: no redis-server binary was found.
        RedisServerStartError: the server did not start.
    """
    with RedisServer(**kwargs) as server:
        yield server
