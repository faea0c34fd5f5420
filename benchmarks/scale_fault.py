"""The drain of ``benchmarks.scale`` with replicas, and with ``--kill-primary`` a primary
SIGKILLed half-way through it.

    python -m benchmarks.scale --messages 1000000 --replicas 1 --kill-primary

Every factory writes with ``write_quorum=1``: a push that returns (*acknowledged*) is on a
replica too. The drain:

- 1% of the messages (ids divisible by 100) are pushed again just before it (a push of an
  existing id replaces it) with delays spread evenly over its expected length (the fill's, at
  least 10 s), the due time (epoch ms, read before the push) in the payload; a consumer that
  gets one more than 5 ms (clock tolerance) before it counts it *early*;
- ``procs`` consumer processes ``pop(batch, lease_ms=5000)`` and ``ack_many``, retrying any
  error after a short back-off (an ack for up to a minute; messages whose ack never applied
  come back once their lease ends). Each publishes in a shared array how many it has acked,
  how many it holds un-acked (its current batch) and whether it is inside a pop, and marks the
  ids it got in a byte map;
- the parent runs an unack pass every second and ends the drain once ``stats()`` reads nothing
  waiting and nothing leased three times in a row, half a second apart;
- with ``--kill-primary``: once half the messages are acked, the parent SIGKILLs the primary
  that holds the most partitions, reading at that instant how many messages the consumers held
  (*in flight*), waits until the cluster names its replica as the owner of its partitions
  (*failover*), then restarts the killed node, which rejoins as the new primary's replica: the
  promoted replica has none, so until then WAIT 1 cannot succeed there and every ack of its
  partitions fails (typed, ``QuorumNotReachedError``, applied on the primary all the same).

Lost = acknowledged ids never delivered. Duplicates can only be messages whose ack had not
reached the replica at the kill: those in flight (held by a consumer, ack not returned), plus
at most one batch per consumer that was inside a pop at the kill (counted too): its claim ran on
the killed primary but never reached the replica, which serves those messages again. The check
is duplicated <= in flight + procs x batch.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from dynoqueue import DynoQueueError, Message, QueuePolicy
from dynoqueue.embedded import ClusterTopology, RedisServer
from dynoqueue.model.partitions import partition_keys

from .scale import PAYLOAD, QUEUE, _factory, _start, _tenth_rates, push_acknowledged, tally

#: The drain's lease, ms: short, so that what a failover strands comes back within the run.
LEASE_MS = 5_000
#: How long a consumer retries one ack before leaving its messages to their lease, s.
ACK_RETRY_S = 60.0
#: Every this many ids, one is delayed (ids divisible by it).
DELAYED_EVERY = 100
#: Clock tolerance of the early check, ms (the due time is read before the push).
TOLERANCE_MS = 5
#: The drain ends after this many clean stats reads (nothing waiting, nothing leased) in a row.
CLEAN_READS = 3
#: With no ack for this long the parent gives up the drain (what is left is counted lost), s.
STALL_S = 300.0
#: Columns of the consumers' shared counters, one row per consumer: messages acked, messages
#: held (popped, ack not returned), 1 while a pop is under way.
ACKED, HELD, POPPING, COLUMNS = 0, 1, 2, 3


def _delay_some(q: Any, n: int, window_ms: int) -> list[int]:
    """Push ids ``m0``, ``m100``, ... again, delayed evenly over ``window_ms``, each with its
    due time (epoch ms, at most the server's) in the payload; returns those due times."""
    ids = range(0, n, DELAYED_EVERY)
    due: list[int] = []
    for first in range(0, len(ids), 500):
        now = int(time.time() * 1000)
        batch = []
        for k in range(first, min(first + 500, len(ids))):
            delay = window_ms * k // len(ids)
            head = f"due:{now + delay}:"
            batch.append(Message(f"m{ids[k]}", head + PAYLOAD[len(head):], timeout=delay))
            due.append(now + delay)
        push_acknowledged(q, batch)
    return due


def _kind(exc: BaseException) -> str:
    """An error's class name, marked when it is not one of the library's typed errors."""
    name = type(exc).__name__
    return name if isinstance(exc, DynoQueueError) else f"{name} (untyped)"


def _ack(q: Any, got: list[Message], errors: Counter[str]) -> bool:
    """``ack_many(got)``, retried through errors for up to ACK_RETRY_S; whether it returned."""
    deadline = time.monotonic() + ACK_RETRY_S
    pause = 0.05
    while True:
        try:
            q.ack_many(got)
            return True
        except Exception as exc:  # every error is counted and outlived; untyped ones reported
            errors[_kind(exc)] += 1
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(1.0, pause * 2)


def _consume(url: str, partitions: int, total: int, batch: int, seen_path: str,
             counters: Any, done: Any, go: Any, cpu: Any, slot: int) -> None:
    """Pop + ack until ``done``; mark each id got in a byte map written to ``seen_path``,
    errors and early deliveries to ``seen_path``.json; publish acked and held counts."""
    seen = bytearray(total)
    errors: Counter[str] = Counter()
    early = delayed = 0
    row = slot * COLUMNS
    with _factory(url, 1) as queues:
        q = queues.get(QUEUE, QueuePolicy(partitions=partitions))
        go.wait()
        began = time.process_time()
        while not done.is_set():
            counters[row + POPPING] = 1
            try:
                got = q.pop(batch, lease_ms=LEASE_MS)
            except Exception as exc:  # as in _ack
                got = []
                errors[_kind(exc)] += 1
                time.sleep(0.1)
            with counters.get_lock():  # the parent never sees a batch in neither column
                counters[row + POPPING] = 0
                counters[row + HELD] = len(got)
            if not got:
                done.wait(0.05)
                continue
            now_ms = time.time() * 1000
            for message in got:
                index = int(message.id[1:])
                if seen[index] < 255:
                    seen[index] += 1
                if message.payload and message.payload.startswith("due:"):
                    delayed += 1
                    early += now_ms < int(message.payload.split(":")[1]) - TOLERANCE_MS
            acked = _ack(q, got, errors)
            with counters.get_lock():
                counters[row + ACKED] += len(got) if acked else 0
                counters[row + HELD] = 0
        cpu[slot] = time.process_time() - began
    Path(seen_path).write_bytes(bytes(seen))
    Path(seen_path + ".json").write_text(json.dumps(
        {"errors": errors, "early": early, "delayed": delayed}))


class _Fault:
    """The SIGKILL of the primary that holds most of the queue's partitions, and its recovery,
    stepped from the parent's main thread (a server started from a thread gets SIGKILL when
    that thread ends: ``dynoqueue.embedded.process.with_parent``): its replica's promotion,
    then the killed node's restart as a replica of it."""

    def __init__(self, topology: ClusterTopology, q: Any, partitions: int) -> None:
        self.topology = topology
        keys = [k.message_hash for k in partition_keys(q.keys, partitions)]
        owners = [topology.owner_of(key) for key in keys]
        self.victim = max(topology.primaries, key=lambda p: sum(o is p for o in owners))
        self.replica = topology.replicas[topology.primaries.index(self.victim)][0]
        self.keys = [key for key, owner in zip(keys, owners, strict=True) if owner is self.victim]
        self.figures: dict[str, Any] = {"killed_port": self.victim.port,
                                        "replica_port": self.replica.port,
                                        "killed_partitions": len(self.keys),
                                        "promoted_s": None, "rejoined_s": None}
        self.state = "up"  # then killed, restarted, done
        self.killed = 0.0

    def kill(self) -> None:
        """SIGKILL the victim (the caller reads the counters around it)."""
        self.victim.kill()
        self.killed = time.monotonic()
        self.figures["killed_epoch_ms"] = time.time() * 1000
        self.state = "killed"

    def step(self) -> None:
        """Move the recovery on: once the cluster names the replica as the owner of the
        victim's partitions, restart the victim; once it has synced, done. A step that waits
        over two minutes gives up (that figure stays None)."""
        waited = time.monotonic() - self.killed
        if self.state == "killed" and (self._promoted() or waited > 120):
            if self._promoted():
                self.figures["promoted_s"] = waited
            self.victim.start()
            self.state = "restarted"
        elif self.state == "restarted":
            if _link(self.victim) == "up":
                self.figures["rejoined_s"] = waited
                self.state = "done"
            elif waited > 600:
                self.state = "done"

    def _promoted(self) -> bool:
        """Whether the cluster names the replica as the owner of every partition the victim
        held (or, with none, whether the replica calls itself a primary)."""
        try:
            if not self.keys:
                return bool(self.replica.info("replication").get("role") == "master")
            return all(self.topology.owner_of(key) is self.replica for key in self.keys)
        except Exception:  # no live node answers yet, redis-py's errors while it settles
            return False


def _link(server: RedisServer) -> Any:
    try:
        return server.info("replication").get("master_link_status")
    except Exception:  # not answering yet
        return None


def _oversee(n: int, counters: Any, workers: list[Any], queues: Any, q: Any,
             fault: _Fault | None, began: float) -> dict[str, Any]:
    """The parent's loop while the consumers drain: acked samples, the kill at half-way,
    unack passes, and the end check. Returns the samples, the kill's figures and the errors."""
    samples: list[tuple[float, int]] = [(began, n)]
    errors: Counter[str] = Counter()
    out: dict[str, Any] = {"samples": samples, "parent_errors": errors, "stalled": False}
    next_sample = next_unack = began + 0.2
    next_check, clean, last_acked, last_progress = began + 0.5, 0, 0, began
    while True:
        now = time.monotonic()
        acked = sum(counters[ACKED::COLUMNS])
        if fault is not None and fault.state == "up" and acked >= n // 2:
            with counters.get_lock():  # the consumers' counts at the kill's instant
                snapshot = counters[:]
                fault.kill()
            out["drained_at_kill"] = sum(snapshot[ACKED::COLUMNS])
            out["in_flight"] = sum(snapshot[HELD::COLUMNS])
            out["popping_at_kill"] = sum(snapshot[POPPING::COLUMNS])
            out["kill_s"] = fault.killed - began
        elif fault is not None and fault.state != "done":
            fault.step()
        if now >= next_sample:
            samples.append((now, max(0, n - acked)))
            next_sample = now + 0.2
        if acked != last_acked:
            last_acked, last_progress = acked, now
        elif now - last_progress > STALL_S:
            out["stalled"] = True
            return out
        if now >= next_unack:
            next_unack = now + 1.0
            try:
                q.process_unacks()
            except Exception as exc:  # counted; the next pass runs a second later
                errors[_kind(exc)] += 1
        if now >= next_check and (fault is None or fault.state == "done"):
            next_check = now + 0.5
            try:
                stats = queues.stats([QUEUE])[0]
                empty = stats.total("waiting") == 0 and stats.total("leased") == 0
                clean = clean + 1 if empty else 0
            except Exception as exc:  # as above
                errors[_kind(exc)] += 1
                clean = 0
            if clean >= CLEAN_READS:
                return out
        if not all(w.is_alive() for w in workers):
            return out  # a consumer died: what it held is counted lost or left
        # Before the kill, often: the kill's instant is half-way, not a sleep later.
        time.sleep(0.002 if fault is not None and fault.state == "up" else 0.05)


def drain(topology: ClusterTopology, queues: Any, q: Any, options: argparse.Namespace,
          fill_s: float) -> dict[str, Any]:
    """Delay 1%, drain with retrying consumers, kill a primary half-way if asked; every
    figure of the fault section (see the module docstring)."""
    n, procs, batch = options.messages, options.procs, options.batch
    kill = getattr(options, "kill_primary", False)
    window_ms = int(max(10.0, fill_s) * 1000)
    due = _delay_some(q, n, window_ms)
    fault = _Fault(topology, q, options.partitions) if kill else None
    ctx = mp.get_context("spawn")
    counters, done = ctx.Array("q", procs * COLUMNS), ctx.Event()
    with tempfile.TemporaryDirectory(prefix="dq-scale-") as tmp:
        paths = [os.path.join(tmp, f"seen-{k}") for k in range(procs)]
        workers, go, cpu = _start(_consume, [(topology.url, options.partitions, n, batch, path,
                                              counters, done) for path in paths])
        time.sleep(1.0)  # the processes have imported and connected
        began = time.monotonic()
        go.set()
        watched = _oversee(n, counters, workers, queues, q, fault, began)
        seconds = time.monotonic() - began
        done.set()
        for w in workers:
            w.join()
        out: dict[str, Any] = tally(paths, n)
        errors: Counter[str] = Counter()
        early = delayed = 0
        for path in paths:
            if os.path.exists(path + ".json"):
                got = json.loads(Path(path + ".json").read_text())
                errors.update(got["errors"])
                early += got["early"]
                delayed += got["delayed"]
    out.update({"drain_s": seconds, "drain_tenths": _tenth_rates(watched["samples"], n, False),
                "drain_client_us": sum(cpu[:]) / n * 1e6, "killed": kill,
                "delayed": len(due), "delayed_delivered": delayed, "early": early,
                "window_s": window_ms / 1000, "consumer_errors": dict(errors),
                "parent_errors": dict(watched["parent_errors"]),
                "stalled": watched["stalled"],
                "consumer_exits": [w.exitcode for w in workers]})
    if fault is not None:
        out.update(fault.figures)
        out.update({k: watched[k] for k in ("drained_at_kill", "in_flight", "popping_at_kill",
                                            "kill_s") if k in watched})
        killed_ms = fault.figures.get("killed_epoch_ms", float("inf"))
        out["delayed_after_kill"] = sum(d > killed_ms for d in due)
        out["duplicate_bound"] = out.get("in_flight", 0) + procs * batch
    return out


def _errors(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "none"


def report_lines(r: dict[str, Any]) -> list[str]:
    """The fault section of the report."""
    n = r["messages"]
    lines = [f"delayed: {r['delayed']:,} messages (ids divisible by {DELAYED_EVERY}) due over "
             f"{r['window_s']:.0f} s from the drain's start, lease {LEASE_MS / 1000:g} s"]
    if r.get("killed"):
        promoted, rejoined = r.get("promoted_s"), r.get("rejoined_s")
        drained = r.get("drained_at_kill", 0)
        lines += [
            f"kill: SIGKILL of primary :{r['killed_port']} ({r['killed_partitions']} of "
            f"{r['partitions']} partitions) at {drained:,} messages drained "
            f"({drained / n:.0%}), {r.get('kill_s', 0):.1f} s into the drain",
            "failover: its replica :{} named primary of its partitions {} after the kill; "
            "the killed node restarted, back as its replica {} after the kill".format(
                r["replica_port"], "never" if promoted is None else f"{promoted:.1f} s",
                "never" if rejoined is None else f"{rejoined:.1f} s"),
            f"in flight at the kill: {r.get('in_flight', 0):,} messages (popped, ack not "
            f"returned); {r.get('popping_at_kill', 0)} of {r['procs']} consumers inside a pop "
            f"(up to {r['batch']} messages each, whose claim may not have reached the replica)",
            f"at least once: {r['lost']:,} lost, {r['duplicated']:,} duplicated (bound "
            f"{r['duplicate_bound']:,}: in flight + {r['procs']} x {r['batch']}), "
            f"{r['early']:,} early of {r['delayed_delivered']:,} delayed deliveries "
            f"({r['delayed_after_kill']:,} delayed messages due after the kill)"]
    else:
        lines.append(f"exactly once: {r['lost']:,} lost, {r['duplicated']:,} duplicated, "
                     f"{r['early']:,} early of {r['delayed_delivered']:,} delayed deliveries")
    lines.append(f"errors outlived: consumers {_errors(r['consumer_errors'])}; parent "
                 f"{_errors(r['parent_errors'])}")
    if r["stalled"] or any(code != 0 for code in r["consumer_exits"]):
        lines.append(f"drain cut short: stalled {r['stalled']}, consumer exit codes "
                     f"{r['consumer_exits']}")
    return lines
