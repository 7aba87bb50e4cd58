"""The in-process provider (``shared.client.VaneProvider``) against real processes: a control
plane, a relay, and a backend process that uses the provider through OpenFeature.

A toggle reaches the backend (event and value); the relay stops and the backend keeps serving
(stale); the relay returns and the backend catches up; the feed refuses keys that must not read
rules; and the provider answers exactly what the relay's OFREP answers, for many flags and
contexts.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.event import ProviderEvent
from openfeature.track import TrackingEventDetails

from shared.client import VaneProvider
from shared.keys import hash_token
from tests.e2e.test_backends import Backend
from tests.e2e.test_relays import eventually, start_control_plane, start_relay
from tests.processes import Process, free_port

pytestmark = pytest.mark.e2e

PLANS = ["free", "pro", "team", "enterprise"]
COUNTRIES = ["DE", "FR", "US", "JP"]


def random_flags(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Flags with varied types, rules, rollouts and targets, and their production settings."""
    flags = []
    for i in range(count):
        kind = rng.choice(["boolean", "string", "number"])
        values: list[Any] = (
            [True, False]
            if kind == "boolean"
            else [f"v{j}" for j in range(3)]
            if kind == "string"
            else [j * 1.5 for j in range(3)]
        )
        n = len(values)
        rules = []
        for _ in range(rng.randint(0, 3)):
            clause: dict[str, Any] = rng.choice(
                [
                    {"attribute": "plan", "op": "in", "values": rng.sample(PLANS, 2)},
                    {"attribute": "country", "op": "in", "values": rng.sample(COUNTRIES, 2)},
                    {"attribute": "age", "op": "greaterThan", "values": [rng.randint(10, 60)]},
                    {"attribute": "email", "op": "endsWith", "values": ["@example.com"]},
                ]
            )
            if rng.random() < 0.3:
                clause["negate"] = True
            serve: dict[str, Any] = (
                {"variation": rng.randrange(n)}
                if rng.random() < 0.6
                else {"rollout": [{"idx": 0, "weight": 30}, {"idx": n - 1, "weight": 70}]}
            )
            rules.append({"clauses": [clause], **serve})
        flags.append(
            {
                "flag": {
                    "key": f"rand-{i}",
                    "type": kind,
                    "clientSide": rng.random() < 0.5,
                    **({} if kind == "boolean" else {"variations": [{"value": v} for v in values]}),
                },
                "settings": {
                    "enabled": rng.random() < 0.85,
                    "fallthrough": (
                        {"variation": rng.randrange(n)}
                        if rng.random() < 0.5
                        else {"rollout": [{"idx": 0, "weight": 50}, {"idx": n - 1, "weight": 50}]}
                    ),
                    "targets": [{"variation": rng.randrange(n), "values": ["user-3", "user-7"]}],
                },
                "rules": rules,
            }
        )
    return flags


class Stack(Backend):
    backend: Process
    backend_url: str
    relay_port: int
    relay_dir: Path
    flags: list[str]

    def backend_get(self, path: str, **query: str) -> Any:
        return httpx.get(f"{self.backend_url}{path}", params=query, timeout=10).json()

    def events(self) -> list[dict[str, Any]]:
        return self.backend_get("/events")  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("provider")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    port = free_port()
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay", port=port)
    site = Stack(cp, relay)
    site.relay_port, site.relay_dir = port, tmp / "relay"
    backend: Process | None = None
    try:
        site.server_key = site.api(
            "POST", "/keys", {"kind": "server", "environment": "production"}
        ).json()["key"]
        site.api("POST", "/flags", {"key": "kill-switch", "clientSide": False})
        site.flags = ["kill-switch"]
        for spec in random_flags(random.Random(7), 12):
            created = site.api("POST", "/flags", spec["flag"])
            assert created.status_code == 201, created.text
            key = spec["flag"]["key"]
            base = f"/flags/{key}/environments/production"
            assert site.api("PUT", base, spec["settings"]).status_code == 200
            assert site.api("PUT", f"{base}/rules", {"rules": spec["rules"]}).status_code == 200
            site.flags.append(key)
        site.relay_current()
        backend_port = free_port()
        backend = Process(
            [sys.executable, "-m", "tests.e2e.backend_app", str(backend_port)],
            env={"VANE_URL": relay.url, "VANE_SERVER_KEY": site.server_key},
        )
        backend.wait_for_line(r"^backend on")
        site.backend, site.backend_url = backend, f"http://127.0.0.1:{backend_port}"
        yield site
    finally:
        if backend is not None:
            backend.stop()
        site.relay.process.stop()
        cp.process.stop()


