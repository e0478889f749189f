"""The supervisor hands back the code pages only loading needed, once its serving processes run.

Loading imports torch, exports and times the model: it touches tens of MB of shared-library
code (libtorch above all) that the supervisor never runs again while it only watches its
processes, and that the serving processes, which never ran it, do not map. Those pages were the
largest private part of the supervisor's memory (a third of the digits tree's PSS). Once every
serving process is ready, ``page_out_code`` asks the kernel to reclaim the supervisor's resident
pages of read-only file mappings (``MADV_PAGEOUT``, Linux 5.4): clean file pages, so nothing is
written or lost; a page another process maps is left alone by the kernel; one the supervisor
needs again (the next model load, a replacement fork) is read back from the file on first touch.
Writable mappings (data, the shared metrics files) are not asked. Anywhere the call is refused
(an older kernel, another OS), the supervisor keeps the pages, as before.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

log = logging.getLogger(__name__)
MADV_PAGEOUT = 21  # <linux/mman.h>
SKIPPED_PREFIXES = ("/dev/", "/memfd:", "/SYSV")
"""Shared memory, not code: the process board and its kin are left as they are."""


def code_mappings(maps: str) -> list[tuple[int, int]]:
    """(start, end) of every read-only mapping of a regular file in a ``/proc/PID/maps`` text."""
    found = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or "w" in fields[1] or not fields[5].startswith("/"):
            continue
        if fields[5].startswith(SKIPPED_PREFIXES) or fields[5].endswith("(deleted)"):
            continue
        start, end = fields[0].split("-")
        found.append((int(start, 16), int(end, 16)))
    return found


def page_out_code() -> int:
    """Ask the kernel to reclaim this process's pages of read-only file mappings; the bytes of
    mappings asked (0 where the kernel refuses the advice)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return 0
    asked = 0
    for start, end in code_mappings(maps):
        if madvise(start, end - start, MADV_PAGEOUT) != 0:
            errno = ctypes.get_errno()
            log.debug("madvise(MADV_PAGEOUT) refused (errno %d): the supervisor keeps its code pages", errno)
            return asked
        asked += end - start
    return asked
