"""docs/browser.md's "Try it", as written: its experiments, its page, its purchase, its results.

Its own control plane and relay (module-scoped ``site``): the walkthrough's experiments run on
every path, so they must not meet the other browser tests' pages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Site
from tests.e2e.test_relays import eventually
from tests.variants import variant_of

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "browser.md"


def walkthrough() -> tuple[list[tuple[str, dict[str, Any]]], str, list[str]]:
    """The API calls (path, body), the page and the results paths of the "Try it" section."""
    section = DOCS.read_text().split("## Try it", 1)[1].split("\n## ", 1)[0]
    shell, html, results = re.findall(r"```(?:sh|html)\n(.*?)```", section, re.DOTALL)
    calls = [
        (path, json.loads(body))
        for path, body in re.findall(r"^api (/\S+) '(.*?)'$", shell, re.DOTALL | re.MULTILINE)
    ]
    reads = re.findall(r"localhost:8000/api/v1(/\S+)", results)
    return calls, html, reads


def test_the_documented_walkthrough(site: Site, visitors: Callable[[], Any]) -> None:
    calls, html, reads = walkthrough()
    assert [path for path, _ in calls] == ["/metrics", "/experiments", "/experiments"]
    for path, body in calls:
        answer = site.api("POST", path, body)
        assert answer.status_code == 201, answer.text
    site.relay_current()
    page_html = html.replace("http://localhost:8100", site.relay.url).replace(
        "pk_live_…", site.public
    )
    url = site.pages.add("/index.html", page_html)
    variants = {"headline": ["control", "bold"], "buy-button": ["control", "green"]}
    seen: list[tuple[str, str, str]] = []
    for visitor in range(4):
        page = visitors().new_page()
        page.goto(url)
        # applied, as a visitor sees it (ready() also settles after 3 s without the relay's
        # answer: a busy machine)
        page.wait_for_function("performance.getEntriesByName('vane:applied').length > 0")
        unit = page.evaluate("vane.unit")
        headline = variant_of("headline", unit, variants["headline"], [None, None])
        button = variant_of("buy-button", unit, variants["buy-button"], [None, None])
        assert page.text_content("#headline") == (
            "Ship twice as fast" if headline == "bold" else "Deploy with confidence"
        )
        assert page.text_content("#buy") == ("Buy now" if button == "green" else "Buy")
        if visitor % 2 == 0:
            page.click("#buy")
        page.close()  # the tab; the visitor's browser lives on (the profile closes at the end)
        seen.append((unit, headline, button))
    assert reads == ["/experiments/headline", "/experiments/buy-button"]

    def results(path: str) -> dict[str, tuple[int, int]]:
        answer = site.api("GET", path).json()["results"]
        return {v["key"]: (v["exposed"], v["conversions"]) for v in answer["variants"]}

    def expected(index: int, key: str) -> dict[str, tuple[int, int]]:
        return {
            v: (
                sum(1 for s in seen if s[index] == v),
                sum(1 for i, s in enumerate(seen) if s[index] == v and i % 2 == 0),
            )
            for v in variants[key]
        }

    def counted(read: str, index: int, key: str, what: str) -> None:
        eventually(
            lambda: results(read) == expected(index, key),
            timeout=60,
            every=0.5,
            what=lambda: f"{what}: {results(read)} != {expected(index, key)}, visitors {seen}",
        )

    counted(reads[0], 1, "headline", "the headline's exposures and purchases")
    counted(reads[1], 2, "buy-button", "the button's exposures and clicks")
    for i in (0, 2):
        [purchase] = site.wait_stored(seen[i][0], "purchase")
        assert (purchase["value"], purchase["currency"]) == (4900, "EUR")
        assert purchase["props"]["plan"] == "team"
