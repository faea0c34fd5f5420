"""Issue 11 item 5: a predicate call never blocks Redis, whatever its pattern.

Lua's ``string.match`` backtracks in one C call that no script timeout or SCRIPT KILL stops:
the pattern ``.-Q`` costs O(n**2) on an n-byte payload and kept a 20 KB message's predicate
scripts running for seconds, every other client waiting. The predicate calls now read pages
and match in Python within a step budget; these tests watch Redis (a PING loop and the
slowlog) while each call runs, on both APIs.
"""

from __future__ import annotations

import threading
import time

import pytest

from dynoqueue import InvalidPatternError, Message

from .apis import API_NAMES
from .conftest import unique

PAYLOAD = "a" * 20_000
#: Longest Redis may answer nothing while a predicate call runs (a script of the old kind took
#: 1.5-2.7 s on this payload).
MAX_BLOCKED_S = 0.2
#: Generous bound on one call (the step budget stops a search after about a second of CPU).
MAX_CALL_S = 15.0


class PingWatch:
    """PINGs Redis from its own connection in a loop; ``worst_s`` is the slowest answer."""

    def __init__(self, client) -> None:
        self.client = client
        self.worst_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self.client.ping()
            self.worst_s = max(self.worst_s, time.perf_counter() - started)
            time.sleep(0.01)

    def __enter__(self) -> PingWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.mark.deployments("single")
@pytest.mark.parametrize("api", API_NAMES, indirect=True)
@pytest.mark.parametrize("call", ["pop_msg_with_predicate", "get_msg_with_predicate",
                                  "contains_predicate"])
def test_a_backtracking_pattern_does_not_block_redis(make_queues, raw, deployment, call) -> None:
    q = make_queues().get(unique())
    q.push([Message("big", PAYLOAD), Message("small", "order-7")])
    raw.slowlog_reset()
    watch_client = deployment.raw()
    try:
        with PingWatch(watch_client) as watch:
            started = time.monotonic()
            try:
                outcome: object = getattr(q, call)(".-Q")
            except InvalidPatternError as exc:
                outcome = exc
            elapsed = time.monotonic() - started
    finally:
        watch_client.close()
    assert watch.worst_s < MAX_BLOCKED_S, f"Redis did not answer for {watch.worst_s:.2f} s"
    assert elapsed < MAX_CALL_S
    # The search gives up at its step budget, saying so, rather than answering "no match".
    assert isinstance(outcome, InvalidPatternError) and "matching steps" in str(outcome)
    slow = [entry for entry in raw.slowlog_get(128)
            if entry["duration"] > MAX_BLOCKED_S * 1e6 and q.name in str(entry["command"])]
    assert slow == []
    # The same payload with a pattern that does not backtrack is found, quickly.
    started = time.monotonic()
    found = getattr(q, call)('aaaa"')
    assert time.monotonic() - started < 2.0
    assert found == {"pop_msg_with_predicate": Message("big"), "contains_predicate": True,
                     "get_msg_with_predicate": "big"}[call]
    assert q.size() == 2 - (call == "pop_msg_with_predicate")
