"""Flags as code at scale (issue #36): plan and apply a project document of 10,000 flags in
3 environments, against targets of plan < 5 s, apply < 30 s and one publish per environment.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_projectfile   # FLAGS=10000 DATABASES=sqlite,postgresql

For each database (SQLite in a temporary directory; PostgreSQL: a fresh database created on the
server at ``VANE_TEST_POSTGRES_URL``, default ``postgresql://postgres@127.0.0.1:5432/test``, and
dropped after, skipped if the server does not answer) a control plane is started as ``vane
control-plane`` (a real process, as the e2e tests start it) and sent, through its HTTP API:

1. ``POST /plan`` of the new project: ``FLAGS`` flags of four types (boolean, string, number,
   json), each with settings in ``staging``, ``production`` (made by the bootstrap) and ``qa``
   (made by the document): a fallthrough (a variation or a 50/50 rollout), one rule on an
   attribute, a segment rule on every fifth flag (20 segments in the document), targets on
   every third, and on two flags in ten a prerequisite on another flag;
2. ``POST /apply`` of it with the plan's versions;
3. ``POST /plan`` again: nothing to change;
4. an edit of 1 % of the flags (production turned on or off, a staging rule's values, the
   description), then its plan and apply.

Each call is reported with its wall time and the CPU time the control plane process spent on
it (``/proc``): on a machine shared with other work the first is the second stretched by the
share the process got. Each plan is sent ``PLANS`` times (default 3; a plan writes nothing) and
the best is reported with the slowest beside it. Publishes are counted as a user sees them: each environment's
``snapshotVersion`` (``GET /environments``) before and after an apply; one publish per
environment per apply moves it by exactly one.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.benchmarks.common import Cleanup, Row, cpu_seconds, log, print_table, wait_quiet
from tests.e2e.test_relays import ControlPlane, start_control_plane

POSTGRES_URL = os.environ.get("VANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
ENVIRONMENTS = ("staging", "production", "qa")
SEGMENTS = 20
TYPES = ("boolean", "string", "number", "json")
VALUES: dict[str, list[Any]] = {
    "boolean": [True, False],
    "string": ["red", "green", "blue"],
    "number": [1, 2.5, 10],
    "json": [{"layout": "grid"}, {"layout": "list"}],
}
TIMEOUT = httpx.Timeout(900.0, connect=10.0)


def _setting(i: int, env: int, kind: str, flags: int) -> dict[str, Any]:
    count = len(VALUES[kind])
    rules: list[dict[str, Any]] = [
        {
            "id": f"r{i}-country",
            "description": "",
            "clauses": [
                {"attribute": "country", "op": "in", "values": ["DE", "FR"], "negate": False}
            ],
            "serve": {"variation": 1},
        }
    ]
    if i % 5 == 0:
        rules.append(
            {
                "id": f"r{i}-segment",
                "description": "",
                "clauses": [
                    {
                        "attribute": "",
                        "op": "segmentMatch",
                        "values": [f"segment-{i % SEGMENTS:02d}"],
                        "negate": False,
                    }
                ],
                "serve": {"variation": 0},
            }
        )
    fallthrough: dict[str, Any] = (
        {"rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 50}]}
        if i % 2
        else {"variation": 0}
    )
    setting: dict[str, Any] = {
        "enabled": (i + env) % 3 != 0,
        "offVariation": count - 1,
        "fallthrough": fallthrough,
        "rules": rules,
    }
    if i % 3 == 0:
        setting["targets"] = [{"variation": 0, "values": [f"user-{i}", f"user-{i + 1}"]}]
    if i % 10 in (1, 2) and i - i % 10 < flags:
        setting["prerequisites"] = [{"key": _key(i - i % 10), "variation": 0}]
    return setting


def _key(i: int) -> str:
    return f"flag-{i:05d}"


def document(flags: int) -> dict[str, Any]:
    """The project: 3 environments, ``SEGMENTS`` segments and ``flags`` flags."""
    segments = [
        {
            "key": f"segment-{j:02d}",
            "included": [f"user-{j}"],
            "rules": [
                {
                    "clauses": [
                        {"attribute": "plan", "op": "in", "values": ["pro"], "negate": False}
                    ],
                    "weight": 50,
                }
            ],
        }
        for j in range(SEGMENTS)
    ]
    items = []
    for i in range(flags):
        kind = TYPES[i % len(TYPES)]
        items.append(
            {
                "key": _key(i),
                "type": kind,
                "description": f"flag number {i}",
                "tags": ["bench", kind],
                "variations": [{"idx": n, "value": x} for n, x in enumerate(VALUES[kind])],
                "environments": {
                    env: _setting(i, e, kind, flags) for e, env in enumerate(ENVIRONMENTS)
                },
            }
        )
    return {
        "version": 1,
        "environments": [
            {"key": "production", "critical": True},
            {"key": "qa", "name": "QA", "critical": False},
            {"key": "staging", "critical": False},
        ],
        "segments": segments,
        "flags": items,
    }


def edit(doc: dict[str, Any], share: float = 0.01) -> int:
    """Change ``share`` of the flags: production on/off, a staging rule's values, the
    description. Answers how many."""
    step = max(1, round(1 / share))
    edited = 0
    for flag in doc["flags"][::step]:
        production = flag["environments"]["production"]
        production["enabled"] = not production["enabled"]
        flag["environments"]["staging"]["rules"][0]["clauses"][0]["values"] = ["DE", "FR", "IT"]
        flag["description"] += " (edited)"
        edited += 1
    return edited


PLANS = int(os.environ.get("PLANS", "3"))
"""How many times each plan is sent (a plan writes nothing, so each answers alike): the best
is reported, with the slowest beside it. This machine's speed moves by as much as half from
one minute to the next; an apply, which changes what the next would do, is sent once."""


class Timed:
    """A call's wall time and the CPU time the control plane process spent on it (on a busy
    machine the wall time is the CPU time stretched by the share the process got)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu = 0.0

    def call(self, client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[str, Any]:
        took, cpu, answer = self._once(client, path, body)
        return f"{took:.2f} s (CPU {cpu:.2f} s)", answer

    def best(self, client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[str, Any]:
        """``call``, ``PLANS`` times: the best, and the slowest wall time beside it."""
        runs = [self._once(client, path, body) for _ in range(PLANS)]
        took, cpu, answer = min(runs, key=lambda run: run[0])
        if any(run[2] != answer for run in runs):
            raise SystemExit(f"{path} answered differently when sent again")
        slowest = max(run[0] for run in runs)
        return f"{took:.2f} s (CPU {cpu:.2f} s; best of {PLANS}, slowest {slowest:.2f} s)", answer

    def _once(
        self, client: httpx.Client, path: str, body: dict[str, Any]
    ) -> tuple[float, float, Any]:
        cpu, began = cpu_seconds(self.pid), time.perf_counter()
        response = client.post(path, json=body)
        took = time.perf_counter() - began
        self.cpu = cpu_seconds(self.pid) - cpu
        if response.status_code != 200:
            raise SystemExit(f"{path} answered {response.status_code}: {response.text[:2000]}")
        return took, self.cpu, response.json()


def _versions(client: httpx.Client) -> dict[str, int]:
    found = client.get("/environments").json()["environments"]
    return {e["key"]: int(e["snapshotVersion"]) for e in found}


def _moved(before: dict[str, int], after: dict[str, int]) -> str:
    return ", ".join(f"{k} +{after[k] - before.get(k, 0)}" for k in sorted(after))


def measure(cp: ControlPlane, flags: int, label: str) -> list[Row]:
    doc = document(flags)
    rows: list[Row] = []
    timed = Timed(cp.process.popen.pid)
    headers = {"Authorization": f"Bearer {cp.keys['management']}"}
    with httpx.Client(base_url=f"{cp.url}/api/v1", headers=headers, timeout=TIMEOUT) as client:
        wait_quiet()
        log(f"{label}: plan of {flags} new flags")
        took, planned = timed.best(client, "/plan", {"document": doc})
        changes = f"{len(planned['changes'])} changes"
        rows.append(Row(f"{label}: plan, new project", took, changes, "target < 5 s"))
        before = _versions(client)
        log(f"{label}: apply")
        body = {"document": doc, "versions": planned["versions"], "fileName": "bench.yaml"}
        took, applied = timed.call(client, "/apply", body)
        after = _versions(client)
        rows.append(Row(f"{label}: apply, new project", took, applied["message"], "target < 30 s"))
        rows.append(
            Row(f"{label}: snapshotVersion moved", _moved(before, after), "", "target: +1 each")
        )
        log(f"{label}: plan again")
        took, again = timed.best(client, "/plan", {"document": doc})
        rows.append(
            Row(
                f"{label}: plan, nothing to change",
                took,
                f"hasChanges {again['hasChanges']}, {len(again['changes'])} changes",
                "target < 5 s",
            )
        )
        count = edit(doc)
        log(f"{label}: plan and apply of {count} edited flags")
        took, planned = timed.best(client, "/plan", {"document": doc})
        rows.append(
            Row(
                f"{label}: plan, {count} flags edited",
                took,
                f"{len(planned['changes'])} changes",
                "target < 5 s",
            )
        )
        before = _versions(client)
        body = {"document": doc, "versions": planned["versions"], "fileName": "bench.yaml"}
        took, applied = timed.call(client, "/apply", body)
        after = _versions(client)
        rows.append(
            Row(
                f"{label}: apply, {count} flags edited",
                took,
                applied["message"],
                "target < 30 s",
            )
        )
        rows.append(
            Row(f"{label}: snapshotVersion moved", _moved(before, after), "", "target: +1 each")
        )
    return rows


def _postgres_database() -> tuple[str, str] | None:
    """A fresh database on the server (its URL and name), or None if none answers."""
    try:
        import psycopg

        name = f"vane_bench_pf_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # the server is not there: the figure says so
        log(f"PostgreSQL unavailable: {exc}")
        return None
    base, _, _ = POSTGRES_URL.rpartition("/")
    return f"{base}/{name}", name


def _drop(name: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _one(database: str, flags: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="vane-bench-pf-") as tmp:
        tmp_path = Path(tmp)
        dropped: str | None = None
        if database == "sqlite":
            url = f"sqlite:///{tmp_path / 'vane.db'}"
        else:
            made = _postgres_database()
            if made is None:
                return [Row(database, "unavailable", POSTGRES_URL)]
            url, dropped = made
        try:
            with Cleanup() as cleanup:
                log(f"{database}: starting the control plane")
                cp = start_control_plane(url, tmp_path)
                cleanup.add(cp.process)
                return measure(cp, flags, database)
        finally:
            if dropped is not None:
                _drop(dropped)


def main() -> None:
    flags = int(os.environ.get("FLAGS", "10000"))
    databases = os.environ.get("DATABASES", "sqlite,postgresql").split(",")
    rows: list[Row] = []
    notes = [
        f"{flags} flags ({', '.join(TYPES)}) in 3 environments ({', '.join(ENVIRONMENTS)}; "
        f"qa made by the document), {SEGMENTS} segments; a control plane process per database, "
        "over HTTP; publishes counted by each environment's snapshotVersion."
    ]
    for database in databases:
        rows += _one(database, flags)
    print_table(f"Flags as code: {flags} flags, 3 environments", rows, notes)


if __name__ == "__main__":
    main()
