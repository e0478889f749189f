"""loadtest/bench/memory.py: the sweep's options and what each reading added per process."""

from __future__ import annotations

from loadtest.bench.memory import added, memory_parser, table, total_mib
from loadtest.smaps import KINDS


def row(pid: int, heap: int, anon: int, threads: int = 1) -> dict[str, int]:
    return {"pid": pid, "threads": threads, "mappings": 3, **dict.fromkeys(KINDS, 0), "heap": heap, "anon": anon}


def test_compare_sweep_options_parse():
    args = memory_parser().parse_args(["--concurrency", "1,8,64", "--warmup", "2", "--seconds", "6", "--settle", "0"])
    assert (args.concurrency, args.warmup, args.seconds, args.settle) == ("1,8,64", 2.0, 6.0, 0.0)
    defaults = memory_parser().parse_args([])
    assert (defaults.concurrency, defaults.warmup, defaults.settle) == ("64", 1.0, 1.0)  # the case as before


def test_added_is_per_process_and_counts_a_new_process_whole():
    before = [row(1, heap=100, anon=50), row(2, heap=10, anon=5)]
    after = [row(1, heap=100, anon=80, threads=2), row(2, heap=12, anon=5), row(3, heap=7, anon=1)]
    gained = {r["pid"]: r for r in added(before, after)}
    assert (gained[1]["anon"], gained[1]["heap"], gained[1]["threads"]) == (30, 0, 1)
    assert (gained[2]["heap"], gained[2]["anon"]) == (2, 0)
    assert (gained[3]["heap"], gained[3]["anon"], gained[3]["threads"]) == (7, 1, 1)
    assert total_mib(added(before, after)) == (30 + 2 + 8) / 1024


def test_table_sums_the_tree():
    text = table("t", [row(1, heap=1024, anon=2048), row(2, heap=1024, anon=0)])
    assert text.splitlines()[-1].startswith("| tree |")
    assert text.splitlines()[-1].endswith("| 4.0 |")
