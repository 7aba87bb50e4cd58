"""``python -m relay``: the relay alone, without importing the control plane (smaller, faster)."""

from __future__ import annotations

import argparse
import sys

from relay.cli import add_relay_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vane")
    add_relay_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["relay", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