def test_a_toggle_reaches_the_backend_with_an_event(stack: Stack) -> None:
    before = stack.backend_get("/eval", flag="kill-switch", key="acct-1")
    assert before == {"value": False, "variant": "off", "reason": "DISABLED", "errorCode": None}
    stack.api("POST", "/flags/kill-switch/environments/production/toggle", {"enabled": True})
    eventually(
        lambda: stack.backend_get("/eval", flag="kill-switch", key="acct-1")["value"] is True,
        what="the toggle reached the backend",
    )
    changed = [e for e in stack.events() if e["event"] == "PROVIDER_CONFIGURATION_CHANGED"]
    assert ["kill-switch"] in [e["flagsChanged"] for e in changed]
    assert stack.backend_get("/direct", flag="kill-switch", key="acct-1") == {"value": True}


def test_the_backend_serves_while_the_relay_is_away_and_catches_up(stack: Stack) -> None:
    value = stack.backend_get("/eval", flag="kill-switch", key="acct-2")["value"]
    stack.relay.process.stop()
    eventually(
        lambda: any(e["event"] == "PROVIDER_STALE" for e in stack.events()),
        what="the provider said it is stale",
    )
    assert stack.backend_get("/eval", flag="kill-switch", key="acct-2")["value"] == value
    stack.api("POST", "/flags/kill-switch/environments/production/toggle", {"enabled": not value})
    relay = start_relay(
        stack.cp.url, stack.cp.keys["relay"], stack.relay_dir, port=stack.relay_port
    )
    stack.relay = relay
    eventually(
        lambda: stack.backend_get("/eval", flag="kill-switch", key="acct-2")["value"] is not value,
        timeout=30,
        what="the backend caught up after the relay returned",
    )
    events = [e["event"] for e in stack.events()]
    assert events[events.index("PROVIDER_STALE") :].count("PROVIDER_READY") >= 1


def test_the_feed_is_for_bound_server_keys_and_never_from_a_page(stack: Stack) -> None:
    feed = f"{stack.relay.url}/api/v1/snapshot/stream"
    unbound = stack.api("POST", "/keys", {"kind": "server"}).json()["key"]
    for headers, status in (
        ({"Authorization": f"Bearer {stack.keys['public']}"}, 403),
        ({"Authorization": f"Bearer {unbound}"}, 403),  # events only
        ({**stack.server(), "Origin": "https://shop.example"}, 403),
        ({}, 401),
    ):
        answer = httpx.get(feed, headers=headers, timeout=10)
        assert answer.status_code == status, (headers, answer.text)
    with httpx.stream("GET", feed, headers=stack.server(), timeout=10) as answer:
        assert answer.status_code == 200
        lines = answer.iter_lines()
        assert next(lines) == "event: snapshot"
        text = next(line for line in lines if line.startswith("data:"))
        assert stack.server_key not in text
        assert text.endswith('"access":{}}')  # no key hashes for backends
        assert hash_token(stack.server_key) not in text


