"""A real Netflix Dynomite datacenter on 127.0.0.1 (:class:`DynomiteTopology`, :func:`dynomite`).

One datacenter, one rack per availability zone, ``nodes_per_rack`` Dynomite nodes in each rack,
each node fronting its own :class:`RedisServer`. Every rack holds a full copy of the data (each
rack's nodes split the token ring between them); Dynomite replicates writes to every rack and
answers at its configured consistency level. The YAML of each node is written here (no shell
script), every port is a free one, and every process is stopped when the topology stops, at
interpreter exit, and (Linux) when this process dies.

The binary is not bundled: :func:`find_dynomite` looks for it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dynoqueue.embedded.binary import executable_path
from dynoqueue.embedded.ports import _LOCALHOST, _PORT_ATTEMPTS, free_port
from dynoqueue.embedded.process import _tail, with_parent
from dynoqueue.embedded.server import RedisServer
from dynoqueue.embedded.topology import Topology
from dynoqueue.errors import DynomiteNotFoundError, InvalidArgumentError, RedisServerStartError

logger = logging.getLogger("dynoqueue.embedded")

#: Environment variable naming the dynomite binary (a path, or a command name on ``PATH``).
ENV_DYNOMITE = "DYNOQUEUE_DYNOMITE"
#: The racks of the default topology: one per availability zone, as dyno-queues deploys.
RACKS = ("us-east-1a", "us-east-1b", "us-east-1c")
#: Dynomite's consistency levels (``read_consistency`` / ``write_consistency``).
CONSISTENCY_LEVELS = ("DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM")
_RING = 2**32  # Dynomite's token space (murmur3 32-bit)
_READY_PROBE = "__dynoqueue_dynomite_ready_{}__"

_GET_IT = (
    "Build it from github.com/Netflix/dynomite outside this checkout (autoreconf -fvi && "
    f"./configure && make) and set {ENV_DYNOMITE}=/path/to/dynomite, or put it on PATH."
)

_live_lock = threading.Lock()
_live_nodes: list[DynomiteNode] = []


@atexit.register
def _stop_all_at_exit() -> None:
    with _live_lock:
        nodes = list(reversed(_live_nodes))
    for node in nodes:
        node.stop()


def find_dynomite() -> str:
    """Return the dynomite binary the embedded topology runs.

    Looked up in this order: ``$DYNOQUEUE_DYNOMITE`` (a path or a command name; when set it must
    be usable), then a ``dynomite`` on ``PATH``. No binary ships with dynoqueue.

    Returns:
        The absolute path of an executable dynomite.

    Raises:
        DynomiteNotFoundError: none was found; the message says how to get one.
    """
    configured = os.environ.get(ENV_DYNOMITE, "").strip()
    if configured:
        found = executable_path(configured)
        if found is None:
            raise DynomiteNotFoundError(
                f"{ENV_DYNOMITE}={configured!r} is not an executable dynomite. {_GET_IT}")
        return os.path.abspath(found)
    on_path = shutil.which("dynomite")
    if on_path:
        return os.path.abspath(on_path)
    raise DynomiteNotFoundError(
        f"No dynomite binary: {ENV_DYNOMITE} is not set and none is on PATH. {_GET_IT}")


def client(host: str, port: int, **redis_kwargs: Any) -> redis.Redis:
    """A redis-py client that Dynomite accepts: RESP2 and no ``CLIENT SETINFO`` (Dynomite closes
    the connection on commands it does not know). ``redis_kwargs`` go to :class:`redis.Redis`."""
    return redis.Redis(host=host, port=port, protocol=2, driver_info=None, **redis_kwargs)


class DynomiteNode:
    """One Dynomite process in a rack, fronting its own redis-server.

    Args:
        rack: the rack (availability zone) name.
        token: the node's token on the ring, 0 <= token < 2**32.
        backend: the redis-server it fronts (started by the topology).
        executable: the dynomite binary.
        directory: where its YAML and log go.
    """

    def __init__(self, rack: str, token: int, backend: RedisServer, executable: str,
                 directory: Path) -> None:
        self.rack = rack
        self.token = token
        self.backend = backend
        self.executable = executable
        self._directory = directory
        self._process: subprocess.Popen[bytes] | None = None
        self.new_ports()

    def new_ports(self) -> None:
        """Pick new free ports (and file names) for a node that is not running."""
        self.peer_port = free_port()
        self.port = free_port()
        self.stats_port = free_port()
        self.config_path = self._directory / f"{self.rack}-{self.port}.yml"
        self.log_path = self._directory / f"{self.rack}-{self.port}.log"

    def port_was_taken(self) -> bool:
        """Whether the node's last start failed because one of its ports was in use."""
        return "Address already in use" in _tail(self.log_path)

    @property
    def host(self) -> str:
        """Always ``"127.0.0.1"``."""
        return _LOCALHOST

    @property
    def url(self) -> str:
        """The node's client address, ``redis://127.0.0.1:<port>`` (db 0 only)."""
        return f"redis://{self.host}:{self.port}"

    def seed(self, datacenter: str) -> str:
        """This node as another node's ``dyn_seeds`` entry."""
        return f"{self.host}:{self.peer_port}:{self.rack}:{datacenter}:{self.token}"

    def client(self, **redis_kwargs: Any) -> redis.Redis:
        """A new client of this node (see :func:`client`); the caller closes it."""
        return client(self.host, self.port, **redis_kwargs)

    @property
    def pid(self) -> int | None:
        """The process id of the running dynomite, None when it is not running."""
        return self._process.pid if self.is_running() and self._process is not None else None

    def is_running(self) -> bool:
        """Whether the dynomite process runs (its redis-server is not checked)."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the process (the YAML must exist) and wait until it answers PING.

        Raises:
            RedisServerStartError: it exited or did not answer within 10 s (with its log tail).
        """
        if self.is_running():
            return
        with self.log_path.open("ab") as out:
            command, preexec = with_parent(
                [self.executable, "-c", str(self.config_path), "-o", str(self.log_path),
                 "-v", "4"])
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.config_path.parent, preexec_fn=preexec, start_new_session=True)
        with _live_lock:
            _live_nodes.append(self)
        probe = self.client(socket_timeout=0.5, socket_connect_timeout=0.5,
                            retry=Retry(NoBackoff(), 0))
        deadline = time.monotonic() + 10
        try:
            while True:
                if self._process.poll() is not None:
                    raise RedisServerStartError(
                        f"dynomite {self.rack} (port {self.port}) exited with code "
                        f"{self._process.returncode}.\n{self.log_tail()}")
                with contextlib.suppress(redis.RedisError):
                    if probe.ping():
                        return
                if time.monotonic() > deadline:
                    raise RedisServerStartError(
                        f"dynomite {self.rack} (port {self.port}) did not answer PING in 10 s."
                        f"\n{self.log_tail()}")
                time.sleep(0.02)
        finally:
            probe.close()

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 5 s). Safe to call more than once."""
        process, self._process = self._process, None
        with _live_lock:
            if self in _live_nodes:
                _live_nodes.remove(self)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        process.kill()  # does nothing once it has exited
        process.wait()

    def kill(self) -> None:
        """SIGKILL the process, as a crash would; :meth:`start` brings it back on its ports."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def log_tail(self) -> str:
        """The last lines of the node's log."""
        return f"--- tail of {self.log_path}:\n{_tail(self.log_path)}"

    def set_consistency(self, read: str, write: str) -> None:
        """Change the node's consistency levels at run time (its stats port's REST call).

        Dynomite applies them to client connections made afterwards; open ones keep theirs.
        """
        for kind, level in (("read", read), ("write", write)):
            address = f"http://{self.host}:{self.stats_port}/set_consistency/{kind}/{level}"
            with urllib.request.urlopen(address, timeout=5) as reply:  # loopback, http
                reply.read()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"DynomiteNode({self.rack}, port={self.port}, token={self.token}, {state})"


