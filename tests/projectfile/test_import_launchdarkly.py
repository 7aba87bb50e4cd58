"""LaunchDarkly's flag JSON imported through plan and apply (issue #36): the sdk-test-harness's
own data files, each imported into a new control plane, evaluated through the API, and compared
with LaunchDarkly's expected results wherever the conversion is exact (bucketing differs:
rollouts are compared by their weights, not context by context)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from control_plane.app import create_app
from control_plane.domain.problems import KEY_PATTERN
from control_plane.domain.projectfile.imports import KEY_PATTERN as IMPORT_KEY_PATTERN
from control_plane.domain.projectfile.imports import Refused, launchdarkly
from control_plane.settings import Settings
from tests.conftest import Api, serve
from tests.engine.ld_harness import Case, Unmappable, expand, json_equal, translate
from tests.engine.test_ld_conformance import DEFAULT_DIR
from tests.projectfile.conftest import apply, export, flag_of, ok

FILES = sorted(DEFAULT_DIR.glob("*.yml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in expand(path.read_text(encoding="utf-8")) if doc.get("sdkData")]


@pytest.fixture(scope="module")
def fresh(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A new control plane on a new database, as often as asked, on one app."""
    app = create_app(Settings(database_url=f"sqlite:///{sqlite_template}"))
    folder = tmp_path_factory.mktemp("imports")
    count = [0]

    def new() -> Any:
        count[0] += 1
        path = folder / f"{count[0]}.db"
        shutil.copyfile(sqlite_template, path)
        return serve(f"sqlite:///{path}", app)

    return new


def _expected_exactly(case: Case) -> bool:
    """Whether LaunchDarkly's expected result is one Vane must reproduce exactly."""
    try:
        translate(case)
    except Unmappable:
        return False  # a rollout's bucket, an SDK capability: not the converter's to match
    reason = (case.evaluation.get("expect") or {}).get("reason") or {}
    return reason.get("errorKind") is None


def _check(api: Api, case: Case) -> None:
    expect = case.evaluation.get("expect") or {}
    reason = expect.get("reason") or {}
    context = case.evaluation.get("context") or {}
    if context.get("kind") != "multi" and "custom" in context:
        context = {k: v for k, v in context.items() if k != "custom"} | context["custom"]
    key = case.evaluation["flagKey"].lower()
    found = ok(api.post(f"/flags/{key}/environments/production/evaluate", {"context": context}))
    assert json_equal(found["value"], expect.get("value")), (case.id, found)
    assert found["variation"] == expect.get("variationIndex"), case.id
    assert found["reason"] == reason.get("kind"), (case.id, found)
    assert found["ruleIndex"] == reason.get("ruleIndex"), case.id
    assert found["prerequisiteKey"] == reason.get("prerequisiteKey"), case.id


def _rollouts_kept(api: Api, sdk: dict[str, Any]) -> int:
    """Every LaunchDarkly rollout is live with the same weights (out of 100,000; what they
    leave goes to the last variation, as in LaunchDarkly); how many."""
    live = export(api)
    seen = 0
    for key, ld in (sdk.get("flags") or {}).items():
        setting = flag_of(live, key.lower())["environments"]["production"]
        pairs = [(ld.get("fallthrough"), setting["fallthrough"])]
        pairs += [
            (r, s["serve"]) for r, s in zip(ld.get("rules") or [], setting["rules"], strict=True)
        ]
        for given, served in pairs:
            if isinstance(given, dict) and given.get("variation") is None and given.get("rollout"):
                weights = [[w["variation"], w["weight"]] for w in given["rollout"]["variations"]]
                weights[-1][1] += 100_000 - sum(w for _, w in weights)
                kept = [[w["idx"], round(w["weight"] * 1000)] for w in served["rollout"]]
                assert kept == weights, (key, kept, weights)
                seen += 1
    return seen


