"""One ``redis-server`` process on 127.0.0.1 (:class:`RedisServer`, :func:`single`): its
address, its clients and its configuration.

Running it as a process (start, wait, stop, kill) is its base,
:class:`~dynoqueue.embedded.process.ServerProcess`; picking its port is
:mod:`dynoqueue.embedded.ports`. :func:`free_port` and
:func:`with_parent` are importable from here too.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dynoqueue.embedded.binary import _parse_version, find_redis_server
from dynoqueue.embedded.ports import _LOCALHOST, free_port
from dynoqueue.embedded.process import ServerProcess, with_parent
from dynoqueue.embedded.tls import TlsFiles
from dynoqueue.errors import InvalidArgumentError

__all__ = ["RedisServer", "free_port", "single", "with_parent"]


def _requirepass(extra_args: Sequence[str]) -> str | None:
    """The value of the last ``--requirepass`` in a command line (Redis keeps the last)."""
    found = None
    for name, value in itertools.pairwise(extra_args):
        if name == "--requirepass":
            found = value
    return found


class RedisServer(ServerProcess):
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
        self._process = None
        self._last_pid = None
        self._directory = None
        self._admin = None
        self._version = None
        self._paused = False
        self._lock = threading.RLock()

    # ---- addresses ------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address the server listens on: always ``"127.0.0.1"``."""
        return _LOCALHOST

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

    # ---- configuration ------------------------------------------------------------------

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
