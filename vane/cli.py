"""``vane <command>``: pick the side that runs the command and import only that side.

``vane relay`` imports the relay and nothing of the control plane (no SQLAlchemy, Litestar or
scipy), in this process: there is no re-exec, so nothing is looked up again from the working
directory. Every other command belongs to the control plane.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

RELAY = "relay.cli"
CONTROL_PLANE = "control_plane.entry.cli"
FLAGS_AS_CODE = "control_plane.entry.flags_as_code"  # a client of the API: httpx and YAML

COMMANDS: dict[str, tuple[str, str]] = {
    "up": (CONTROL_PLANE, "run a control plane and a relay together (SQLite by default)"),
    "control-plane": (CONTROL_PLANE, "serve the control plane"),
    "relay": (RELAY, "serve a relay next to your apps"),
    "db": (CONTROL_PLANE, "database schema"),
    "keys": (CONTROL_PLANE, "API keys"),
    "users": (CONTROL_PLANE, "people who sign in"),
    "code-refs": (CONTROL_PLANE, "flag references in code"),
    "export": (FLAGS_AS_CODE, "write the project as one document (YAML, or --json)"),
    "plan": (FLAGS_AS_CODE, "what applying a project document (or a promotion) would change"),
    "apply": (FLAGS_AS_CODE, "apply a project document (or a promotion) in one transaction"),
    "import": (FLAGS_AS_CODE, "import a LaunchDarkly, flagd or Unleash flag file (plan, apply)"),
}


def overview() -> argparse.ArgumentParser:
    """The top-level help: every command, without importing either side."""
    parser = argparse.ArgumentParser(
        prog="vane",
        description="Vane: experimentation, metrics and feature flags. "
        "`vane <command> --help` describes a command.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for name, (_, summary) in COMMANDS.items():
        sub.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else None
    if command not in COMMANDS:
        try:
            overview().parse_args(args)  # prints the usage (or the help) and exits
        except SystemExit as exc:
            # a usage error exits 1, not argparse's 2: 2 is ``vane plan``'s "something would
            # change", and ``vane plann FILE || [ $? -eq 2 ]`` must not pass a CI job
            return 1 if exc.code == 2 else int(exc.code or 0)
        return 1
    side = importlib.import_module(COMMANDS[command][0])
    return int(side.main(args))


if __name__ == "__main__":
    sys.exit(main())
