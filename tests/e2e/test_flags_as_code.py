"""Flags as code over real processes (issue #36): a control plane and a relay started as
``vane`` starts them, and the ``vane export``, ``vane plan`` and ``vane apply`` commands a CI
job runs: export, plan shows nothing, an edit plans as exactly that edit, apply, the relay
serves it, the export equals the edited file, and applying again changes nothing."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_relays import (
    ControlPlane,
    Relay,
    eventually,
    serves,
    start_control_plane,
    start_relay,
)
from tests.processes import VANE

pytestmark = pytest.mark.e2e


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[ControlPlane, Relay]]:
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        yield cp, relay
    finally:
        relay.process.stop()
        cp.process.stop()


def vane(cp: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VANE_URL": cp.url, "VANE_API_KEY": cp.keys["management"]}
    return subprocess.run([*VANE, *args], env=env, capture_output=True, text=True, timeout=120)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_export_plan_edit_apply_serve_export(
    stack: tuple[ControlPlane, Relay], tmp_path: Path
) -> None:
    cp, relay = stack
    made = cp.api(
        "POST",
        "/flags",
        {
            "key": "checkout",
            "type": "string",
            "variations": [{"value": "classic"}, {"value": "express"}],
        },
    )
    assert made.status_code == 201, made.text
    public = cp.keys["public"]  # production's
    eventually(
        serves(relay, public, "checkout", "express"), what="the relay serves the new flag off"
    )
    file = tmp_path / "vane.yaml"
    exported = vane(cp, "export", "--out", str(file))
    assert exported.returncode == 0, exported.stderr
    planned = vane(cp, "plan", str(file))
    assert (planned.returncode, planned.stdout) == (0, "Plan: nothing to change; 5 left alone.\n")

    document = load(file)
    (flag,) = document["flags"]
    production = flag["environments"]["production"]
    production["enabled"] = True
    production["rules"] = [
        {"clauses": [{"attribute": "country", "values": ["NL"]}], "variation": 1}
    ]
    production["fallthrough"] = {"variation": 0}
    file.write_text(yaml.safe_dump(document, sort_keys=False))
    planned = vane(cp, "plan", str(file))
    assert planned.returncode == 2, planned.stdout + planned.stderr
    lines = planned.stdout.splitlines()
    assert lines[:2] == ["~ setting checkout in production: update", "    enabled: false -> true"]
    assert lines[2].startswith('    rules: [] -> [{"description": "", "clauses": [{"op": "in", ')
    assert lines[3:] == ["Plan: 1 to update; 4 left alone."]

    applied = vane(cp, "apply", str(file))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[-1] == "1 change(s) applied"
    eventually(serves(relay, public, "checkout", "classic"), what="the relay serves the edit")
    nl = relay.evaluate(public, "checkout", {"targetingKey": "u-1", "country": "NL"})
    assert nl.json()["value"] == "express"

    again = vane(cp, "export", "--json", "--out", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stderr
    after = load(tmp_path / "again.json")
    rule = after["flags"][0]["environments"]["production"]["rules"][0]
    assert rule.pop("id").startswith("rule_")
    assert rule == {
        "description": "",
        "clauses": [{"op": "in", "attribute": "country", "values": ["NL"], "negate": False}],
        "serve": {"variation": 1},
    }
    production["rules"] = [rule]
    assert after["flags"][0]["environments"]["production"]["rules"] == [rule]
    assert {**after, "flags": []} == {**document, "flags": []}
    assert vane(cp, "plan", str(file)).returncode == 0  # the edited file is now what is live
    second = vane(cp, "apply", str(file))
    assert (second.returncode, second.stdout.splitlines()[-1]) == (
        0,
        "Plan: nothing to change; 5 left alone.",
    )


def test_a_bad_file_exits_1_naming_the_path(
    stack: tuple[ControlPlane, Relay], tmp_path: Path
) -> None:
    cp, _ = stack
    file = tmp_path / "bad.yaml"
    file.write_text(
        "flags:\n- key: x\n  variations: [{value: true}, {value: false}]\n  colour: blue\n"
    )
    planned = vane(cp, "plan", str(file))
    assert planned.returncode == 1
    assert "flags[0].colour" in planned.stderr
    assert vane(cp, "plan", str(tmp_path / "missing.yaml")).returncode == 1


def test_a_webhook_made_from_a_file_is_noted_never_its_secret(
    stack: tuple[ControlPlane, Relay], tmp_path: Path
) -> None:
    """``vane plan`` and ``vane apply`` print how to set a new webhook's secret; the secret
    that was generated is printed nowhere, and the export never holds one."""
    cp, _ = stack
    file = tmp_path / "vane.yaml"
    file.write_text("webhooks:\n- url: https://hooks.example.com/vane\n  events: ['flag.*']\n")
    planned = vane(cp, "plan", str(file))
    assert planned.returncode == 2, planned.stderr
    assert "+ webhook https://hooks.example.com/vane: create" in planned.stdout
    assert "Note: webhook https://hooks.example.com/vane" in planned.stdout
    assert "PATCH /webhooks/{id}" in planned.stdout
    applied = vane(cp, "apply", str(file))
    assert applied.returncode == 0, applied.stderr
    assert "whsec_" not in applied.stdout + applied.stderr
    assert vane(cp, "plan", str(file)).returncode == 0
    exported = vane(cp, "export", "--json")
    assert exported.returncode == 0, exported.stderr
    assert "secret" not in exported.stdout.lower()
