"""``vane relay``: serve a relay (granian) against one or more control planes."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import secrets
import sys
import time
from collections.abc import Sequence

from relay.serve import ServeOptions, serve
from relay.settings import split_upstreams

KEY_WAIT_S = 2.0  # a relay started before its key exists re-reads the key file this often


def add_relay_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    relay = sub.add_parser("relay", help="serve a relay next to your apps")
    relay.add_argument(
        "--upstream",
        action="append",
        default=None,
        help="control plane base URL; repeat for several replicas, preferred first "
        "(default: $VANE_RELAY_UPSTREAM, comma-separated, or http://127.0.0.1:8000)",
    )
    relay.add_argument(
        "--key",
        default=None,
        help="relay key rsk_… (prefer $VANE_RELAY_KEY or --key-file: argv is visible in ps)",
    )
    relay.add_argument(
        "--key-file",
        default=os.environ.get("VANE_RELAY_KEY_FILE"),
        help="read the relay key from this file; waits until it holds one "
        "(default: $VANE_RELAY_KEY_FILE)",
    )
    relay.add_argument("--host", default=os.environ.get("VANE_RELAY_HOST", "127.0.0.1"))
    relay.add_argument("--port", type=int, default=int(os.environ.get("VANE_RELAY_PORT", "8100")))
    relay.add_argument(
        "--data-dir",
        default=os.environ.get("VANE_RELAY_DATA_DIR", ".vane/relay"),
        help="where last-known-good snapshots and the event spool are kept",
    )
    relay.add_argument(
        "--max-streams",
        type=int,
        default=int(os.environ.get("VANE_RELAY_MAX_STREAMS", "10000")),
        help="open OFREP event streams held at most; more get 503 + Retry-After",
    )
    relay.add_argument(
        "--max-requests",
        type=int,
        default=int(os.environ.get("VANE_RELAY_MAX_REQUESTS", "1024")),
        help="other requests (evaluations, events) in flight at once, beyond the streams",
    )
    relay.add_argument(
        "--http-buffer-bytes",
        type=int,
        default=int(os.environ.get("VANE_RELAY_HTTP_BUFFER_BYTES", "8192")),
        help="per-connection HTTP/1 read buffer, at least 8192 (request heads must fit; bodies "
        "stream through): granian's 400 KiB default costs ~10 KiB per open stream",
    )
    relay.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("VANE_RELAY_WORKERS", "1")),
        help="worker processes (one per core to use); 1, the default, serves from this one "
        "process (a sidecar's footprint), more add granian's supervising main process",
    )
    relay.set_defaults(func=cmd_relay)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vane")
    add_relay_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``vane relay …`` (``argv`` starts with ``relay``)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.func(args))


def read_key(args: argparse.Namespace) -> str | None:
    """The relay key from --key, $VANE_RELAY_KEY or --key-file; with a key file that is missing
    or empty (a key not created yet), wait for it and say so, rather than exit."""
    key = args.key or os.environ.get("VANE_RELAY_KEY")
    if key or not args.key_file:
        return key
    said = False
    while True:
        with contextlib.suppress(OSError):
            with open(args.key_file) as handle:
                key = handle.read().strip()
            if key:
                return key
        if not said:
            print(
                f"waiting for a relay key in {args.key_file} (missing or empty; "
                "create one with `vane keys create --kind relay`)",
                file=sys.stderr,
                flush=True,
            )
            said = True
        time.sleep(KEY_WAIT_S)


def raise_open_file_limit(wanted: int) -> None:
    """Every open stream is a socket: lift the soft limit towards the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def cmd_relay(args: argparse.Namespace) -> int:
    upstreams = tuple(url.rstrip("/") for url in args.upstream or ()) or split_upstreams(
        os.environ.get("VANE_RELAY_UPSTREAM", "")
    )
    upstreams = upstreams or ("http://127.0.0.1:8000",)
    key = read_key(args)
    if not key or not key.startswith("rsk_"):
        print(
            "a relay key (rsk_…) is required: VANE_RELAY_KEY, --key-file or --key",
            file=sys.stderr,
        )
        return 2
    os.environ.update(
        {
            "VANE_RELAY_UPSTREAM": ",".join(upstreams),
            "VANE_RELAY_KEY": key,
            "VANE_RELAY_HOST": args.host,
            "VANE_RELAY_PORT": str(args.port),
            "VANE_RELAY_DATA_DIR": args.data_dir,
            "VANE_RELAY_MAX_STREAMS": str(args.max_streams),
        }
    )
    if args.workers > 1 and not os.environ.get("VANE_RELAY_SSE_SECRET"):
        # an event-stream URL one worker signs may be opened on another: one secret for all
        os.environ["VANE_RELAY_SSE_SECRET"] = secrets.token_hex(32)
    # granian admits `backpressure` requests at once per worker (default: its backlog, 1,024);
    # an open stream is a request in flight, so streams alone used to fill it and every
    # evaluation then waited forever. Room for every stream the relay accepts plus the others.
    in_flight = args.max_streams + args.max_requests
    raise_open_file_limit(in_flight + 1024)
    print(
        f"Vane relay on http://{args.host}:{args.port}  "
        f"(upstream {', '.join(upstreams)}, data {args.data_dir})"
    )
    sys.stdout.flush()
    serve(
        ServeOptions(
            host=args.host,
            port=args.port,
            workers=max(1, args.workers),
            backpressure=in_flight,
            backlog=max(2048, min(in_flight, 65535)),
            http_buffer_bytes=max(8192, args.http_buffer_bytes),
        )
    )
    return 0
