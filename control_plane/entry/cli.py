"""``vane`` on the control plane's side: serve, migrate, issue keys and scan code references
(``vane relay`` is the relay's own, ``relay/cli.py``; ``vane/cli.py`` picks the side). Every command reads
``VANE_DATABASE_URL`` (default: a SQLite file under ``.vane/``) and says what it did."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar
from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker

from control_plane.access import Role
from control_plane.auth import KeyKind
from control_plane.db import migrate
from control_plane.db.engine import make_async_engine
from control_plane.db.models import Flag
from control_plane.domain.coderefs import schemas as coderef_schemas
from control_plane.domain.coderefs import services as coderefs
from control_plane.domain.coderefs.scanner import CodeRef, scan_tree
from control_plane.domain.common import Scope
from control_plane.domain.keys import schemas as key_schemas
from control_plane.domain.keys import services as keys
from control_plane.domain.people import services as people
from control_plane.entry.bootstrap import IssuedKey, bootstrap
from control_plane.entry.oneshot import database_url as _database_url
from control_plane.entry.oneshot import in_project
from control_plane.entry.up import cmd_up as run_up
from control_plane.errors import ApiError
from control_plane.publishing.hub import Hub
from shared.serving import Embedded, leave_now, run_embedded, run_workers


def print_issued(issued: Sequence[IssuedKey], out: Any = sys.stdout) -> None:
    if not issued:
        return
    print("First keys (shown once; store them now):", file=out)
    for key in issued:
        where = f" [{key.environment}]" if key.environment else ""
        print(f"  {key.kind.value:<10} {key.token}{where}", file=out)


def _migrate_and_bootstrap(url: str) -> list[IssuedKey]:
    before, after = migrate.upgrade(url)
    if before != after:
        print(f"database migrated: {before or 'empty'} -> {after} ({url})")

    async def run() -> list[IssuedKey]:
        engine = make_async_engine(url)
        try:
            return await bootstrap(async_sessionmaker(engine, expire_on_commit=False))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def cmd_control_plane(args: argparse.Namespace) -> int:
    """One worker (the default) runs in this very process (``shared.serving``): a stop signal
    ends the open streams first (relays, providers' feeds, console pages reconnect to another
    replica at once) and ``kill -9`` leaves no worker behind. More workers: granian's main
    process and its workers, each dying with it."""
    url = _database_url()
    issued = _migrate_and_bootstrap(url)
    print(f"Vane control plane on http://{args.host}:{args.port}  (API /api/v1, docs /schema)")
    print(f"database: {url}")
    print_issued(issued)
    sys.stdout.flush()
    os.environ["VANE_DATABASE_URL"] = url
    if args.workers <= 1:
        from control_plane.app import create_app

        def stopping(app: Litestar) -> None:
            hub: Hub = app.state.hub
            hub.close_all()

        run_embedded(Embedded(create_app, args.host, args.port, stopping))
        leave_now()
    run_workers(
        "control_plane.app:create_app", workers=args.workers, host=args.host, port=args.port
    )
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    url = _database_url()
    return run_up(args, url, _migrate_and_bootstrap(url))


def cmd_db_upgrade(_: argparse.Namespace) -> int:
    url = _database_url()
    before, after = migrate.upgrade(url)
    if before == after:
        print(f"database already at {after} ({url})")
    else:
        print(f"database migrated: {before or 'empty'} -> {after} ({url})")
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    print_issued(_migrate_and_bootstrap(_database_url()))
    body = key_schemas.KeyCreate(
        kind=args.kind, name=args.name or "", environment=args.env, origins=args.origin or []
    )
    created = asyncio.run(in_project(args.project, lambda scope: keys.create_key(scope, body)))
    if args.json:
        print(msgspec.json.encode(created).decode())
    else:
        where = f" for {created.environment}" if created.environment else ""
        print(f"created {created.kind} key {created.id}{where}:")
        print(created.key)
    return 0


def cmd_users_create(args: argparse.Namespace) -> int:
    """A person with a role in a project, and a one-time sign-in link (a day) to set a password."""
    print_issued(_migrate_and_bootstrap(_database_url()))

    async def work(scope: Scope) -> tuple[str, str]:
        user, token = await people.create_person(
            scope.session,
            scope.project_id,
            args.email,
            Role(args.role),
            name=args.name or "",
            may_turn_off=args.may_turn_off,
        )
        return user.email, token

    try:
        email, token = asyncio.run(in_project(args.project, work))
    except ApiError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    base = (args.url or os.environ.get("VANE_PUBLIC_URL") or "http://127.0.0.1:8000").rstrip("/")
    print(f"created {args.role} {email} in project {args.project}.")
    print("One-time sign-in link (valid 24 h; they set their password there):")
    print(f"  {base}{people.WELCOME_PATH}{token}")
    return 0


def _git(path: Path, *argv: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(path), *argv], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cmd_code_refs_scan(args: argparse.Namespace) -> int:
    root = Path(args.path).resolve()
    if not root.is_dir():
        print(f"not a directory: {root}", file=sys.stderr)
        return 2
    repository = args.repository or Path(_git(root, "rev-parse", "--show-toplevel") or root).name
    branch = args.branch or _git(root, "rev-parse", "--abbrev-ref", "HEAD") or "main"

    if args.url:
        return _scan_over_http(args, root, repository, branch)

    async def flag_keys(scope: Scope) -> list[str]:
        return list(
            await scope.session.scalars(select(Flag.key).where(Flag.project_id == scope.project_id))
        )

    found = scan_tree(root, asyncio.run(in_project(args.project, flag_keys)))
    _print_refs(found, root)
    if args.upload:
        body = _upload_body(found, repository, branch)
        result = asyncio.run(in_project(args.project, lambda scope: coderefs.upload(scope, body)))
        print(
            f"uploaded {result.references} references to {result.flags} flags for {repository}@{branch}"
        )
    return 0


def _scan_over_http(args: argparse.Namespace, root: Path, repository: str, branch: str) -> int:
    import httpx

    key = args.key or os.environ.get("VANE_API_KEY")
    if not key:
        print("--url needs a management key: --key or VANE_API_KEY", file=sys.stderr)
        return 2
    base = args.url.rstrip("/") + "/api/v1"
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(headers=headers, timeout=30) as client:
        keys: list[str] = []
        params = {"archived": "true", "limit": "500"}
        while True:  # every page: the list answers at most 500 flags at a time
            listed = client.get(f"{base}/flags", params=params)
            listed.raise_for_status()
            page = listed.json()
            keys.extend(f["key"] for f in page["flags"])
            if not page.get("nextCursor"):
                break
            params["cursor"] = page["nextCursor"]
        found = scan_tree(root, keys)
        _print_refs(found, root)
        if args.upload:
            body = msgspec.json.encode(_upload_body(found, repository, branch))
            sent = client.put(
                f"{base}/code-refs", content=body, headers={"Content-Type": "application/json"}
            )
            sent.raise_for_status()
            result = sent.json()
            print(
                f"uploaded {result['references']} references to {result['flags']} flags for {repository}@{branch}"
            )
    return 0


def _upload_body(
    found: list[CodeRef], repository: str, branch: str
) -> coderef_schemas.CodeRefUpload:
    return coderef_schemas.CodeRefUpload(
        repository=repository,
        branch=branch,
        refs=[
            coderef_schemas.CodeRefIn(
                flag_key=r.flag_key, path=r.path, line=r.line, snippet=r.snippet
            )
            for r in found
        ],
    )


def _print_refs(found: list[CodeRef], root: Path) -> None:
    for ref in found:
        print(f"{ref.path}:{ref.line}: {ref.flag_key}: {ref.snippet}")
    print(f"{len(found)} references to {len({r.flag_key for r in found})} flags under {root}")


def cmd_code_refs_stale(args: argparse.Namespace) -> int:
    stale = asyncio.run(in_project(args.project, coderefs.stale_flags))
    if args.json:
        print(msgspec.json.encode(stale).decode())
        return 0
    for flag in stale.flags:
        print(f"{flag.key}\t{flag.name}\tcreated {flag.created_at:%Y-%m-%d}")
    print(f"{stale.count} temporary flags with no code reference")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("control-plane", help="serve the control plane")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(func=cmd_control_plane)

    up = sub.add_parser("up", help="run a control plane and a relay together (SQLite by default)")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--relay-port", type=int, default=8100)
    up.set_defaults(func=cmd_up)

    db = sub.add_parser("db", help="database schema").add_subparsers(
        dest="db_command", required=True
    )
    db.add_parser("upgrade", help="migrate the schema to the newest version").set_defaults(
        func=cmd_db_upgrade
    )

    keys_parser = sub.add_parser("keys", help="API keys").add_subparsers(
        dest="keys_command", required=True
    )
    create = keys_parser.add_parser("create", help="issue a key (its secret is printed once)")
    create.add_argument("--kind", required=True, choices=[k.value for k in KeyKind])
    create.add_argument(
        "--env",
        help="environment (required for public keys; a server key bound to one evaluates its"
        " flags at relays; optional for relay keys)",
    )
    create.add_argument("--name", help="a label for the key")
    create.add_argument(
        "--origin", action="append", help="allowed browser origin (public keys; repeatable)"
    )
    create.add_argument("--project", default="default")
    create.add_argument("--json", action="store_true", help="print the key record as JSON")
    create.set_defaults(func=cmd_keys_create)

    users_parser = sub.add_parser("users", help="people who sign in").add_subparsers(
        dest="users_command", required=True
    )
    user_create = users_parser.add_parser(
        "create", help="add a person with a role; prints a one-time sign-in link"
    )
    user_create.add_argument("--email", required=True)
    user_create.add_argument("--role", required=True, choices=[r.value for r in Role])
    user_create.add_argument("--name", help="their display name")
    user_create.add_argument(
        "--may-turn-off", action="store_true", help="may turn flags off at once (on-call)"
    )
    user_create.add_argument("--project", default="default")
    user_create.add_argument(
        "--url", help="the console's address for the link (default: $VANE_PUBLIC_URL or :8000)"
    )
    user_create.set_defaults(func=cmd_users_create)

    refs = sub.add_parser("code-refs", help="flag references in code").add_subparsers(
        dest="refs_command", required=True
    )
    scan = refs.add_parser("scan", help="find flag keys in a source tree")
    scan.add_argument("path")
    scan.add_argument("--upload", action="store_true", help="replace this repository's references")
    scan.add_argument(
        "--repository", help="repository name (default: the git top-level folder name)"
    )
    scan.add_argument("--branch", help="branch (default: the checked-out git branch)")
    scan.add_argument("--project", default="default")
    scan.add_argument("--url", help="talk to a control plane over HTTP instead of the database")
    scan.add_argument("--key", help="management key for --url (default: $VANE_API_KEY)")
    scan.set_defaults(func=cmd_code_refs_scan)
    stale = refs.add_parser("stale", help="temporary flags no code references")
    stale.add_argument("--project", default="default")
    stale.add_argument("--json", action="store_true")
    stale.set_defaults(func=cmd_code_refs_stale)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ApiError as exc:
        detail = "; ".join(f"{d.field}: {d.message}" for d in exc.details)
        print(
            f"error: {exc.message}"
            + (f" ({detail})" if detail and detail not in exc.message else ""),
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
