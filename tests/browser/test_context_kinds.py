"""Context kinds in the console (issue #35): a person targets keys of another kind and buckets a
rollout by another kind on a flag's page, and lists keys of other kinds in a segment; the API
then shows exactly that, and the relay serves it. Both screens stay free of serious axe-core
violations; their screenshots are kept under ``docs/console/``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Site
from tests.browser.test_console import axe_source as axe_source  # a fixture
from tests.browser.test_console import serious_violations, serves, shot, sign_in
from tests.e2e.test_relays import eventually

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

ACME = {"kind": "org", "key": "acme"}


def test_targets_of_another_kind_and_a_rollouts_kind_are_set_on_the_flag_page(
    site: Site, context: Any, axe_source: str
) -> None:
    created = site.api("POST", "/flags", {"key": "org-billing"})
    assert created.status_code == 201, created.text
    settings = "/flags/org-billing/environments/production"
    kept = {"enabled": True, "targets": [{"variation": 1, "values": ["u-off"]}]}
    assert site.api("PUT", settings, kept).status_code == 200
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/flags/org-billing?env=production")

    # a second target group: organizations acme and initech get "on"
    group = page.get_by_role("group", name="Target 2")
    group.get_by_label("Context kind").fill("multi")  # no kind can be called that
    group.get_by_label("Variation").select_option(label="on")
    group.get_by_label("Context keys (one per line)").fill("acme\ninitech")
    page.get_by_role("button", name="Save targets").click()
    error = page.locator("#err-targets-1-contextKind")
    error.wait_for()
    assert "not a context kind" in error.inner_text()
    assert group.get_by_label("Context keys (one per line)").input_value() == "acme\ninitech"
    assert site.api("GET", settings).json()["targets"] == kept["targets"]  # nothing written
    group.get_by_label("Context kind").fill("org")
    page.get_by_role("button", name="Save targets").click()
    page.wait_for_url("**/console/flags/org-billing?env=production")
    assert site.api("GET", settings).json()["targets"] == [
        {"variation": 1, "values": ["u-off"]},
        {"variation": 0, "values": ["acme", "initech"], "contextKind": "org"},
    ]

    # the fallthrough: a rollout by organization (all "off" for now), bucketed by its key
    serve = page.locator("fieldset.serve")
    serve.get_by_role("radio", name="a percentage rollout").check()
    page.locator("#w0").fill("0")
    page.locator("#w1").fill("100")
    serve.get_by_label("of context kind").fill("org")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url("**/console/flags/org-billing?env=production")
    fallthrough = site.api("GET", settings).json()["fallthrough"]
    assert fallthrough == {
        "rollout": [{"idx": 0, "weight": 0}, {"idx": 1, "weight": 100}],
        "contextKind": "org",
    }
    assert serve.get_by_label("of context kind").input_value() == "org"

    # a rule's rollout by organization, bucketed by its /tier
    page.get_by_role("button", name="Add rule").click()
    page.get_by_label("Attribute").first.fill("plan")
    page.locator("textarea[name='rules[0].clauses[0].values']").fill("pro")
    page.get_by_label("Serve", exact=True).select_option(label="a percentage rollout")
    page.locator("#r0w0").fill("100")
    page.locator("#r0w1").fill("0")
    page.locator("#r0-bucket").fill("/tier")
    page.locator("#r0-kind").fill("org")
    page.get_by_role("button", name="Save rules").click()
    page.wait_for_url("**#rules")
    (rule,) = site.api("GET", settings + "/rules").json()["rules"]
    assert rule["serve"] == {
        "rollout": [{"idx": 0, "weight": 100}, {"idx": 1, "weight": 0}],
        "bucketBy": "/tier",
        "contextKind": "org",
    }
    assert page.locator("#r0-kind").input_value() == "org"

    # saving the targets again as shown changes nothing (each group keeps its kind)
    page.get_by_role("button", name="Save targets").click()
    page.wait_for_url("**/console/flags/org-billing?env=production")
    assert site.api("GET", settings).json()["targets"][1]["contextKind"] == "org"
    # an error about a target is shown beside its row, even when a row before it was emptied
    page.get_by_role("group", name="Target 2").get_by_label("Context keys (one per line)").fill("")
    third = page.get_by_role("group", name="Target 3")
    third.get_by_label("Context kind").fill("device type")
    third.get_by_label("Context keys (one per line)").fill("d-1")
    page.get_by_role("button", name="Save targets").click()
    page.locator("#err-targets-2-contextKind").wait_for()
    assert "targets[2].contextKind" in page.locator("#form-error").inner_text()
    assert page.locator("#err-targets-1-contextKind").count() == 0
    assert site.api("GET", settings).json()["targets"][1]["contextKind"] == "org"  # unchanged
    page.goto(site.cp.url + "/console/flags/org-billing?env=production")

    # at the relay: the organization acme, and any user of it, is targeted
    site.relay_current()
    eventually(lambda: serves(site, "org-billing", ACME, True))
    member = {"kind": "multi", "user": {"key": "u9"}, "org": {"key": "initech"}}
    assert serves(site, "org-billing", member, True)
    assert serves(site, "org-billing", {"targetingKey": "u-off"}, False)
    assert serves(site, "org-billing", {"kind": "org", "key": "globex"}, False)
    assert serves(site, "org-billing", {"targetingKey": "acme"}, False)  # a user, not the org
    assert serves(site, "org-billing", {"targetingKey": "u2", "plan": "pro"}, True)  # the rule

    assert serious_violations(page, axe_source) == []
    page.locator("#targets").scroll_into_view_if_needed()
    shot(page, "flag-kinds")


def test_a_segments_contexts_of_other_kinds_are_edited_on_its_page(
    site: Site, context: Any, axe_source: str
) -> None:
    made = site.api(
        "POST", "/segments", {"key": "accounts", "excludedContexts": [], "included": ["ceo"]}
    )
    assert made.status_code == 201, made.text
    flag = {"key": "for-accounts"}
    assert site.api("POST", "/flags", flag).status_code == 201
    rules = {
        "rules": [{"clauses": [{"op": "segmentMatch", "values": ["accounts"]}], "variation": 0}]
    }
    put = site.api("PUT", "/flags/for-accounts/environments/production/rules", rules)
    assert put.status_code == 200, put.text
    on = {"enabled": True, "fallthrough": {"variation": 1}}
    assert site.api("PUT", "/flags/for-accounts/environments/production", on).status_code == 200

    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/segments/accounts")
    page.locator("input[name='includedContexts[0].contextKind']").fill("org")
    page.locator("textarea[name='includedContexts[0].values']").fill("acme\n\nglobex")
    page.locator("input[name='excludedContexts[0].contextKind']").fill("org")
    page.locator("textarea[name='excludedContexts[0].values']").fill("")
    page.get_by_role("button", name="Save segment").click()
    page.wait_for_url("**/console/segments/accounts")
    stored = site.api("GET", "/segments/accounts").json()
    assert stored["includedContexts"] == [{"contextKind": "org", "values": ["acme", "globex"]}]
    assert stored["excludedContexts"] == []  # a kind with no keys lists nothing
    assert stored["included"] == ["ceo"]

    # globex moves to the excluded list; a bad kind is the API's error beside its field
    page.locator("textarea[name='includedContexts[0].values']").fill("acme")
    page.locator("input[name='excludedContexts[0].contextKind']").fill("org!")
    page.locator("textarea[name='excludedContexts[0].values']").fill("globex")
    page.get_by_role("button", name="Save segment").click()
    error = page.locator("#err-excludedContexts-0-contextKind")
    error.wait_for()
    assert "context kind" in error.inner_text()
    assert page.locator("textarea[name='excludedContexts[0].values']").input_value() == "globex"
    assert site.api("GET", "/segments/accounts").json()["version"] == stored["version"]
    page.locator("input[name='excludedContexts[0].contextKind']").fill("org")
    # and a weighted rule that buckets organizations
    page.get_by_role("button", name="Add rule").click()
    page.get_by_label("Attribute").first.fill("plan")
    page.locator("#r0c0-kind").fill("org")
    page.locator("textarea[name='rules[0].clauses[0].values']").fill("pro")
    page.get_by_label("Weight % (empty: all)").fill("100")
    page.locator("#r0-kind").fill("org")
    page.get_by_role("button", name="Save segment").click()
    page.wait_for_url("**/console/segments/accounts")
    stored = site.api("GET", "/segments/accounts").json()
    assert stored["includedContexts"] == [{"contextKind": "org", "values": ["acme"]}]
    assert stored["excludedContexts"] == [{"contextKind": "org", "values": ["globex"]}]
    assert stored["rules"][0]["contextKind"] == "org"
    assert stored["rules"][0]["weight"] == 100
    audit = site.api("GET", "/segments/accounts/audit").json()["entries"]
    assert audit[0]["after"]["excludedContexts"] == stored["excludedContexts"]

    # at the relay: acme is in, globex (even on the pro plan) out, the user acme is not acme
    site.relay_current()
    eventually(lambda: serves(site, "for-accounts", ACME, True))
    assert serves(site, "for-accounts", {"kind": "org", "key": "globex", "plan": "pro"}, False)
    assert serves(site, "for-accounts", {"kind": "org", "key": "initech", "plan": "pro"}, True)
    assert serves(site, "for-accounts", {"targetingKey": "acme"}, False)
    assert serves(site, "for-accounts", {"targetingKey": "ceo"}, True)

    assert serious_violations(page, axe_source) == []
    shot(page, "segment-kinds")


def test_saving_a_form_as_shown_keeps_the_kinds_the_api_set(site: Site, context: Any) -> None:
    """Kinds set through the API survive a person saving the console's forms unchanged."""
    assert site.api("POST", "/flags", {"key": "kinds-kept"}).status_code == 201
    settings = "/flags/kinds-kept/environments/staging"
    rollout = {"rollout": [{"idx": 0, "weight": 30}, {"idx": 1, "weight": 70}]}
    body = {
        "targets": [
            {"variation": 0, "values": ["acme"], "contextKind": "org"},
            {"variation": 0, "values": ["u1"]},
            {"variation": 1, "values": ["d-1", "d-2"], "contextKind": "device"},
        ],
        "fallthrough": {**rollout, "contextKind": "org", "bucketBy": "/tier"},
    }
    assert site.api("PUT", settings, body).status_code == 200
    rules = {
        "rules": [
            {
                "id": "r1",
                "clauses": [{"attribute": "plan", "values": ["pro"]}],
                "serve": {**rollout, "contextKind": "device"},
            }
        ]
    }
    assert site.api("PUT", settings + "/rules", rules).status_code == 200
    segment = {
        "key": "kinds-kept",
        "includedContexts": [{"contextKind": "org", "values": ["acme"]}],
        "excludedContexts": [{"contextKind": "device", "values": ["d-9"]}],
        "rules": [
            {
                "clauses": [{"attribute": "plan", "values": ["pro"]}],
                "weight": 50,
                "contextKind": "org",
            }
        ],
    }
    assert site.api("POST", "/segments", segment).status_code == 201
    before = (
        site.api("GET", settings).json(),
        site.api("GET", settings + "/rules").json()["rules"],
        site.api("GET", "/segments/kinds-kept").json(),
    )

    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/flags/kinds-kept?env=staging")
    for button in ("Save settings", "Save targets", "Save rules"):
        page.get_by_role("button", name=button).click()
        page.wait_for_load_state()
        assert page.locator("#form-error").count() == 0, button
    page.goto(site.cp.url + "/console/segments/kinds-kept")
    page.get_by_role("button", name="Save segment").click()
    page.wait_for_url("**/console/segments/kinds-kept")
    after = (
        site.api("GET", settings).json(),
        site.api("GET", settings + "/rules").json()["rules"],
        site.api("GET", "/segments/kinds-kept").json(),
    )
    assert after[0]["targets"] == before[0]["targets"]
    assert after[0]["fallthrough"] == before[0]["fallthrough"]
    assert after[1] == before[1]
    for name in ("includedContexts", "excludedContexts", "rules"):
        assert after[2][name] == before[2][name], name
