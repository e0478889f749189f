"""``python -m loadtest.bench <case> [options]``, ``--list`` for the cases (loadtest/bench/__init__.py)."""

from __future__ import annotations

import sys

from loadtest.bench import CASES, PROG, runner

USAGE = f"usage: {PROG} --list | <case> [options] | <case> --help"


def listing() -> str:
    width = max(map(len, CASES))
    return "\n".join(f"{name:<{width}}  {case.summary}" for name, case in CASES.items())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(f"{USAGE}\n\ncases:\n{listing()}")
        return 0 if args else 2
    if args[0] == "--list":
        print(listing())
        return 0
    name, rest = args[0], args[1:]
    if name not in CASES:
        print(f"{USAGE}\nunknown case {name!r}; {PROG} --list shows them", file=sys.stderr)
        return 2
    result = runner(name)(rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
