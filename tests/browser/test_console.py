"""The console as a person uses it: headless Chromium against a real control plane and relay.

Screenshots of each screen are kept under ``docs/console/`` (``VANE_CONSOLE_SHOTS=0`` skips
writing them).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import Site
from tests.conftest import IN_CI, REPO
from tests.e2e.test_relays import eventually

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

SHOTS = REPO / "docs" / "console"
AXE_DIR = REPO / ".vane" / "test-tools"
AXE = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"


def shot(page: Any, name: str) -> None:
    if os.environ.get("VANE_CONSOLE_SHOTS", "1") != "0":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def database_of(site: Site) -> Path:
    """The control plane's SQLite file (the ``site`` fixture puts it beside the relay's data)."""
    argv = site.relay.process.argv
    return Path(argv[argv.index("--data-dir") + 1]).parent / "vane.db"


def sign_in(page: Any, site: Site, key: str | None = None) -> None:
    page.goto(site.cp.url + "/")
    assert "/console/sign-in" in page.url
    page.get_by_text("Sign in with a management key instead").click()  # people sign in above
    page.get_by_label("Management key").fill(key or site.cp.keys["management"])
    page.get_by_role("button", name="Sign in with the key").click()
    page.wait_for_url("**/console/flags")


def create_flag(page: Any, key: str) -> None:
    page.goto(page.url.split("/console")[0] + "/console/flags")
    page.get_by_text("New flag").click()
    page.get_by_label("Key", exact=True).fill(key)
    page.get_by_role("button", name="Create flag").click()
    page.wait_for_url(f"**/console/flags/{key}")


def ofrep(site: Site, flag: str, context: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{site.relay.url}/ofrep/v1/evaluate/flags/{flag}",
        json={"context": context},
        headers={"Authorization": f"Bearer {site.public}"},
        timeout=5,
    )


def serves(site: Site, flag: str, context: dict[str, Any], value: Any) -> bool:
    answer = ofrep(site, flag, context)
    return answer.status_code == 200 and answer.json().get("value") == value


def test_walkthrough_sign_in_create_rule_toggle_and_off_again(site: Site, context: Any) -> None:
    created = site.api("POST", "/segments", {"key": "beta", "included": ["user-7"]})
    assert created.status_code == 201, created.text
    page = context.new_page()
    sign_in(page, site)
    shot(page, "flags")
    create_flag(page, "new-checkout")

    # everyone else gets false when it is on (the fallthrough), users of segment beta true
    page.locator("fieldset.serve").get_by_role("radio", name="off").check()
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url("**/console/flags/new-checkout?env=production")
    page.get_by_role("button", name="Add rule").click()
    page.get_by_label("Operator").select_option("segmentMatch")
    page.locator("textarea[name='rules[0].clauses[0].values']").fill("beta")
    page.get_by_label("Serve", exact=True).select_option(label="on")
    page.get_by_role("button", name="Save rules").click()
    page.wait_for_url("**/console/flags/new-checkout?env=production#rules")
    assert page.locator("textarea[name='rules[0].clauses[0].values']").input_value() == "beta"
    shot(page, "flag")

    # on in production from the list: production is critical, so the console asks first
    page.goto(site.cp.url + "/console/flags")
    row = page.locator("tr[data-flag='new-checkout']")
    row.get_by_role("switch", name="new-checkout in production").click()
    dialog = page.locator("dialog#confirm")
    assert dialog.is_visible()
    assert "new-checkout in production" in dialog.inner_text()
    shot(page, "confirm")
    dialog.get_by_role("button", name="Confirm").click()
    page.wait_for_load_state()
    eventually(
        lambda: (
            row.get_by_role("switch", name="new-checkout in production").get_attribute(
                "aria-checked"
            )
            == "true"
        ),
        what="the switch shows on",
    )
    site.relay_current()
    eventually(lambda: serves(site, "new-checkout", {"targetingKey": "user-7"}, True))
    assert ofrep(site, "new-checkout", {"targetingKey": "user-8"}).json()["value"] is False

    # off again from the flag page, confirming in the dialog
    page.goto(site.cp.url + "/console/flags/new-checkout?env=production")
    page.get_by_role("switch", name="Serve new-checkout in production").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    page.wait_for_load_state()
    eventually(lambda: serves(site, "new-checkout", {"targetingKey": "user-7"}, False))

    # the console's writes are the API's: audited with the key that signed in
    trail = site.api("GET", "/audit?resourceType=flag&resourceKey=new-checkout").json()["entries"]
    actions = [entry["action"] for entry in trail]
    assert "flag.create" in actions
    assert actions.count("flag.toggle") == 2, actions
    management_id = site.api("GET", "/keys?kind=management").json()["keys"][0]["id"]
    assert {entry["actorKeyId"] for entry in trail} == {management_id}


def test_a_toggle_made_elsewhere_shows_in_an_open_page(site: Site, context: Any) -> None:
    assert site.api("POST", "/flags", {"key": "live-one"}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    page.wait_for_selector("body[data-live-open]")
    switch = page.locator("tr[data-flag='live-one']").get_by_role(
        "switch", name="live-one in staging"
    )
    assert switch.get_attribute("aria-checked") == "false"
    toggled = site.api("POST", "/flags/live-one/environments/staging/toggle", {"enabled": True})
    assert toggled.status_code == 200
    switch.and_(page.locator("[aria-checked='true']")).wait_for()


def test_a_live_refresh_of_any_page_keeps_one_page(site: Site, context: Any) -> None:
    """Found in review: the live refresh put the whole page a server sent (header, nav and all)
    inside <main> on every page but the flags' two, which send their <main> alone."""
    assert site.api("POST", "/flags", {"key": "elsewhere"}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/segments")
    page.wait_for_selector("body[data-live-open]")
    assert page.get_attribute("body", "data-version") is None
    toggled = site.api("POST", "/flags/elsewhere/environments/staging/toggle", {"enabled": True})
    assert toggled.status_code == 200
    page.wait_for_selector("body[data-version]", state="attached")
    assert page.locator("header.top").count() == 1
    assert page.locator("main h1").count() == 1


def test_two_pages_editing_one_flag_the_second_sees_the_conflict(site: Site, context: Any) -> None:
    assert site.api("POST", "/flags", {"key": "contested"}).status_code == 201
    first, second = context.new_page(), context.new_page()
    sign_in(first, site)
    for page in (first, second):
        page.goto(site.cp.url + "/console/flags/contested?env=staging")
        page.get_by_role("button", name="Add rule").click()
    second.get_by_label("Description").first.fill("mine")  # the second is mid-edit
    first.get_by_label("Description").first.fill("first")
    first.get_by_label("Attribute").first.fill("country")
    first.locator("textarea[name='rules[0].clauses[0].values']").fill("DE")
    first.get_by_role("button", name="Save rules").click()
    first.wait_for_url("**#rules")

    second.get_by_label("Attribute").first.fill("plan")
    second.locator("textarea[name='rules[0].clauses[0].values']").fill("enterprise")
    second.get_by_role("button", name="Save rules").click()
    alert = second.locator("#form-error")
    alert.wait_for()
    assert "changed this flag since you opened it" in alert.inner_text()
    assert "Nothing was overwritten" in alert.inner_text()
    shot(second, "conflict")
    stored = site.api("GET", "/flags/contested/environments/staging/rules").json()["rules"]
    assert [c["attribute"] for rule in stored for c in rule["clauses"]] == ["country"]
    history = second.locator(".history li").first.inner_text()
    assert "rules" in history


def test_a_failed_form_shows_the_apis_error_beside_its_field(site: Site, context: Any) -> None:
    assert site.api("POST", "/flags", {"key": "erring"}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/flags/erring?env=staging")
    page.get_by_role("button", name="Add rule").click()
    page.get_by_label("Attribute").first.fill("age")
    page.get_by_label("Operator").first.select_option("greaterThan")
    page.locator("textarea[name='rules[0].clauses[0].values']").fill("old")
    page.get_by_role("button", name="Save rules").click()
    assert "this operator compares numbers" in page.locator(".clause .field-error").inner_text()
    assert site.api("GET", "/flags/erring/environments/staging/rules").json()["rules"] == []


def test_safety_cross_site_forged_expired_and_revoked_sessions(site: Site, context: Any) -> None:
    assert site.api("POST", "/flags", {"key": "guarded"}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    # a form on another site posting to the console: refused, nothing toggled
    evil = site.pages.add(
        "/evil",
        "<!doctype html><title>evil</title><form id=f method=post "
        f"action='{site.cp.url}/console/flags/guarded/environments/staging/toggle'>"
        "<input name=enabled value=true><input name=_csrf value=guess></form>"
        "<script>document.getElementById('f').submit()</script>",
    )
    page.goto(evil)
    page.wait_for_load_state()
    assert "/console/flags/guarded" not in page.url or "Refused" in page.content()
    flag = site.api("GET", "/flags/guarded").json()
    assert flag["environments"]["staging"]["enabled"] is False

    # the CSP header on every page, and user text rendered as text
    xss = "<img src=x onerror=alert(1)>"
    assert site.api("POST", "/flags", {"key": "xss-name", "name": xss}).status_code == 201
    dialogs: list[str] = []

    def opened(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", opened)
    response = page.goto(site.cp.url + "/console/flags?q=xss")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert page.get_by_text(xss).is_visible()
    response = page.goto(site.cp.url + "/console/flags/xss-name")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert page.locator("img[src=x]").count() == 0
    assert dialogs == []

    # a forged session cookie goes to sign-in
    forged = context.browser.new_context()
    forged.add_cookies(
        [{"name": "vane_console", "value": "forged", "url": site.cp.url + "/console"}]
    )
    other = forged.new_page()
    other.goto(site.cp.url + "/console/flags")
    assert "/console/sign-in" in other.url
    forged.close()

    # an expired (idle) session goes to sign-in
    with sqlite3.connect(database_of(site)) as db:
        db.execute("UPDATE console_sessions SET seen_at = '2000-01-01 00:00:00.000000'")
    goes_to_sign_in(page, site.cp.url + "/console/flags")

    # a revoked key's session is refused at its next request
    key = site.api("POST", "/keys", {"kind": "management", "name": "temp"}).json()
    sign_in(page, site, key["key"])
    assert site.api("DELETE", f"/keys/{key['id']}").status_code in (200, 204)
    goes_to_sign_in(page, site.cp.url + "/console/flags")


def goes_to_sign_in(page: Any, url: str) -> None:
    """Going to ``url`` ends at sign-in. The page it leaves may get there first: an open page's
    live stream ends with ``signed-out`` once its session has, and the page goes to sign-in of
    its own, interrupting the navigation asked for."""
    try:
        page.goto(url)
    except PlaywrightError as exc:
        if "/console/sign-in" not in str(exc):
            raise
    page.wait_for_url("**/console/sign-in**")


def test_results_page_shows_the_apis_numbers_and_an_interval_per_treatment(
    site: Site, context: Any
) -> None:
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/experiments")
    page.get_by_text("New experiment").click()
    page.get_by_label("Name").fill("Pricing page")
    page.get_by_label("Key (optional)").fill("pricing")
    page.get_by_label("Goal event").fill("purchase")
    page.get_by_label("Variant 3 key").fill("cheaper")
    page.get_by_label("Start now").check()
    page.get_by_role("button", name="Create experiment").click()
    page.wait_for_url("**/console/experiments/pricing")
    assert page.locator(".status.running").first.is_visible()

    metric = site.api(
        "POST",
        "/metrics",
        {"name": "Revenue", "key": "revenue", "event": "purchase", "aggregation": "sum"},
    )
    assert metric.status_code == 201, metric.text
    events = []
    for i in range(240):
        unit = f"p{i}"
        assigned = site.api("POST", "/experiments/pricing/assign", {"unit": unit}).json()
        bought = i % 4 == 0 or (assigned["variant"] != "control" and i % 3 == 0)
        if bought:
            events.append({"unit": unit, "event": "purchase", "value": 1000 + i})
    stored = site.api("POST", "/events", {"events": events})
    assert stored.status_code == 200, stored.text

    # guardrail chosen in the page
    page.reload()
    page.get_by_label("Revenue").check()
    page.get_by_role("button", name="Save metrics").click()
    page.wait_for_url("**/console/experiments/pricing#results")
    api = site.api("GET", "/experiments/pricing").json()["results"]
    tables = page.locator("table.results")
    assert tables.count() == 2  # the primary metric and the guardrail
    primary = tables.nth(0)
    for variant in api["variants"]:
        row = primary.locator(f"tr[data-variant='{variant['key']}']")
        assert row.locator("[data-field=exposed]").inner_text() == str(variant["exposed"])
        assert row.locator("[data-field=conversions]").inner_text() == str(variant["conversions"])
        assert row.locator("[data-field=rate]").inner_text() == f"{variant['rate']:.4g}"
        if variant.get("uplift") is not None:
            assert row.locator("[data-field=uplift]").inner_text() == f"{variant['uplift']:+.2f}%"
    # the verdict: about 80 units per arm are far from any plan, so no winner yet, whatever the table
    assert api["winner"] is None
    assert api["verdict"]["state"] == "not-yet"
    verdict = page.locator("#results [data-verdict]").first
    assert verdict.get_attribute("data-verdict") == "not-yet"
    assert verdict.inner_text().startswith(
        f"No winner yet: {api['verdict']['reachedPerArm']:,} of the "
        f"{api['verdict']['plannedPerArm']:,} units per variant planned"
    )
    assert page.locator("#results .winner").count() == 0
    forest = page.locator("svg.forest")
    treatments = len(api["variants"]) - 1
    assert forest.locator("line.interval").count() == treatments * 2  # primary and guardrail
    description = forest.locator("desc").text_content() or ""
    assert "cheaper" in description
    assert "95% interval" in description
    # the time series is drawn apart and follows the results
    page.wait_for_selector("#daily[data-loaded] svg.timeseries")
    assert page.locator("svg.timeseries polyline").count() == len(api["variants"])
    shot(page, "results")

    page.get_by_role("button", name="Stop").click()
    page.wait_for_url("**/console/experiments/pricing")
    assert site.api("GET", "/experiments/pricing").json()["status"] == "stopped"


def test_a_new_key_is_shown_once_and_can_be_revoked(site: Site, context: Any) -> None:
    body = {"kind": "management", "name": "deploy bot", "role": "editor", "mayTurnOff": True}
    bot = site.api("POST", "/keys", body)
    assert bot.status_code == 201, bot.text
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/keys")
    # a service account's role and grant, on its row
    assert page.get_by_label("Role of deploy bot", exact=True).input_value() == "editor"
    page.get_by_label("Role of deploy bot", exact=True).select_option("viewer")
    page.get_by_role("button", name="Save role of deploy bot").click()
    page.wait_for_url("**/console/keys")
    assert site.api("GET", "/keys?kind=management").json()["keys"][-1]["role"] == "viewer"
    page.get_by_text("New key").click()
    # a service account's role and grant: asked of a management key only
    account = page.locator("fieldset#k-account")
    page.get_by_label("Kind").select_option("management")
    assert account.is_visible()
    assert page.get_by_label("Role", exact=True).input_value() == "editor"
    page.get_by_label("Kind").select_option("public")
    assert not account.is_visible()
    page.get_by_label("Environment (public keys need one; server keys may have one)").select_option(
        "staging"
    )
    page.get_by_label("Name").fill("landing page")
    page.get_by_role("button", name="Create key").click()
    token = page.locator("#new-key").inner_text()
    assert token.startswith("pk_live_")
    shot(page, "keys")
    page.goto(site.cp.url + "/console/keys")
    assert token not in page.content()  # shown once
    created = next(
        k for k in site.api("GET", "/keys").json()["keys"] if k["name"] == "landing page"
    )
    page.get_by_role("button", name=f"Revoke {created['id']}").click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    page.wait_for_load_state()
    eventually(
        lambda: (
            site.api("GET", "/keys?revoked=true").status_code == 200
            and all(k["id"] != created["id"] for k in site.api("GET", "/keys").json()["keys"])
        )
    )


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        AXE_DIR.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["npm", "install", "--no-save", "--prefix", str(AXE_DIR), "axe-core@4"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0 or not AXE.exists():
            if IN_CI:
                pytest.fail(f"could not install axe-core from npm: {result.stderr[-500:]}")
            pytest.skip("axe-core could not be installed from npm")
    return AXE.read_text()


def serious_violations(page: Any, axe: str) -> list[str]:
    page.evaluate(axe)
    found = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".filter(v => v.impact === 'serious' || v.impact === 'critical')"
        ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))"
    )
    return list(found)


def test_every_screen_has_no_serious_accessibility_violation(
    site: Site, context: Any, axe_source: str
) -> None:
    if site.api("GET", "/flags/a11y").status_code == 404:
        assert site.api("POST", "/flags", {"key": "a11y"}).status_code == 201
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(site.cp.url + "/console/sign-in")
    assert serious_violations(page, axe_source) == []
    shot(page, "sign-in")
    # an invitation's page, as the invited person first sees it
    invited = site.api(
        "POST", "/users/invitations", {"email": "a11y@example.com", "role": "editor"}
    )
    assert invited.status_code == 201, invited.text
    page.goto(invited.json()["url"])
    assert serious_violations(page, axe_source) == []
    shot(page, "welcome")
    sign_in(page, site)
    if site.api("GET", "/experiments/a11y-exp").status_code == 404:
        body = {"name": "A11y", "key": "a11y-exp", "goal": "signup"}
        assert site.api("POST", "/experiments", body).status_code == 201
    if site.api("GET", "/segments/a11y-seg").status_code == 404:
        assert site.api("POST", "/segments", {"key": "a11y-seg"}).status_code == 201
    screens = {
        "flags": "/console/flags",
        "flag": "/console/flags/a11y?env=production",
        "segments": "/console/segments",
        "segment": "/console/segments/a11y-seg",
        "experiments": "/console/experiments",
        "experiment": "/console/experiments/a11y-exp",
        "experiment per day": "/console/experiments/a11y-exp/daily",
        "metrics": "/console/metrics",
        "environments": "/console/environments",
        "keys": "/console/keys",
        "webhooks": "/console/webhooks",
        "people": "/console/people",
        "audit": "/console/audit",
    }
    for name, path in screens.items():
        page.goto(site.cp.url + path)
        assert serious_violations(page, axe_source) == [], path
        if name in (
            "segments",
            "segment",
            "experiments",
            "metrics",
            "environments",
            "webhooks",
            "people",
            "audit",
        ):
            shot(page, name)
    # every request a console page made went to the control plane (axe is injected, not fetched)
    assert requested
    assert [url for url in requested if not url.startswith(site.cp.url + "/")] == []


def test_a_critical_toggle_with_the_keyboard_alone(site: Site, context: Any) -> None:
    assert site.api("POST", "/flags", {"key": "keyboard"}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/flags?q=keyboard")
    switch = page.get_by_role("switch", name="keyboard in production")
    for _ in range(60):  # Tab until the switch has the focus, as a person would
        page.keyboard.press("Tab")
        if switch.evaluate("el => el === document.activeElement"):
            break
    else:
        raise AssertionError("the switch never took the focus")
    page.keyboard.press("Enter")
    dialog = page.locator("dialog#confirm")
    assert dialog.is_visible()
    assert page.evaluate("document.activeElement.id") == "confirm-ok"
    page.keyboard.press("Enter")
    page.wait_for_load_state()
    eventually(
        lambda: site.api("GET", "/flags/keyboard").json()["environments"]["production"]["enabled"]
    )


def test_prerequisites_are_set_from_the_flag_page(site: Site, context: Any) -> None:
    for key in ("parent-flag", "child-flag"):
        if site.api("GET", f"/flags/{key}").status_code == 404:
            assert site.api("POST", "/flags", {"key": key}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/flags/child-flag?env=staging")
    page.locator("input[name='prerequisites[0].key']").fill("no-such-flag")
    page.locator("input[name='prerequisites[0].variation']").fill("0")
    page.get_by_role("button", name="Save prerequisites").click()
    assert "no-such-flag" in page.locator("#form-error").inner_text()
    page.locator("input[name='prerequisites[0].key']").fill("parent-flag")
    page.locator("input[name='prerequisites[0].variation']").fill("0")
    page.get_by_role("button", name="Save prerequisites").click()
    page.wait_for_url("**#prerequisites")
    settings = site.api("GET", "/flags/child-flag/environments/staging").json()
    assert settings["prerequisites"] == [{"key": "parent-flag", "variation": 0}]


def test_a_toggle_is_scheduled_and_cancelled_from_the_flag_page(site: Site, context: Any) -> None:
    if site.api("GET", "/flags/timed").status_code == 404:
        assert site.api("POST", "/flags", {"key": "timed"}).status_code == 201
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/flags/timed?env=staging")
    page.get_by_label("At (UTC)").fill("2030-01-02T03:04")
    page.get_by_role("button", name="Schedule").click()
    page.wait_for_url("**#schedules")
    listed = site.api("GET", "/flags/timed/environments/staging/schedule").json()
    [planned] = [c for c in listed["schedules"] if c["status"] == "pending"]
    assert planned["at"].startswith("2030-01-02T03:04")
    assert planned["enabled"] is True
    page.get_by_role("button", name="Cancel the change at 2030-01-02 03:04").click()
    page.wait_for_url("**#schedules")
    after = site.api("GET", "/flags/timed/environments/staging/schedule").json()["schedules"]
    assert [c["status"] for c in after] == ["cancelled"]


def test_a_segments_rules_are_edited_like_a_flags(site: Site, context: Any) -> None:
    """Segments: members and rules edited field by field (as a flag's rules are), an error beside
    the field the API names, and the segment at work at the relay."""
    assert site.api("POST", "/segments", {"key": "big-accounts"}).status_code == 201
    rule = {
        "clauses": [{"op": "segmentMatch", "values": ["big-accounts"]}],
        "serve": {"variation": 0},
    }
    flag = {"key": "for-big-accounts", "variations": [{"value": True}, {"value": False}]}
    assert site.api("POST", "/flags", flag).status_code == 201
    assert (
        site.api(
            "PUT", "/flags/for-big-accounts/environments/production/rules", {"rules": [rule]}
        ).status_code
        == 200
    )
    settings = {"enabled": True, "fallthrough": {"variation": 1}}  # others: false
    answer = site.api("PUT", "/flags/for-big-accounts/environments/production", settings)
    assert answer.status_code == 200, answer.text
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/segments/big-accounts")
    page.get_by_label("Included context keys (one per line): always in").fill("acme-ceo")
    page.get_by_role("button", name="Add rule").click()
    page.get_by_label("Attribute").first.fill("plan")
    page.locator("textarea[name='rules[0].clauses[0].values']").fill("enterprise\nscale")
    page.get_by_label("Weight % (empty: all)").fill("150")
    page.get_by_role("button", name="Save segment").click()
    error = page.locator(".field-error", has_text="100")
    error.wait_for()
    assert page.get_by_label("Attribute").first.input_value() == "plan"  # kept as typed
    assert site.api("GET", "/segments/big-accounts").json()["rules"] == []  # nothing written
    page.get_by_label("Weight % (empty: all)").fill("")
    page.get_by_role("button", name="Save segment").click()
    page.wait_for_url("**/console/segments/big-accounts")
    stored = site.api("GET", "/segments/big-accounts").json()
    assert stored["included"] == ["acme-ceo"]
    assert [c["values"] for c in stored["rules"][0]["clauses"]] == [["enterprise", "scale"]]
    assert stored["rules"][0]["clauses"][0]["attribute"] == "plan"
    eventually(
        lambda: serves(site, "for-big-accounts", {"targetingKey": "u1", "plan": "scale"}, True)
    )
    assert serves(site, "for-big-accounts", {"targetingKey": "u2", "plan": "free"}, False)
    assert serves(site, "for-big-accounts", {"targetingKey": "acme-ceo"}, True)
    shot(page, "segment")


def test_a_ratio_metric_is_defined_from_the_metrics_page(site: Site, context: Any) -> None:
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/metrics")
    page.get_by_text("New metric").click()
    page.get_by_label("Name").fill("Clicks per session")
    page.get_by_label("Event (a ratio's numerator)").fill("click")
    page.get_by_label("Aggregation").select_option("ratio")
    page.get_by_label("Numerator takes").select_option("count")
    page.get_by_role("button", name="Create metric").click()
    # no denominator event: the API's error, beside its field, and the form kept
    form = page.locator("form[action='/console/metrics/']")
    assert "the event name the metric reads" in form.inner_text()
    page.get_by_label("Denominator event").fill("session")
    page.get_by_role("button", name="Create metric").click()
    page.wait_for_url("**/console/metrics")
    row = page.get_by_role("row", name="Clicks per session")
    assert "click count per session count" in row.inner_text()
    made = site.api("GET", "/metrics/clicks-per-session").json()
    assert made["numerator"] == {"event": "click", "aggregation": "count"}
    assert made["denominator"] == {"event": "session", "aggregation": "count"}
    page.get_by_text("New metric").click()
    shot(page, "metrics")


# --- results by dimension ---------------------------------------------------------------------

SLICE_LABELS = {"other": "Other", "none": "None"}


def slice_rows(api: dict[str, Any], position: int) -> list[tuple[str, dict[str, Any], bool]]:
    """(the row's data-slice, the metric's variants by key, tested) per slice of the API's split,
    for the metric at ``position`` (the primary first, then the guardrails)."""
    return [
        (
            piece["value"] if piece["slice"] == "value" else piece["slice"],
            {v["key"]: v for v in piece["metrics"][position]["variants"]},
            piece["tested"],
        )
        for piece in api["slices"]
    ]


def test_results_split_by_a_dimension_show_the_apis_slices(
    site: Site, context: Any, axe_source: str
) -> None:
    """An experiment created in the console capturing "country", units assigned with their
    context, then its results split by country: the rows and numbers are the API's."""
    page = context.new_page()
    sign_in(page, site)
    page.goto(site.cp.url + "/console/experiments")
    page.get_by_text("New experiment").click()
    page.get_by_label("Name").fill("Checkout by country")
    page.get_by_label("Key (optional)").fill("checkout-country")
    page.get_by_label("Goal event").fill("purchase")
    page.get_by_label("Split results by").fill("country")
    page.get_by_label("Start now").check()
    page.get_by_role("button", name="Create experiment").click()
    page.wait_for_url("**/console/experiments/checkout-country")
    assert page.locator("#dimensions .captured code").all_inner_texts() == ["country"]
    assert site.api("GET", "/experiments/checkout-country").json()["dimensions"] == ["country"]

    # units assigned with their context (which the dimension is captured from); a treatment
    # converts far more often in DE only; GB and IT fall in "other" (top 3), 24 have no country
    countries: list[tuple[str | None, int]] = [
        ("DE", 300),
        ("FR", 260),
        ("US", 40),
        ("GB", 16),
        ("IT", 10),
        (None, 24),
    ]
    events = []
    headers = {"Authorization": f"Bearer {site.cp.keys['management']}"}
    with httpx.Client(base_url=site.cp.url + "/api/v1", headers=headers, timeout=10) as client:
        i = 0
        for country, units in countries:
            for _ in range(units):
                unit, i = f"cc{i}", i + 1
                attributes = {"country": country} if country else {}
                body = {"unit": unit, "context": {"targetingKey": unit, **attributes}}
                answer = client.post("/experiments/checkout-country/assign", json=body)
                assert answer.status_code == 200, answer.text
                lifted = country == "DE" and answer.json()["variant"] != "control"
                if i % 20 < (8 if lifted else 3):
                    events.append({"unit": unit, "event": "purchase"})
        stored = client.post("/events", json={"events": events})
        assert stored.status_code == 200, stored.text

    page.reload()
    page.get_by_label("Split by", exact=True).select_option("country")
    page.get_by_label("Values with a row of their own").fill("3")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**/console/experiments/checkout-country?dimension=country&top=3*")
    api = site.api("GET", "/experiments/checkout-country?dimension=country&top=3").json()
    split = api["results"]["dimension"]
    assert split["correction"] == "holm"
    table = page.locator("table.slices")
    assert table.count() == 1  # the primary metric (the goal event); no guardrail
    assert "by country" in table.locator("caption").inner_text()
    assert "Holm" in table.locator("caption").inner_text()
    rows = slice_rows(split, 0)
    assert [name for name, _, _ in rows] == ["DE", "FR", "US", "other", "none"]
    assert table.locator("tbody tr").count() == len(rows)
    control, treatment = "control", "treatment"
    for name, variants, tested in rows:
        row = table.locator(f"tr[data-slice='{name}']")
        label = row.locator("th").inner_text()
        assert label.startswith(SLICE_LABELS.get(name, name))
        for key, variant in variants.items():
            exposed, rate = (row.locator(f"[data-field={f}-{key}]") for f in ("exposed", "rate"))
            assert exposed.inner_text() == str(variant["exposed"])
            assert rate.inner_text() == f"{variant['rate']:.4g}"
        versus = variants[treatment]
        change = row.locator(f"[data-field=change-{treatment}]").inner_text()
        p_value = row.locator(f"[data-field=p-{treatment}]").inner_text()
        result = row.locator(f"[data-field=result-{treatment}]").inner_text()
        if not tested:
            assert (change, p_value, result) == ("—", "—", "too few units (not tested)")
            continue
        assert change == (
            f"{versus['uplift']:+.2f}% ({versus['ciLow']:+.2f}% to {versus['ciHigh']:+.2f}%)"
        )
        assert p_value == f"{versus['pValueAdjusted']:.3g}"
        assert result == ("significant" if versus["significant"] else "not significant")
        assert variants[control]["exposed"] >= 100
    marks = {name: variants[treatment].get("significant") for name, variants, _ in rows}
    assert marks["DE"] is True  # the lift is in DE, and survives the correction
    assert marks["FR"] is False
    shown = page.locator("#by-dimension").inner_text()
    assert all(note in shown for note in split["notes"])
    # the totals are still there, above the split
    assert page.locator("table.results:not(.slices)").count() == 1
    assert serious_violations(page, axe_source) == []
    shot(page, "results-dimension")

    # a dimension the experiment does not capture: the API's message, and the totals
    response = page.goto(site.cp.url + "/console/experiments/checkout-country?dimension=plan")
    assert response is not None
    assert response.status == 422
    refused = site.api("GET", "/experiments/checkout-country?dimension=plan")
    assert refused.status_code == 422
    assert page.locator("#split-error").inner_text() == refused.json()["error"]["message"]
    assert page.locator("table.results").count() == 1
    assert page.locator("table.slices").count() == 0


def test_a_bad_dimension_shows_the_apis_error_beside_the_field(
    site: Site, context: Any, axe_source: str
) -> None:
    page = context.new_page()
    sign_in(page, site)
    # creating: refused, the error beside the field, nothing created
    page.goto(site.cp.url + "/console/experiments")
    page.get_by_text("New experiment").click()
    page.get_by_label("Name").fill("Dimensions edited")
    page.get_by_label("Key (optional)").fill("dims-edited")
    page.get_by_label("Goal event").fill("signup")
    page.get_by_label("Split results by").fill("country, key")
    page.get_by_role("button", name="Create experiment").click()
    refused = site.api(
        "POST",
        "/experiments",
        {"name": "Dimensions edited", "goal": "signup", "dimensions": ["country", "key"]},
    )
    assert refused.status_code == 422
    [detail] = refused.json()["error"]["details"]
    error = page.locator("#err-dimensions")
    assert error.inner_text() == f"{detail['field']}: {detail['message']}"
    assert page.get_by_label("Split results by").get_attribute("aria-invalid") == "true"
    assert page.get_by_label("Split results by").input_value() == "country, key"  # as typed
    assert site.api("GET", "/experiments/dims-edited").status_code == 404
    page.get_by_label("Split results by").fill("country")
    page.get_by_role("button", name="Create experiment").click()
    page.wait_for_url("**/console/experiments/dims-edited")

    # editing: refused, the error beside the field, nothing changed
    field = page.get_by_label("Split results by")
    assert field.input_value() == "country"
    field.fill("country, /device/os, country")
    page.get_by_role("button", name="Save dimensions").click()
    patch = {"dimensions": ["country", "/device/os", "country"]}
    refused = site.api("PATCH", "/experiments/dims-edited", patch)
    assert refused.status_code == 422
    [detail] = refused.json()["error"]["details"]
    assert detail["field"] == "dimensions[2]"
    error = page.locator("#dimensions .field-error")
    assert error.inner_text() == f"dimensions[2]: {detail['message']}"
    assert field.input_value() == "country, /device/os, country"  # kept as typed
    assert field.get_attribute("aria-invalid") == "true"
    assert site.api("GET", "/experiments/dims-edited").json()["dimensions"] == ["country"]
    assert serious_violations(page, axe_source) == []

    # corrected: saved through the API's service, a new version, audited
    before = site.api("GET", "/experiments/dims-edited").json()["version"]
    field.fill("country, /device/os")
    page.get_by_role("button", name="Save dimensions").click()
    page.wait_for_url("**/console/experiments/dims-edited#dimensions")
    assert page.locator("#dimensions .captured code").all_inner_texts() == ["country", "/device/os"]
    after = site.api("GET", "/experiments/dims-edited").json()
    assert (after["dimensions"], after["version"]) == (["country", "/device/os"], before + 1)
    trail = site.api("GET", "/audit?resourceType=experiment&resourceKey=dims-edited").json()
    update = next(e for e in trail["entries"] if e["action"] == "experiment.update")
    assert update["after"]["dimensions"] == ["country", "/device/os"]
    assert page.get_by_label("Split by", exact=True).locator("option").all_inner_texts() == [
        "nothing (totals only)",
        "country",
        "/device/os",
    ]
