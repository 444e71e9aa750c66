"""Command line: ``python -m mambalab bugs | bench | ...``."""

from __future__ import annotations

import argparse
import sys


def _cmd_bugs(args: argparse.Namespace) -> int:
    from .bugs import CATALOGUE

    width = max(len(b.id) for b in CATALOGUE)
    for b in CATALOGUE:
        parts = f"  (parts: {', '.join(b.parts)})" if b.parts else ""
        print(f"{b.id:<{width}}  #{b.pr}  {b.title}{parts}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # bench parses its own options
        from . import bench

        return bench.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m mambalab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("bugs", help="list the bug catalogue: id, PR, title")
    sub.add_parser("bench", help="GPU bandwidth benchmark of the decode kernels (bench --help)")
    args = parser.parse_args(argv)
    return {"bugs": _cmd_bugs}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