def _without(sdk: dict[str, Any], flag: str) -> dict[str, Any]:
    """The file without the flag ``flag`` (as a Vane key), as its owner would edit it."""
    flags = {k: v for k, v in sdk["flags"].items() if k.lower() != flag}
    return {**sdk, "flags": flags}


def _users_of(sdk: dict[str, Any], segment: str) -> list[str]:
    """The flags (as Vane keys) whose rules match the segment ``segment``."""
    return [
        key.lower()
        for key, flag in sdk["flags"].items()
        for rule in flag.get("rules") or []
        for clause in rule.get("clauses") or []
        if clause.get("op") == "segmentMatch"
        and segment in [str(v).lower() for v in clause["values"]]
    ]


def _leave_out(sdk: dict[str, Any], kind: str, name: str) -> tuple[dict[str, Any], list[str]]:
    """The file without the flag or segment refused (and the flags matching that segment)."""
    names = _users_of(sdk, name) if kind == "segment" else [name.lower()]
    if kind == "segment":
        segments = {k: v for k, v in sdk["segments"].items() if k.lower() != name}
        sdk = {**sdk, "segments": segments}
    for flag in names:
        sdk = _without(sdk, flag)
    return sdk, names


def _convert(sdk: dict[str, Any]) -> tuple[dict[str, Any] | None, str, str]:
    """The document, or the kind and name of what the converter refused (named, with the
    construct)."""
    try:
        return launchdarkly.convert(sdk, "production").document, "", ""
    except Refused as exc:
        refused = exc
    kind, name = refused.where.split()[:2]
    assert kind in ("flag", "segment"), str(refused)
    assert refused.construct, str(refused)
    assert "expected shape" not in refused.construct, str(refused)  # a construct, named
    return None, kind, name


