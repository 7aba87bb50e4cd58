"""``vane up``: a control plane and a relay on this machine, on the embedded default (SQLite).

The relay gets its key through its environment (``VANE_RELAY_KEY``), never its command line,
where ``ps`` would show it to every user of the machine. The children run in their own process
group (a Ctrl-C reaches ``vane up``, which stops them in order) and are bound to ``vane up``'s
life: on Linux each asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so
a ``vane up`` killed outright (SIGKILL, OOM) leaves no control plane or relay holding the ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker

from control_plane.auth import find_principal
from control_plane.db.engine import make_async_engine
from control_plane.domain.keys import schemas as key_schemas
from control_plane.domain.keys import services as keys
from control_plane.domain.keys.schemas import KindName
from control_plane.domain.people.services import WELCOME_PATH
from control_plane.entry.bootstrap import FIRST_ADMIN_EMAIL, IssuedKey, SignInLink, first_admin
from control_plane.entry.oneshot import in_project
from control_plane.errors import ApiError
from shared.serving import die_with_parent

KEYS_FILE = Path(".vane/first-keys.json")
LOG_DIR = Path(".vane/logs")
SERVER_ENVIRONMENT = "production"
"""The environment of the server key ``vane up`` prints (the README's backend examples)."""


def save_keys(issued: list[IssuedKey]) -> None:
    KEYS_FILE.parent.mkdir(parents=True, exist_ok=True)
    data = {key.kind.value: {"token": key.token, "environment": key.environment} for key in issued}
    KEYS_FILE.write_text(json.dumps(data, indent=2))
    KEYS_FILE.chmod(0o600)


async def _valid(url: str, token: str) -> bool:
    engine = make_async_engine(url)
    try:
        async with async_sessionmaker(engine)() as session:
            return await find_principal(session, token) is not None
    finally:
        await engine.dispose()


def known_keys(url: str) -> dict[str, dict[str, str | None]]:
    """The first keys kept in .vane/ by an earlier `vane up`, if they still work."""
    if not KEYS_FILE.exists():
        return {}
    data: dict[str, dict[str, str | None]] = json.loads(KEYS_FILE.read_text())
    return {
        kind: info
        for kind, info in data.items()
        if info.get("token") and asyncio.run(_valid(url, str(info["token"])))
    }


def ensure_key(
    saved: dict[str, dict[str, str | None]], kind: KindName, environment: str | None
) -> str:
    """The kept key of ``kind`` bound to ``environment``, or a new one, kept for the next run (a
    ``.vane/`` from before the first server key was bound to production gets a bound one)."""
    info = saved.get(kind)
    if info and info.get("token") and info.get("environment") == environment:
        return str(info["token"])
    created = asyncio.run(
        in_project(
            "default",
            lambda scope: keys.create_key(
                scope, key_schemas.KeyCreate(kind=kind, name="vane up", environment=environment)
            ),
        )
    )
    saved[kind] = {"token": created.key, "environment": environment}
    KEYS_FILE.parent.mkdir(parents=True, exist_ok=True)
    KEYS_FILE.write_text(json.dumps(saved, indent=2))
    KEYS_FILE.chmod(0o600)
    return created.key


def _spawn(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = open(log, "ab")  # noqa: SIM115 - the child keeps it
    parent = os.getpid()

    def prepare() -> None:  # in the child, before exec
        die_with_parent(parent)

    return subprocess.Popen(
        argv,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        preexec_fn=prepare,  # vane up runs no threads at this point
    )


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited early; see {log}:\n" + log.read_text()[-2000:])
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s; see {log}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


async def _first_admin(url: str) -> SignInLink | None:
    engine = make_async_engine(url)
    try:
        email = os.environ.get("VANE_ADMIN_EMAIL") or FIRST_ADMIN_EMAIL
        return await first_admin(async_sessionmaker(engine, expire_on_commit=False), email)
    finally:
        await engine.dispose()


def cmd_up(args: argparse.Namespace, url: str, issued: list[IssuedKey]) -> int:
    if issued:
        save_keys(issued)
    saved = known_keys(url)
    link = asyncio.run(_first_admin(url))
    relay_key = ensure_key(saved, "relay", None)
    try:
        ensure_key(saved, "server", SERVER_ENVIRONMENT)
    except ApiError as exc:  # the project has no production environment any more
        print(f"note: no server key bound to {SERVER_ENVIRONMENT}: {exc}", file=sys.stderr)
    python = sys.executable
    cp_url = f"http://{args.host}:{args.port}"
    relay_url = f"http://{args.host}:{args.relay_port}"
    env_note = {"VANE_DATABASE_URL": url}
    os.environ.update(env_note)
    control_plane = _spawn(
        [
            python,
            "-P",
            "-m",
            "control_plane.entry.cli",
            "control-plane",
            "--host",
            args.host,
            "--port",
            str(args.port),
        ],
        LOG_DIR / "control-plane.log",
    )
    relay = None
    try:
        _wait_ready(f"{cp_url}/readyz", control_plane, LOG_DIR / "control-plane.log")
        relay = _spawn(
            [
                python,
                "-P",  # the working directory stays off sys.path: a `relay/` there is not us
                "-m",
                "relay",
                "--upstream",
                cp_url,
                "--host",
                args.host,
                "--port",
                str(args.relay_port),
                "--data-dir",
                ".vane/relay",
            ],
            LOG_DIR / "relay.log",
            env={"VANE_RELAY_KEY": relay_key},  # not argv: ps shows argv to every user
        )
        _wait_ready(f"{relay_url}/readyz", relay, LOG_DIR / "relay.log")
        _banner(cp_url, relay_url, url, saved, link)
        stop = {"now": False}

        def on_signal(*_: object) -> None:
            stop["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        while not stop["now"]:
            for name, process in (("control plane", control_plane), ("relay", relay)):
                if process.poll() is not None:
                    print(
                        f"{name} exited ({process.returncode}); stopping. Logs: {LOG_DIR}/",
                        file=sys.stderr,
                    )
                    return 1
            time.sleep(0.2)
        print("stopping…")
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if relay is not None:
            _stop(relay)
        _stop(control_plane)


def _banner(
    cp_url: str,
    relay_url: str,
    database_url: str,
    saved: dict[str, dict[str, str | None]],
    link: SignInLink | None,
) -> None:
    print()
    print("Vane is up (Ctrl-C stops both):")
    print(f"  console        {cp_url}/")
    print(f"  control plane  {cp_url}/api/v1   (API docs {cp_url}/schema/swagger)")
    print(
        f"  relay          {relay_url}        (OFREP {relay_url}/ofrep/v1, browser SDK {relay_url}/sdk/v1)"
    )
    print(f"  database       {database_url}")
    print(f"  logs           {LOG_DIR}/")
    if link is not None:
        print()
        print(f"First sign-in: open this one-time link (24 h) as {link.email} and set a password:")
        print(f"  {cp_url}{WELCOME_PATH}{link.token}")
        print("  (each start gives a new link until someone has signed in; more people: the")
        print("  console's People page, or `vane users create --email … --role …`)")
    print()
    print("Keys (kept in .vane/first-keys.json; more with `vane keys create`):")
    for kind in ("management", "server", "relay", "public"):
        info = saved.get(kind)
        if info:
            where = f" [{info['environment']}]" if info.get("environment") else ""
            print(f"  {kind:<10} {info['token']}{where}")
    management = saved.get("management", {}).get("token")
    public = saved.get("public", {}).get("token")
    if management:
        print()
        print("Try:")
        print(
            f"  curl -s -X POST {cp_url}/api/v1/flags -H 'Authorization: Bearer {management}' "
            "-H 'Content-Type: application/json' -d '{\"key\":\"new-checkout\"}'"
        )
        print(
            f"  curl -s -X POST {cp_url}/api/v1/flags/new-checkout/environments/production/toggle "
            f"-H 'Authorization: Bearer {management}' -H 'Content-Type: application/json' -d '{{\"enabled\":true}}'"
        )
    if public:
        print()
        print("In a page's <head> (element and cta experiments, events, flags: docs/browser.md):")
        print(f'  <script src="{relay_url}/sdk/v1/vane.js" data-key="{public}"></script>')
        print()
        print(
            f"  curl -s -X POST {relay_url}/ofrep/v1/evaluate/flags -H 'Authorization: Bearer {public}' "
            '-H \'Content-Type: application/json\' -d \'{"context":{"targetingKey":"user-1"}}\''
        )
    sys.stdout.flush()
