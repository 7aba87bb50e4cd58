"""A live flag reaches an open page however the pages before it left their connections.

Found from outside (#22): in one browser context, a page with the tracker whose cta was clicked
(navigating away), the same page loaded again and left (``about:blank``) right after tracking an
event, then a second page: its ``vane.flag('live')`` never saw the toggle made after it was ready.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Site
from tests.browser.test_tracker import units_in

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


def test_a_toggle_reaches_a_page_after_earlier_pages_navigated_away(
    site: Site, context: Any
) -> None:
    assert site.api("POST", "/flags", {"key": "live"}).status_code == 201
    toggled = site.api("POST", "/flags/live/environments/production/toggle", {"enabled": True})
    assert toggled.status_code == 200
    site.experiment(
        {
            "name": "live-cta",
            "key": "live-cta",
            "type": "cta",
            "url": "/live-cta",
            "selector": "a.go",
            "variants": [
                {"key": "control", "content": ""},
                {"key": "treatment", "content": "Go now", "href": "/elsewhere"},
            ],
        }
    )
    site.pages.add("/elsewhere", "<!doctype html><title>elsewhere</title><p>no tracker</p>")
    [unit] = units_in("live-cta", "treatment")
    url = site.page("/live-cta", '<a class="go" href="/elsewhere">Go</a>', unit=unit)

    first = context.new_page()
    first.goto(url)
    first.evaluate("vane.ready()")
    first.click("a.go")
    first.wait_for_url("**/elsewhere")
    first.goto(url)
    first.evaluate("vane.ready()")
    first.evaluate("() => { vane.track('leaving', {}); location.href = 'about:blank'; }")
    first.wait_for_url("about:blank")

    second = context.new_page()
    second.goto(site.page("/live-second", "<p>second</p>", unit="live-second-unit"))
    second.evaluate("vane.ready()")
    assert second.evaluate("vane.flag('live', false)") is True
    second.evaluate(
        "() => { window.changes = []; vane.on('change', c => window.changes.push(c)); }"
    )
    off = site.api("POST", "/flags/live/environments/production/toggle", {"enabled": False})
    assert off.status_code == 200
    second.wait_for_function("window.changes.length > 0", timeout=10_000)
    assert second.evaluate("window.changes") == [{"live": False}]
    assert second.evaluate("vane.flag('live', true)") is False


def test_a_change_between_the_first_flags_and_the_stream_opening_is_not_missed(
    site: Site, context: Any
) -> None:
    """The stream opens after the first flags answer; a toggle in between must still arrive."""
    assert site.api("POST", "/flags", {"key": "gap"}).status_code == 201
    site.relay_current()
    page = context.new_page()
    # hold the event stream back until the toggle is made, as a slow network would
    release: list[Any] = []
    page.route("**/ofrep/v1/events?**", lambda route: release.append(route))
    page.goto(site.page("/gap", "<p>gap</p>", unit="gap-unit"))
    page.evaluate("vane.ready()")
    assert page.evaluate("vane.flag('gap', 'unset')") is False
    page.evaluate("() => { window.changes = []; vane.on('change', c => window.changes.push(c)); }")
    page.wait_for_function("true")
    assert len(release) == 1  # the stream was asked for, and is held
    on = site.api("POST", "/flags/gap/environments/production/toggle", {"enabled": True})
    assert on.status_code == 200
    site.relay_current()
    release[0].continue_()
    page.wait_for_function("window.changes.length > 0", timeout=10_000)
    assert page.evaluate("vane.flag('gap', 'unset')") is True