class DynomiteTopology(Topology):
    """One Dynomite datacenter: racks of Dynomite nodes, each fronting its own redis-server.

    :meth:`start` writes each node's YAML (seeds: every other node), starts the redis-servers,
    then the nodes, and returns once a write through every node has reached every rack.

    Args:
        racks: rack names, one per availability zone (default ``us-east-1a/b/c``).
        nodes_per_rack: Dynomite nodes in each rack, >= 1; a rack's nodes split the token ring.
        read_consistency, write_consistency: one of :data:`CONSISTENCY_LEVELS` (default
            ``DC_QUORUM``: a reply is a majority of the racks' identical replies).
        hash_tag: set ``hash_tag: "{}"`` on every node, so keys that share a ``{...}`` part
            live on one node per rack; default: on when ``nodes_per_rack > 1`` (the queue's
            scripts touch several keys, which must then share a node).
        datacenter: the datacenter name.
        request_timeout_ms: Dynomite's ``timeout`` for a request to a peer or its redis, ms.
        executable: the dynomite binary; ``None`` uses :func:`find_dynomite`.
        redis_executable: the redis-server binary; ``None`` uses ``find_redis_server``.
        ready_timeout_s: wait for the ring to replicate, seconds.

    Raises:
        InvalidArgumentError: bad racks, node count or consistency level.
    """

    def __init__(
        self,
        racks: Sequence[str] = RACKS,
        nodes_per_rack: int = 1,
        *,
        read_consistency: str = "DC_QUORUM",
        write_consistency: str = "DC_QUORUM",
        hash_tag: bool | None = None,
        datacenter: str = "dc1",
        request_timeout_ms: int = 5000,
        executable: str | None = None,
        redis_executable: str | None = None,
        ready_timeout_s: float = 30.0,
    ) -> None:
        super().__init__()
        rack_list = list(racks)
        if isinstance(racks, str) or not rack_list or len(set(rack_list)) != len(rack_list):
            raise InvalidArgumentError(f"racks must be unique rack names, got {racks!r}")
        if any(not isinstance(r, str) or not r.isprintable() or not r.strip() or ":" in r
               for r in rack_list):
            raise InvalidArgumentError(f"rack names must be printable words, got {rack_list}")
        if not isinstance(nodes_per_rack, int) or nodes_per_rack < 1:
            raise InvalidArgumentError(f"nodes_per_rack must be an int >= 1, got "
                                       f"{nodes_per_rack!r}")
        for level in (read_consistency, write_consistency):
            if level not in CONSISTENCY_LEVELS:
                raise InvalidArgumentError(f"consistency must be one of {CONSISTENCY_LEVELS}, "
                                           f"got {level!r}")
        self.racks = rack_list
        self.nodes_per_rack = nodes_per_rack
        self.read_consistency = read_consistency
        self.write_consistency = write_consistency
        self.hash_tag = nodes_per_rack > 1 if hash_tag is None else bool(hash_tag)
        self.datacenter = datacenter
        self.request_timeout_ms = request_timeout_ms
        self._executable = executable
        self._redis_executable = redis_executable
        self._ready_timeout_s = ready_timeout_s
        self._directory: Path | None = None
        self.nodes: list[DynomiteNode] = []

    # ---- addresses ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The first rack's first node, ``redis://127.0.0.1:<port>`` (for ``dynomite=True``)."""
        return self.nodes[0].url

    def rack(self, name: str) -> list[DynomiteNode]:
        """The nodes of rack ``name``, in token order.

        Raises:
            InvalidArgumentError: no such rack.
        """
        if name not in self.racks:
            raise InvalidArgumentError(f"no rack {name!r}; racks: {self.racks}")
        return [node for node in self.nodes if node.rack == name]

    def urls(self, rack: str) -> str:
        """Every node of ``rack`` then of the other racks, as one comma-separated URL
        (``redis://h:p,h:p,...``): the Dynomite profile's fail-over list for that zone."""
        order = self.rack(rack) + [n for n in self.nodes if n.rack != rack]
        return "redis://" + ",".join(f"{n.host}:{n.port}" for n in order)

    def servers(self) -> list[RedisServer]:
        """Every node's redis-server, rack by rack."""
        return [node.backend for node in self.nodes]

    def is_running(self) -> bool:
        """Whether every redis-server and every Dynomite process runs."""
        return super().is_running() and all(node.is_running() for node in self.nodes)

    def set_consistency(self, read: str, write: str) -> None:
        """Change every node's consistency levels at run time (their REST port). Dynomite
        applies them to client connections made afterwards: build new clients.

        Raises:
            InvalidArgumentError: not one of :data:`CONSISTENCY_LEVELS`.
        """
        for level in (read, write):
            if level not in CONSISTENCY_LEVELS:
                raise InvalidArgumentError(f"consistency must be one of {CONSISTENCY_LEVELS}")
        for node in self.nodes:
            node.set_consistency(read, write)
        self.read_consistency, self.write_consistency = read, write

    # ---- life cycle -----------------------------------------------------------------------

    def _start(self) -> None:
        executable = self._executable or find_dynomite()
        self._directory = Path(tempfile.mkdtemp(prefix="dynoqueue-dynomite-"))
        step = _RING // self.nodes_per_rack
        for rack in self.racks:
            for k in range(self.nodes_per_rack):
                backend = self._add(RedisServer(executable=self._redis_executable))
                self.nodes.append(DynomiteNode(rack, k * step, backend, executable,
                                               self._directory))
        for node in self.nodes:
            node.backend.start()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            for node in self.nodes:
                node.config_path.write_text(self._yaml(node), encoding="utf-8")
            try:
                for node in self.nodes:
                    node.start()
                break
            except RedisServerStartError:
                # Another process took a port between our pick and dynomite's bind. Every
                # node's YAML names the others' peer ports, so the whole ring moves.
                if attempt == _PORT_ATTEMPTS or not any(n.port_was_taken() for n in self.nodes):
                    raise
                for node in self.nodes:
                    node.stop()
                    node.new_ports()
                logger.info("a dynomite port was taken; restarting the ring on new ports")
        self.wait_until_replicating()
        logger.info("dynomite up: %d racks x %d nodes, client ports %s (read %s, write %s)",
                    len(self.racks), self.nodes_per_rack, [n.port for n in self.nodes],
                    self.read_consistency, self.write_consistency)

    def _yaml(self, node: DynomiteNode) -> str:
        seeds = "\n".join(f"  - {other.seed(self.datacenter)}"
                          for other in self.nodes if other is not node)
        lines = [
            "dyn_o_mite:",
            f"  datacenter: {self.datacenter}",
            f"  rack: {node.rack}",
            f"  dyn_listen: {node.host}:{node.peer_port}",
            "  dyn_seeds:",
            seeds,
            f"  listen: {node.host}:{node.port}",
            "  servers:",
            f"  - {node.backend.host}:{node.backend.port}:1",
            f"  tokens: '{node.token}'",
            "  data_store: 0",
            "  secure_server_option: none",
            f"  read_consistency: {self.read_consistency}",
            f"  write_consistency: {self.write_consistency}",
            f"  timeout: {self.request_timeout_ms}",
            f"  stats_listen: {node.host}:{node.stats_port}",
        ]  # fmt: skip
        if self.hash_tag:
            lines.append('  hash_tag: "{}"')
        return "\n".join(lines) + "\n"

    def wait_until_replicating(self, timeout_s: float | None = None) -> None:
        """Return once a write through every node reaches every rack's redis-server.

        Peers connect lazily, and a node reconnects to a restarted redis-server about a second
        after it noticed the loss: writes in between never reach that rack (Dynomite has no
        hinted handoff). Call this after restarting a process to know the ring is whole again.

        Args:
            timeout_s: how long to wait, seconds; default the topology's ``ready_timeout_s``.

        Raises:
            RedisServerStartError: the ring did not replicate in time (with a node's log tail).
        """
        timeout_s = self._ready_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        for i, node in enumerate(self.nodes):
            key = _READY_PROBE.format(i)
            with node.client(socket_timeout=2.0, retry=Retry(NoBackoff(), 0)) as probe:
                while not self._everywhere(probe, key):
                    if time.monotonic() > deadline:
                        raise RedisServerStartError(
                            f"a write through dynomite {node.rack}:{node.port} did not reach "
                            f"every rack in {timeout_s:g} s.\n{node.log_tail()}")
                    time.sleep(0.05)
                probe.delete(key)

    def _everywhere(self, probe: Any, key: str) -> bool:
        with contextlib.suppress(redis.RedisError):
            probe.set(key, "1")
            return all(any(n.backend._admin_client().exists(key) for n in self.rack(rack))
                       for rack in self.racks)
        return False

    def stop(self) -> None:
        """Stop every Dynomite node, then every redis-server, and remove the directories."""
        for node in self.nodes:
            node.stop()
        super().stop()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def __repr__(self) -> str:
        return (f"DynomiteTopology({len(self.racks)} racks x {self.nodes_per_rack}, "
                f"read={self.read_consistency}, write={self.write_consistency})")


@contextlib.contextmanager
def dynomite(racks: Sequence[str] = RACKS, nodes_per_rack: int = 1,
             **kwargs: Any) -> Iterator[DynomiteTopology]:
    """Run a :class:`DynomiteTopology` (default: 3 racks, 1 node each, DC_QUORUM) for a
    ``with`` block.

    Raises:
        DynomiteNotFoundError: no dynomite binary (see :func:`find_dynomite`).
        RedisServerNotFoundError: no redis-server binary.
        RedisServerStartError: a process did not start or the ring did not replicate.
    """
    with DynomiteTopology(racks, nodes_per_rack, **kwargs) as topology:
        yield topology
