"""PNG plots of the suite's results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _median(entry: dict[str, Any] | None, key: str = "rate") -> float:
    if not entry or key not in entry:
        return float("nan")
    return float(entry[key]["median"])


def throughput(results: dict[str, Any], path: Path) -> Path:
    """Grouped bars (log scale): enqueue one/bulk and dequeue+ack 1/N processes per library."""
    plt = _pyplot()
    libs = list(results["meta"]["options"]["libraries"])
    procs = results["meta"]["options"]["procs"]
    series = [
        ("enqueue, one per call", lambda lib: _median(results["enqueue"].get(lib, {})
                                                      .get("single"))),
        ("enqueue, bulk", lambda lib: _median(results["enqueue"].get(lib, {}).get("batched"))),
        ("dequeue+ack, 1 process", lambda lib: _median(results["consume"].get(lib, {})
                                                       .get("one"))),
        (f"dequeue+ack, {procs} processes", lambda lib: _median(results["consume"].get(lib, {})
                                                                .get("several"))),
    ]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(series)
    for i, (label, get) in enumerate(series):
        values = [get(lib) for lib in libs]
        xs = [j + i * width for j in range(len(libs))]
        heights = [0 if math.isnan(v) else v for v in values]
        bars = ax.bar(xs, heights, width, label=label)
        for bar, v in zip(bars, values, strict=True):
            ax.annotate("n/a" if math.isnan(v) else f"{v / 1000:.1f}k",
                        (bar.get_x() + bar.get_width() / 2, max(bar.get_height(), 1)),
                        ha="center", va="bottom", fontsize=7)
    limit = results["limits"].get("server_lua", {})
    for mix, style in (("push", "--"), ("pop+ack", ":")):
        if mix in limit:
            ax.axhline(limit[mix]["median"], linestyle=style, color="grey",
                       label=f"Redis limit, {mix} (server-side Lua, 500 per call)")
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(libs))], libs)
    ax.set_yscale("log")
    ax.set_ylabel("messages / s (log scale, median)")
    ax.set_title("Throughput on one redis-server")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def lateness(results: dict[str, Any], path: Path) -> Path:
    """Cumulative distribution of delivery lateness (ms, symlog x) per library and load."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))
    for lib, modes in results["lateness"].items():
        for mode, entry in modes.items():
            samples = sorted(entry.get("samples") or [])
            if not samples:
                continue
            ys = [(i + 1) / len(samples) for i in range(len(samples))]
            ax.plot(samples, ys, label=f"{lib} ({int(mode):,} msgs)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.axvline(10, color="grey", linestyle="--", label="10 ms")
    ax.set_xlabel("lateness: receive time - due time (ms, symlog; < 0 = early)")
    ax.set_ylabel("fraction of messages")
    ax.set_title("Delivery lateness with one waiting consumer")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def depth(results: dict[str, Any], path: Path) -> Path | None:
    """dynoqueue rates vs number of waiting messages (log x), one line per operation."""
    data = results.get("depth")
    if not data or not data["depths"]:
        return None
    plt = _pyplot()
    depths = [int(d) for d in data["depths"]]
    fig, ax = plt.subplots(figsize=(8, 5))
    for key in ("push", "pop+ack", "push single", "pop+ack single"):
        meds = [data["depths"][str(d)][key]["median"] for d in depths]
        lows = [data["depths"][str(d)][key]["min"] for d in depths]
        highs = [data["depths"][str(d)][key]["max"] for d in depths]
        ax.errorbar(depths, meds, yerr=[[m - lo for m, lo in zip(meds, lows, strict=True)],
                                        [h - m for m, h in zip(meds, highs, strict=True)]],
                    marker="o", capsize=3, label=key.replace("single", "one per call")
                    if "single" in key else f"{key} bulk")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("waiting messages (not yet due)")
    ax.set_ylabel("messages / s (median, min-max bars)")
    ax.set_title("dynoqueue cost vs queue depth")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write throughput.png, lateness.png and depth.png into ``out_dir``; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [throughput(results, out_dir / "throughput.png"),
             lateness(results, out_dir / "lateness.png"),
             depth(results, out_dir / "depth.png")]
    return [p for p in paths if p is not None]
