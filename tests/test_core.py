"""The core's own logic, driven without a driver where it is pure (the doorbell listener's
back-off), and on a real redis-server where it is about the commands sent."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dynoqueue import DynoQueueError, Message, SingleShardSupplier
from dynoqueue.core import doorbell as bell
from dynoqueue.core.leases import _receipt, id_receipt_pairs
from dynoqueue.core.requests import Step
from dynoqueue.model import validate

from .conftest import unique


def test_the_doorbell_listener_backs_off_and_logs_once_per_outage(caplog) -> None:
    """A persistent unexpected error used to log a traceback 20 times a second: now each
    retry waits twice as long (up to the cap) and only the first failure is logged."""
    pauses: list[float] = []
    closed = False

    def answer(request: Any) -> Any:
        nonlocal closed
        if isinstance(request, bell.Subscribe):
            raise RuntimeError("broken subscription")
        if isinstance(request, bell.Pause):
            pauses.append(request.seconds)
            closed = len(pauses) >= 8
        return None

    step = Step(bell.listen(["c1"], lambda: closed))
    with caplog.at_level(logging.INFO, logger="dynoqueue.doorbell"):
        while step.pending:
            try:
                step.send(answer(step.request))
            except RuntimeError as exc:
                step.send(None, exc)
    first, cap = bell.RECONNECT_DELAY_S
    assert pauses[:3] == [first, first * 2, first * 4]
    assert max(pauses) == cap and pauses == sorted(pauses)
    assert len([r for r in caplog.records if "listener failed" in r.getMessage()]) == 1


def test_the_listener_counts_rings_and_wakes_all_after_resubscribing() -> None:
    rings = bell.Rings(["a", "b"])
    messages = iter([{"type": "subscribe"}, {"type": "subscribe"},
                     {"type": b"message", "channel": b"a"}, None])
    seen: list[Any] = []
    done = False

    def answer(request: Any) -> Any:
        nonlocal done
        seen.append(request)
        if isinstance(request, bell.NextMessage):
            message = next(messages, None)
            done = message is None
            return message
        if isinstance(request, bell.Rang):
            rings.bump(request.channel)
        return "handle" if isinstance(request, bell.Subscribe) else None

    step = Step(bell.listen(["a", "b"], lambda: done))
    while step.pending:
        step.send(answer(step.request))
    assert rings.counts == {"a": 2, "b": 1}  # everyone once at subscribe, then a ring on a
    assert any(isinstance(r, bell.Listening) and r.value for r in seen)
    assert isinstance(seen[-2], bell.Unsubscribe)


@pytest.mark.deployments("ring")
def test_pipelined_writes_send_no_script_exists(make_queues, deployment) -> None:
    """Writes with WAIT are pipelined; redis-py's Script objects would send SCRIPT EXISTS
    before each pipeline (one extra round trip per write). EVALSHA goes straight out."""
    primary = deployment.topology.primary.client(decode_responses=True)

    def calls(name: str) -> int:
        stats = primary.info("commandstats")
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    q = make_queues(shard_supplier=SingleShardSupplier("a"), write_quorum=1).get(unique())
    q.push([Message("warm-up")])  # loads the script once (NOSCRIPT, then EVAL)
    before = (calls("script|exists"), calls("evalsha"))
    for i in range(20):
        q.push([Message(f"m{i}")])
    assert calls("script|exists") == before[0]
    assert calls("evalsha") - before[1] == 20
    primary.close()


def test_every_script_defines_each_prelude_helper_it_mentions() -> None:
    """Scripts carry only the lib/ helpers they use (Redis makes each helper's closure again
    on every call): whatever name of lib/*.lua a script's text mentions outside comments must
    be defined in that text, or the script would fail at run time on a missing global."""
    import re
    from importlib import resources

    from dynoqueue import scripts

    prelude = "\n".join(lib.read_text(encoding="utf-8")
                        for lib in resources.files(scripts).joinpath("lib").iterdir()
                        if lib.name.endswith(".lua"))
    code = re.sub(r"--[^\n]*", "", prelude)
    names = set(re.findall(r"^local function (\w+)", code, re.M))
    for line in re.findall(r"^local ([\w, ]+?)\s*=", code, re.M):
        names.update(n.strip() for n in line.split(","))
    assert {"lifecycle_keys", "policy_of", "wait_in", "LIFE_PAD_VALUE"} <= names
    for doorbell in (True, False):
        for name in scripts.WRITE_SCRIPTS + scripts.READ_SCRIPTS:
            text = scripts.source(name, doorbell)
            # outside comments and strings, not a field (p.strict) or a table key ({strict = 0})
            mentioned = names & scripts.names_used(text, keys=False)
            for helper in mentioned:
                assert re.search(rf"^local (function )?([\w, ]*\b)?{helper}\b", text, re.M), (
                    f"{name}.lua mentions {helper} but its text does not define it")
    assert "local function lease(" not in scripts.source("push")  # push leases nothing
    assert "local function lease(" in scripts.source("claim_id")


def testid_receipt_pairs_fast_path_accepts_exactly_what_the_checks_accept() -> None:
    """The ids and receipts of acks and nacks skip the per-item checks when they are ASCII
    text: each item gives what the checks give, and what they refuse is still refused."""
    def checked(item: Any) -> list[str]:  # the checks alone, item by item
        if isinstance(item, Message):
            return [validate.message_id(item.id), _receipt(item.receipt)]
        return [validate.message_id(item), ""]

    texts: list[Any] = ["m1", "é", "\ud800", "", None, 5, b"m1", "1:2"]
    items: list[Any] = list(texts)
    for id_ in ("m1", "é"):
        for receipt in texts:
            message = Message(id_)
            message.receipt = receipt
            items.append(message)
    for item in items:
        try:
            expected: Any = checked(item)
        except DynoQueueError as exc:
            expected = type(exc)
        try:
            got: Any = id_receipt_pairs("ack_many", [item])
        except DynoQueueError as exc:
            got = type(exc)
        assert got == expected, (item, getattr(item, "receipt", None))
