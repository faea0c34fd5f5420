"""Free ports on 127.0.0.1 for the embedded servers: :func:`free_port`.

Picked below the kernel's ephemeral range, so that no outgoing connection can take a port
between the pick and the server's bind, and never one handed out lately in this process.
"""

from __future__ import annotations

import collections
import random
import socket
import threading
from pathlib import Path

from dynoqueue.errors import RedisServerStartError

_LOCALHOST = "127.0.0.1"
#: How many ports a fresh server (or Dynomite ring) tries when another process takes its port.
_PORT_ATTEMPTS = 5


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
            port = _random.randrange(ports.start, ports.stop - offset)
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
#: Its own generator, seeded from the OS: a test framework that seeds the global ``random``
#: (Hypothesis does, per test case) would otherwise give two test processes the same picks.
_random = random.Random()


def _free_cluster_port() -> int:
    """A free port p whose cluster bus port p + 10000 is free too."""
    return free_port(offset=10_000)
