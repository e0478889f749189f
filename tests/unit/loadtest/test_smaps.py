"""loadtest/smaps.py: a process's PSS by kind of mapping, from its smaps text and from /proc."""

from __future__ import annotations

import os

from loadtest.smaps import KINDS, kind_of, pss_by_kind, resident_frames, tree_pss_by_kind, tree_shared_outside

SMAPS = """\
55d0a0000000-55d0a0100000 rw-p 00000000 00:00 0                          [heap]
Size:               1024 kB
Pss:                 300 kB
7f0000000000-7f0000400000 r-xp 00010000 fd:01 2 /venv/torch/lib/libtorch_cpu.so
Pss:                1000 kB
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Pss:                  40 kB
Private_Dirty:        40 kB
7f0000500000-7f0000600000 rw-p 00000000 00:00 0 [anon:python]
Pss:                   2 kB
7f0000600000-7f0000601000 rw-s 00000000 00:05 3 /dev/shm/board
Pss:                   4 kB
7f0000601000-7f0000602000 r--p 00000000 fd:01 5 /tmp/model.onnx.data
Pss:                   8 kB
7f0000602000-7f0000603000 r-xp 00000000 fd:01 6 /usr/lib/libc.so.6 (deleted)
Pss:                  16 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Pss:                  20 kB
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0                          [vdso]
Pss:                   0 kB
"""


def test_each_mapping_counts_under_its_kind():
    found = pss_by_kind(SMAPS)
    assert found == {"heap": 300, "anon": 42, "stack": 20, "so": 1016, "file": 8, "shm": 4, "mappings": 2}


def test_names_sort_into_kinds():
    assert [kind_of(n) for n in ("", "[heap]", "[stack]", "/a/b.cpython-311.so", "/a/libx.so.1", "/a/x.py")] == [
        "anon", "heap", "stack", "so", "so", "file",
    ]  # fmt: skip


def test_this_process_is_read_from_proc():
    rows = tree_pss_by_kind(os.getpid())
    assert rows[0]["pid"] == os.getpid()
    assert rows[0]["threads"] >= 1
    assert sum(rows[0][kind] for kind in KINDS) > 0


def test_pages_shared_outside_the_tree_are_read_from_the_frame_counts():
    """Root reads frame numbers: this process's libc pages are mapped by every other process too.
    Anyone else reads none, and the figure is 0 rather than wrong."""
    frames = resident_frames(os.getpid())
    outside = tree_shared_outside(os.getpid())
    if os.geteuid() == 0:
        assert len(frames) > 100
        assert 0 < outside <= len(frames) * 4
    else:
        assert outside == 0