def _relay_answer(stack: Stack, flag: str, context: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(
        f"{stack.relay.url}/ofrep/v1/evaluate/flags/{flag}",
        json={"context": context},
        headers=stack.server(),
        timeout=10,
    ).json()
    return {k: answer.get(k) for k in ("value", "variant", "reason", "errorCode")}


@pytest.fixture(scope="module")
def local_provider(stack: Stack) -> Iterator[VaneProvider]:
    provider = VaneProvider(stack.relay.url, stack.server_key, track_exposures=False)
    provider.initialize(None)  # type: ignore[arg-type]
    try:
        yield provider
    finally:
        provider.shutdown()


@given(
    flag_index=st.integers(0, 12),
    user=st.integers(0, 12),
    plan=st.sampled_from([*PLANS, None]),
    country=st.sampled_from([*COUNTRIES, None]),
    age=st.one_of(st.none(), st.integers(0, 90)),
    email=st.sampled_from(["a@example.com", "b@other.org", None]),
)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_provider_answers_what_the_relay_answers(
    stack: Stack,
    local_provider: VaneProvider,
    flag_index: int,
    user: int,
    plan: str | None,
    country: str | None,
    age: int | None,
    email: str | None,
) -> None:
    flag = stack.flags[flag_index]
    attributes = {"plan": plan, "country": country, "age": age, "email": email}
    context = {
        "targetingKey": f"user-{user}",
        **{k: v for k, v in attributes.items() if v is not None},
    }
    relay = _relay_answer(stack, flag, context)
    found = local_provider.resolve(flag, context, None, lambda value: True)
    mine = {
        "value": found.value,
        "variant": found.variant,
        "reason": found.reason,
        "errorCode": found.error_code.value if found.error_code else None,
    }
    assert mine == relay


def test_a_provider_can_follow_the_control_plane_directly(stack: Stack) -> None:
    changes: list[list[str]] = []
    provider = VaneProvider(stack.cp.url, stack.server_key, track_exposures=False)
    api.set_provider_and_wait(provider, "control-plane")
    client = api.get_client("control-plane")
    client.add_handler(
        ProviderEvent.PROVIDER_CONFIGURATION_CHANGED,
        lambda details: changes.append(details.flags_changed or []),
    )
    try:
        context = {"targetingKey": "acct-5"}
        before: bool | None = provider.evaluate("kill-switch", context, None)
        assert before == _relay_answer(stack, "kill-switch", context)["value"]
        assert before is not None
        stack.api(
            "POST", "/flags/kill-switch/environments/production/toggle", {"enabled": not before}
        )
        eventually(
            lambda: (
                client.get_boolean_value("kill-switch", before, EvaluationContext("acct-5"))
                is (not before)
            ),
            what="the toggle reached the provider from the control plane",
        )
        eventually(lambda: ["kill-switch"] in changes, what="flagsChanged named the flag")
        page = httpx.get(
            f"{stack.cp.url}/api/v1/snapshot/stream",
            headers={**stack.server(), "Origin": "https://shop.example"},
        )
        assert page.status_code == 403
    finally:
        api.clear_providers()


def test_first_exposures_of_flags_with_metrics_are_reported_once(stack: Stack) -> None:
    stack.api("POST", "/metrics", {"name": "Upgrades", "event": "upgrade", "aggregation": "count"})
    stack.api("POST", "/flags", {"key": "measured", "clientSide": False})
    stack.api("PUT", "/flags/measured/metrics", {"metrics": ["upgrades"]})
    stack.api("POST", "/flags/measured/environments/production/toggle", {"enabled": True})
    stack.relay_current()
    provider = VaneProvider(stack.relay.url, stack.server_key)
    provider.initialize(None)  # type: ignore[arg-type]
    try:
        eventually(lambda: provider.evaluate("measured", {"targetingKey": "u"}, None) is True)
        for _ in range(3):  # repeats are one exposure each
            for unit in ("m1", "m2", "m3"):
                assert provider.evaluate("measured", {"targetingKey": unit}, None) is True
        assert provider.client is not None
        assert provider.client.flush(timeout=10)

        def exposed() -> int:
            results = stack.api("GET", "/flags/measured/metrics").json()["results"]
            return sum(v["exposed"] for v in results[0]["variants"])

        eventually(lambda: exposed() == 4, what="u, m1, m2 and m3 exposed once each")
        # a context of another kind is exposed as its qualified unit (issue #23), by the
        # provider and by the relay alike
        organization = {"kind": "organization", "targetingKey": "acme"}
        assert provider.evaluate("measured", organization, None) is True
        assert provider.client.flush(timeout=10)
        device = {"context": {"kind": "device", "key": "d1"}}
        served = httpx.post(
            f"{stack.relay.url}/ofrep/v1/evaluate/flags/measured",
            json=device,
            headers=stack.server(),
            timeout=10,
        )
        assert served.json()["value"] is True, served.text
        eventually(lambda: exposed() == 6, what="the organization and the device exposed")
        for unit in ("organization:acme", "device:d1"):
            found = stack.api("GET", f"/events?unit={unit}&event=$flag_exposure").json()
            assert len(found["events"]) == 1, (unit, found)
    finally:
        provider.shutdown()


def test_a_rule_on_the_organization_reaches_a_backend_and_a_page_alike(stack: Stack) -> None:
    """Issue #23: a rule on ``organization.plan``, evaluated by the in-process provider through
    OpenFeature (``kind: "multi"`` with a part per kind, as LaunchDarkly's OpenFeature providers
    carry it) and by the relay for a page holding a public key: every user of the enterprise
    organization gets it, a user who says ``plan: enterprise`` of itself does not."""
    assert stack.api("POST", "/flags", {"key": "enterprise-only"}).status_code == 201
    base = "/flags/enterprise-only/environments/production"
    on_org = {"contextKind": "organization", "attribute": "plan", "values": ["enterprise"]}
    rules = {"rules": [{"clauses": [on_org], "variation": 0}]}
    assert stack.api("PUT", f"{base}/rules", rules).status_code == 200
    settings_ = {"enabled": True, "fallthrough": {"variation": 1}}
    assert stack.api("PUT", base, settings_).status_code == 200
    stack.relay_current()
    member: dict[str, Any] = {
        "kind": "multi",
        "user": {"key": "u1", "email": "a@acme.example"},
        "organization": {"key": "acme", "plan": "enterprise"},
    }
    provider = VaneProvider(stack.relay.url, stack.server_key)  # with a client: it tracks
    api.set_provider_and_wait(provider, "kinds")
    client = api.get_client("kinds")
    try:
        eventually(
            lambda: (
                client.get_boolean_value("enterprise-only", False, EvaluationContext("u1", member))
                is True
            ),
            what="the provider served the organization's rule",
        )
        self_said = EvaluationContext("u2", {"plan": "enterprise"})
        assert client.get_boolean_value("enterprise-only", True, self_said) is False
        # an event of the account (OpenFeature tracking, the detail unitKind), and of the user
        details = TrackingEventDetails(attributes={"unitKind": "organization", "seats": 3})
        client.track("upgraded", EvaluationContext("u1", member), details)
        client.track("upgraded", EvaluationContext("u1", member))
        assert provider.client is not None
        assert provider.client.flush(timeout=10)
    finally:
        api.clear_providers()

    def stored(unit: str) -> list[dict[str, Any]]:
        answer = stack.api("GET", f"/events?unit={unit}&event=upgraded").json()
        return answer["events"]  # type: ignore[no-any-return]

    eventually(lambda: len(stored("organization:acme")) == 1, what="the account's event stored")
    assert stored("organization:acme")[0]["props"] == {"seats": 3}
    eventually(lambda: len(stored("u1")) == 1, what="the user's event stored")
    page = httpx.post(
        f"{stack.relay.url}/ofrep/v1/evaluate/flags/enterprise-only",
        json={"context": {"targetingKey": "u1", **member}},
        headers={"Authorization": f"Bearer {stack.keys['public']}"},
        timeout=10,
    )
    assert page.status_code == 200, page.text
    assert (page.json()["value"], page.json()["reason"]) == (True, "TARGETING_MATCH")
