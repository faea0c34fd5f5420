"""Issue 10's speed rows, A/B against the pre-lifecycle code (commit ``7bb31ab``).

``python -m benchmarks.lifecycle_ab [--n 50000] [--rounds 5]`` exports the pre-lifecycle
``dynoqueue`` package from git (``git archive``) into a temporary folder, renamed
``dynoqueue_pre`` (its absolute imports rewritten), imports it beside the current package, and
on one redis-server (``dynoqueue.embedded.single``) alternates rounds of these cases, each on
``n`` due messages with ~60-byte bodies, one shard, the suite's consumer (``pop(500)`` then
``ack_many`` of the popped Message objects, i.e. with receipts on the current code):

- ``pre``: the pre-lifecycle code, plain queue (the reference);
- ``default``: the current code, default policy (delivery counting on);
- ``limits``: the current code, ``QueuePolicy(max_deliveries=5, message_ttl_ms=3_600_000)``;
- ``nack``: the current code, default policy: ``nack_many`` of the popped batches (500 each)
  with ``delay_ms=60_000`` (only the nacks timed).

The order of the cases turns by one every round, after one untimed warm-up round, so a change
in the machine's load hits them alike. Reported per case: msgs/s (median [min-max]), ratio to
``pre`` taken per round, server time per message (script ``usec`` of ``INFO commandstats``),
client CPU per message (``time.process_time``), and memory per waiting message (``INFO
memory`` ``used_memory`` growth over the fill / n). Server and client CPU times do not count
what other tenants of the machine take, so they are the load-robust figures.

``--compare COMMIT`` adds that commit's default, limits and nack cases to the same rounds (an
A/B of a change, e.g. ``--compare 764ffe9``; it is imported as ``dynoqueue_cmp``).

The suite's ``lifecycle`` section (``dynoqueue bench --sections lifecycle``) runs
:func:`measure`; without git or without the commit (an installed package) the reference reads
n/a and the other rows still run.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

#: The last commit before the message lifecycle (issue 10): the reference of the speed goals.
PRE_LIFECYCLE = "7bb31ab"
#: Package name the exported pre-lifecycle tree is imported under.
PRE_PACKAGE = "dynoqueue_pre"
#: Messages per pop, ack_many and nack_many call (as the suite's consumer).
BATCH = 500
#: Cases in table order; "pre" is the reference the others are held against.
CASES = ("pre", "default", "limits", "nack")
#: The limits of the "limits" case: max_deliveries and message TTL (1 h).
LIMITS = {"max_deliveries": 5, "message_ttl_ms": 3_600_000}
#: Delay of the nacks (ms): the nacked messages wait, so nothing is delivered again.
NACK_DELAY_MS = 60_000
_PAD = "x" * 24
_IMPORT = re.compile(r"^(\s*)(from|import)\s+dynoqueue\b", re.MULTILINE)

CASE_LABELS = {
    "pre": f"pre-lifecycle ({PRE_LIFECYCLE}), pop(500)+ack_many",
    "default": "pop(500)+ack_many, default policy",
    "limits": "pop(500)+ack_many, max_deliveries=5 + TTL 1 h",
    "nack": f"nack_many(500 popped, delay_ms={NACK_DELAY_MS:,})",
}


def label(case: str) -> str:
    """A case's row label; ``case@commit`` is that case run by another commit's code."""
    kind, _, commit = case.partition("@")
    return f"{CASE_LABELS[kind]} ({commit})" if commit else CASE_LABELS[kind]


def repo_root() -> Path:
    """The checkout this module lives in (its git work tree, if it is one)."""
    return Path(__file__).resolve().parents[1]


@contextmanager
def pre_lifecycle(commit: str = PRE_LIFECYCLE,
                  package: str = PRE_PACKAGE) -> Iterator[ModuleType | None]:
    """Import the ``dynoqueue`` package of ``commit`` as ``package`` (for an A/B of any two
    versions: the current tree's package keeps its name).

    Yields the imported package, or None when git, the repository or the commit is not there
    (e.g. the suite runs from an installed package). The temporary copy and the imported
    modules are dropped on exit.
    """
    if not commit:
        yield None
        return
    try:
        tar = subprocess.run(["git", "-C", str(repo_root()), "archive", "--format=tar", commit,
                              "dynoqueue"], capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="dynoqueue-pre-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12
                archive.extractall(folder, filter="data")
            else:  # our own git archive: paths under dynoqueue/ only
                archive.extractall(folder)
        (folder / "dynoqueue").rename(folder / package)
        for path in (folder / package).rglob("*.py"):
            text = path.read_text()
            path.write_text(_IMPORT.sub(rf"\1\2 {package}", text))
        sys.path.insert(0, str(folder))
        try:
            yield importlib.import_module(package)
        finally:
            sys.path.remove(str(folder))
            for name in [m for m in sys.modules if m.split(".")[0] == package]:
                del sys.modules[name]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _script_usec(admin: Any) -> float:
    """Microseconds the server spent in script calls since the last CONFIG RESETSTAT."""
    return sum(float(v["usec"]) for k, v in admin.info("commandstats").items()
               if k.removeprefix("cmdstat_").lower() in ("evalsha", "eval"))


def _used_memory(admin: Any) -> int:
    return int(admin.info("memory")["used_memory"])


class _Case:
    """One case's queue factory on its own client: ``queue(name)`` gives a fresh queue."""

    def __init__(self, package: ModuleType, url: str, case: str) -> None:
        import redis
        self.package, self.case = package, case.split("@")[0]
        self.client = redis.Redis.from_url(url)
        self.queues = package.RedisQueues(self.client, self.client,
                                          key_prefix=f"ab{case.replace('@', '.')}",
                                          shard_supplier=package.SingleShardSupplier("a"),
                                          unack_handler_interval_ms=0)

    def queue(self, name: str) -> Any:
        if self.case == "limits":
            return self.queues.get(name, self.package.QueuePolicy(**LIMITS))
        return self.queues.get(name)

    def messages(self, n: int, prefix: str) -> list[Any]:
        message = self.package.Message
        return [message(f"{prefix}{i}", f'{{"id":"{prefix}{i}","due":0,"pad":"{_PAD}"}}')
                for i in range(n)]

    def close(self) -> None:
        self.queues.close()
        self.client.close()


def _fill(q: Any, messages: list[Any]) -> None:
    for i in range(0, len(messages), BATCH):
        q.push(messages[i:i + BATCH])


def _one(case: _Case, admin: Any, n: int, name: str) -> dict[str, float]:
    """Fill one fresh queue with n due messages, then time the case's consumer on it."""
    admin.flushall()
    q = case.queue(name)
    messages = case.messages(n, "m")
    mem0 = _used_memory(admin)
    _fill(q, messages)
    memory = (_used_memory(admin) - mem0) / n
    del messages
    batches: list[Any] = []
    if case.case == "nack":
        while got := q.pop(BATCH):
            batches.append(got)
    admin.config_resetstat()
    cpu, started = time.process_time(), time.perf_counter()
    done = 0
    if case.case == "nack":
        for got in batches:
            done += q.nack_many(got, NACK_DELAY_MS)
    else:
        while got := q.pop(BATCH):
            done += q.ack_many(got)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    server = _script_usec(admin)
    if done != n:
        raise RuntimeError(f"{case.case}: {done} of {n} messages handled")
    return {"rate": n / elapsed, "server_us": server / n, "client_us": cpu * 1e6 / n,
            "memory": memory}


def measure(url: str, admin: Any, n: int = 50_000, rounds: int = 5,
            commit: str = PRE_LIFECYCLE,
            progress: Callable[[str], None] | None = None,
            compare: str | None = None) -> dict[str, Any]:
    """The A/B rounds (see the module docstring) on the redis-server at ``url``.

    Args:
        url: ``redis://host:port/db`` of a server that may be FLUSHALLed.
        admin: a redis-py client of that server (decode_responses=True) for INFO and FLUSHALL.
        n: due messages per case and round (a multiple of 500 is best), >= 500.
        rounds: timed rounds, after one untimed warm-up round of min(n, 5,000).
        commit: the reference commit; without it (no git, no commit) ``pre`` is left out.
        progress: called with a short label before every round.
        compare: another commit (e.g. the code before a change): its default, limits and nack
            cases run too, in the same rounds, as ``default@<commit>`` etc.

    Returns:
        ``{"cases": {case: {"rate": [msgs/s per round], "server_us": [...], "client_us":
        [...], "memory": [bytes per waiting message]}}, "ratios": {case: [rate / pre rate per
        round]}, "reference": commit or None (n/a), "n": n, "rounds": rounds, "load":
        [load averages before, after]}``.
    """
    out: dict[str, Any] = {"n": n, "rounds": rounds, "load": [os.getloadavg()[0]],
                           "cases": {}, "ratios": {}, "reference": None}
    import dynoqueue
    with pre_lifecycle(commit) as pre, \
            pre_lifecycle(compare or "", "dynoqueue_cmp") as other:
        cases = {c: _Case(dynoqueue, url, c) for c in CASES if c != "pre"}
        if compare and other is None:
            raise RuntimeError(f"cannot export commit {compare!r} with git")
        if other is not None:
            cases.update({f"{c}@{compare}": _Case(other, url, f"{c}@{compare}")
                          for c in CASES if c != "pre"})
        if pre is not None:
            cases = {"pre": _Case(pre, url, "pre"), **cases}
            out["reference"] = commit
        order = list(cases)
        out["cases"] = {c: {"rate": [], "server_us": [], "client_us": [], "memory": []}
                        for c in order}
        try:
            for r in range(-1, rounds):
                if progress is not None:
                    progress("warm-up" if r < 0 else f"round {r + 1} of {rounds}")
                turn = order[r % len(order):] + order[:r % len(order)] if r >= 0 else order
                got = {c: _one(cases[c], admin, n if r >= 0 else min(n, 5_000), f"q{r}")
                       for c in turn}
                if r < 0:
                    continue
                for c, figures in got.items():
                    for key, value in figures.items():
                        out["cases"][c][key].append(value)
                if "pre" in got:
                    for c in order:
                        out["ratios"].setdefault(c, []).append(got[c]["rate"]
                                                               / got["pre"]["rate"])
        finally:
            for case in cases.values():
                case.close()
            admin.flushall()
    out["load"].append(os.getloadavg()[0])
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(result: dict[str, Any]) -> str:
    """The result as a Markdown table plus one line of method."""
    lines = ["| case | msgs/s median [min-max] | of pre-lifecycle: median [min-max] per round "
             "| server us/msg | client CPU us/msg | bytes per waiting message |",
             "|---|---|---|---|---|---|"]
    for case, figures in result["cases"].items():
        rates, ratios = figures["rate"], result["ratios"].get(case, [])
        ratio = (f"{_median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
                 if ratios else "n/a")
        lines.append(f"| {label(case)} | {_median(rates):,.0f} [{min(rates):,.0f}-"
                     f"{max(rates):,.0f}] | {ratio} | {_median(figures['server_us']):.2f} | "
                     f"{_median(figures['client_us']):.2f} | {_median(figures['memory']):.0f} |")
    load = result["load"]
    lines.append("")
    lines.append(f"{result['rounds']} interleaved rounds of {result['n']:,} due messages per case "
                 f"(one untimed warm-up round); reference: "
                 f"{result['reference'] or 'n/a (no git history)'}; "
                 f"load average {load[0]:.1f} before, {load[-1]:.1f} after")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.lifecycle_ab``: start a server, run :func:`measure`, print."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lifecycle_ab",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000, help="messages per case and round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--commit", default=PRE_LIFECYCLE, help="the reference commit")
    parser.add_argument("--compare", metavar="COMMIT",
                        help="also run that commit's default, limits and nack cases (A/B)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    from dynoqueue.embedded import single
    started = time.perf_counter()
    with single() as server:
        admin = server.client(decode_responses=True)
        try:
            result = measure(server.url, admin, args.n, args.rounds, args.commit,
                             progress=lambda text: print(f"  {text}", file=sys.stderr),
                             compare=args.compare)
        finally:
            admin.close()
    print(table(result))
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
