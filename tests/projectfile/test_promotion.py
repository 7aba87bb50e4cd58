"""Promotion (issue #36): flags' settings in one environment copied to another as a partial
document (``promote``), which plans as a change to the target only and applies with apply's
guarantees: a change request where the target requires approval, a cycle refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from control_plane.domain.projectfile.promotion import PromotionRefused, promote
from control_plane.entry.flags_as_code import build_parser, check_arguments
from tests.conftest import Api
from tests.projectfile.conftest import apply, export, flag_of, ok, plan
from vane import cli


def setting(enabled: bool, variation: int, rules: list[Any] | None = None) -> dict[str, Any]:
    return {
        "enabled": enabled,
        "offVariation": 0,
        "fallthrough": {"variation": variation},
        "targets": [{"variation": 1, "values": ["qa-1"]}] if enabled else [],
        "prerequisites": [],
        "rules": rules or [],
    }


def flag(
    key: str, *, archived: bool = False, envs: tuple[str, ...] = ("dev", "prod", "stg")
) -> Any:
    return {
        "key": key,
        "name": key.title(),
        "description": "",
        "type": "boolean",
        "temporary": True,
        "bucketBy": "key",
        "tags": ["t"],
        "clientSide": True,
        "archived": archived,
        "variations": [{"value": True, "idx": 0}, {"value": False, "idx": 1}],
        "environments": {e: setting(e == "stg", 1 if e == "stg" else 0) for e in envs},
    }


RULE = {
    "id": "rule_1",
    "description": "NL",
    "clauses": [{"op": "in", "attribute": "country", "values": ["NL"], "negate": False}],
    "serve": {"variation": 1},
}

DOCUMENT: dict[str, Any] = {
    "version": 1,
    "environments": [{"key": k, "requiredApprovals": 0} for k in ("dev", "prod", "stg")],
    "segments": [{"key": "beta", "included": ["u1"]}],
    "flags": [flag("a"), flag("b"), flag("old", archived=True)],
    "metrics": [{"key": "revenue", "name": "Revenue", "aggregation": "sum", "event": "buy"}],
}
DOCUMENT["flags"][0]["environments"]["stg"]["rules"] = [RULE]


def test_every_flag_not_archived_gets_the_source_setting_in_the_target_only() -> None:
    given = copy.deepcopy(DOCUMENT)
    promoted = promote(given, "stg", "prod", None)
    assert set(promoted) == {"version", "flags"}  # environments, segments, metrics left alone
    assert promoted["version"] == 1
    assert [f["key"] for f in promoted["flags"]] == ["a", "b"]
    a = promoted["flags"][0]
    assert {k: v for k, v in a.items() if k != "environments"} == {
        k: v for k, v in DOCUMENT["flags"][0].items() if k != "environments"
    }
    assert a["environments"] == {"prod": DOCUMENT["flags"][0]["environments"]["stg"]}
    assert a["environments"]["prod"]["rules"] == [RULE]  # ids and all: on/off too
    assert a["environments"]["prod"]["enabled"] is True
    a["environments"]["prod"]["rules"][0]["clauses"][0]["values"].append("BE")
    a["tags"].append("changed")
    assert given == DOCUMENT  # a copy: the document given is not touched


def test_named_flags_only_once_each_in_key_order() -> None:
    promoted = promote(DOCUMENT, "stg", "dev", ["b", "a", "b"])
    assert [f["key"] for f in promoted["flags"]] == ["a", "b"]
    assert all(set(f["environments"]) == {"dev"} for f in promoted["flags"])
    assert promote(DOCUMENT, "stg", "dev", [])["flags"] == []


def test_the_target_may_be_an_environment_of_another_instance() -> None:
    promoted = promote(DOCUMENT, "stg", "production", ["a"], targets=["production"])
    assert set(promoted["flags"][0]["environments"]) == {"production"}
    with pytest.raises(PromotionRefused, match="no environment 'prod' to promote to"):
        promote(DOCUMENT, "stg", "prod", ["a"], targets=["production"])


@pytest.mark.parametrize(
    ("source", "target", "flags", "message"),
    [
        ("stg", "stg", None, "the source and target environment are both 'stg'"),
        ("qa", "prod", None, "no environment 'qa' in the document (source)"),
        ("stg", "qa", None, "no environment 'qa' to promote to (target)"),
        ("stg", "prod", ["a", "nope", "gone"], "no such flag in the document: 'nope', 'gone'"),
        ("stg", "prod", ["old", "a"], "archived flag(s) 'old': restore them to promote"),
    ],
)
def test_refusals_name_what_is_wrong(
    source: str, target: str, flags: list[str] | None, message: str
) -> None:
    with pytest.raises(PromotionRefused) as refused:
        promote(DOCUMENT, source, target, flags)
    assert str(refused.value).startswith(message)


def test_a_flag_without_a_setting_in_the_source_is_refused() -> None:
    document = {**DOCUMENT, "flags": [flag("a", envs=("prod",))]}
    with pytest.raises(PromotionRefused, match=r"flag\(s\) 'a' have no setting in 'stg'"):
        promote(document, "stg", "prod")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan"], "give FILE, or --from-env and --to-env to promote"),
        (["plan", "--from-env", "staging"], "--from-env and --to-env go together"),
        (["apply", "x.yaml", "--from-env", "a", "--to-env", "b"], "not both"),
        (["plan", "x.yaml", "--flag", "checkout"], "--flag and --from-file go with"),
        (["apply", "--from-env", "a", "--to-env", "b", "--prune"], "--prune does not go"),
    ],
)
def test_the_command_takes_a_file_or_the_pair(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        check_arguments(build_parser().parse_args(argv))
    assert message in capsys.readouterr().err
    assert exited.value.code == 1  # not 2, which is plan's "something would change"
    check_arguments(build_parser().parse_args(["plan", "--from-env", "a", "--to-env", "b"]))


@pytest.mark.parametrize(
    "argv", [["plan", "a.yaml", "--prunee"], ["plann", "a.yaml"], ["apply"], ["plan", "--key"]]
)
def test_a_mistyped_command_exits_1_not_plans_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI job gating on ``vane plan FILE || [ $? -eq 2 ]`` must not pass a typo."""
    with pytest.raises(SystemExit) as exited:
        check_arguments(build_parser().parse_args(argv))
    assert exited.value.code == 1
    assert "error:" in capsys.readouterr().err