def _import(api: Api, sdk: dict[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """Import ``sdk``, leaving out each flag refused (by the converter or the API, named) until
    the rest imports; the file imported and the flags left out, or none if nothing imports."""
    left_out: list[str] = []
    while True:
        document, kind, name = _convert(sdk)
        if document is None:
            sdk, names = _leave_out(sdk, kind, name)
            left_out += names
            continue
        answer = api.post("/apply", {"document": document, "fileName": "ld.json"})
        if answer.status_code == 200:
            return sdk, left_out
        assert answer.status_code == 422, answer.text  # named by its path: nothing written
        assert export(api)["flags"] == []
        field = answer.json()["error"]["details"][0]["field"]
        if not field.startswith("flags["):
            return None
        flag = document["flags"][int(field[6 : field.index("]")])]["key"]
        sdk = _without(sdk, flag)
        left_out.append(flag)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_harness_files_import_and_evaluate_as_launchdarkly_expects(path: Path, fresh: Any) -> None:
    checked = rollouts = 0
    for doc in documents(path):
        with fresh() as api:
            imported = _import(api, doc["sdkData"])
            if imported is None:
                continue
            sdk, left_out = imported
            rollouts += _rollouts_kept(api, sdk)
            for evaluation in doc.get("evaluations") or []:
                case = Case(doc.get("name", ""), path.name, doc, evaluation)
                key = evaluation["flagKey"]
                if (
                    _expected_exactly(case)
                    and key in sdk["flags"]
                    and not _reaches(sdk, key, left_out)
                ):
                    _check(api, case)
                    checked += 1
    assert checked or rollouts or path.stem in NOTHING_EXACT, checked


def _reaches(sdk: dict[str, Any], key: str, left_out: list[str]) -> bool:
    """Whether the flag's prerequisites name a flag left out."""
    prerequisites = sdk["flags"].get(key, {}).get("prerequisites") or []
    return any(
        p["key"].lower() in left_out or _reaches(sdk, p["key"], left_out) for p in prerequisites
    )


NOTHING_EXACT = {  # every flag of these files is one LaunchDarkly expects to fail
    "errors",
    "errors-bad-attribute-reference",
    "errors-wrong-type",
    "segment-recursion",
}


def test_the_import_key_pattern_is_the_control_planes() -> None:
    assert IMPORT_KEY_PATTERN.pattern == KEY_PATTERN.pattern


def test_the_rest_apis_flags_import_one_environment(api: Api) -> None:
    """``GET /api/v2/flags/{project}``'s shape: variations as objects (their names kept), each
    environment's setting under ``environments``; the one asked for is imported."""
    items = [
        {
            "key": "checkout",
            "name": "Checkout",
            "tags": ["payments"],
            "temporary": False,
            "variations": [
                {"_id": "a", "value": "classic", "name": "Classic"},
                {"_id": "b", "value": "express", "name": "Express"},
            ],
            "environments": {
                "production": {
                    "on": True,
                    "offVariation": 0,
                    "fallthrough": {"variation": 0},
                    "rules": [
                        {
                            "_id": "r1",
                            "clauses": [{"attribute": "country", "op": "in", "values": ["NL"]}],
                            "variation": 1,
                        }
                    ],
                    "trackEvents": True,
                    "_site": {"href": "/x"},
                    "lastModified": 1,
                },
                "test": {"on": False, "offVariation": 1, "fallthrough": {"variation": 0}},
            },
        }
    ]
    converted = launchdarkly.convert({"items": items}, "production")
    assert converted.notes == ["flag checkout: trackEvents (no Vane equivalent)"]
    apply(api, converted.document)
    context = {"key": "u1", "country": "NL"}
    found = ok(api.post("/flags/checkout/environments/production/evaluate", {"context": context}))
    assert (found["value"], found["variationName"]) == ("express", "Express")
    flag = flag_of(export(api), "checkout")
    assert (flag["name"], flag["tags"], flag["temporary"]) == ("Checkout", ["payments"], False)
    with pytest.raises(Refused) as missing:  # a mistyped --env imports nothing, said so
        launchdarkly.convert({"items": items}, "qa")
    assert str(missing.value) == (
        "environment 'qa': not in the file (its environments: production, test)"
    )


def test_a_segments_contexts_of_other_kinds_are_imported(api: Api) -> None:
    """LaunchDarkly's ``includedContexts``: user keys join ``included``, other kinds become the
    segment's ``includedContexts`` (one entry a kind), and a rule on the segment matches an
    organization in it."""
    sdk = {
        "flags": {
            "beta": {
                "key": "beta",
                "on": True,
                "variations": [False, True],
                "offVariation": 0,
                "fallthrough": {"variation": 0},
                "rules": [
                    {
                        "clauses": [{"attribute": "", "op": "segmentMatch", "values": ["pilots"]}],
                        "variation": 1,
                    }
                ],
            }
        },
        "segments": {
            "pilots": {
                "key": "pilots",
                "includedContexts": [
                    {"contextKind": "org", "values": ["acme"]},
                    {"contextKind": "user", "values": ["u1"]},
                    {"contextKind": "org", "values": ["initech"]},
                ],
                "excludedContexts": [{"contextKind": "org", "values": ["globex"]}],
            }
        },
    }
    converted = launchdarkly.convert(sdk, "production")
    apply(api, converted.document)
    pilots = ok(api.get("/segments/pilots"))
    assert pilots["included"] == ["u1"]
    assert pilots["includedContexts"] == [{"contextKind": "org", "values": ["acme", "initech"]}]
    assert pilots["excludedContexts"] == [{"contextKind": "org", "values": ["globex"]}]
    evaluate = "/flags/beta/environments/production/evaluate"
    acme = {"kind": "multi", "user": {"key": "u9"}, "org": {"key": "acme"}}
    assert ok(api.post(evaluate, {"context": acme}))["value"] is True
    globex = {"kind": "multi", "user": {"key": "u9"}, "org": {"key": "globex"}}
    assert ok(api.post(evaluate, {"context": globex}))["value"] is False
