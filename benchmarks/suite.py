"""The benchmark suite: every workload for dynoqueue and its peers, on one embedded redis-server.

:func:`run` starts a redis-server (``dynoqueue.embedded.single``), measures the Redis limit and
each workload ``runs`` times (libraries interleaved within a run, so slow drifts in machine load
hit every library alike), and returns one JSON-ready dict of raw figures and medians. The report
(:mod:`benchmarks.report`) and the plots (:mod:`benchmarks.plots`) read only that dict.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from .common import RoundTrips, summary
from .peers import ADAPTERS, ASYNCIO, PEERS, NotSupported, load

#: Fields of a measurement that are summarised (median/min/max over the runs).
_NUMERIC = ("rate", "commands_per_msg", "round_trips_per_msg", "memory_per_msg", "p50", "p99",
            "max", "min", "idle_commands_per_s", "idle_reads_per_s", "delivered",
            "due_offset_ms", "client_cpu_ms", "server_cpu_ms", "pulls_per_msg",
            "claim_gap_avg_ms", "claim_gap_max_ms", "ratio", "a_rate", "b_rate",
            "redelivered", "lost", "claim_p50", "claim_p99", "claim_max")
#: The sections of a run: the six workloads and asyncio rows ("core"), the Worker (issue 13),
#: ``dynoqueue serve`` over HTTP (issue 14), ordering (issue 15) and the message lifecycle's
#: costs against the pre-lifecycle code (issue 10), with the redelivery after a lease ends.
SECTIONS = ["core", "worker", "serve", "ordering", "lifecycle"]
#: Handlers at once of the Worker rows: the sync Worker, the asyncio Worker.
WORKER_CONCURRENCY = {"dynoqueue": 1, "dynoqueue.asyncio": 16}
#: The package that provides each library (for versions and install hints).
DISTRIBUTIONS = {"dynoqueue": "dynoqueue", "dynoqueue.asyncio": "dynoqueue", "bullmq": "bullmq",
                 "rq": "rq",
                 "dramatiq": "dramatiq", "huey": "huey", "saq": "saq"}


@dataclass
class Options:
    """Sizes and switches of one suite run (defaults: the full run, < 10 min on 2 cores).

    Message counts are per measurement. Peers get fewer messages than dynoqueue because they
    are 10-100x slower per message; every figure is a rate or a per-message cost, so the
    counts only set how long each measurement lasts (each lasts >= ~0.5 s).
    """

    runs: int = 3
    procs: int = 4
    dq_enqueue: int = 100_000
    dq_enqueue_single: int = 10_000
    dq_consume: int = 100_000
    dq_consume_single: int = 10_000
    peer_enqueue: int = 5_000
    peer_enqueue_single: int = 2_000
    peer_consume: int = 4_000
    lateness_dense: int = 10_000
    lateness_sparse: int = 1_000
    spread_s: float = 4.0
    idle_s: float = 2.0
    lead_s: float = 1.0
    depths: list[int] = field(default_factory=lambda: [1_000, 100_000, 1_000_000])
    depth_probe: int = 20_000
    depth_probe_single: int = 1_000
    memory_n: int = 10_000
    bench_requests: int = 200_000
    async_tasks: int = 100
    #: Paired A/B steps (benchmarks.paired): block pairs per run, and messages per block one
    #: per call and in bulk.
    paired_pairs: int = 16
    paired_single: int = 250
    paired_bulk: int = 5_000
    libraries: list[str] = field(default_factory=lambda: ["dynoqueue", *PEERS])
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    worker_consume: int = 20_000
    serve_clients: int = 32
    serve_msgs: int = 1_000
    serve_poll_msgs: int = 200
    serve_poll_spread_s: float = 2.0
    ordering_depths: list[int] = field(default_factory=lambda: [1_000, 1_000_000])
    ordering_probe: int = 10_000
    ordering_groups: int = 10_000
    lifecycle_messages: int = 50_000
    lifecycle_rounds: int = 5
    #: Redelivery after a lease ends (benchmarks.redelivery, in the lifecycle section): leases
    #: that end per run, and their lease.
    redelivery_leases: int = 300
    redelivery_lease_ms: int = 200
    profile: bool = False
    quick: bool = False

    @classmethod
    def quick_mode(cls) -> Options:
        """Small sizes, one run, two consumer processes: a smoke run of ~1 min."""
        return cls(runs=1, procs=2, dq_enqueue=10_000, dq_enqueue_single=1_000,
                   dq_consume=10_000, dq_consume_single=1_000, peer_enqueue=400,
                   peer_enqueue_single=200, peer_consume=300, lateness_dense=1_000,
                   lateness_sparse=100, spread_s=1.0, idle_s=1.0, lead_s=0.5,
                   depths=[1_000, 20_000],
                   depth_probe=2_000, depth_probe_single=200, memory_n=1_000,
                   bench_requests=20_000, worker_consume=3_000, serve_msgs=200,
                   serve_poll_msgs=50, serve_poll_spread_s=1.0,
                   ordering_depths=[1_000, 20_000], ordering_probe=2_000,
                   lifecycle_messages=5_000, lifecycle_rounds=1, redelivery_leases=100,
                   paired_pairs=4,
                   paired_single=50, paired_bulk=1_000, quick=True)


@dataclass
class Step:
    """One unit of work for the progress display."""

    label: str
    fn: Callable[[], None]


def reply_parser() -> str:
    """Which reply parser redis-py uses here: ``hiredis <version>`` (the C parser users of
    the ``hiredis`` extra get) or ``pure Python`` (every client-side figure is then slower)."""
    from redis.utils import HIREDIS_AVAILABLE

    if not HIREDIS_AVAILABLE:
        return "pure Python (install the hiredis extra for the C parser)"
    return f"hiredis {importlib.metadata.version('hiredis')}"


def _versions(names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(DISTRIBUTIONS[name])
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _available(name: str) -> str | None:
    """None when the library's adapter imports, else the reason it does not."""
    try:
        load(name)
    except ImportError as exc:
        return f"not installed ({exc.name or exc}); pip install -e '.[bench]'"
    return None


