"""Running one server process, and the bookkeeping every embedded server shares.

:class:`ServerProcess` is the life cycle of one process in its own temporary directory
(start and wait until it answers, stop, kill, pause, resume), the base of
:class:`~dynoqueue.embedded.server.RedisServer`, which says what to run and how to talk to it.
Also: the registry of live servers that an :mod:`atexit` hook stops, ``PR_SET_PDEATHSIG`` so
that servers die with this process on Linux (:func:`with_parent`), and the log tail that
start-up errors quote.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import redis

from dynoqueue.embedded.binary import executable_path
from dynoqueue.embedded.ports import _PORT_ATTEMPTS, free_port
from dynoqueue.errors import RedisServerStartError

logger = logging.getLogger("dynoqueue.embedded")

_PR_SET_PDEATHSIG = 1
_LOG_TAIL_LINES = 25


class _Stoppable(Protocol):
    @property
    def port(self) -> int: ...

    def stop(self) -> None: ...


_live_lock = threading.Lock()
_live_servers: list[_Stoppable] = []


def _register(server: _Stoppable) -> None:
    with _live_lock:
        if server not in _live_servers:
            _live_servers.append(server)


def _unregister(server: _Stoppable) -> None:
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


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """The life cycle of one server process in its own temporary directory.

    The base of :class:`~dynoqueue.embedded.server.RedisServer`: that class sets the state
    below in its ``__init__`` and says what to run (:meth:`_command_line`) and how to reach the
    process (:meth:`_internal_client`); this one starts it, waits until it answers, and stops,
    kills, pauses and resumes it.
    """

    _port: int
    _fixed_port: bool
    _startup_timeout_s: float
    _process: subprocess.Popen[bytes] | None
    _last_pid: int | None
    _directory: Path | None
    _admin: Any
    _version: tuple[int, ...] | None
    _paused: bool
    _lock: threading.RLock

    def _command_line(self) -> list[str]:
        """Return the full command line (the subclass says what to run)."""
        raise NotImplementedError

    def _internal_client(self, socket_timeout_s: float, **redis_kwargs: Any) -> Any:
        """A client of this module's own for the process (the subclass knows how to log in)."""
        raise NotImplementedError

    @property
    def port(self) -> int:
        """The TCP port the server listens on (chosen at construction, may change on a clash)."""
        return self._port

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


    def is_running(self) -> bool:
        """Return whether the server process exists and has not exited (paused counts)."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
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
        command, process = self._spawn(line)
        self._wait_until_answering(process, line[0], command[0])

    def _spawn(self, line: list[str]) -> tuple[list[str], subprocess.Popen[bytes]]:
        """Run ``line`` (tied to this process, see :func:`with_parent`) in the directory and
        register it; returns the command run and its process."""
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
        return command, process

    def _wait_until_answering(self, process: subprocess.Popen[bytes], executable: str,
                              launcher: str) -> None:
        """Wait until ``process`` itself answers on the port (raises if it exits first, or
        does not answer in time). ``launcher`` is what was run (setpriv or the server)."""
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
                        f"redis-server ({launcher}) on port {self.port} did not answer PING "
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

    def __enter__(self) -> Self:
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
