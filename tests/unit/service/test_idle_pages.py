"""The supervisor's page-out of its loading code (service/processes/idle_pages.py): which
mappings it asks about, and that the kernel really drops the pages of a file only this
process maps while the bytes read back unchanged."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from inferpool.service.processes.idle_pages import code_mappings, page_out_code

MAPS = """\
55d0a0000000-55d0a0001000 r--p 00000000 fd:01 1 /usr/bin/python3.11
7f0000000000-7f0000400000 r-xp 00010000 fd:01 2 /venv/torch/lib/libtorch_cpu.so
7f0000400000-7f0000500000 rw-p 00410000 fd:01 2 /venv/torch/lib/libtorch_cpu.so
7f0000500000-7f0000600000 rw-p 00000000 00:00 0
7f0000600000-7f0000601000 rw-s 00000000 00:05 3 /dev/shm/board
7f0000601000-7f0000602000 r--s 00000000 00:01 4 /memfd:counts (deleted)
7f0000602000-7f0000603000 r--p 00000000 fd:01 5 /tmp/gone.so (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0                          [vdso]
"""


def test_only_read_only_mappings_of_regular_files_are_asked():
    assert code_mappings(MAPS) == [(0x55D0A0000000, 0x55D0A0001000), (0x7F0000000000, 0x7F0000400000)]


def rss_file_kib() -> int:
    status = Path("/proc/self/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("RssFile:"))


def test_the_pages_of_a_file_only_this_process_maps_are_reclaimed(tmp_path):
    size = 32 << 20
    content = os.urandom(size)
    path = tmp_path / "code.bin"
    with path.open("wb") as file:  # written back: the kernel reclaims a dirty page only after writing it
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        touched = sum(mapped[offset] for offset in range(0, size, mmap.PAGESIZE))
        before = rss_file_kib()
        asked = page_out_code()
        after = rss_file_kib()
        assert mapped[:] == content  # read back from the file, unchanged
        assert sum(mapped[offset] for offset in range(0, size, mmap.PAGESIZE)) == touched
    assert asked >= size
    assert before - after > (size >> 10) * 0.9, (before, after)
