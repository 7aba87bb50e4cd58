"""Promotion over real processes (issue #36): ``vane plan --from-env staging --to-env
production`` shows the setting change in production only, ``vane apply`` makes it (the relay
serves staging's rule and targets in production, the audit names the promotion), a second plan
has nothing to change; a protected production gets a change request instead; and across
instances, an export of one is promoted into the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_flags_as_code import stack as stack  # the fixture
from tests.e2e.test_flags_as_code import vane
from tests.e2e.test_relays import ControlPlane, Relay, eventually, serves, start_control_plane

pytestmark = pytest.mark.e2e

PROMOTE = ("--from-env", "staging", "--to-env", "production")
NAME = "promotion staging -> production"


def ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json()


def make_checkout(cp: ControlPlane) -> None:
    """``checkout`` on in staging with a rule for NL and a target, off in production; ``banner``
    the same in both."""
    variations = [{"value": "classic"}, {"value": "express"}]
    ok(cp.api("POST", "/flags", {"key": "checkout", "type": "string", "variations": variations}))
    ok(cp.api("POST", "/flags", {"key": "banner"}))
    staging = "/flags/checkout/environments/staging"
    ok(
        cp.api(
            "PUT",
            staging,
            {
                "enabled": True,
                "fallthrough": {"variation": 0},
                "targets": [{"variation": 1, "values": ["qa-1"]}],
            },
        )
    )
    rule = {"id": "nl", "clauses": [{"attribute": "country", "values": ["NL"]}], "variation": 1}
    ok(cp.api("PUT", staging + "/rules", {"rules": [rule]}))


def test_plan_then_apply_a_promotion_from_staging_to_production(
    stack: tuple[ControlPlane, Relay],
) -> None:
    cp, relay = stack
    make_checkout(cp)
    public = cp.keys["public"]  # production's
    eventually(serves(relay, public, "checkout", "express"), what="checkout is off in production")

    planned = vane(cp, "plan", *PROMOTE)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert planned.stderr == "promoting 2 flag(s) from staging to production\n"
    lines = planned.stdout.splitlines()
    assert lines[0] == "~ setting checkout in production: update"
    assert "    enabled: false -> true" in lines
    assert any(line.startswith('    targets: [] -> [{"variation": 1') for line in lines)
    assert any(line.startswith('    rules: [] -> [{"id": "nl"') for line in lines)
    assert not any(line.startswith(("~", "+", "-", "?")) for line in lines[1:])
    assert lines[-1] == "Plan: 1 to update; 5 left alone."

    applied = vane(cp, "apply", *PROMOTE, "--flag", "checkout")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[-1] == "1 change(s) applied"
    eventually(serves(relay, public, "checkout", "classic"), what="the promoted fallthrough")
    nl = relay.evaluate(public, "checkout", {"targetingKey": "u-1", "country": "NL"})
    assert nl.json()["value"] == "express"
    qa = relay.evaluate(public, "checkout", {"targetingKey": "qa-1"})
    assert qa.json()["value"] == "express"

    again = vane(cp, "plan", *PROMOTE)
    assert (again.returncode, again.stdout) == (0, "Plan: nothing to change; 6 left alone.\n")
    entries = ok(cp.api("GET", "/audit?limit=200"))["entries"]
    promoted = [e for e in entries if (e.get("after") or {}).get("appliedFrom") == NAME]
    assert {(e["action"], e["resourceKey"]) for e in promoted} == {
        ("flag.settings.update", "checkout"),
        ("flag.rules.update", "checkout"),
    }


def test_a_promotion_is_refused_naming_what_is_wrong(stack: tuple[ControlPlane, Relay]) -> None:
    cp, _ = stack
    ok(cp.api("POST", "/flags", {"key": "banner"}))
    unknown = vane(cp, "plan", "--from-env", "staging", "--to-env", "nowhere")
    assert unknown.returncode == 1
    assert unknown.stderr == (
        "error: cannot promote: no environment 'nowhere' to promote to (target)\n"
    )
    missing = vane(cp, "apply", *PROMOTE, "--flag", "banner", "--flag", "nope")
    assert missing.returncode == 1
    assert "no such flag in the document: 'nope'" in missing.stderr
    assert vane(cp, "plan", "--from-env", "staging").returncode == 1  # usage: 1, not 2
    assert "--from-env and --to-env go together" in vane(cp, "plan", "--to-env", "x").stderr


def test_a_promotion_to_a_protected_production_opens_a_change_request(
    stack: tuple[ControlPlane, Relay],
) -> None:
    cp, relay = stack
    ok(cp.api("PATCH", "/environments/production", {"requiredApprovals": 1}))
    make_checkout(cp)
    applied = vane(cp, "apply", *PROMOTE)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    lines = applied.stdout.splitlines()
    assert lines[0] == (
        "? setting checkout in production: propose (requires approval: a change request)"
    )
    assert "0 change(s) applied; environment production requires approval" in lines[-1]
    (request,) = ok(cp.api("GET", "/change-requests?status=open"))["changeRequests"]
    assert request["id"] in lines[-1]
    assert request["title"] == f"Applied from {NAME}"
    setting = ok(cp.api("GET", "/flags/checkout/environments/production"))
    assert (setting["enabled"], setting["targets"]) == (False, [])  # proposed, not written
    public = cp.keys["public"]
    eventually(serves(relay, public, "checkout", "express"), what="production is still off")


def test_across_instances_an_export_of_one_is_promoted_into_the_other(
    stack: tuple[ControlPlane, Relay], tmp_path: Path
) -> None:
    first, _ = stack
    make_checkout(first)
    exported = tmp_path / "first.json"
    assert vane(first, "export", "--json", "--out", str(exported)).returncode == 0
    (tmp_path / "second").mkdir()
    second = start_control_plane(f"sqlite:///{tmp_path / 'second.db'}", tmp_path / "second")
    try:
        from_file = ("--from-file", str(exported), "--flag", "checkout")
        planned = vane(second, "plan", *PROMOTE, *from_file)
        assert planned.returncode == 2, planned.stdout + planned.stderr
        assert planned.stdout.splitlines()[0] == "+ flag checkout: create"
        applied = vane(second, "apply", *PROMOTE, *from_file)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        document = json.loads(exported.read_text())
        staging = next(f for f in document["flags"] if f["key"] == "checkout")["environments"]
        made = ok(second.api("GET", "/export"))
        (checkout,) = made["flags"]
        assert checkout["environments"]["production"] == staging["staging"]
        assert checkout["environments"]["staging"]["enabled"] is False  # left as made
        assert vane(second, "plan", *PROMOTE, *from_file).returncode == 0
    finally:
        second.process.stop()
