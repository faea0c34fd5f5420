"""Tables, ratios and goals from the suite's results, as rich tables, Markdown and JSON.

Every table is built once as plain rows (:class:`Table`) and rendered twice: to the console with
rich and to ``results.md`` as Markdown, so the two never disagree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .peers import PEERS
from .suite import WORKER_CONCURRENCY
from .workloads import LATENESS_CHUNK

NA = "n/a"


@dataclass
class Table:
    """A titled table of strings, with notes printed under it."""

    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """The table as GitHub Markdown (title as a heading, notes as a list)."""
        lines = [f"### {self.title}", "", "| " + " | ".join(self.header) + " |",
                 "|" + "|".join("---" for _ in self.header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines += [""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def rich(self) -> Any:
        """The table as a ``rich.table.Table``."""
        from rich.table import Table as RichTable

        table = RichTable(title=self.title, title_justify="left", caption_justify="left",
                          caption="\n".join(self.notes) if self.notes else None)
        for i, name in enumerate(self.header):
            table.add_column(name, justify="left" if i == 0 else "right")
        for row in self.rows:
            table.add_row(*row)
        return table


# ------------------------------------------------------------------------------ formatting


def _num(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    if digits == 0 and abs(value) >= 1:
        return f"{value:,.0f}"
    return f"{value:,.{max(digits, 1)}f}"


def fmt(entry: dict[str, Any] | None, key: str = "rate", digits: int = 0) -> str:
    """``median [min-max]`` of a summarised figure, or "n/a: reason" / "error"."""
    if not entry:
        return NA
    if "na" in entry:
        return f"{NA} ({entry['na']})"
    if "error" in entry and key not in entry:
        return "error"
    stats = entry.get(key)
    if not stats:
        return NA
    text = _num(stats["median"], digits)
    if stats["runs"] > 1:
        text += f" [{_num(stats['min'], digits)}-{_num(stats['max'], digits)}]"
    return text


def median(entry: dict[str, Any] | None, key: str = "rate") -> float:
    """The median of a summarised figure; NaN when missing."""
    if not entry or key not in entry:
        return float("nan")
    return float(entry[key]["median"])


def ratio(a: float, b: float) -> str:
    """``a / b`` as "12.3x", or n/a."""
    if math.isnan(a) or math.isnan(b) or b == 0:
        return NA
    return f"{a / b:.2f}x" if a / b < 10 else f"{a / b:.1f}x"


def _best(values: dict[str, float]) -> tuple[str, float]:
    valid = {k: v for k, v in values.items() if not math.isnan(v)}
    if not valid:
        return NA, float("nan")
    name = max(valid, key=lambda k: valid[k])
    return name, valid[name]


# -------------------------------------------------------------------------------- figures


def key_figures(results: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers the ratios and goals are computed from.

    Returns:
        A flat dict: dynoqueue rates, the best peer (name, rate) per workload, the limits.
    """
    enq, con, late = results["enqueue"], results["consume"], results["lateness"]
    dq_e, dq_c = enq.get("dynoqueue", {}), con.get("dynoqueue", {})
    peers = [p for p in PEERS if p in enq]
    best_enqueue = _best({p: _nanmax(median(enq[p].get("batched")), median(enq[p].get("single")))
                          for p in peers})
    best_single = _best({p: median(enq[p].get("single")) for p in peers})
    best_consume = _best({p: median(con.get(p, {}).get("one")) for p in peers})
    best_several = _best({p: median(con.get(p, {}).get("several")) for p in peers})
    limits = results["limits"]
    mix = limits.get("redis_benchmark_mix", {})
    rawpy = limits.get("raw_python", {})
    lua = limits.get("server_lua", {})
    aio_e, aio_c = enq.get("dynoqueue.asyncio", {}), con.get("dynoqueue.asyncio", {})
    aio_pairs = results.get("paired", {}).get("dynoqueue.asyncio vs dynoqueue", {})
    return {
        "aio_push_batched": median(aio_e.get("batched")),
        "aio_push_single": median(aio_e.get("single")),
        "aio_push_concurrent": median(aio_e.get("concurrent")),
        "aio_consume": median(aio_c.get("one")),
        "best_peer_single": best_single,
        "dq_push_batched": median(dq_e.get("batched")),
        "dq_push_single": median(dq_e.get("single")),
        "dq_consume": median(dq_c.get("one")),
        "dq_consume_several": median(dq_c.get("several")),
        "dq_consume_single": median(con.get("dynoqueue pop(1)", {}).get("one")),
        "best_peer_enqueue": best_enqueue,
        "best_peer_consume": best_consume,
        "best_peer_several": best_several,
        "limit_push": lua.get("push", {}).get("median", float("nan")),
        "limit_pop_ack": lua.get("pop+ack", {}).get("median", float("nan")),
        "bench_push": mix.get("push", {}).get("median", float("nan")),
        "bench_pop_ack": mix.get("pop+ack", {}).get("median", float("nan")),
        "raw_push": rawpy.get("push", {}).get("median", float("nan")),
        "raw_pop_ack": rawpy.get("pop+ack", {}).get("median", float("nan")),
        "lateness": late.get("dynoqueue", {}),
        "paired_single": _paired_single(results),
        "paired_aio_batched": median(aio_pairs.get("batched"), "ratio"),
        "paired_aio_consume": median(aio_pairs.get("consume"), "ratio"),
    }


