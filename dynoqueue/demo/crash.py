"""The handler of the demo's doomed Worker: ``dynoqueue worker dynoqueue.demo.crash:hold``.

The demo runs it as a real Worker process in one zone and kills it with SIGKILL while it holds
reminders. Each handler call prints the reminder it got (``id<TAB>delivery<TAB>epoch ms``) for
the demo's books, then hangs, as a consumer stuck on a dead dependency would, until the kill.
"""

from __future__ import annotations

import sys
import threading
import time

from ..model.message import Message


def hold(message: Message) -> None:
    """Report the reminder on stdout, then never return (the process is killed)."""
    sys.stdout.write(f"{message.id}\t{message.deliveries}\t{time.time_ns() // 1_000_000}\n")
    sys.stdout.flush()
    threading.Event().wait()
