"""Change requests in the console (issue #34), in headless Chromium: an admin protects
production from the Environments page, an editor proposes a change from the flag page, the admin
approves and applies it on the review page, then proposes a protected segment's change from its
page; every screen with no serious axe-core violation.

Screenshots go to ``docs/console/`` as the other browser tests' do (``VANE_CONSOLE_SHOTS=0``
skips them)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import Site
from tests.browser.test_console import (  # noqa: F401 (axe_source: a fixture)
    axe_source,
    serious_violations,
    shot,
    sign_in,
)

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

PASSWORD = "correct horse battery"


def joined(context: Any, site: Site, email: str, role: str) -> Any:
    """A page of a person invited with ``role`` who opened their link and set a password."""
    invited = site.api("POST", "/users/invitations", {"email": email, "role": role})
    assert invited.status_code == 201, invited.text
    page = context.new_page()
    page.goto(site.cp.url + urlsplit(invited.json()["url"]).path)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url("**/console/**")
    return page


def test_an_editor_proposes_and_an_admin_approves_and_applies(
    site: Site,
    browser: Any,
    context: Any,
    axe_source: str,  # noqa: F811
) -> None:
    assert site.api("POST", "/flags", {"key": "cr-checkout"}).status_code == 201
    # a segment a flag of production uses: protected with production
    assert site.api("POST", "/flags", {"key": "cr-members"}).status_code == 201
    assert site.api("POST", "/segments", {"key": "cr-vips", "included": ["u1"]}).status_code == 201
    rules = [{"clauses": [{"segment": "cr-vips", "op": "segmentMatch"}], "variation": 1}]
    used = site.api("PUT", "/flags/cr-members/environments/production/rules", {"rules": rules})
    assert used.status_code == 200, used.text
    admin = context.new_page()
    sign_in(admin, site)

    # the admin protects production from the Environments page
    admin.goto(site.cp.url + "/console/environments")
    assert serious_violations(admin, axe_source) == []
    shot(admin, "environments-approvals")
    admin.get_by_role("button", name="Require an approval for production").click()
    admin.wait_for_url("**/console/environments")
    assert site.api("GET", "/environments/production").json()["requiredApprovals"] == 1
    assert admin.get_by_label("Approvals required in production", exact=True).input_value() == "1"

    # the editor (another browser profile) proposes serving "off" when no rule matches
    editor_context = browser.new_context()
    try:
        editor = joined(editor_context, site, "ed@example.com", "editor")
        editor.goto(site.cp.url + "/console/flags/cr-checkout?env=production")
        assert serious_violations(editor, axe_source) == []
        settings = editor.locator("form#settings")
        assert settings.get_by_role("button", name="Request change").is_visible()
        assert editor.get_by_role("button", name="Request to turn on cr-checkout in production")
        shot(editor, "flag-protected")
        settings.get_by_role("radio", name="off").check()
        settings.get_by_label("Change request title").fill("Hold the new checkout back")
        settings.get_by_role("button", name="Request change").click()
        editor.wait_for_url(re.compile(r".*/console/change-requests/chr_\w+$"))
        request_url = editor.url
        assert "Hold the new checkout back" in editor.locator("h1").inner_text()
        assert "0 of 1 required" in editor.locator("#approvals").inner_text()
        # its author is not offered the review form (nobody approves their own)
        assert editor.locator("#review-form").count() == 0
        assert serious_violations(editor, axe_source) == []
    finally:
        editor_context.close()
    live = site.api("GET", "/flags/cr-checkout/environments/production").json()
    assert live["fallthrough"] == {"variation": 0}  # nothing served differently yet

    # the admin finds it in the list, approves it with a comment and applies it
    admin.goto(site.cp.url + "/console/change-requests")
    assert serious_violations(admin, axe_source) == []
    shot(admin, "change-requests")
    admin.get_by_role("link", name="Hold the new checkout back").click()
    admin.wait_for_url(request_url)
    diff = admin.locator("table.cr-diff")
    assert "fallthrough" in diff.inner_text()
    assert serious_violations(admin, axe_source) == []
    shot(admin, "change-request")
    admin.get_by_label("Comment (optional to approve, required to reject)").fill("Ship it")
    admin.get_by_role("button", name="Approve", exact=True).click()
    admin.wait_for_url(request_url)
    assert "1 of 1 required" in admin.locator("#approvals").inner_text()
    assert "Ship it" in admin.locator("#reviews").inner_text()
    admin.get_by_role("button", name="Apply", exact=True).click()
    admin.wait_for_url(request_url)
    assert admin.locator(".status.cr-applied").first.inner_text() == "applied"
    assert serious_violations(admin, axe_source) == []
    shot(admin, "change-request-applied")
    live = site.api("GET", "/flags/cr-checkout/environments/production").json()
    assert live["fallthrough"] == {"variation": 1}

    # the segment's page proposes its change too
    admin.goto(site.cp.url + "/console/segments/cr-vips")
    assert "production requires 1 approval" in admin.locator("#protected-note").inner_text()
    assert serious_violations(admin, axe_source) == []
    admin.get_by_label("Included context keys (one per line): always in").fill("u1\nu2")
    admin.get_by_role("button", name="Request change").click()
    admin.wait_for_url(re.compile(r".*/console/change-requests/chr_\w+$"))
    assert "Change segment cr-vips in production" in admin.locator("h1").inner_text()
    assert site.api("GET", "/segments/cr-vips").json()["included"] == ["u1"]
