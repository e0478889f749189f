"""What a process's memory is made of: its PSS by kind of mapping, from ``/proc/PID/smaps``
(Linux only). The tree's total (loadtest/procs.py) says how much; this says where: the C heap,
anonymous mappings (malloc's per-thread arenas, large allocations, thread stacks, numpy's
buffers), shared libraries' pages, other files, and shared memory."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from loadtest.procs import tree

KINDS = ("heap", "anon", "stack", "so", "file", "shm")
SHARED_MEMORY = ("/dev/shm/", "/memfd:", "/SYSV")


def kind_of(name: str) -> str:
    """A mapping's kind from the pathname column of its ``smaps`` header line."""
    if name == "[heap]":
        return "heap"
    if name.startswith("[stack"):
        return "stack"
    if not name or name.startswith("[anon"):
        return "anon"
    if name.startswith(SHARED_MEMORY):
        return "shm"
    if name.startswith("["):  # [vdso], [vvar], [vsyscall]
        return "file"
    return "so" if ".so" in Path(name.removesuffix(" (deleted)")).name else "file"


def pss_by_kind(smaps: str) -> dict[str, int]:
    """KiB of PSS per kind (``KINDS``) in a ``/proc/PID/smaps`` text, and ``mappings``: how many
    anonymous mappings there are (glibc's arenas and thread stacks are one or two each)."""
    found = dict.fromkeys((*KINDS, "mappings"), 0)
    kind = "anon"
    for line in smaps.splitlines():
        first = line.split(maxsplit=1)[0] if line else ""
        if "-" in first and not first.endswith(":"):  # a mapping's header: address range first
            fields = line.split(maxsplit=5)
            kind = kind_of(fields[5].strip() if len(fields) > 5 else "")
            found["mappings"] += kind == "anon"
        elif first == "Pss:":
            found[kind] += int(line.split()[1])
    return found


def tree_pss_by_kind(pid: int) -> list[dict[str, int]]:
    """One row per member of ``pid``'s tree: ``pid``, ``threads`` and its PSS by kind (KiB)."""
    rows = []
    for member in tree(pid):
        try:
            smaps = Path(f"/proc/{member}/smaps").read_text()
            threads = len(list(Path(f"/proc/{member}/task").iterdir()))
        except OSError:
            continue  # exited meanwhile
        rows.append({"pid": member, "threads": threads, **pss_by_kind(smaps)})
    return rows


PAGE_KIB = 4
_PRESENT = np.uint64(1 << 63)
_FRAME = np.uint64((1 << 55) - 1)


def resident_frames(pid: int) -> npt.NDArray[np.uint64]:
    """The physical frames of ``pid``'s resident pages (``/proc/PID/pagemap``), each once per
    mapping it is in; empty where they cannot be read (frame numbers need root)."""
    found = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            start, end = (int(x, 16) for x in line.split(maxsplit=1)[0].split("-"))
            pages = (end - start) // (PAGE_KIB * 1024)
            try:
                raw = os.pread(pagemap.fileno(), pages * 8, start // (PAGE_KIB * 1024) * 8)
            except OSError:  # [vsyscall]: not readable through pagemap
                continue
            entries = np.frombuffer(raw, dtype=np.uint64)
            found.append(entries[(entries & _PRESENT) != 0] & _FRAME)
    frames = np.concatenate(found) if found else np.empty(0, np.uint64)
    return frames[frames != 0]


def tree_shared_outside(pid: int) -> int:
    """KiB of the tree's resident pages that processes outside it map too (``/proc/kpagecount``
    against the tree's own count): PSS divides those with the neighbours, so a tree's summed PSS
    reads less beside other servers of the same libraries, and a load generator that maps them
    keeps its supervisor from paging them out (loadtest/apart.py). 0 where frames cannot be read."""
    every = []
    for member in tree(pid):
        try:
            every.append(resident_frames(member))
        except OSError:
            continue  # exited meanwhile
    frames, inside = np.unique(np.concatenate(every) if every else np.empty(0, np.uint64), return_counts=True)
    outside = 0
    with open("/proc/kpagecount", "rb") as counts:
        for frame, mine in zip(frames.tolist(), inside.tolist(), strict=True):
            raw = os.pread(counts.fileno(), 8, frame * 8)
            outside += len(raw) == 8 and int.from_bytes(raw, "little") > mine
    return outside * PAGE_KIB
