"""Whether this CPU runs bfloat16 natively: the question ``precision = "auto"`` asks first.

Read from the kernel's CPU flags, not from OpenVINO (its import and ``Core`` cost ~0.7 s, which a
model that cannot use bf16 should not pay): ``amx_bf16`` (Intel 4th-generation Xeon and later)
or ``avx512_bf16`` (Cooper Lake; AMD Zen 4 and later). OpenVINO's CPU plugin reports bf16 in
``OPTIMIZATION_CAPABILITIES`` on exactly these, and only there does its bf16 run faster than f32;
elsewhere it would emulate, and the race would serve fp32 anyway after paying for the compile.

``runtime.native_bf16`` overrides the reading: ``off`` says "no bf16 here" (tests, or a fleet whose
nodes differ: a model whose choice must not depend on which node it starts on), ``on`` trusts
the operator where the flags cannot be read (not Linux).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

FLAGS = ("amx_bf16", "avx512_bf16")
MODES = ("auto", "on", "off")
"""``runtime.native_bf16``: read the CPU flags, or say yes or no."""


@cache
def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags (every core of a machine has the same), or none where unreadable."""
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def native_bf16(mode: str = "auto", flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """Whether bf16 can win here, and the reading behind it (for the log and the config route)."""
    if mode != "auto":
        return mode == "on", f"runtime.native_bf16 is {mode!r}"
    found = sorted(set(FLAGS) & (cpu_flags() if flags is None else flags))
    if found:
        return True, f"the CPU has {' and '.join(found)}"
    return False, f"the CPU has neither {' nor '.join(FLAGS)}"
