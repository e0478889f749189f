"""A run as one line, and every run as ``runs.json`` and PNGs (latency vs throughput, CDFs)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np


def brief(run: dict[str, Any]) -> str:
    lat = run["latency_ms"]
    load = f"rate {run['offered_rps']:>7}" if run["mode"] == "open" else f"conc {run['concurrency']:>4}"
    return (
        f"{run['label']:<24} {load}  achieved {run['achieved_rps']:>8.1f}/s  p50 {lat['p50']} p99 {lat['p99']} "
        f"max {lat['max']} ms  503 {run['rejected_503']}  err {run['connection_errors']}  "
        f"unanswered {run['unanswered']}  gen {run['generator_cpu']['cores']} cores"
    )


def write_results(runs: list[dict[str, Any]], out: Path, title: str = "") -> list[Path]:
    """``runs.json`` and, with matplotlib, ``latency_vs_throughput.png`` and ``latency_cdf.png``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    written = [out / "runs.json"]
    with contextlib.suppress(ImportError):  # matplotlib is the optional 'bench' extra
        written += plot(runs, out, title)
    return written


def plot(runs: list[dict[str, Any]], out: Path, title: str = "") -> list[Path]:
    import matplotlib  # type: ignore[import-not-found]  # the optional 'bench' extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    series: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        series.setdefault(f"{run['label']} ({run['mode']} loop)".strip(), []).append(run)
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=90)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4
    for (name, group), color in zip(series.items(), colors, strict=False):
        group = [r for r in group if r["latency_ms"]["p50"] is not None]
        group.sort(key=lambda r: r["offered_rps"] if r["mode"] == "open" else r["concurrency"])
        xs = [r["achieved_rps"] for r in group]
        ax.plot(xs, [r["latency_ms"]["p50"] for r in group], "o-", color=color, label=f"{name} p50")
        ax.plot(xs, [r["latency_ms"]["p99"] for r in group], "s--", color=color, label=f"{name} p99")
        for r in group:
            ax.annotate(_load(r), (r["achieved_rps"], r["latency_ms"]["p99"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")  # fmt: skip
    ax.set_yscale("log")
    curve = _save(plt, fig, out / "latency_vs_throughput.png", title or "latency vs throughput",
                  "achieved throughput (req/s, 200s only)", "latency (ms, log)", legend_size=7)  # fmt: skip

    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=90)
    for run in runs:
        if run["cdf_ms"]:
            label = f"{run['label']} {_load(run)}".strip()
            ax.plot(run["cdf_ms"], np.linspace(0, 1, len(run["cdf_ms"])), label=label)
    ax.set_xscale("log")
    cdf = _save(plt, fig, out / "latency_cdf.png", (title + ": " if title else "") + "latency CDF (warm-up excluded)",
                "latency (ms, log)", "fraction of requests", legend_size=6)  # fmt: skip
    return [curve, cdf]


def _load(run: dict[str, Any]) -> str:
    return f"{run['offered_rps']:g}/s" if run["mode"] == "open" else f"c={run['concurrency']}"


def _save(plt: Any, fig: Any, path: Path, title: str, xlabel: str, ylabel: str, legend_size: int) -> Path:
    (ax,) = fig.axes
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
