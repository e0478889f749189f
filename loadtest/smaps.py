"""What a process's memory is made of: its PSS by kind of mapping, from ``/proc/PID/smaps``
(Linux only). The tree's total (loadtest/procs.py) says how much; this says where: the C heap,
anonymous mappings (malloc's per-thread arenas, large allocations, thread stacks, numpy's
buffers), shared libraries' pages, other files, and shared memory."""

from __future__ import annotations

from pathlib import Path

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
