"""``vane import`` over real processes (issue #36): another product's flag file is converted,
planned (``--dry-run`` stops there), applied with apply's guarantees, and served by the relay;
what has no Vane equivalent is listed by name, what cannot be converted is refused naming the
flag and the construct, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_flags_as_code import stack as stack  # the fixture
from tests.e2e.test_flags_as_code import vane
from tests.e2e.test_relays import ControlPlane, Relay, eventually

pytestmark = pytest.mark.e2e

LD: dict[str, Any] = {
    "flags": {
        "Checkout": {
            "key": "Checkout",
            "on": True,
            "variations": ["classic", "express", "beta"],
            "offVariation": 0,
            "fallthrough": {
                "rollout": {
                    "variations": [
                        {"variation": 0, "weight": 25000},
                        {"variation": 1, "weight": 75000},
                    ],
                    "contextKind": "user",
                    "bucketBy": "key",
                }
            },
            "targets": [{"variation": 2, "values": ["qa-1"]}],
            "contextTargets": [{"contextKind": "org", "variation": 2, "values": ["acme"]}],
            "rules": [
                {
                    "id": "nl",
                    "clauses": [
                        {"attribute": "country", "op": "in", "values": ["NL"], "negate": False}
                    ],
                    "variation": 1,
                    "trackEvents": True,
                },
                {
                    "id": "beta",
                    "clauses": [{"attribute": "", "op": "segmentMatch", "values": ["testers"]}],
                    "variation": 2,
                },
            ],
            "prerequisites": [{"key": "login", "variation": 0}],
            "salt": "abc",
            "clientSideAvailability": {"usingEnvironmentId": True, "usingMobileKey": True},
            "trackEvents": True,
            "version": 7,
        },
        "login": {
            "key": "login",
            "on": True,
            "variations": [True, False],
            "offVariation": 1,
            "fallthrough": {"variation": 0},
        },
    },
    "segments": {
        "testers": {"key": "testers", "included": ["t-1"], "rules": [], "salt": "x"},
    },
}


def test_a_launchdarkly_file_is_planned_then_applied_and_served(
    stack: tuple[ControlPlane, Relay],
    tmp_path: Path,
) -> None:
    cp, relay = stack
    file = tmp_path / "ld.json"
    file.write_text(json.dumps(LD))

    dry = vane(cp, "import", "--from", "launchdarkly", str(file), "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "+ flag checkout: create" in dry.stdout.splitlines()
    assert "+ segment testers: create" in dry.stdout.splitlines()
    notes = dry.stderr.splitlines()
    assert "not converted: flag Checkout: imported as checkout (Vane's keys are lowercase)" in notes
    assert "not converted: flag checkout: trackEvents (no Vane equivalent)" in notes
    assert "not converted: flag checkout rules[0]: trackEvents (no Vane equivalent)" in notes
    assert any(n.startswith("not converted: flag checkout: salt") for n in notes)
    assert cp.api("GET", "/flags/checkout").status_code == 404  # a dry run writes nothing

    applied = vane(cp, "import", "--from", "launchdarkly", str(file))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    public = cp.keys["public"]  # production's

    def nl() -> Any:
        return relay.evaluate(public, "checkout", {"targetingKey": "u-9", "country": "NL"})

    eventually(
        lambda: nl().status_code == 200 and nl().json()["value"] == "express",
        what=lambda: f"the NL rule is served: {nl().text}",
    )
    tester = relay.evaluate(public, "checkout", {"targetingKey": "t-1"})
    assert tester.json()["value"] == "beta"
    org = relay.evaluate(
        public, "checkout", {"kind": "multi", "user": {"key": "u-3"}, "org": {"key": "acme"}}
    )
    assert org.json()["value"] == "beta"
    setting = cp.api("GET", "/flags/checkout/environments/production").json()
    assert setting["fallthrough"]["rollout"] == [
        {"idx": 0, "weight": 25},
        {"idx": 1, "weight": 75},
    ]
    audit = cp.api("GET", "/audit?limit=50").json()["entries"]
    assert any((e.get("after") or {}).get("appliedFrom") == "ld.json" for e in audit), audit[:3]

    again = vane(cp, "import", "--from", "launchdarkly", str(file))
    assert again.returncode == 0
    assert again.stdout.splitlines()[-1].startswith("Plan: nothing to change")


def test_a_flag_that_cannot_be_converted_refuses_the_import(
    stack: tuple[ControlPlane, Relay],
    tmp_path: Path,
) -> None:
    cp, _ = stack
    bad = json.loads(json.dumps(LD))
    bad["flags"]["login"]["rules"] = [
        {"clauses": [{"attribute": "x", "op": "unknownOp", "values": [1]}], "variation": 0}
    ]
    file = tmp_path / "ld.json"
    file.write_text(json.dumps(bad))
    refused = vane(cp, "import", "--from", "launchdarkly", str(file))
    assert refused.returncode == 1
    assert "flag login rules[0] clauses[0]: operator 'unknownOp'" in refused.stderr
    assert cp.api("GET", "/flags/login").status_code == 404


def test_a_flagd_file_imports_and_the_project_exports_as_flagd(
    stack: tuple[ControlPlane, Relay],
    tmp_path: Path,
) -> None:
    cp, _ = stack
    file = tmp_path / "flags.flagd.json"
    flags = {
        "flags": {
            "banner": {
                "state": "ENABLED",
                "variants": {"off": "none", "red": "red"},
                "defaultVariant": "off",
                "targeting": {"if": [{"in": [{"var": "country"}, ["DE"]]}, "red", None]},
            }
        }
    }
    file.write_text(json.dumps(flags))
    dry = vane(cp, "import", "--from", "flagd", str(file), "--dry-run")
    assert dry.returncode == 2, dry.stdout + dry.stderr
    assert "+ flag banner: create" in dry.stdout.splitlines()
    assert vane(cp, "import", "--from", "flagd", str(file)).returncode == 0
    answer = cp.api(
        "POST",
        "/flags/banner/environments/production/evaluate",
        {"context": {"key": "u", "country": "DE"}},
    )
    assert answer.json()["value"] == "red"
    out = tmp_path / "out.flagd.json"
    exported = vane(cp, "export", "--format", "flagd", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert json.loads(out.read_text())["flags"]["banner"] == {
        "state": "ENABLED",
        "variants": {"off": "none", "red": "red"},
        "defaultVariant": "off",
        "targeting": {"if": [{"in": [{"var": "country"}, ["DE"]]}, "red", "off"]},
    }
    bad = {
        "flags": {
            "x": {
                "variants": {"a": 1},
                "defaultVariant": "a",
                "targeting": {"if": [{"some": [1]}, "a", None]},
            }
        }
    }
    file.write_text(json.dumps(bad))
    refused = vane(cp, "import", "--from", "flagd", str(file))
    assert refused.returncode == 1
    assert "flag x: operator 'some'" in refused.stderr


def test_an_unleash_export_into_a_protected_environment_opens_a_change_request(
    stack: tuple[ControlPlane, Relay],
    tmp_path: Path,
) -> None:
    cp, _ = stack
    made = cp.api("POST", "/flags", {"key": "beta-banner"})
    assert made.status_code == 201, made.text
    protected = cp.api("PATCH", "/environments/production", {"requiredApprovals": 1})
    assert protected.status_code == 200, protected.text
    export = {
        "features": [{"name": "beta-banner", "type": "release"}],
        "featureStrategies": [
            {
                "featureName": "beta-banner",
                "environment": "production",
                "name": "userWithId",
                "parameters": {"userIds": "ann"},
            }
        ],
        "featureEnvironments": [
            {"featureName": "beta-banner", "environment": "production", "enabled": True}
        ],
    }
    file = tmp_path / "unleash.json"
    file.write_text(json.dumps(export))
    done = vane(cp, "import", "--from", "unleash", str(file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "? setting beta-banner in production: propose" in done.stdout
    assert "change request" in done.stdout.splitlines()[-1]
    setting = cp.api("GET", "/flags/beta-banner/environments/production").json()
    assert setting["enabled"] is False  # not written: proposed for review
