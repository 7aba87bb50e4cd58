"""An environment created from another serves exactly what its source serves: checked through a
real relay with a public key of each, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay

pytestmark = pytest.mark.e2e


@pytest.fixture
def stack(database_url: str, tmp_path: Path) -> Iterator[tuple[ControlPlane, Relay]]:
    cp = start_control_plane(database_url, tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        yield cp, relay
    finally:
        relay.process.stop()
        cp.process.stop()


def ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json()


def everything(relay: Relay, public_key: str, context: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{relay.url}/ofrep/v1/evaluate/flags",
        json={"context": context},
        headers={"Authorization": f"Bearer {public_key}"},
        timeout=5,
    )
    assert response.status_code == 200, response.text
    return {
        item["key"]: (item.get("value"), item.get("variant"), item.get("reason"))
        for item in response.json()["flags"]
    }


def test_a_cloned_environment_serves_exactly_what_its_source_serves(
    stack: tuple[ControlPlane, Relay],
) -> None:
    cp, relay = stack
    ok(cp.api("POST", "/segments", {"key": "staff", "included": ["u-3", "u-8"]}))
    variations = [{"value": v} for v in ("classic", "one-page", "express")]
    ok(cp.api("POST", "/flags", {"key": "checkout", "type": "string", "variations": variations}))
    ok(cp.api("POST", "/flags", {"key": "banner"}))
    ok(cp.api("POST", "/flags", {"key": "untouched"}))
    staging = "/flags/checkout/environments/staging"
    rollout = [{"idx": 0, "weight": 25}, {"idx": 1, "weight": 25}, {"idx": 2, "weight": 50}]
    ok(cp.api("PUT", staging, {"enabled": True, "fallthrough": {"rollout": rollout}}))
    ok(cp.api("PUT", staging, {"targets": [{"variation": 2, "values": ["u-1"]}]}))
    rules = [
        {"clauses": [{"segment": "staff", "op": "segmentMatch"}], "variation": 0},
        {"clauses": [{"attribute": "country", "op": "in", "values": ["NL"]}], "variation": 1},
    ]
    ok(cp.api("PUT", f"{staging}/rules", {"rules": rules}))
    banner = "/flags/banner/environments/staging"
    ok(
        cp.api(
            "PUT", banner, {"enabled": True, "prerequisites": [{"key": "checkout", "variation": 2}]}
        )
    )

    ok(cp.api("POST", "/environments", {"key": "qa", "copyFrom": "staging"}))
    keys = {
        env: ok(cp.api("POST", "/keys", {"kind": "public", "environment": env}))["key"]
        for env in ("staging", "qa", "production")
    }
    contexts = [
        {"targetingKey": f"u-{i}", **({"country": "NL"} if i % 4 == 0 else {})} for i in range(60)
    ]

    last: list[str] = []

    def relay_serves_qa() -> bool:
        response = httpx.post(
            f"{relay.url}/ofrep/v1/evaluate/flags",
            json={"context": contexts[0]},
            headers={"Authorization": f"Bearer {keys['qa']}"},
            timeout=5,
        )
        last[:] = [f"{response.status_code} {response.text[:300]}"]
        return response.status_code == 200 and len(response.json()["flags"]) == 3

    eventually(relay_serves_qa, timeout=60, what=f"the relay serves the new environment {last}")
    seen_variants: set[Any] = set()
    for context in contexts:
        source = everything(relay, keys["staging"], context)
        clone = everything(relay, keys["qa"], context)
        assert clone == source, context
        seen_variants.add(source["checkout"])
        # production was not copied from: it serves its own (disabled) settings
        assert everything(relay, keys["production"], context)["checkout"][2] == "DISABLED"
    reasons = {reason for _, _, reason in seen_variants}
    assert {"TARGETING_MATCH", "SPLIT"} <= reasons  # rules, targets and the rollout all exercised
