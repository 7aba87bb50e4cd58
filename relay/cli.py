"""``vane relay``: serve a relay (granian, one worker) against a control plane."""

from __future__ import annotations

import argparse
import os
import sys


def add_relay_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    relay = sub.add_parser("relay", help="serve a relay next to your apps")
    relay.add_argument(
        "--upstream",
        default=os.environ.get("VANE_RELAY_UPSTREAM", "http://127.0.0.1:8000"),
        help="control plane base URL",
    )
    relay.add_argument(
        "--key",
        default=os.environ.get("VANE_RELAY_KEY"),
        help="relay key rsk_… (default: $VANE_RELAY_KEY)",
    )
    relay.add_argument("--key-file", help="read the relay key from this file instead")
    relay.add_argument("--host", default="127.0.0.1")
    relay.add_argument("--port", type=int, default=8100)
    relay.add_argument(
        "--data-dir",
        default=os.environ.get("VANE_RELAY_DATA_DIR", ".vane/relay"),
        help="where last-known-good snapshots are kept",
    )
    relay.set_defaults(func=cmd_relay)


def exec_relay_only(argv: list[str]) -> None:
    """Replace this process with ``python -m relay``, which never imports the control plane:
    a relay started as ``vane relay`` then weighs ~40 MiB less and collects garbage faster."""
    os.execv(sys.executable, [sys.executable, "-m", "relay", *argv])


def cmd_relay(args: argparse.Namespace) -> int:
    from granian import Granian

    if "control_plane" in sys.modules and not os.environ.get("VANE_RELAY_NO_EXEC"):
        exec_relay_only(sys.argv[2:] if sys.argv[1:2] == ["relay"] else sys.argv[1:])

    if args.key_file:
        with open(args.key_file) as handle:
            args.key = handle.read().strip()
    if not args.key or not args.key.startswith("rsk_"):
        print("a relay key (rsk_…) is required: --key or VANE_RELAY_KEY", file=sys.stderr)
        return 2
    os.environ.update(
        {
            "VANE_RELAY_UPSTREAM": args.upstream,
            "VANE_RELAY_KEY": args.key,
            "VANE_RELAY_HOST": args.host,
            "VANE_RELAY_PORT": str(args.port),
            "VANE_RELAY_DATA_DIR": args.data_dir,
        }
    )
    print(
        f"Vane relay on http://{args.host}:{args.port}  (upstream {args.upstream}, data {args.data_dir})"
    )
    sys.stdout.flush()
    Granian(
        "relay.app:create_app_from_env",
        factory=True,
        address=args.host,
        port=args.port,
        interface="asgi",  # type: ignore[arg-type]
        workers=1,
        log_access=False,
    ).serve()
    return 0
