"""What people and roles cost a write, and the kill switch's path, before and after (issue #34).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_roles      # BASE=e13f1b0 TOGGLES=300 RELAYS=3

Two trees in one run, each its own control plane (SQLite in a temporary directory) with
``RELAYS`` relays: **before**, the code at ``BASE`` (the last commit before roles, checked out
with ``git worktree`` into the temporary directory and put first on ``PYTHONPATH``), and
**after**, this tree. On each, ``TOGGLES`` toggles of one flag in production, one at a time,
each timed from its request to its response (the API write: the key's lookup, now with its
role and person; the permission check; the write; the publish) and to every relay's event
stream announcing it (the kill switch's path). After, the same with a person's personal token
(the lookup joins the person and their membership). The target: the role check adds at most
1 ms to the write's p95, and the kill switch's path is unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import subprocess
import tempfile
from functools import partial
from pathlib import Path

import httpx

from tests.benchmarks.bench_killswitch import FLAG, _has_flag, _start_relays, propagation
from tests.benchmarks.common import (
    Cleanup,
    Row,
    Spread,
    log,
    percentile,
    print_table,
    stop_all,
    wait_quiet,
)
from tests.e2e.test_relays import ControlPlane, eventually, start_control_plane

REPO = Path(__file__).resolve().parents[2]


def _person_token(cp: ControlPlane) -> str:
    """An admin person's personal token: invited, joined through the link, made on People."""
    invited = cp.api("POST", "/users/invitations", {"email": "bench@example.com", "role": "admin"})
    invited.raise_for_status()
    path = httpx.URL(invited.json()["url"]).path
    with httpx.Client(base_url=cp.url, follow_redirects=True, timeout=10) as browser:
        login = re.search(r'name="_login" value="([^"]+)"', browser.get(path).text)
        assert login is not None
        browser.post(path, data={"_login": login.group(1), "password": "bench password!"})
        page = browser.get("/console/people").text
        csrf = re.search(r'name="_csrf" value="([^"]+)"', page)
        assert csrf is not None
        made = browser.post("/console/people/tokens", data={"_csrf": csrf.group(1), "name": "b"})
        token = re.search(r'<code id="new-token">([^<]+)</code>', made.text)
        assert token is not None
        return token.group(1)


def _measure(
    label: str, cp: ControlPlane, urls: list[str], toggles: int
) -> tuple[list[Row], float]:
    result, _ = asyncio.run(
        propagation(cp, urls, flag=FLAG, enabled=False, toggles=toggles, method="sse")
    )
    write = Spread.of(result.toggle_ms)
    p95 = percentile(result.toggle_ms, 95)
    path = Spread.of(result.from_start)
    rows = [
        Row(f"{label}: toggle write (request → response), p95 {p95:.2f} ms", write.text(2)),
        Row(f"{label}: toggle request → every relay (kill switch path)", path.text(1)),
    ]
    return rows, p95


def _tree(
    label: str, tmp: Path, cleanup: Cleanup, relays: int, toggles: int, *, base: Path | None
) -> tuple[list[Row], dict[str, float]]:
    env = {"PYTHONPATH": str(base)} if base else {}
    work = tmp / label
    work.mkdir()
    log(f"{label}: starting a control plane and {relays} relays")
    cp = start_control_plane(f"sqlite:///{work / 'vane.db'}", work, extra_env=env)
    cleanup.add(cp.process)
    started = _start_relays(cp, work, relays, cleanup)
    cp.api("POST", "/flags", {"key": FLAG}).raise_for_status()
    for relay in started:
        eventually(partial(_has_flag, relay, cp.keys["public"]), timeout=60, what=relay.url)
    urls = [r.url for r in started]
    wait_quiet()
    rows, key_p95 = _measure(f"{label}, management key", cp, urls, toggles)
    p95s = {"key": key_p95}
    if base is None:
        person = dataclasses.replace(cp, keys={**cp.keys, "management": _person_token(cp)})
        more, person_p95 = _measure(f"{label}, a person's token", person, urls, toggles)
        rows += more
        p95s["person"] = person_p95
    return rows, p95s


def main() -> None:
    base_commit = os.environ.get("BASE", "e13f1b0")
    toggles = int(os.environ.get("TOGGLES", "300"))
    relays = int(os.environ.get("RELAYS", "3"))
    with tempfile.TemporaryDirectory(prefix="vane-bench-roles-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        base = tmp_path / "base-tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), base_commit],
            check=True,
            capture_output=True,
        )
        try:
            before, base_p95 = _tree("before", tmp_path, cleanup, relays, toggles, base=base)
            stop_all(cleanup.processes)  # one tree at a time on the machine
            cleanup.processes.clear()
            after, head_p95 = _tree("after", tmp_path, cleanup, relays, toggles, base=None)
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                check=False,
                capture_output=True,
            )
    added = head_p95["key"] - base_p95["key"]
    added_person = head_p95["person"] - base_p95["key"]
    verdict = [
        Row(
            "roles: added to the write's p95 (management key)",
            f"{added:+.2f} ms",
            "target ≤ 1 ms",
            "met" if added <= 1 else "NOT met",
        ),
        Row(
            "roles: added to the write's p95 (a person's token)",
            f"{added_person:+.2f} ms",
            "target ≤ 1 ms",
            "met" if added_person <= 1 else "NOT met",
        ),
    ]
    print_table(
        f"People and roles: before ({base_commit}) and after, same run, {toggles} toggles, "
        f"{relays} relays",
        [*before, *after, *verdict],
        notes=[
            "Each toggle waits for every relay's event before the next (20-100 ms apart).",
            "The kill switch's path is request sent → the relay's OFREP event stream announcing it.",
        ],
    )


if __name__ == "__main__":
    main()