def test_a_mistyped_command_name_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plann", "a.yaml"]) == 1
    assert "invalid choice: 'plann'" in capsys.readouterr().err
    assert cli.main([]) == 1
    assert cli.main(["--help"]) == 0


def test_a_promotion_plans_as_the_targets_change_and_applies(seeded: Api) -> None:
    promoted = promote(export(seeded), "staging", "production", ["checkout"])
    found = plan(seeded, promoted)
    assert {(c["kind"], c["key"], c["environment"], c["action"]) for c in found["changes"]} == {
        ("setting", "checkout", "production", "update")
    }
    assert "flag checkout" in found["unchanged"]
    apply(seeded, promoted, versions=found["versions"], fileName="promotion staging -> production")
    after = export(seeded)
    envs = flag_of(after, "checkout")["environments"]
    assert envs["production"] == envs["staging"]
    assert plan(seeded, promote(after, "staging", "production"))["hasChanges"] is False


def test_a_promotion_to_a_protected_environment_opens_a_change_request(seeded: Api) -> None:
    ok(seeded.patch("/environments/production", {"requiredApprovals": 1}))
    before = ok(seeded.get("/flags/checkout/environments/production"))
    promoted = promote(export(seeded), "staging", "production", ["checkout"])
    done = apply(seeded, promoted, fileName="promotion staging -> production")
    (request,) = done["changeRequests"]
    assert (request["environment"], request["flags"]) == ("production", ["checkout"])
    opened = ok(seeded.get(f"/change-requests/{request['id']}"))
    assert opened["title"] == "Applied from promotion staging -> production"
    assert ok(seeded.get("/flags/checkout/environments/production")) == before  # not written


def test_a_prerequisite_cycle_in_the_target_is_refused(seeded: Api) -> None:
    ok(
        seeded.put(
            "/flags/login/environments/production",
            {"prerequisites": [{"key": "checkout", "variation": 0}]},
        )
    )
    refused = seeded.post(
        "/plan", {"document": promote(export(seeded), "staging", "production", ["checkout"])}
    )
    assert refused.status_code == 422, refused.text
    (detail,) = refused.json()["error"]["details"]
    assert detail["field"] == "flags[0].environments.production.prerequisites"
    assert "cycle" in detail["message"]
