"""``vane import`` of several environments in one run (issue #36): ``--env`` repeated, the
mapping ``--env THEIRS=OURS`` and ``--all-environments``, for the formats carrying several
environments (an Unleash export, LaunchDarkly's REST list of flags); the same settings to each
``--env`` for a file of one environment. One plan, one apply; an environment the project does
not have refuses the whole import, naming it, with nothing written.

The command runs in this process (``flags_as_code.main``), its requests served by the
in-process control plane."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from control_plane.domain.projectfile.imports import Refused, unleash
from control_plane.domain.projectfile.imports.environments import Wanted, targets
from control_plane.entry import flags_as_code
from tests.conftest import Api
from tests.projectfile.conftest import export, flag_of, ok

Vane = Callable[..., tuple[int, str, str]]


class _Routed:
    """The command's HTTP client, its requests sent to the in-process control plane."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.api.get(path, **kwargs)

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.api.post(path, json, **kwargs)


@pytest.fixture
def vane(api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Vane:
    """``vane ARGS...`` against the in-process control plane: exit code, stdout, stderr."""
    monkeypatch.setattr(flags_as_code, "_client", lambda args: contextlib.nullcontext(_Routed(api)))

    def run(*argv: str) -> tuple[int, str, str]:
        code = flags_as_code.main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def written(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def value(api: Api, flag: str, environment: str, context: dict[str, Any]) -> Any:
    path = f"/flags/{flag}/environments/{environment}/evaluate"
    return ok(api.post(path, {"context": context}))["value"]


def strategy(feature: str, environment: str, **more: Any) -> dict[str, Any]:
    return {"featureName": feature, "environment": environment, "name": "default", **more}


UNLEASH: dict[str, Any] = {
    "features": [
        {"name": "checkout", "type": "release"},
        {"name": "prod-only", "type": "release"},
    ],
    "featureStrategies": [
        # development: on for testers only; production: on for Germany only
        strategy(
            "checkout",
            "development",
            name="userWithId",
            parameters={"userIds": "tester"},
        ),
        strategy(
            "checkout",
            "production",
            constraints=[{"contextName": "country", "operator": "IN", "values": ["DE"]}],
        ),
    ],
    "featureEnvironments": [
        {"featureName": "checkout", "environment": "development", "enabled": True},
        {"featureName": "checkout", "environment": "production", "enabled": True},
        {"featureName": "prod-only", "environment": "production", "enabled": True},
    ],
    "environments": [
        {"name": "development", "type": "development", "enabled": True},
        {"name": "production", "type": "production", "enabled": True},
    ],
}
TESTER = {"key": "tester", "country": "NL"}
GERMAN = {"key": "hans", "country": "DE"}


def test_an_unleash_export_imports_every_environment_in_one_run(
    api: Api, vane: Vane, tmp_path: Path
) -> None:
    ok(api.post("/environments", {"key": "development"}), 201)
    # a flag already set in development, absent from the file's development: left as it is
    ok(api.post("/flags", {"key": "prod-only"}), 201)
    ok(api.put("/flags/prod-only/environments/development", {"enabled": True}))
    before = ok(api.get("/flags/prod-only/environments/development"))
    file = written(tmp_path, "unleash.json", UNLEASH)

    code, out, err = vane("import", "--from", "unleash", file, "--all-environments")
    assert code == 0, out + err
    lines = out.splitlines()
    assert "+ flag checkout: create" in lines, out
    assert "+ setting checkout in development: create" in lines, out
    assert "+ setting checkout in production: create" in lines, out
    assert "~ setting prod-only in production: update" in lines, out
    assert not [line for line in lines if "prod-only in development" in line], out
    assert "environments: development -> development, production -> production" in err
    assert lines[-1] == "4 change(s) applied", out  # one apply: both environments
    assert value(api, "checkout", "development", TESTER) is True
    assert value(api, "checkout", "development", GERMAN) is False
    assert value(api, "checkout", "production", TESTER) is False
    assert value(api, "checkout", "production", GERMAN) is True
    assert value(api, "prod-only", "production", {"key": "x"}) is True
    assert ok(api.get("/flags/prod-only/environments/development")) == before
    assert flag_of(export(api), "checkout")["environments"]["staging"]["enabled"] is False
    again = vane("import", "--from", "unleash", file, "--all-environments")
    assert again[0] == 0
    assert again[1].splitlines()[-1].startswith("Plan: nothing to change"), again


def test_an_environment_of_the_file_maps_to_another_of_vanes(
    api: Api, vane: Vane, tmp_path: Path
) -> None:
    file = written(tmp_path, "unleash.json", UNLEASH)
    code, out, err = vane(
        "import", "--from", "unleash", file, "--env", "development=staging", "--env", "production"
    )
    assert code == 0, out + err
    assert value(api, "checkout", "staging", TESTER) is True
    assert value(api, "checkout", "staging", GERMAN) is False
    assert value(api, "checkout", "production", GERMAN) is True
    # every environment, the one Vane lacks mapped
    code, out, err = vane(
        "import", "--from", "unleash", file, "--all-environments", "--env", "development=staging"
    )
    assert code == 0, out + err
    assert out.splitlines()[-1].startswith("Plan: nothing to change"), out


def test_an_environment_vane_lacks_refuses_the_import_with_nothing_written(
    api: Api, vane: Vane, tmp_path: Path
) -> None:
    file = written(tmp_path, "unleash.json", UNLEASH)
    code, out, err = vane("import", "--from", "unleash", file, "--all-environments")
    assert code == 1
    assert "no Vane environment 'development' (the file's 'development')" in err, err
    assert "--env development=OURS" in err
    assert out == ""  # not planned
    assert export(api)["flags"] == []
    # an environment the file does not have is refused too, naming the file's
    code, _, err = vane("import", "--from", "unleash", file, "--env", "qa")
    assert code == 1
    assert "environment 'qa': not in the file (its environments: development, production)" in err
    assert export(api)["flags"] == []


ITEMS: list[dict[str, Any]] = [
    {
        "key": "checkout",
        "name": "Checkout",
        "variations": [{"value": "classic", "name": "Classic"}, {"value": "express"}],
        "environments": {
            "production": {"on": True, "offVariation": 0, "fallthrough": {"variation": 0}},
            "test": {
                "on": True,
                "offVariation": 0,
                "fallthrough": {"variation": 1},
                "trackEvents": True,
            },
        },
    },
    {  # only in test: production's setting is left as it is
        "key": "beta",
        "variations": [{"value": True}, {"value": False}],
        "environments": {"test": {"on": True, "offVariation": 1, "fallthrough": {"variation": 0}}},
    },
]


def test_launchdarklys_rest_list_imports_its_environments(
    api: Api, vane: Vane, tmp_path: Path
) -> None:
    file = written(tmp_path, "ld.json", {"items": ITEMS})
    code, out, err = vane("import", "--from", "launchdarkly", file, "--all-environments")
    assert code == 1  # LaunchDarkly's "test" is no environment of this project
    assert "no Vane environment 'test' (the file's 'test')" in err
    assert export(api)["flags"] == []

    code, out, err = vane(
        "import", "--from", "launchdarkly", file, "--all-environments", "--env", "test=staging"
    )
    assert code == 0, out + err
    assert "not converted: flag checkout in test: trackEvents (no Vane equivalent)" in err
    assert "not converted: flag beta: no environment 'production' (left as it is there)" in err
    assert value(api, "checkout", "production", {"key": "u"}) == "classic"
    assert value(api, "checkout", "staging", {"key": "u"}) == "express"
    assert value(api, "beta", "staging", {"key": "u"}) is True
    assert ok(api.get("/flags/beta/environments/production"))["enabled"] is False


LD_RELAY = {
    "flags": {
        "banner": {
            "key": "banner",
            "on": True,
            "variations": ["none", "red"],
            "offVariation": 0,
            "fallthrough": {"variation": 1},
        }
    },
    "segments": {},
}


def test_a_file_of_one_environment_goes_to_each_env_given(
    api: Api, vane: Vane, tmp_path: Path
) -> None:
    file = written(tmp_path, "relay.json", LD_RELAY)
    code, out, err = vane(
        "import", "--from", "launchdarkly", file, "--env", "staging", "--env", "production"
    )
    assert code == 0, out + err
    assert value(api, "banner", "staging", {"key": "u"}) == "red"
    assert value(api, "banner", "production", {"key": "u"}) == "red"
    # a file of one environment has no environments to take all of, or to map from
    for more in (["--all-environments"], ["--env", "production=staging"]):
        code, _, err = vane("import", "--from", "launchdarkly", file, *more)
        assert code == 1
        assert "holds one environment's flags" in err, err


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (["--all-environments"], "--all-environments: a flagd file holds one environment's"),
        (["--env", "a=b"], "--env a=b: a flagd file holds one environment's"),
        (["--env", "=b"], "argument --env: '=b' is not ENV or THEIRS=OURS"),
        (["--env", "a=b=c"], "argument --env: 'a=b=c' is not ENV or THEIRS=OURS"),
    ],
)
def test_what_a_flagd_file_cannot_take_is_a_usage_error(
    more: list[str], message: str, vane: Vane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = written(tmp_path, "flags.flagd.json", {"flags": {}})
    with pytest.raises(SystemExit) as exited:
        vane("import", "--from", "flagd", file, *more)
    assert exited.value.code == 1  # a usage error, as every usage error of the CLI
    err = capsys.readouterr().err
    assert err.startswith("usage: vane import"), err
    assert message in err, err


def test_the_mapping_is_refused_where_two_environments_go_to_one() -> None:
    found = ["development", "production"]
    assert targets(found, Wanted(every=True)) == [
        ("development", "development"),
        ("production", "production"),
    ]
    with pytest.raises(Refused) as refused:
        targets(found, Wanted(("Development=staging",)))  # the file's names, exactly
    assert "environment 'Development': not in the file" in str(refused.value)
    with pytest.raises(Refused) as refused:
        targets(found, Wanted(("development=production",), every=True))
    assert "environment 'production'" in str(refused.value)
    assert targets(["Production"], Wanted(every=True)) == [("Production", "production")]
    with pytest.raises(Refused) as refused:
        targets(["Pre Prod"], Wanted(every=True))
    assert "--env 'Pre Prod'=OURS" in str(refused.value)
    assert targets(None, Wanted(("staging", "production"))) == [
        (None, "production"),
        (None, "staging"),
    ]


def test_variants_in_one_environment_but_not_another_where_it_is_on_are_refused() -> None:
    data: dict[str, Any] = {
        "features": [{"name": "theme"}],
        "featureEnvironments": [
            {
                "featureName": "theme",
                "environment": "production",
                "enabled": True,
                "variants": [{"name": "dark", "weight": 1000}],
            },
            {"featureName": "theme", "environment": "development", "enabled": True},
        ],
    }
    with pytest.raises(Refused) as refused:
        unleash.convert(data, Wanted(every=True))
    assert refused.value.where == "feature theme"
    assert "variants in production but none in development" in refused.value.construct
    # off in development: it serves "disabled" there, as Unleash's getVariant does
    data["featureEnvironments"][1]["enabled"] = False
    converted = unleash.convert(data, Wanted(every=True))
    (flag,) = converted.document["flags"]
    assert flag["type"] == "json"
    assert flag["environments"]["development"]["enabled"] is False
    assert flag["environments"]["development"]["offVariation"] == 0
