"""``python -m inferpool``: the same command line as the ``inferpool`` script."""

from inferpool.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
