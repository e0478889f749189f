"""``inferpool bench``'s numbers: percentiles of a phase, and the table a person reads."""

from __future__ import annotations

from typing import Any

import numpy as np

LABELS = {
    "bare": "bare model call (no server)",
    "engine": "engine infer (hand-off, no HTTP)",
    "http_json": "HTTP POST /predict (JSON)",
    "http_v2_binary": "HTTP v2 infer (binary tensors)",
    "grpc": "gRPC v2 ModelInfer (raw tensors)",
}


def summarize(seconds: list[float]) -> dict[str, Any]:
    """Calls and p50/p99/mean in microseconds (0.1 µs)."""
    us = np.asarray(seconds) * 1e6
    return {
        "calls": int(us.size),
        "p50_us": round(float(np.percentile(us, 50)), 1),
        "p99_us": round(float(np.percentile(us, 99)), 1),
        "mean_us": round(float(us.mean()), 1),
    }


def _precision_line(precision: dict[str, Any] | None) -> list[str]:
    """The precision served and why (``precision = "auto"``, or a gate's verdict)."""
    if not precision:
        return []
    why = precision.get("reason") or (precision["gate"] or {}).get("inputs", "")
    return [f"precision {precision['served']} (configured: {precision['configured']}){': ' + why if why else ''}"]


def format_table(report: dict[str, Any]) -> str:
    threads = report["threads"]
    chosen = report["backend"]
    configured = report["backend_configured"]
    backend = chosen if chosen == configured else f"{chosen} (configured: {configured})"
    lines = [
        f"inferpool bench: model {report['model']} ({report['source']})",
        f"backend {backend}, dispatch {report['dispatch']}, {threads['runtimes']} runtimes x "
        f"{threads['intra_op_threads']} intra-op threads, {threads['usable_cpus']} usable CPUs per process, "
        f"{threads['server_processes']} server process(es)",
        *_dispatch_line(report.get("dispatch_selection")),
        *_precision_line(report.get("precision")),
        *([f"platform: {report['platform']}"] if report.get("platform") else []),
        "",
        f"{'':<34}{'calls':>7}{'p50 µs':>10}{'p99 µs':>10}   {'overhead p50 / p99 µs':>22}{'x bare p50':>12}",
    ]
    for name, stats in report["timings"].items():
        over = report["overhead"].get(name)
        extra = f"   {over['p50_us']:>10.1f} / {over['p99_us']:<9.1f}{over['ratio_p50']:>12.2f}" if over else ""
        label = LABELS.get(name, name)
        lines.append(f"{label:<34}{stats['calls']:>7}{stats['p50_us']:>10.1f}{stats['p99_us']:>10.1f}{extra}")
    cpu = ", ".join(
        f"{LABELS.get(k, k).split(' (')[0]} {v:.1f} µs" for k, v in report["client_cpu_us_per_request"].items()
    )
    ref = report["reference"]
    asgi = ref["bare_asgi"]
    servers = report["server_cpu_us_per_request"]
    bare_cpu = servers.get("bare_asgi")
    front_ends = ", ".join(
        f"{LABELS.get(k, k).split(' (')[0]}{' (' + report['grpc_server'] + ')' if k == 'grpc' else ''} {v:.0f} µs"
        + (f" ({v / bare_cpu:.2f}x)" if bare_cpu else "")
        for k, v in servers.items()
        if k != "bare_asgi"
    )
    ratio = "n/a" if ref["ratio_p50"] is None else f"{ref['ratio_p50']:.2f}x"
    lines += [
        f"{'bare ASGI app, JSON + bare call':<34}{asgi['calls']:>7}{asgi['p50_us']:>10.1f}{asgi['p99_us']:>10.1f}"
        f"   {ref['bare_asgi_overhead_p50_us']:>10.1f}",
        "",
        f"HTTP /predict overhead p50: InferPool {ref['inferpool_overhead_p50_us']:.1f} µs, bare ASGI app "
        f"{ref['bare_asgi_overhead_p50_us']:.1f} µs: {ratio} (same uvicorn settings, bare call inline)",
        "overhead = phase - bare call, at the same percentile; one request at a time, one keep-alive connection "
        "(gRPC: one channel).",
        f"The client runs on this machine inside each round trip; its CPU per request: {cpu}.",
        f"Server CPU per request (whole process tree): {front_ends}; bare ASGI app "
        + ("n/a" if bare_cpu is None else f"{bare_cpu:.0f} µs")
        + ".",
    ]
    return "\n".join(lines)


def _dispatch_line(figures: dict[str, Any] | None) -> list[str]:
    """Why the server chose its dispatch (``dispatch = "auto"``), from its own figures."""
    if not figures:
        return []
    share = figures.get("gil_share")
    held = "not measured" if share is None else f"{share:.2f}"
    return [
        f"dispatch chosen by measurement: call {figures.get('call_us')} µs, GIL held {held} of it, hand-off "
        f"{figures.get('handoff_us')} µs -> {figures.get('rule')}: {figures.get('reason')}"
    ]
