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

Then the kill switch as a person on call pulls it: a **console click** (the toggle form's POST,
signed in to the console with the management key, ``CLICKS`` turn-offs a side) to every relay's
stream, before, after, and after with production protected (``requiredApprovals`` 1: the
turn-off still applies at once, audited as an emergency; turning back on between clicks goes
through an approved change request, untimed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx

from tests.benchmarks.bench_killswitch import (
    FLAG,
    TIMEOUT_S,
    Streams,
    _has_flag,
    _start_relays,
    propagation,
)
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


class Console:
    """A browser signed in to the console with the management key; it clicks the flag's switch."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.client = httpx.AsyncClient(base_url=cp.url, timeout=30)
        self.csrf = ""

    async def sign_in(self) -> None:
        page = (await self.client.get("/console/sign-in")).text
        login = re.search(r'name="_login" value="([^"]+)"', page)
        assert login is not None
        signed = await self.client.post(
            "/console/sign-in", data={"_login": login.group(1), "key": self.cp.keys["management"]}
        )
        assert signed.status_code == 303, signed.text[:300]
        flag_page = (await self.client.get(f"/console/flags/{FLAG}")).text
        csrf = re.search(r'name="_csrf" value="([^"]+)"', flag_page)
        assert csrf is not None
        self.csrf = csrf.group(1)

    async def click(self, enabled: bool) -> tuple[float, float]:
        started = time.perf_counter()
        answer = await self.client.post(
            f"/console/flags/{FLAG}/environments/production/toggle",
            data={"_csrf": self.csrf, "enabled": "true" if enabled else "false", "confirm": "yes"},
        )
        answered = time.perf_counter()
        assert answer.status_code == 303, answer.text[:300]
        return started, answered


async def _on_by_request(cp: ControlPlane, approver: str) -> None:
    """Production protected: the flag goes back on through a change request approved by a
    person, as it must (untimed)."""
    management = {"Authorization": f"Bearer {cp.keys['management']}"}
    async with httpx.AsyncClient(base_url=f"{cp.url}/api/v1", timeout=30) as api:
        made = await api.post(
            "/change-requests",
            json={
                "environment": "production",
                "title": "back on",
                "changes": [{"flag": FLAG, "settings": {"enabled": True}}],
            },
            headers=management,
        )
        made.raise_for_status()
        ident = made.json()["id"]
        approved = await api.post(
            f"/change-requests/{ident}/approve",
            json={},
            headers={"Authorization": f"Bearer {approver}"},
        )
        approved.raise_for_status()
        (await api.post(f"/change-requests/{ident}/apply", headers=management)).raise_for_status()


@dataclasses.dataclass
class ClickSide:
    """Turn-offs clicked in the console, each from a flag that every relay serves on."""

    label: str
    cp: ControlPlane
    urls: list[str]
    approver: str | None = None  # production protected: who approves turning back on
    write_ms: list[float] = dataclasses.field(default_factory=list)
    path_ms: list[float] = dataclasses.field(default_factory=list)

    async def _measure(self, clicks: int) -> None:
        console = Console(self.cp)
        await console.sign_in()
        await console.click(False)  # from off, whatever the last round left
        await asyncio.sleep(0.5)  # every relay has it before the streams read their versions
        async with Streams(self.urls, self.cp.keys["public"]) as streams:
            for _ in range(clicks):
                if self.approver is None:
                    await console.click(True)
                else:
                    await _on_by_request(self.cp, self.approver)
                deadline = time.perf_counter() + TIMEOUT_S
                for index in range(len(self.urls)):
                    await streams.next_change(index, deadline)
                started, answered = await console.click(False)
                deadline = answered + TIMEOUT_S
                arrivals = [await streams.next_change(i, deadline) for i in range(len(self.urls))]
                self.write_ms.append((answered - started) * 1000)
                if all(at is not None for at in arrivals):
                    self.path_ms.append((max(a for a in arrivals if a) - started) * 1000)
        await console.client.aclose()

    def measure(self, clicks: int) -> None:
        asyncio.run(self._measure(clicks))

    def rows(self) -> list[Row]:
        return [
            Row(
                f"{self.label}: console click (turn off) → response",
                Spread.of(self.write_ms).text(2),
            ),
            Row(
                f"{self.label}: console click (turn off) → every relay (kill switch path)",
                Spread.of(self.path_ms).text(1),
                f"{len(self.path_ms)} of {len(self.write_ms)} seen by every relay",
            ),
        ]


def _protect(cp: ControlPlane, approvals: int) -> None:
    answer = cp.api("PATCH", "/environments/production", {"requiredApprovals": approvals})
    answer.raise_for_status()


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
    clicks = int(os.environ.get("CLICKS", "60"))
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
            approver = person.keys["management"]
            click_sides = [
                ClickSide("before", before, before_urls),
                ClickSide("after", after, after_urls),
                ClickSide("after, production protected", after, after_urls, approver),
            ]
            wait_quiet()
            # interleaved rounds: what else the machine does falls on every side alike
            for n in range(rounds):
                log(f"round {n + 1} of {rounds}")
                for side in sides:
                    side.measure(toggles // rounds)
                for click_side in click_sides:
                    if click_side.approver is not None:
                        _protect(after, 1)
                    click_side.measure(clicks // rounds)
                    if click_side.approver is not None:
                        _protect(after, 0)
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
        [row for side in sides for row in side.rows()]
        + verdict
        + [row for click_side in click_sides for row in click_side.rows()],
        notes=[
            "Each toggle waits for every relay's event before the next (20-100 ms apart).",
            "The kill switch's path is request sent → the relay's OFREP event stream announcing it.",
            f"Console clicks: {clicks} turn-offs a side, each from on (turned on by a click, or "
            "in protected production by an approved change request, untimed).",
        ],
    )


if __name__ == "__main__":
    main()
