"""Time sources, in epoch milliseconds.

Queues take time from the Redis server (``TIME`` in the scripts) unless a ``clock`` is injected;
this is the process's own wall clock, the clock of the Dynomite profile and of the demos.
"""

from __future__ import annotations

import time


def system_clock_ms() -> int:
    """This process's wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000
