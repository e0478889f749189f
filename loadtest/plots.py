"""The PNGs in docs/, drawn from the JSON results of ``loadtest.compare`` and ``loadtest.run``.

    python -m loadtest.plots --closed COMPARE/runs.json [--open RUN/runs.json] [--out docs]
                             [--cdf-concurrency 8] [--only NAME,...]

- ``compare-latency-vs-throughput.png``: each server's closed-loop sweep, achieved req/s
  against p50 (dotted) and p99 (solid) latency, each point labelled with its client count;
  down and to the right is better.
- ``compare-latency-cdf.png``: the latency CDF of every server at ``--cdf-concurrency`` clients.
- ``openloop-latency-vs-rate.png`` (with ``--open``): an open-loop rate sweep, latency measured
  from each request's intended send time, against the offered and the achieved rate.

Small on purpose (80 dpi, few colours): they are committed. Needs the ``bench`` extra (matplotlib).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib  # type: ignore[import-not-found]  # the optional 'bench' extra

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # type: ignore[import-not-found]

DPI = 80
PEER_STYLE = {"FastAPI": "--", "LitServe": ":"}  # peers dashed or dotted, InferPool solid


def _style(label: str) -> str:
    return next((style for prefix, style in PEER_STYLE.items() if label.startswith(prefix)), "-")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, pil_kwargs={"optimize": True})
    plt.close(fig)
    return path


def _by_label(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if run["latency_ms"]["p50"] is not None:
            groups.setdefault(run["label"], []).append(run)
    return groups


def closed_curves(runs: list[dict[str, Any]], out: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3
    for (label, group), color in zip(_by_label(runs).items(), colors, strict=False):
        group.sort(key=lambda r: r["concurrency"])
        xs = [r["achieved_rps"] for r in group]
        style = _style(label)
        ax.plot(xs, [r["latency_ms"]["p99"] for r in group], style, marker="o", color=color, label=f"{label} p99")
        ax.plot(xs, [r["latency_ms"]["p50"] for r in group], style, marker=".", color=color, alpha=0.45, lw=1)
        for r in group:
            ax.annotate(str(r["concurrency"]), (r["achieved_rps"], r["latency_ms"]["p99"]), fontsize=7,
                        xytext=(2, 3), textcoords="offset points", color=color)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("achieved throughput, req/s (numbers: concurrent clients)")
    ax.set_ylabel("latency ms (log): p99 bold, p50 faint")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, out / "compare-latency-vs-throughput.png")


def closed_cdf(runs: list[dict[str, Any]], out: Path, concurrency: int, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3
    for (label, group), color in zip(_by_label(runs).items(), colors, strict=False):
        for r in group:
            if r["concurrency"] == concurrency and r["cdf_ms"]:
                ys = [i / (len(r["cdf_ms"]) - 1) for i in range(len(r["cdf_ms"]))]
                ax.plot(r["cdf_ms"], ys, _style(label), color=color, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("latency ms (log)")
    ax.set_ylabel("fraction of requests answered within")
    ax.set_title(f"{title}: latency CDF at {concurrency} clients")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, out / "compare-latency-cdf.png")


def open_sweep(runs: list[dict[str, Any]], out: Path, title: str) -> Path:
    runs = sorted((r for r in runs if r["mode"] == "open"), key=lambda r: r["offered_rps"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    offered = [r["offered_rps"] for r in runs]
    for name, marker in (("p50", "o"), ("p99", "s"), ("max", "^")):
        left.plot(offered, [r["latency_ms"][name] for r in runs], marker=marker, label=name)
    left.set_yscale("log")
    left.set_xlabel("offered rate, req/s")
    left.set_ylabel("latency ms from intended send time (log)")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    right.plot(offered, [r["achieved_rps"] for r in runs], marker="o", label="achieved (200s)")
    right.plot(offered, offered, "--", color="grey", label="offered")
    right.set_xlabel("offered rate, req/s")
    right.set_ylabel("achieved req/s")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _save(fig, out / "openloop-latency-vs-rate.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--closed", type=Path, required=True, help="runs.json of loadtest.compare")
    parser.add_argument("--open", type=Path, default=None, help="runs.json of an open-loop loadtest.run")
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--cdf-concurrency", type=int, default=8)
    parser.add_argument("--only", default="", help="comma-separated server names to draw (substring match)")
    parser.add_argument("--title", default="digits CNN, closed loop (wrk), 2 shared cores")
    args = parser.parse_args()
    runs = json.loads(args.closed.read_text())
    if args.only:
        wanted = [w.strip().lower() for w in args.only.split(",")]
        runs = [r for r in runs if any(w in r["label"].lower() for w in wanted)]
    written = [closed_curves(runs, args.out, args.title), closed_cdf(runs, args.out, args.cdf_concurrency, args.title)]
    if args.open:
        opened = json.loads(args.open.read_text())
        label = opened[0]["label"] if opened else "open loop"
        written.append(open_sweep(opened, args.out, f"{label}: open loop (latency from intended send time)"))
    for path in written:
        print(f"{path} {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