def _paired_single(results: dict[str, Any]) -> tuple[str, float]:
    """The peer whose one-per-call enqueue came closest to dynoqueue's in the paired blocks
    (the lowest median ratio dynoqueue / peer), and that ratio; (n/a, NaN) without them."""
    ratios = {row.removeprefix("dynoqueue vs "): median(modes.get("single"), "ratio")
              for row, modes in results.get("paired", {}).items()
              if row.startswith("dynoqueue vs ")}
    valid = {peer: r for peer, r in ratios.items() if not math.isnan(r)}
    if not valid:
        return NA, float("nan")
    peer = min(valid, key=lambda p: valid[p])
    return peer, valid[peer]


def _nanmax(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


# --------------------------------------------------------------------------------- tables


def _limit_row(label: str, stats: dict[str, Any] | None) -> list[str]:
    return [label, fmt({"rate": stats} if stats else None)]


def tables(results: dict[str, Any]) -> list[Table]:
    """Every table of the report, in order (workloads 1-6, ratios, goals)."""
    opts = results["meta"]["options"]
    if "core" not in opts.get("sections", ["core"]):
        return [*section_tables(results), goals_table(results)]
    k = key_figures(results)
    out: list[Table] = [_enqueue_table(results, k)]
    paired = _paired_table(results)
    if paired is not None:
        out.append(paired)
    out += [_dequeue_table(results, k), _lateness_table(results)]
    depth = _depth_table(results)
    if depth is not None:
        out.append(depth)
    out += [_memory_table(results), _commands_table(results)]
    asyncio_table = _asyncio_table(results, k)
    if asyncio_table is not None:
        out.append(asyncio_table)
    out += section_tables(results)
    out.append(goals_table(results))
    return out


def _consumer_rows(libs: list[str]) -> list[str]:
    """The libraries of the dequeue tables, with dynoqueue's pop(1) row after dynoqueue."""
    return [*libs[:1], "dynoqueue pop(1)", *libs[1:]] if "dynoqueue" in libs else libs


def _enqueue_table(results: dict[str, Any], k: dict[str, Any]) -> Table:
    opts = results["meta"]["options"]
    enq, limits = results["enqueue"], results["limits"]
    mix = limits.get("redis_benchmark_mix", {})
    rawpy = limits.get("raw_python", {})
    lua = limits.get("server_lua", {})
    t = Table("1. Enqueue, messages delayed by 1 h (msgs/s)",
              ["library", "one per call", "bulk", "bulk API"])
    for lib in opts["libraries"]:
        t.rows.append([lib, fmt(enq.get(lib, {}).get("single")),
                       fmt(enq.get(lib, {}).get("batched")),
                       results["libraries"].get(lib, {}).get("batch_api", "") or NA])
    t.rows.append(["Redis limit: HSET+ZADD inside Lua", "", fmt({"rate": lua.get("push")}),
                   "server only: 500 msgs per call"])
    t.rows.append(["Redis limit: HSET+ZADD one by one", "",
                   fmt({"rate": mix["push"]} if mix else None),
                   "redis-benchmark -P 64, 1 connection"])
    t.rows.append(["raw redis-py pipeline HSET+ZADD", "", fmt({"rate": rawpy.get("push")}),
                   "500 msgs per round trip"])
    t.notes = [f"median of {opts['runs']} run(s) [min-max]; dynoqueue {opts['dq_enqueue']:,} msgs "
               f"bulk / {opts['dq_enqueue_single']:,} one per call, peers "
               f"{opts['peer_enqueue']:,} / {opts['peer_enqueue_single']:,}",
               f"dynoqueue bulk = {ratio(k['dq_push_batched'], k['best_peer_enqueue'][1])} "
               f"the best peer ({k['best_peer_enqueue'][0]}), "
               f"{ratio(k['dq_push_batched'], k['limit_push'])} of the Redis limit (Lua), "
               f"{ratio(k['dq_push_batched'], k['bench_push'])} of redis-benchmark, "
               f"{ratio(k['dq_push_batched'], k['raw_push'])} of raw redis-py; dynoqueue one "
               f"per call = {ratio(k['dq_push_single'], k['best_peer_single'][1])} the best "
               f"peer's one per call ({k['best_peer_single'][0]})"]
    return t


def _dequeue_table(results: dict[str, Any], k: dict[str, Any]) -> Table:
    opts = results["meta"]["options"]
    con, limits = results["consume"], results["limits"]
    mix = limits.get("redis_benchmark_mix", {})
    rawpy = limits.get("raw_python", {})
    lua = limits.get("server_lua", {})
    t = Table("2. Dequeue + ack of due messages (msgs/s)",
              ["library", "1 consumer process", f"{opts['procs']} consumer processes",
               "consumer"])
    for lib in _consumer_rows(opts["libraries"]):
        info = results["libraries"].get(lib, {})
        consumer = info.get("consumer", "") if lib != "dynoqueue pop(1)" else \
            "pop(1) + ack(id): one message per call"
        several = con.get(lib, {}).get("several")
        t.rows.append([lib, fmt(con.get(lib, {}).get("one")),
                       fmt(several) if several or lib != "dynoqueue pop(1)" else "-", consumer])
    t.rows.append(["Redis limit: HGET+ZREM+ZADD+ZREM+HDEL inside Lua",
                   fmt({"rate": lua.get("pop+ack")}), "", "server only: 500 msgs per call"])
    t.rows.append(["Redis limit: the same one by one",
                   fmt({"rate": mix["pop+ack"]} if mix else None), "",
                   "redis-benchmark -P 64, 1 connection"])
    t.rows.append(["raw redis-py pipeline, same commands", fmt({"rate": rawpy.get("pop+ack")}),
                   "", "500 msgs per round trip, not atomic"])
    t.notes = [f"dynoqueue {opts['dq_consume']:,} msgs (pop(1): {opts['dq_consume_single']:,}),"
               f" peers {opts['peer_consume']:,}; timed from releasing the ready consumers to "
               "the last ack",
               f"dynoqueue 1 consumer = {ratio(k['dq_consume'], k['best_peer_consume'][1])} the "
               f"best peer ({k['best_peer_consume'][0]}), "
               f"{ratio(k['dq_consume'], k['limit_pop_ack'])} of the Redis limit (Lua), "
               f"{ratio(k['dq_consume'], k['bench_pop_ack'])} of redis-benchmark, "
               f"{ratio(k['dq_consume'], k['raw_pop_ack'])} of raw redis-py; "
               f"{opts['procs']} processes = "
               f"{ratio(k['dq_consume_several'], k['best_peer_several'][1])} the best peer "
               f"({k['best_peer_several'][0]})"]
    return t


def _lateness_table(results: dict[str, Any]) -> Table:
    opts = results["meta"]["options"]
    libs, late = opts["libraries"], results["lateness"]
    t = Table("3. Delivery lateness, one waiting consumer (ms after the due time)",
              ["library", "messages", "p50", "p99", "max", "earliest", "delivered",
               "idle cmds/s", "idle reads/s"])
    for lib in libs:
        for mode, entry in late.get(lib, {}).items():
            delivered = entry.get("delivered", {}).get("median") if "delivered" in entry else None
            t.rows.append([
                lib, f"{int(mode):,} over {opts['spread_s']:g} s", fmt(entry, "p50", 1),
                fmt(entry, "p99", 1), fmt(entry, "max", 1), fmt(entry, "min", 1),
                f"{delivered:,.0f}/{int(mode):,}" if delivered is not None else NA,
                fmt(entry, "idle_commands_per_s", 1), fmt(entry, "idle_reads_per_s", 1)])
    t.notes = ["lateness = receive time in the consumer - the due time the producer asked for "
               "(negative = delivered early); idle = the waiting consumer's own cost on the "
               f"server over {opts['idle_s']:g} s with nothing due (commands incl. those inside "
               "Lua; reads = client requests)",
               f"producers send bulk calls of {LATENESS_CHUNK} messages, with due times "
               "stamped on the client (dynoqueue: due_at_ms) or each delay computed just "
               "before the call where the library takes only delays"]
    offsets = [f"{lib} {int(mode):,} msgs: {median(entry, 'due_offset_ms'):.2f} ms"
               for lib in libs for mode, entry in late.get(lib, {}).items()
               if "due_offset_ms" in entry]
    if offsets:
        t.notes.append("recorded due time - the one asked for (median; the rounding to whole "
                       "ms, included in the lateness above): " + "; ".join(offsets))
    return t


def _depth_table(results: dict[str, Any]) -> Table | None:
    opts = results["meta"]["options"]
    depth = results.get("depth")
    if not depth:
        return None
    t = Table("4. dynoqueue cost vs queue depth (msgs/s; waiting messages not yet due)",
              ["waiting", "push bulk", "pop+ack bulk", "push one", "pop(1)+ack one"])
    depths = list(depth["depths"])
    for d in depths:
        figures = depth["depths"][d]
        t.rows.append([f"{int(d):,}"] + [fmt({"rate": figures[key]}) for key in
                                          ("push", "pop+ack", "push single",
                                           "pop+ack single")])
    first, last = depth["depths"][depths[0]], depth["depths"][depths[-1]]
    t.rows.append([f"{int(depths[-1]):,} vs {int(depths[0]):,}"] + [
        ratio(last[key]["median"], first[key]["median"])
        for key in ("push", "pop+ack", "push single", "pop+ack single")])
    t.notes = [f"one queue per depth; probes of {opts['depth_probe']:,} messages in bulk "
               f"and {opts['depth_probe_single']:,} one by one, the depths taken in turn "
               "in each run; peers not measured: filling 1M jobs at their enqueue rates "
               "takes minutes each"]
    return t


def _memory_table(results: dict[str, Any]) -> Table:
    opts = results["meta"]["options"]
    depth = results.get("depth")
    t = Table("5. Memory per waiting message (INFO memory used_memory, bytes)",
              ["library", "bytes per message", "measured on"])
    for lib in opts["libraries"]:
        entry = results.get("memory", {}).get(lib, {}).get("delayed")
        t.rows.append([lib, fmt(entry, "memory_per_msg"),
                       f"{opts['memory_n']:,} msgs due in 1 h"])
    if depth and depth.get("memory_per_msg"):
        t.rows.append(["dynoqueue at depth", _num(depth["memory_per_msg"]),
                       f"{int(list(depth['depths'])[-1]):,} waiting msgs"])
    t.notes = ["~60-byte bodies; includes each library's per-job metadata"]
    return t


def _pair(entry: dict[str, Any] | None) -> str:
    if not entry or "commands_per_msg" not in entry:
        return fmt(entry)
    return (f"{median(entry, 'commands_per_msg'):.2f} / "
            f"{median(entry, 'round_trips_per_msg'):.3f}")


def _total(first: dict[str, Any] | None, second: dict[str, Any] | None) -> str:
    if not first or not second or "commands_per_msg" not in first \
            or "commands_per_msg" not in second:
        return NA
    cmds = median(first, "commands_per_msg") + median(second, "commands_per_msg")
    trips = median(first, "round_trips_per_msg") + median(second, "round_trips_per_msg")
    return f"{cmds:.2f} / {trips:.3f}"


def _commands_table(results: dict[str, Any]) -> Table:
    enq, con = results["enqueue"], results["consume"]
    t = Table("6. Redis commands / round trips per message",
              ["library", "enqueue one", "enqueue bulk", "dequeue+ack",
               "end to end (fastest)"])
    for lib in _consumer_rows(results["meta"]["options"]["libraries"]):
        consumed = con.get(lib, {}).get("one")
        if lib == "dynoqueue pop(1)":
            single = enq.get("dynoqueue", {}).get("single")
            t.rows.append([lib, _pair(single), "", _pair(consumed), _total(single, consumed)])
            continue
        single, bulk = enq.get(lib, {}).get("single"), enq.get(lib, {}).get("batched")
        fastest = bulk if bulk and "commands_per_msg" in bulk else single
        t.rows.append([lib, _pair(single), _pair(bulk), _pair(consumed),
                       _total(fastest, consumed)])
    t.notes = ["commands / round trips: commands = INFO commandstats calls (those run inside "
               "Lua scripts included) / messages; round trips = requests the client sent "
               "(each command or pipeline once) / messages",
               "dynoqueue pop(1) row: one push, one pop and one ack per message"]
    return t


def section_tables(results: dict[str, Any]) -> list[Table]:
    """Tables 8-11b: the Worker, ``dynoqueue serve``, ordering, lifecycle and redelivery (those
    that ran)."""
    out = [t for t in (_worker_table(results), _serve_table(results),
                       _ordering_table(results), _lifecycle_table(results),
                       _redelivery_table(results)) if t is not None]
    return out


def _worker_rows(results: dict[str, Any]) -> dict[str, Any]:
    """The Worker figures: ``{"baseline": rate entry, "rows": [(label, consume, lateness,
    kind)]}`` with kind "dynoqueue" or "peer"."""
    opts = results["meta"]["options"]
    worker = results.get("worker", {})
    sparse = str(opts["lateness_sparse"])
    rows: list[tuple[str, Any, Any, str]] = []
    for api, concurrency in WORKER_CONCURRENCY.items():
        entry = worker.get(f"{api} Worker", {})
        kind = "thread" if api == "dynoqueue" else "asyncio"
        rows.append((f"{api}.Worker, concurrency={concurrency} ({kind})",
                     entry.get("consume"), entry.get("lateness"), "dynoqueue"))
    for peer in [lib for lib in opts["libraries"] if lib in PEERS]:
        rows.append((peer, results["consume"].get(peer, {}).get("one"),
                     results["lateness"].get(peer, {}).get(sparse), "peer"))
    return {"baseline": worker.get("dynoqueue pop+ack", {}).get("consume"), "rows": rows}


def _worker_table(results: dict[str, Any]) -> Table | None:
    """Table 8: the Worker against the batched consumer and the peers' own workers."""
    if not results.get("worker"):
        return None
    opts = results["meta"]["options"]
    figures = _worker_rows(results)
    base = median(figures["baseline"])
    t = Table("8. Workers: no-op handler, 1 consumer process (msgs/s; lateness ms)",
              ["consumer", "dequeue+ack", "of batched pop+ack", "lateness p50", "p99",
               "idle cmds/s", "worker"])
    t.rows.append(["dynoqueue pop(500)+ack_many (batched)", fmt(figures["baseline"]), "1.00x",
                   "", "", "", "the core consumer loop of table 2"])
    for label, consume, late, kind in figures["rows"]:
        info = results["libraries"].get(label, {}).get("consumer", "") if kind == "peer" \
            else "claims for free handlers, acks in batches"
        t.rows.append([label, fmt(consume), ratio(median(consume), base),
                       fmt(late, "p50", 1), fmt(late, "p99", 1),
                       fmt(late, "idle_commands_per_s", 1), info])
    t.notes = [f"dynoqueue rows: {opts['worker_consume']:,} due messages each, timed from "
               "releasing the consumer process to the last ack; the batched row is measured "
               "right before the Workers in each run; peers' workers "
               f"{opts['peer_consume']:,} messages (their rows of tables 2 and 3 when the core "
               "section ran)",
               f"lateness: {opts['lateness_sparse']:,} messages due evenly over "
               f"{opts['spread_s']:g} s through an idle worker, as in table 3"]
    return t


def _serve_table(results: dict[str, Any]) -> Table | None:
    """Table 9: ``dynoqueue serve`` over HTTP (Camellia's protocol)."""
    serve = results.get("serve")
    if not serve:
        return None
    opts = results["meta"]["options"]
    trip, poll = serve.get("round_trip"), serve.get("long_poll")
    clients = opts["serve_clients"]
    t = Table("9. dynoqueue serve over HTTP (Camellia protocol, httpx clients)",
              ["measure", "msgs/s", "p50 ms", "p99 ms", "max ms", "client CPU ms/msg",
               "server CPU ms/msg"])
    t.rows.append([f"sendMsg + pullMsg + ackMsg, {clients} clients", fmt(trip),
                   fmt(trip, "p50", 1), fmt(trip, "p99", 1), fmt(trip, "max", 1),
                   fmt(trip, "client_cpu_ms", 2), fmt(trip, "server_cpu_ms", 2)])
    t.rows.append([f"longPollingMsg wake-up, {clients} held polls", "", fmt(poll, "p50", 1),
                   fmt(poll, "p99", 1), fmt(poll, "max", 1), "", ""])
    t.notes = [f"a real `dynoqueue serve` (uvicorn) process on loopback; {clients} asyncio "
               f"clients, one connection each; round trips: {opts['serve_msgs']:,} messages "
               "per run, latency = one send + pull + ack round; server CPU = the serve "
               f"process only (Redis not included); pullMsg calls per message "
               f"{fmt(trip, 'pulls_per_msg', 2)} (1 = no empty pull)",
               f"wake-up: {opts['serve_poll_msgs']:,} messages due evenly over "
               f"{opts['serve_poll_spread_s']:g} s; latency = arrival of the held poll's "
               "answer - the due time the server recorded (sendMsg's triggerTime); of "
               "which the server's claim (due -> leased, getMonitorData's pull gap): avg "
               f"{fmt(poll, 'claim_gap_avg_ms', 1)} ms, max {fmt(poll, 'claim_gap_max_ms', 1)} "
               "ms"]
    return t


def _ordering_table(results: dict[str, Any]) -> Table | None:
    """Table 10: pop+ack with strict priority and with ordered groups vs a plain queue."""
    order = results.get("ordering")
    if not order:
        return None
    opts = results["meta"]["options"]
    t = Table("10. Ordering: batched pop+ack with the backlog due (msgs/s)",
              ["waiting", "plain", "strict priority", "strict / plain", "groups",
               "groups / plain", "server us/msg pop+ack (plain, strict, groups)",
               "server us/msg push (plain, strict, groups)"])
    split = order.get("server_us", {})
    for depth, kinds in order["depths"].items():
        plain = kinds["plain"]["median"]
        us = split.get(depth) or split.get(int(depth)) or {}
        t.rows.append([f"{int(depth):,}", fmt({"rate": kinds["plain"]}),
                       fmt({"rate": kinds["strict"]}), ratio(kinds["strict"]["median"], plain),
                       fmt({"rate": kinds["grouped"]}),
                       ratio(kinds["grouped"]["median"], plain),
                       ", ".join(f"{us[k]['pop']:.1f}+{us[k]['ack']:.1f}" for k in
                                 ("plain", "strict", "grouped") if k in us),
                       ", ".join(f"{us[k]['push']:.1f}" for k in ("plain", "strict", "grouped")
                                 if "push" in us.get(k, {}))])
    if "error" in order:
        t.rows.append(["error", order["error"], "", "", "", "", "", ""])
    memory = order.get("memory_per_msg") or {}
    t.notes = [f"the same due backlog in three queues: plain, QueuePolicy(strict_priority=True)"
               f" (priorities 0..99), and in {order.get('groups', 0):,} ordered groups; probes "
               f"of {order.get('probe', 0):,} messages: pop(500) + ack_many timed, then as many "
               "new messages pushed untimed (the depth stays within 500); kinds in turn in "
               f"each of {opts['runs']} run(s)",
               "memory per waiting message at the largest depth: " + ", ".join(
                   f"{k} {v:,.0f} bytes" for k, v in memory.items()),
               "server us/msg: script time (INFO commandstats) per message of the pops, then "
               "of the acks, after the runs; push: of pushing as many back (not in the rates: "
               "what a producer pays)"]
    return t


def _lifecycle_table(results: dict[str, Any]) -> Table | None:
    """Table 11: the lifecycle's costs (issue 10) against the pre-lifecycle code."""
    from .lifecycle_ab import CASE_LABELS, LIMITS, PRE_LIFECYCLE

    life = results.get("lifecycle")
    if not life:
        return None
    t = Table("11. Message lifecycle: batched pop+ack and nack vs the pre-lifecycle code "
              "(msgs/s)",
              ["case", "msgs/s", "of pre-lifecycle (per round)", "server us/msg",
               "client CPU us/msg", "bytes per waiting message"])
    for case, figures in life["cases"].items():
        share = life["ratios"].get(case)
        t.rows.append([CASE_LABELS.get(case, case), fmt(figures),
                       (f"{share['median']:.2f}x [{share['min']:.2f}-{share['max']:.2f}]"
                        if share else NA),
                       fmt(figures, "server_us", 2), fmt(figures, "client_us", 2),
                       fmt(figures, "memory")])
    if "error" in life:
        t.rows.append(["error", life["error"], "", "", "", ""])
        return t
    load = life.get("load") or [float("nan")]
    reference = life.get("reference")
    t.notes = [f"{life['rounds']} interleaved round(s) of {life['n']:,} due messages (~60-byte "
               "bodies, one shard) per case, after an untimed warm-up round; the cases in turn, "
               "the order turning each round; consumer: pop(500) then ack_many of the popped "
               "messages (with their receipts); limits: QueuePolicy("
               + ", ".join(f"{k}={v:_}" for k, v in LIMITS.items()) + ")",
               f"reference: the code before the lifecycle (commit {reference}), exported with "
               "git archive and imported beside this one, on the same server"
               if reference else
               f"reference: n/a (the pre-lifecycle commit {PRE_LIFECYCLE} needs this package's "
               "git history: run from a source checkout)",
               "server us/msg: script time (INFO commandstats); client CPU: process_time of the "
               "benchmark process; bytes: used_memory growth over the fill / messages; load "
               f"average {load[0]:.1f} before, {load[-1]:.1f} after"]
    return t


def _redelivery_table(results: dict[str, Any]) -> Table | None:
    """Table 11b: how late a message whose lease ended reaches a waiting consumer."""
    from .redelivery import REPROCESSOR_MS

    entry = results.get("redelivery")
    if not entry:
        return None
    opts = results["meta"]["options"]
    lease = opts.get("redelivery_lease_ms", 200)
    t = Table("11b. Redelivery after a lease ends, a consumer waiting (ms after the lease's end)",
              ["consumer", "redelivered / leases ended", "p50", "p99", "max",
               "server claim p99"])
    n = entry.get("n")
    t.rows.append([f"pop(1, wait_ms=1000) in a loop; leases of {lease} ms",
                   f"{fmt(entry, 'redelivered')} / {n:,}" if n is not None else fmt(entry),
                   fmt(entry, "p50", 2), fmt(entry, "p99", 2), fmt(entry, "max", 2),
                   fmt(entry, "claim_p99")])
    t.notes = [f"{opts.get('redelivery_leases', 300):,} leases per run, in waves of 20: a first "
               f"consumer takes a wave one message per pop(1, lease_ms={lease}) over "
               f"{lease // 2} ms and never acks; then a second consumer (its own factory, in a "
               "thread) waits in pop(1, wait_ms) until every message came back, acking each; "
               "median of the runs [min-max]",
               "lateness = the moment the second consumer's pop returned (this process's "
               "clock, put on the server's by the offset read with TIME) - the first claim's "
               f"server time + {lease} ms (the receipt); server claim = the redelivering "
               "claim's time (its receipt) - the lease's end, whole ms",
               f"the unack reprocessor runs every {REPROCESSOR_MS:,} ms (the default), so the "
               "claims put the ended leases back: a waiting pop claims again when the next "
               "lease of its shard ends"]
    if "errors" in entry:
        t.notes.append("errors: " + "; ".join(entry["errors"]))
    return t


def _paired_table(results: dict[str, Any]) -> Table | None:
    """Table 1b: the paired A/B enqueues (benchmarks.paired), one row per pair."""
    rows = results.get("paired", {})
    if not rows:
        return None
    opts = results["meta"]["options"]
    t = Table("1b. Paired blocks: A and B alternate, ratio per block pair",
              ["A vs B", "calls", "A msgs/s", "B msgs/s", "A / B (median of pairs)"])
    for row, modes in rows.items():
        for mode, entry in modes.items():
            calls = {"single": "push one per call", "batched": "push in bulk (500 per call)",
                     "consume": "pop(500) + ack_many, in process"}.get(mode, mode)
            t.rows.append([row, calls,
                           fmt(entry, "a_rate"), fmt(entry, "b_rate"),
                           fmt(entry, "ratio", 2) + ("x" if "ratio" in entry else "")])
    t.notes = [f"{opts.get('paired_pairs', 16)} block pairs per run of "
               f"{opts.get('paired_single', 250):,} messages (one per call) or "
               f"{opts.get('paired_bulk', 5_000):,} (bulk; pop+ack: due messages pushed "
               "untimed before each block, drained by the adapter's consumer loop of table 2 "
               "in this process), A and B in turn on open connections (order A B, then B A); "
               "the ratio is taken per pair, then its median over the pairs; median of the "
               "runs [min-max]. Both sides of a pair run within seconds, so the machine's "
               "speed, which drifts over the minutes between the separate steps of tables 1, 2 "
               "and 7, is the same for both: the goals comparing two of these rates read "
               "these ratios"]
    return t


def _asyncio_table(results: dict[str, Any], k: dict[str, Any]) -> Table | None:
    """Table 7: dynoqueue.asyncio against sync dynoqueue (same run) and the asyncio peers."""
    meta = results["meta"]
    names = meta.get("asyncio_libraries") or []
    if "dynoqueue.asyncio" not in names:
        return None
    opts = meta["options"]
    tasks = opts.get("async_tasks", 100)
    enq, con = results["enqueue"], results["consume"]
    t = Table("7. asyncio APIs: dynoqueue.asyncio vs sync dynoqueue and the asyncio peers "
              "(msgs/s)",
              ["library", "enqueue one per call", f"one per call, {tasks} tasks", "bulk",
               "dequeue+ack, 1 consumer process", f"round trips / msg ({tasks} tasks)"])
    for lib in ["dynoqueue", *names]:
        e = enq.get(lib, {})
        concurrent = e.get("concurrent")
        trips = (f"{median(concurrent, 'round_trips_per_msg'):.3f}"
                 if concurrent and "round_trips_per_msg" in concurrent else
                 ("-" if lib == "dynoqueue" else fmt(concurrent)))
        t.rows.append([lib if lib != "dynoqueue" else "dynoqueue (sync API)",
                       fmt(e.get("single")),
                       fmt(concurrent) if lib != "dynoqueue" else "-",
                       fmt(e.get("batched")), fmt(con.get(lib, {}).get("one")), trips])
    t.rows.append(["dynoqueue.asyncio / sync",
                   ratio(k["aio_push_single"], k["dq_push_single"]),
                   ratio(k["aio_push_concurrent"], k["dq_push_single"]) + " of sync one per call",
                   ratio(k["aio_push_batched"], k["dq_push_batched"]),
                   ratio(k["aio_consume"], k["dq_consume"]), ""])
    aio = enq.get("dynoqueue.asyncio", {})
    for peer in names[1:]:
        pe = enq.get(peer, {})
        t.notes.append(
            f"dynoqueue.asyncio vs {peer}: one per call "
            f"{ratio(median(aio.get('single')), median(pe.get('single')))}, {tasks} tasks "
            f"{ratio(median(aio.get('concurrent')), median(pe.get('concurrent')))}, bulk "
            f"{ratio(median(aio.get('batched')), median(pe.get('batched')))}, dequeue+ack "
            f"{ratio(k['aio_consume'], median(con.get(peer, {}).get('one')))}")
    t.notes += [
        f"each dynoqueue step is followed by the same step through dynoqueue.asyncio, with the "
        f"same messages and sizes ({opts['dq_enqueue_single']:,} one per call, "
        f"{opts['dq_enqueue']:,} bulk, {opts['dq_consume']:,} consumed; peers "
        f"{opts['peer_enqueue_single']:,} / {opts['peer_enqueue']:,} / "
        f"{opts['peer_consume']:,}); one event loop per producer or consumer process",
        f"{tasks} tasks: {tasks} producer tasks on one loop, each awaiting one enqueue call "
        "per message in turn; the asyncio libraries' other columns are the measurements of "
        "tables 1 and 2",
    ]
    return t


# ---------------------------------------------------------------------------------- goals


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals for dynoqueue, each with its measured value and whether it is met.

    Returns:
        ``[{"goal": text, "measured": text, "met": bool | None}]`` (None: not measured).
    """
    out: list[dict[str, Any]] = []

    def add(goal: str, measured: str, met: bool | None) -> None:
        out.append({"goal": goal, "measured": measured, "met": met})

    if "core" not in results["meta"]["options"].get("sections", ["core"]):
        _section_goals(results, add)
        return out
    k = key_figures(results)
    _throughput_goals(k, add)
    _lateness_goals(k, add)
    _depth_goals(results, add)
    _round_trip_goals(results, add)
    _section_goals(results, add)
    _asyncio_goals(results, k, add)
    return out


#: How a goal is added: ``add(goal, measured, met)``.
_Add = Callable[[str, str, bool | None], None]


def _known(*values: float) -> bool:
    return all(not math.isnan(v) for v in values)


def _throughput_goals(k: dict[str, Any], add: _Add) -> None:
    """Bulk push and pop+ack, absolute and against the best peer; one message per call."""
    push, peer_push = k["dq_push_batched"], k["best_peer_enqueue"][1]
    add("batched push >= 50,000 msgs/s", _num(push), push >= 50_000 if _known(push) else None)
    add("batched push >= 3x the best peer's enqueue",
        f"{ratio(push, peer_push)} ({k['best_peer_enqueue'][0]} {_num(peer_push)})",
        push >= 3 * peer_push if _known(push, peer_push) else None)
    pop, peer_pop = k["dq_consume"], k["best_peer_consume"][1]
    add("pop+ack, 1 consumer, batches >= 50,000 msgs/s", _num(pop),
        pop >= 50_000 if _known(pop) else None)
    add("pop+ack >= 10x the best peer's consumer",
        f"{ratio(pop, peer_pop)} ({k['best_peer_consume'][0]} {_num(peer_pop)})",
        pop >= 10 * peer_pop if _known(pop, peer_pop) else None)
    one, peer_one = k["dq_push_single"], k["best_peer_single"][1]
    goal = "one message per call push >= 1.5x the best peer's one per call enqueue"
    separate = (f"{ratio(one, peer_one)} ({_num(one)} vs {k['best_peer_single'][0]} "
                f"{_num(peer_one)})")
    closest, paired_one = k["paired_single"]
    if _known(paired_one):  # paired blocks: the same machine for both sides (table 1b)
        add(goal, f"{paired_one:.2f}x paired vs {closest}; separate steps {separate}",
            paired_one >= 1.5)
    else:
        add(goal, separate, one >= 1.5 * peer_one if _known(one, peer_one) else None)


def _lateness_goals(k: dict[str, Any], add: _Add) -> None:
    for mode, entry in k["lateness"].items():
        p99 = median(entry, "p99")
        add(f"lateness p99 < 10 ms ({int(mode):,} msgs)", f"{_num(p99, 1)} ms",
            p99 < 10 if _known(p99) else None)
    idle = [median(e, "idle_commands_per_s") for e in k["lateness"].values()]
    idle = [v for v in idle if not math.isnan(v)]
    if idle:
        add("waiting consumer costs <= a few (5) commands/s", f"{max(idle):.1f} commands/s",
            max(idle) <= 5)


def _depth_goals(results: dict[str, Any], add: _Add) -> None:
    depth = results.get("depth")
    if depth and depth["depths"]:
        ds = list(depth["depths"])
        first, last = depth["depths"][ds[0]], depth["depths"][ds[-1]]
        for key in ("push", "pop+ack"):
            r = last[key]["median"] / first[key]["median"]
            add(f"{key} bulk at {int(ds[-1]):,} waiting within 20% of {int(ds[0]):,}",
                f"{r:.2f}x", r >= 0.8)


def _round_trip_goals(results: dict[str, Any], add: _Add) -> None:
    enq = results["enqueue"].get("dynoqueue", {})
    single = median(enq.get("single"), "round_trips_per_msg") + median(
        results["consume"].get("dynoqueue pop(1)", {}).get("one"), "round_trips_per_msg")
    add("<= 3 round trips per message one at a time (push, claim, ack)", f"{single:.2f}",
        single <= 3.05 if _known(single) else None)
    bulk = median(enq.get("batched"), "round_trips_per_msg") + median(
        results["consume"].get("dynoqueue", {}).get("one"), "round_trips_per_msg")
    add("fewer round trips per message in batches", f"{bulk:.3f}",
        bulk < 1 if _known(bulk) else None)


def _asyncio_goals(results: dict[str, Any], k: dict[str, Any], add: _Add) -> None:
    if "dynoqueue.asyncio" not in (results["meta"].get("asyncio_libraries") or []):
        return
    one = k["dq_push_single"]
    tasks = results["meta"]["options"].get("async_tasks", 100)
    conc = k["aio_push_concurrent"]
    add(f"asyncio: one per call from {tasks} tasks >= 3x sync one per call",
        f"{ratio(conc, one)} ({_num(conc)} vs {_num(one)})",
        conc >= 3 * one if _known(conc, one) else None)
    for label, a, b, paired_aio in (
            ("batched push", k["aio_push_batched"], k["dq_push_batched"],
             k["paired_aio_batched"]),
            ("pop+ack (1 consumer, batches)", k["aio_consume"], k["dq_consume"],
             k["paired_aio_consume"])):
        goal = f"asyncio: {label} within 10% of sync (>= 0.9x)"
        separate = f"{ratio(a, b)} ({_num(a)} vs {_num(b)})"
        if _known(paired_aio):  # paired blocks (table 1b)
            add(goal, f"{paired_aio:.2f}x paired; separate steps {separate}",
                paired_aio >= 0.9)
        else:
            add(goal, separate, a >= 0.9 * b if _known(a, b) else None)


def _section_goals(results: dict[str, Any], add: _Add) -> None:
    """Goals of issues 10 and 13-15 (lifecycle, Worker, serve, ordering), for the sections
    that ran."""
    if results.get("worker"):
        figures = _worker_rows(results)
        base = median(figures["baseline"])
        for (label, consume, _, _), share in zip(figures["rows"], (0.4, 0.6), strict=False):
            rate = median(consume)
            add(f"{label.split(' (')[0]}: >= {share:.0%} of batched pop+ack",
                f"{ratio(rate, base)} ({_num(rate)} vs {_num(base)})",
                rate >= share * base if not (math.isnan(rate) or math.isnan(base)) else None)
        for label, _, late, _ in figures["rows"][:2]:
            p99 = median(late, "p99")
            add(f"{label.split(' (')[0]}: lateness p99 < 5 ms (sparse)", f"{_num(p99, 1)} ms",
                p99 < 5 if not math.isnan(p99) else None)
    poll = (results.get("serve") or {}).get("long_poll")
    if poll is not None:
        p99 = median(poll, "p99")
        add("serve: long-poll wake-up p99 < 20 ms", f"{_num(p99, 1)} ms",
            p99 < 20 if not math.isnan(p99) else None)
    life = results.get("lifecycle")
    if life:
        for case, share, what in (("default", 0.9, "pop+ack, default policy (delivery counting)"),
                                  ("limits", 0.8, "pop+ack, max_deliveries + TTL")):
            r = median({"rate": life["ratios"][case]}) if case in life["ratios"] else float("nan")
            add(f"lifecycle: {what} >= {share:.0%} of the pre-lifecycle rate",
                f"{r:.2f}x" if not math.isnan(r) else f"{NA} (no reference)",
                r >= share if not math.isnan(r) else None)
        nack = median(life["cases"].get("nack"))
        add("lifecycle: nack_many with a delay >= 50,000 msgs/s", _num(nack),
            nack >= 50_000 if not math.isnan(nack) else None)
    again = results.get("redelivery")
    if again:
        from .redelivery import GOAL_P99_MS

        p99 = median(again, "p99")
        lost = again["lost"]["max"] if "lost" in again else float("nan")
        measured = (f"{_num(p99, 1)} ms; {lost:.0f} of {again['n']:,} lost (worst run)"
                    if "n" in again else fmt(again))
        met = None if math.isnan(lost) else (
            False if lost > 0 else (p99 < GOAL_P99_MS if not math.isnan(p99) else None))
        add(f"redelivery after a lease ends: p99 < {GOAL_P99_MS:g} ms with a consumer waiting",
            measured, met)
    order = results.get("ordering")
    if order:
        for depth, kinds in order["depths"].items():
            plain = kinds["plain"]["median"]
            for kind, label in (("strict", "strict priority"), ("grouped", "groups")):
                r = kinds[kind]["median"] / plain if plain else float("nan")
                # Issue 15: six group layouts measured 0.5-0.68x of plain at 1M waiting and
                # the cost is accepted, so groups at 1M have >= 0.5x; 1k keeps within 30%.
                accepted = kind == "grouped" and int(depth) >= 1_000_000
                share = 0.5 if accepted else 0.7
                bar = ">= 0.5x of plain (accepted cost)" if accepted else "within 30% of plain"
                goal = f"pop+ack with {label} at {int(depth):,} waiting {bar}"
                add(goal, f"{r:.2f}x", r >= share if not math.isnan(r) else None)


def goals_table(results: dict[str, Any]) -> Table:
    """The goals as a table."""
    t = Table("Goals (dynoqueue)", ["goal", "measured", "met"])
    for g in goals(results):
        t.rows.append([g["goal"], g["measured"],
                       "yes" if g["met"] else ("NO" if g["met"] is False else NA)])
    return t


# --------------------------------------------------------------------------------- output


def markdown(results: dict[str, Any]) -> str:
    """The whole report as Markdown: a header with the machine and run, then every table."""
    meta = results["meta"]
    head = [
        f"# dynoqueue benchmark results ({meta['started']})", "",
        f"- {'quick' if meta['options']['quick'] else 'full'} run, "
        f"{meta['options']['runs']} run(s), wall time {meta['wall_s']:.0f} s, "
        f"{meta['cpus']} CPUs, load average before {meta['load_before'][0]:.2f}, after "
        f"{meta['load_after'][0]:.2f}",
        f"- Python {meta['python']}, redis-server {meta['redis_server']}, reply parser "
        f"{meta.get('reply_parser', 'not recorded')}; "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
    ]
    body = "\n".join(t.markdown() for t in tables(results))
    if results.get("profile"):
        body += "\n### Profile (cProfile of dynoqueue: batched push, pop + ack; one-message " \
            "pushes)\n\n```\n" + \
            results["profile"] + "\n```\n"
    return "\n".join(head) + "\n" + body


def _strip(value: Any) -> Any:
    """A copy without per-run lateness samples (the summaries keep them pooled)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in ("samples", "trace")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def write(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write ``results.json`` and ``results.md`` into ``out_dir`` (created if needed).

    Returns:
        ``{"json": path, "markdown": path}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    data = dict(results)
    data["raw"] = _strip(results.get("raw", {}))
    data["goals"] = goals(results)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "results.md"}
    paths["json"].write_text(json.dumps(data, indent=1, default=str))
    paths["markdown"].write_text(markdown(results))
    return paths