def _record(bucket: list[dict[str, Any]], fn: Callable[[], dict[str, Any]]) -> None:
    try:
        bucket.append(fn())
    except NotSupported as exc:
        bucket.append({"na": str(exc)})
    except Exception as exc:  # one failing measurement must not sink the whole run
        bucket.append({"error": f"{type(exc).__name__}: {exc}".strip()[:500],
                       "trace": traceback.format_exc(limit=4)})


def _summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median/min/max of every numeric field over the runs that succeeded."""
    ok = [r for r in results if "na" not in r and "error" not in r]
    if not ok:
        first = results[0] if results else {"error": "not run"}
        return {k: first[k] for k in ("na", "error") if k in first}
    out: dict[str, Any] = {}
    for key in _NUMERIC:
        values = [float(r[key]) for r in ok if key in r]
        if values:
            out[key] = summary(values)
    for key in ("n", "procs", "tasks", "spread_s", "commands", "idle_commands", "clients"):
        if key in ok[-1]:
            out[key] = ok[-1][key]
    if "samples" in ok[0]:
        out["samples"] = [s for r in ok for s in r["samples"]]
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        out["errors"] = errors
    return out


def asyncio_names(opts: Options) -> list[str]:
    """The asyncio APIs a run measures: dynoqueue.asyncio (with dynoqueue), bullmq, saq."""
    return [n for n in ASYNCIO if n in opts.libraries
            or (n == "dynoqueue.asyncio" and "dynoqueue" in opts.libraries)]


def plan(opts: Options, server: Any) -> tuple[list[Step], dict[str, Any]]:
    """The steps of a run and the raw-results structure they fill in.

    With dynoqueue among the libraries, each of its enqueue and dequeue steps is followed by
    the same step through dynoqueue.asyncio (so the two APIs are measured back to back), plus
    one-per-call enqueues from ``opts.async_tasks`` concurrent tasks; bullmq and saq get that
    concurrent enqueue too (row ``mode`` "concurrent").

    Returns:
        ``(steps, raw)``: run the steps in order; ``raw`` then holds lists of per-run dicts
        under ``raw[workload][row][mode]``.
    """
    from . import limits, workloads

    raw: dict[str, Any] = {"enqueue": {}, "consume": {}, "lateness": {}, "memory": {},
                           "limits": {}, "worker": {}, "serve": {}, "paired": {}}
    steps: list[Step] = []
    asyncio_libs = asyncio_names(opts)
    missing = {name: _available(name) for name in [*opts.libraries, *asyncio_libs]}

    def bucket(workload: str, row: str, mode: str) -> list[dict[str, Any]]:
        return raw[workload].setdefault(row, {}).setdefault(mode, [])

    def add(label: str, workload: str, row: str, mode: str,
            fn: Callable[[], dict[str, Any]], lib: str) -> None:
        target = bucket(workload, row, mode)
        if missing.get(lib):
            if not target:
                target.append({"na": missing[lib]})
            return
        steps.append(Step(label, lambda: _record(target, fn)))

    bench_rates: list[dict[str, float]] = []
    raw["limits"]["redis_benchmark"] = bench_rates
    raw_python: list[dict[str, float]] = []
    raw["limits"]["raw_python"] = raw_python
    server_lua: list[dict[str, float]] = []
    raw["limits"]["server_lua"] = server_lua

    core = "core" in opts.sections
    for run in range(1, opts.runs + 1 if core else 1):
        tag = f"run {run}/{opts.runs}"
        steps.append(Step(f"{tag} Redis limit (redis-benchmark)", lambda: bench_rates.append(
            limits.redis_benchmark(server.port, opts.bench_requests))))
        steps.append(Step(f"{tag} Redis limit (raw redis-py)", lambda: raw_python.append(
            limits.raw_python(server.admin, opts.dq_enqueue))))
        steps.append(Step(f"{tag} Redis limit (server-side Lua)", lambda: server_lua.append(
            limits.lua_limit(server.admin, opts.dq_enqueue))))
        for lib in opts.libraries:
            dq = lib == "dynoqueue"
            n_single = opts.dq_enqueue_single if dq else opts.peer_enqueue_single
            n_bulk = opts.dq_enqueue if dq else opts.peer_enqueue
            n_consume = opts.dq_consume if dq else opts.peer_consume

            # Each dynoqueue step is followed by the same step through dynoqueue.asyncio.
            apis = [lib, "dynoqueue.asyncio"] if dq else [lib]
            for name in apis:
                add(f"{tag} {name}: enqueue one per call", "enqueue", name, "single",
                    lambda name=name, n=n_single: workloads.enqueue(server, name, n, False),
                    name)
            for name in apis:
                if name in asyncio_libs:
                    add(f"{tag} {name}: enqueue one per call, {opts.async_tasks} tasks",
                        "enqueue", name, "concurrent",
                        lambda name=name, n=n_single: workloads.enqueue(
                            server, name, n, False, tasks=opts.async_tasks), name)
            for name in apis:
                add(f"{tag} {name}: enqueue in bulk", "enqueue", name, "batched",
                    lambda name=name, n=n_bulk: workloads.enqueue(server, name, n, True), name)
            for name in apis:
                add(f"{tag} {name}: dequeue+ack, 1 consumer", "consume", name, "one",
                    lambda name=name, n=n_consume: workloads.consume(server, name, n, 1), name)
            if dq:
                add(f"{tag} dynoqueue pop(1)+ack: 1 consumer", "consume", "dynoqueue pop(1)",
                    "one", lambda: workloads.consume(server, "dynoqueue",
                                                     opts.dq_consume_single, 1,
                                                     {"consume_batch": 1}), lib)
            add(f"{tag} {lib}: dequeue+ack, {opts.procs} processes", "consume", lib,
                "several",
                lambda lib=lib, n=n_consume: workloads.consume(server, lib, n, opts.procs), lib)
            add(f"{tag} {lib}: lateness {opts.lateness_sparse} msgs", "lateness", lib,
                f"{opts.lateness_sparse}",
                lambda lib=lib: workloads.lateness(server, lib, opts.lateness_sparse,
                                                   opts.spread_s, idle_s=opts.idle_s,
                                               lead_s=opts.lead_s), lib)
            if dq:
                add(f"{tag} dynoqueue: lateness {opts.lateness_dense} msgs", "lateness", lib,
                    f"{opts.lateness_dense}",
                    lambda: workloads.lateness(server, "dynoqueue", opts.lateness_dense,
                                               opts.spread_s, idle_s=opts.idle_s,
                                               lead_s=opts.lead_s), lib)

        if "dynoqueue" in opts.libraries:
            _plan_paired(opts, server, tag, add)

    _plan_sections(opts, server, raw, steps, add)
    if not core:
        return steps, raw
    for lib in opts.libraries:
        add(f"{lib}: memory per waiting message", "memory", lib, "delayed",
            lambda lib=lib: workloads.memory(server, lib, opts.memory_n), lib)
    if "dynoqueue" in opts.libraries:
        def depth() -> None:
            raw["depth"] = workloads.depth_scaling(
                server, opts.depths, opts.depth_probe, opts.depth_probe_single, opts.runs)

        steps.append(Step(f"dynoqueue: cost vs depth {', '.join(map(str, opts.depths))}",
                          depth))
    return steps, raw


def _plan_sections(opts: Options, server: Any, raw: dict[str, Any], steps: list[Step],
                   add: Callable[..., None]) -> None:
    """The steps of the Worker, serve and ordering sections (each run in turn, like core).

    Worker: the batched pop+ack consumer, the sync Worker (concurrency 1) and the asyncio
    Worker (concurrency 16) take ``worker_consume`` messages each, then each Worker's lateness
    with sparse due times. The peers' own workers are their consumers of table 2 and 3; when
    the core section does not run, the Worker section measures them itself (same buckets).
    Lifecycle: issue 10's A/B rounds (benchmarks.lifecycle_ab), then the redelivery after a
    lease ends with a consumer waiting (benchmarks.redelivery) once per run.
    """
    from . import lifecycle_ab, ordering, redelivery, serving, workloads

    if "dynoqueue" not in opts.libraries:
        return
    sparse = opts.lateness_sparse
    for run in range(1, opts.runs + 1):
        tag = f"run {run}/{opts.runs}"
        if "worker" in opts.sections:
            measure = partial(_measure, steps, raw["worker"], f"{tag} worker:")
            measure("dynoqueue pop(500)+ack_many, 1 consumer", "dynoqueue pop+ack", "consume",
                    partial(workloads.consume, server, "dynoqueue", opts.worker_consume, 1))
            for api, concurrency in WORKER_CONCURRENCY.items():
                measure(f"{api} Worker(concurrency={concurrency}), no-op handler",
                        f"{api} Worker", "consume",
                        partial(workloads.consume, server, api, opts.worker_consume, 1,
                                {"worker": concurrency}))
            for api, concurrency in WORKER_CONCURRENCY.items():
                measure(f"{api} Worker(concurrency={concurrency}), lateness {sparse} msgs",
                        f"{api} Worker", "lateness",
                        partial(workloads.lateness, server, api, sparse, opts.spread_s,
                                idle_s=opts.idle_s, lead_s=opts.lead_s,
                                options={"worker": concurrency}))
            if "core" not in opts.sections:
                for peer in [lib for lib in opts.libraries if lib != "dynoqueue"]:
                    add(f"{tag} worker: {peer}'s worker, dequeue+ack", "consume", peer, "one",
                        lambda p=peer: workloads.consume(server, p, opts.peer_consume, 1),
                        peer)
                    add(f"{tag} worker: {peer}'s worker, lateness {sparse} msgs", "lateness",
                        peer, f"{sparse}",
                        lambda p=peer: workloads.lateness(
                            server, p, sparse, opts.spread_s, idle_s=opts.idle_s,
                            lead_s=opts.lead_s), peer)
        if "serve" in opts.sections:
            trips = raw["serve"].setdefault("round_trip", [])
            polls = raw["serve"].setdefault("long_poll", [])

            def serve(trips: list[dict[str, Any]] = trips,
                      polls: list[dict[str, Any]] = polls) -> None:
                server.admin.flushall()
                try:
                    served = serving.Served(server.url)
                except Exception as exc:
                    failed = partial(_raise, exc)
                    _record(trips, failed)
                    _record(polls, failed)
                    return
                with served:
                    _record(trips, lambda: serving.round_trips(
                        served, opts.serve_clients, opts.serve_msgs))
                    _record(polls, lambda: serving.long_poll(
                        served, opts.serve_clients, opts.serve_poll_msgs,
                        opts.serve_poll_spread_s, opts.lead_s))

            steps.append(Step(f"{tag} serve: {opts.serve_clients} HTTP clients, round trips "
                              "and long polls", serve))

    if "ordering" in opts.sections:
        def order() -> None:  # a failure is reported in table 10
            _whole_section(raw, "ordering", lambda: ordering.ordering(
                server, opts.ordering_depths, opts.ordering_probe, opts.ordering_groups,
                opts.runs))

        steps.append(Step(f"ordering: plain/strict/grouped pop+ack at "
                          f"{', '.join(f'{d:,}' for d in opts.ordering_depths)} waiting "
                          f"({opts.runs} runs)", order))

    if "lifecycle" in opts.sections:
        def lifecycle() -> None:  # a failure is reported in table 11
            _whole_section(raw, "lifecycle", lambda: lifecycle_ab.measure(
                server.url, server.admin, opts.lifecycle_messages, opts.lifecycle_rounds))

        steps.append(Step(f"lifecycle: pop+ack (default policy, max_deliveries + TTL), nack "
                          f"with a delay and the pre-lifecycle code, {opts.lifecycle_messages:,}"
                          f" messages x {opts.lifecycle_rounds} rounds", lifecycle))
        redelivered = raw.setdefault("redelivery", [])

        def redeliver() -> None:  # each run's failure is reported in table 11b
            for _ in range(opts.runs):
                _record(redelivered, lambda: redelivery.measure(
                    server.url, opts.redelivery_leases, opts.redelivery_lease_ms))

        steps.append(Step(f"lifecycle: redelivery after a lease ends, "
                          f"{opts.redelivery_leases} leases of {opts.redelivery_lease_ms} ms, "
                          f"a consumer waiting ({opts.runs} runs)", redeliver))


def _plan_paired(opts: Options, server: Any, tag: str, add: Any) -> None:
    """A run's paired A/B steps (benchmarks.paired): dynoqueue's one-per-call push against each
    peer's one-per-call enqueue, and dynoqueue.asyncio's bulk push and pop+ack against the
    sync API's, in alternating blocks; the goals that compare two of them read these ratios
    (raw["paired"], row "a vs b", mode "single", "batched" or "consume")."""
    from . import paired

    for peer in opts.libraries:
        if peer != "dynoqueue":
            add(f"{tag} dynoqueue vs {peer}: one per call, paired blocks", "paired",
                f"dynoqueue vs {peer}", "single",
                lambda peer=peer: paired.paired(server, "dynoqueue", peer, batched=False,
                                                pairs=opts.paired_pairs,
                                                size=opts.paired_single),
                peer)
    if "dynoqueue.asyncio" in asyncio_names(opts):
        add(f"{tag} dynoqueue.asyncio vs dynoqueue: bulk, paired blocks", "paired",
            "dynoqueue.asyncio vs dynoqueue", "batched",
            lambda: paired.paired(server, "dynoqueue.asyncio", "dynoqueue", batched=True,
                                  pairs=opts.paired_pairs, size=opts.paired_bulk),
            "dynoqueue.asyncio")
        add(f"{tag} dynoqueue.asyncio vs dynoqueue: pop+ack, paired blocks", "paired",
            "dynoqueue.asyncio vs dynoqueue", "consume",
            lambda: paired.paired_consume(server, "dynoqueue.asyncio", "dynoqueue",
                                          pairs=opts.paired_pairs, size=opts.paired_bulk),
            "dynoqueue.asyncio")


def _whole_section(raw: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    """``raw[name] = fn()``; on an error, the error there instead (its table reports it), so
    the other sections still count."""
    try:
        raw[name] = fn()
    except Exception as exc:
        raw[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}


def _measure(steps: list[Step], section: dict[str, Any], tag: str, label: str, row: str,
             mode: str, fn: Callable[[], dict[str, Any]]) -> None:
    """Add the step "``tag`` ``label``" recording ``fn()`` into ``section[row][mode]``."""
    bucket = section.setdefault(row, {}).setdefault(mode, [])
    steps.append(Step(f"{tag} {label}", lambda: _record(bucket, fn)))


def _raise(exc: Exception) -> dict[str, Any]:
    raise exc


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    """Medians/min/max per measurement, and the limits per message mix.

    Returns:
        ``{"enqueue"|"consume"|"lateness": {row: {mode: summary}}, "limits": {...},
        "depth": {...}, "worker": {row: {mode: summary}}, "serve": {name: summary},
        "ordering": {...}, "lifecycle": {...}, "redelivery": summary}``.
    """
    from .limits import MIXES, mix_rate

    out: dict[str, Any] = {}
    for workload in ("enqueue", "consume", "lateness", "memory", "paired"):
        out[workload] = {row: {mode: _summarise(results) for mode, results in modes.items()}
                         for row, modes in raw.get(workload, {}).items()}
    bench = [r for r in raw["limits"]["redis_benchmark"] if r]
    out["limits"] = {
        "redis_benchmark": {cmd: summary([r[cmd] for r in bench]) for cmd in
                            (bench[0] if bench else {})},
        "redis_benchmark_mix": {mix: summary([mix_rate(r, mix) for r in bench])
                                for mix in MIXES} if bench else {},
        "raw_python": {mix: summary([r[mix] for r in raw["limits"]["raw_python"]])
                       for mix in MIXES},
        "server_lua": {mix: summary([r[mix] for r in raw["limits"]["server_lua"]])
                       for mix in MIXES},
    }
    out["worker"] = {row: {mode: _summarise(results) for mode, results in modes.items()}
                     for row, modes in raw.get("worker", {}).items()}
    out["serve"] = {name: _summarise(results) for name, results in raw.get("serve", {}).items()}
    if "ordering" in raw and "error" in raw["ordering"]:
        out["ordering"] = {"error": raw["ordering"]["error"], "depths": {}}
    elif "ordering" in raw:
        order = raw["ordering"]
        out["ordering"] = {
            "depths": {str(d): {k: summary(v) for k, v in kinds.items()}
                       for d, kinds in order["depths"].items()},
            **{k: order[k] for k in ("fill_s", "memory_per_msg", "groups", "probe",
                                     "server_us") if k in order},
        }
    if "lifecycle" in raw and "error" in raw["lifecycle"]:
        out["lifecycle"] = {"error": raw["lifecycle"]["error"], "cases": {}, "ratios": {}}
    elif "lifecycle" in raw:
        life = raw["lifecycle"]
        out["lifecycle"] = {
            "cases": {case: {k: summary(v) for k, v in figures.items()}
                      for case, figures in life["cases"].items()},
            "ratios": {case: summary(v) for case, v in life["ratios"].items()},
            **{k: life[k] for k in ("reference", "n", "rounds", "load")},
        }
    if raw.get("redelivery"):
        out["redelivery"] = _summarise(raw["redelivery"])
    if "depth" in raw:
        depth = raw["depth"]
        out["depth"] = {
            "depths": {str(d): {k: summary(v) for k, v in figures.items()}
                       for d, figures in depth["depths"].items()},
            "memory_per_msg": depth.get("memory_per_msg"),
        }
    return out


def profile_core(server: Any, n: int = 20_000, n_single: int = 5_000) -> str:
    """cProfile of dynoqueue in this process: a batched push, pop + ack of ``n`` messages, then
    ``n_single`` pushes of one message per call (as the enqueue workload makes them).

    Returns:
        The top functions by internal time of each part (text), for the report.
    """
    import cProfile
    import io
    import pstats

    from dynoqueue import Message

    from .common import items
    from .peers.dynoqueue_adapter import BATCH, DynoqueueAdapter

    server.admin.flushall()
    adapter = DynoqueueAdapter(server.url, queue="profile")
    batch = items(n)
    singles = items(n_single, 3_600_000, prefix="s")
    bulk, single = cProfile.Profile(), cProfile.Profile()
    try:
        bulk.enable()
        adapter.enqueue(batch, batched=True)
        got = 0
        while got < n:
            popped = adapter.q.pop(BATCH)
            adapter.q.ack_many(popped)
            got += len(popped)
        bulk.disable()
        q = adapter.q
        single.enable()
        for item in singles:
            q.push([Message(item.id, item.body, timeout=item.delay_ms())])
        single.disable()
    finally:
        adapter.q.clear()
        adapter.close()
    text = io.StringIO()
    for title, profiler in ((f"batched push, pop + ack of {n:,} messages", bulk),
                            (f"{n_single:,} pushes of one message per call", single)):
        text.write(f"== {title}\n")
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
    return text.getvalue()


def run(opts: Options, progress: Callable[[str, int, int], None] | None = None
        ) -> dict[str, Any]:
    """Run the whole suite on a fresh embedded redis-server.

    Args:
        opts: sizes and switches.
        progress: called as ``progress(label, done, total)`` before each step and at the end.

    Returns:
        The results: ``meta`` (options, machine, versions, wall time), ``libraries`` (how each
        one delays and acks), the summaries of :func:`summarise`, ``raw`` per-run figures,
        and ``profile`` (text) when asked.
    """
    from dynoqueue.embedded import single

    from .workloads import Server

    started = time.time()
    load_before = os.getloadavg()
    RoundTrips.install()
    results: dict[str, Any] = {}
    with single() as redis_server:
        admin = redis_server.client(decode_responses=True)
        server = Server(f"redis://127.0.0.1:{redis_server.port}/0", redis_server.port, admin)
        steps, raw = plan(opts, server)
        for done, step in enumerate(steps):
            if progress is not None:
                progress(step.label, done, len(steps))
            step.fn()
        if progress is not None:
            progress("done", len(steps), len(steps))
        results = summarise(raw)
        if opts.profile:
            results["profile"] = profile_core(server)
        redis_version = str(admin.info("server").get("redis_version"))
        admin.close()
    libraries = {}
    for name in opts.libraries + (["dynoqueue.asyncio"] if "dynoqueue" in opts.libraries
                                  else []):
        try:
            cls = load(name)
            libraries[name] = {k: getattr(cls, k) for k in
                               ("delayed", "ack", "single_api", "batch_api", "consumer")}
        except ImportError:
            libraries[name] = {"missing": _available(name)}
    results["libraries"] = libraries
    results["raw"] = {k: v for k, v in raw.items()}
    results["meta"] = {
        "options": asdict(opts),
        "wall_s": time.time() - started,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "python": platform.python_version(),
        "redis_server": redis_version,
        "reply_parser": reply_parser(),
        "versions": _versions([n for n in opts.libraries if n in ADAPTERS]),
        "asyncio_libraries": asyncio_names(opts),
    }
    return results
