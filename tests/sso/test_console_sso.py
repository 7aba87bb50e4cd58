"""Single sign-on in the console, end to end against the real provider: the sign-in page's
button, the provider's login, the callback; the person is created with the role their claim
maps to (or the default), named in the audit, and refused with the reason they read when the
provider or the rules say no. The control plane runs in-process on SQLite; the provider is a
real ``oidc-provider`` process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from litestar.testing import TestClient

from control_plane.app import create_app
from control_plane.settings import Settings
from tests.sso.conftest import OpenIdProvider

pytestmark = pytest.mark.e2e


class Console:
    def __init__(self, client: TestClient[Any], key: str) -> None:
        self.client = client
        self.key = key

    def start(self) -> str:
        page = self.client.get("/console/sign-in")
        assert 'href="/console/sso/start' in page.text
        answer = self.client.get(
            "/console/sso/start?next=/console/segments", follow_redirects=False
        )
        assert answer.status_code == 303, answer.text
        return str(answer.headers["location"])

    def back(self, query: dict[str, str]) -> Any:
        return self.client.get("/console/sso/callback?" + urlencode(query), follow_redirects=False)

    def signed_in(self, query: dict[str, str]) -> str:
        """The callback signs the person in and answers a page that goes on to where they were
        going (not a redirect: tests/browser/test_sso.py shows why); returns that target."""
        answer = self.back(query)
        assert answer.status_code == 200, answer.text[:800]
        assert "vane_console=" in answer.headers.get("set-cookie", "")
        refresh = re.search(r'<meta http-equiv="refresh" content="0;url=([^"]+)">', answer.text)
        assert refresh is not None, answer.text[:800]
        return refresh.group(1)

    def people(self) -> list[dict[str, Any]]:
        answer = self.client.get("/api/v1/users", headers={"Authorization": f"Bearer {self.key}"})
        assert answer.status_code == 200
        people: list[dict[str, Any]] = answer.json()["people"]
        return people


@pytest.fixture
def console(oidc_provider: OpenIdProvider, tmp_path: Path) -> Iterator[Console]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'vane.db'}",
        sso=oidc_provider.settings(allowed_domains=("example.com",)),
    )
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        key = next(k.token for k in app.state.issued_keys if k.kind.value == "management")
        yield Console(client, key)


def test_a_person_signs_in_through_the_provider_with_their_mapped_role(
    console: Console, oidc_provider: OpenIdProvider
) -> None:
    query = oidc_provider.sign_in(console.start(), "alice")
    assert console.signed_in(query) == "/console/segments"
    page = console.client.get("/console/segments")
    assert "alice@example.com" in page.text
    assert "admin" in page.text
    [alice] = [p for p in console.people() if p["email"] == "alice@example.com"]
    assert (alice["role"], alice["signsInWith"]) == ("admin", ["sso"])
    # a second sign-in finds the same person
    console.client.cookies.clear()
    assert console.signed_in(oidc_provider.sign_in(console.start(), "alice"))
    assert len([p for p in console.people() if p["email"] == "alice@example.com"]) == 1


def test_a_first_time_person_with_no_mapped_role_gets_the_default(
    console: Console, oidc_provider: OpenIdProvider
) -> None:
    assert console.signed_in(oidc_provider.sign_in(console.start(), "nobody"))
    [person] = [p for p in console.people() if p["email"] == "nobody@example.com"]
    assert person["role"] == "viewer"


@pytest.mark.parametrize(
    ("account", "reason"),
    [
        ("bob", "has not verified this email"),
        ("carol", "example.org is not an allowed email domain"),
    ],
)
def test_the_provider_or_the_rules_refuse_and_the_person_reads_why(
    console: Console, oidc_provider: OpenIdProvider, account: str, reason: str
) -> None:
    answer = console.back(oidc_provider.sign_in(console.start(), account))
    assert answer.status_code == 401
    assert reason in answer.text
    assert "vane_console" not in answer.headers.get("set-cookie", "")
    assert console.people() == []


def test_a_callback_from_another_browser_or_replayed_is_refused(
    console: Console, oidc_provider: OpenIdProvider
) -> None:
    query = oidc_provider.sign_in(console.start(), "alice")
    console.client.cookies.clear()  # another browser: no state cookie of this sign-in
    answer = console.back(query)
    assert answer.status_code == 401
    assert "did not start in this browser" in answer.text
    # replayed in the right browser after it was used: refused too
    first = console.start()
    query = oidc_provider.sign_in(first, "alice")
    state = console.client.cookies.get("vane_sso")
    assert console.signed_in(query)
    console.client.cookies.set("vane_sso", state or "", path="/console/sso")
    assert console.back(query).status_code == 401


def test_a_deactivated_person_cannot_come_back_through_the_provider(
    console: Console, oidc_provider: OpenIdProvider
) -> None:
    assert console.signed_in(oidc_provider.sign_in(console.start(), "erin"))
    [erin] = [p for p in console.people() if p["email"] == "erin@example.com"]
    off = console.client.patch(
        f"/api/v1/users/{erin['id']}",
        json={"state": "deactivated"},
        headers={"Authorization": f"Bearer {console.key}"},
    )
    assert off.status_code == 200
    assert console.client.get("/console/flags", follow_redirects=False).status_code == 303
    answer = console.back(oidc_provider.sign_in(console.start(), "erin"))
    assert answer.status_code == 401
    assert "deactivated" in answer.text
