"""What people and roles cost a write, and the kill switch's path, before and after (issue #34).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_roles      # BASE=e13f1b0 TOGGLES=300 RELAYS=3

Two trees in one run, each its own control plane (SQLite in a temporary directory) with
``RELAYS`` relays, running side by side: **before**, the code at ``BASE`` (the last commit
before roles, checked out with ``git worktree`` into the temporary directory and put first on
``PYTHONPATH``), and **after**, this tree, called with its management key and with a person's
personal token (whose lookup joins the person and their membership). Each side gets
``TOGGLES`` toggles of one flag in production, one at a time, in ten interleaved rounds (so
what else the machine does falls on every side alike), each timed from its request to its
response (the API write: the key's lookup, now with its role; the permission check; the write;
the publish) and to every relay's event stream announcing it (the kill switch's path). The target: the role check adds at most
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


@dataclasses.dataclass
class Side:
    label: str
    cp: ControlPlane
    urls: list[str]
    write_ms: list[float] = dataclasses.field(default_factory=list)
    path_ms: list[float] = dataclasses.field(default_factory=list)
    enabled: bool = False

    def measure(self, toggles: int) -> None:
        result, self.enabled = asyncio.run(
            propagation(
                self.cp, self.urls, flag=FLAG, enabled=self.enabled, toggles=toggles, method="sse"
            )
        )
        self.write_ms += result.toggle_ms
        self.path_ms += result.from_start

    def p95(self) -> float:
        return percentile(self.write_ms, 95)

    def rows(self) -> list[Row]:
        return [
            Row(
                f"{self.label}: toggle write (request → response), p95 {self.p95():.2f} ms",
                Spread.of(self.write_ms).text(2),
            ),
            Row(
                f"{self.label}: toggle request → every relay (kill switch path)",
                Spread.of(self.path_ms).text(1),
            ),
        ]


def _tree(
    label: str, tmp: Path, cleanup: Cleanup, relays: int, base: Path | None
) -> tuple[ControlPlane, list[str]]:
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
    return cp, [relay.url for relay in started]


def main() -> None:
    base_commit = os.environ.get("BASE", "e13f1b0")
    toggles = int(os.environ.get("TOGGLES", "300"))
    relays = int(os.environ.get("RELAYS", "3"))
    rounds = 10
    with tempfile.TemporaryDirectory(prefix="vane-bench-roles-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        base = tmp_path / "base-tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), base_commit],
            check=True,
            capture_output=True,
        )
        try:
            before, before_urls = _tree("before", tmp_path, cleanup, relays, base)
            after, after_urls = _tree("after", tmp_path, cleanup, relays, None)
            person = dataclasses.replace(
                after, keys={**after.keys, "management": _person_token(after)}
            )
            sides = [
                Side("before, management key", before, before_urls),
                Side("after, management key", after, after_urls),
                Side("after, a person's token", person, after_urls),
            ]
            wait_quiet()
            # interleaved rounds: what else the machine does falls on every side alike
            for n in range(rounds):
                log(f"round {n + 1} of {rounds}")
                for side in sides:
                    side.measure(toggles // rounds)
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                check=False,
                capture_output=True,
            )
    base_p95 = sides[0].p95()
    verdict = [
        Row(
            f"roles: added to the write's p95 ({side.label.removeprefix('after, ')})",
            f"{side.p95() - base_p95:+.2f} ms",
            "target ≤ 1 ms",
            "met" if side.p95() - base_p95 <= 1 else "NOT met",
        )
        for side in sides[1:]
    ]
    print_table(
        f"People and roles: before ({base_commit}) and after, same run, {toggles} toggles each "
        f"in {rounds} interleaved rounds, {relays} relays each",
        [row for side in sides for row in side.rows()] + verdict,
        notes=[
            "Each toggle waits for every relay's event before the next (20-100 ms apart).",
            "The kill switch's path is request sent → the relay's OFREP event stream announcing it.",
        ],
    )


if __name__ == "__main__":
    main()
