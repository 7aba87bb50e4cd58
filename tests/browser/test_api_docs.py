"""The API docs in a browser with no way out: every request to another origin is refused, as
offline or behind a firewall, and Swagger UI still renders the whole API."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import Site

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.mark.parametrize("path", ["/schema/swagger", "/schema"])
def test_the_api_docs_render_with_no_other_origin_reachable(
    site: Site, context: Any, path: str
) -> None:
    ours = urlsplit(site.cp.url).netloc
    elsewhere: list[str] = []

    def offline(route: Any) -> None:
        if urlsplit(route.request.url).netloc == ours:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", offline)
    page = context.new_page()
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.goto(f"{site.cp.url}{path}")
    title = page.locator(".swagger-ui .info .title")
    title.wait_for()
    assert "Vane control plane" in title.inner_text()
    page.locator(".opblock-tag", has_text="flags").first.wait_for()
    assert page.locator(".opblock").count() > 50  # every operation, not an error box
    assert elsewhere == []
    assert failed == []
