"""Single sign-on as a person does it: headless Chromium, a real control plane process set up
with ``VANE_OIDC_*`` as docs/teams.md's worked example, and the real ``oidc-provider`` process
(tests/sso/provider.mjs) showing its login page. The person clicks the console's SSO button,
signs in at the provider and comes back signed in, or reads why they were refused.

The person opens the console at ``localhost`` and the provider is at ``127.0.0.1``: two sites,
as Vane and Google, Okta or Entra ID are, so the browser's SameSite rules apply as they do there.

Screenshots are written to the test's temporary folder (docs/console has no SSO screen)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_relays import ControlPlane, start_control_plane
from tests.processes import free_port
from tests.sso.conftest import CLIENTS, OpenIdProvider, running_provider

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@dataclass
class SsoSite:
    cp: ControlPlane
    provider: OpenIdProvider
    console: str
    """The control plane's URL as the person opens it (``localhost``: not the provider's site)."""

    def people(self) -> dict[str, dict[str, Any]]:
        answer = self.cp.api("GET", "/users")
        assert answer.status_code == 200, answer.text
        return {person["email"]: person for person in answer.json()["people"]}


@pytest.fixture(scope="module")
def sso_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SsoSite]:
    tmp: Path = tmp_path_factory.mktemp("sso")
    port = free_port()
    console = f"http://localhost:{port}"
    callback = f"{console}/console/sso/callback"
    with running_provider(redirects=[callback]) as provider:
        cp = start_control_plane(
            f"sqlite:///{tmp / 'vane.db'}",
            tmp,
            port=port,
            extra_env={
                "VANE_OIDC_ISSUER": provider.issuer,
                "VANE_OIDC_CLIENT_ID": "vane",
                "VANE_OIDC_CLIENT_SECRET": CLIENTS["vane"],
                "VANE_OIDC_REDIRECT_URL": callback,
                "VANE_OIDC_ALLOWED_DOMAINS": "example.com",
                "VANE_OIDC_ROLE_CLAIM": "groups",
                "VANE_OIDC_ROLE_MAP": "vane-admins=admin,vane-eng=editor",
                "VANE_OIDC_DEFAULT_ROLE": "viewer",
            },
        )
        try:
            yield SsoSite(cp, provider, console)
        finally:
            cp.process.stop()


def sign_in_at_the_provider(page: Any, site: SsoSite, account: str) -> None:
    """From the console's sign-in page, through the SSO button, to the provider's login page,
    where ``account`` signs in; the browser then follows the provider back to the console."""
    page.goto(site.console + "/console/sign-in")
    host = site.provider.issuer.split("//", 1)[1]
    page.get_by_role("link", name=f"Sign in with {host}").click()
    page.wait_for_url(f"{site.provider.issuer}/interaction/**")
    assert page.get_by_role("heading", name="Test identity provider").is_visible()
    assert "continue to vane" in page.inner_text("body")
    page.get_by_label("Account").fill(account)
    page.get_by_role("button", name="Sign in", exact=True).click()


def test_a_person_signs_in_through_the_provider_with_their_mapped_role(
    sso_site: SsoSite, context: Any, tmp_path: Path
) -> None:
    page = context.new_page()
    page.goto(sso_site.console + "/console/flags")
    assert "/console/sign-in" in page.url  # not signed in yet
    sign_in_at_the_provider(page, sso_site, "erin")
    page.wait_for_url(lambda url: url.startswith(sso_site.console) and "/sso/" not in url)
    assert page.url == sso_site.console + "/console/flags"
    assert page.get_by_role("heading", name="Flags").is_visible()
    assert page.locator("header .who").inner_text() == "erin@example.com · editor"
    page.screenshot(path=str(tmp_path / "sso-signed-in.png"), full_page=True)
    erin = sso_site.people()["erin@example.com"]
    assert (erin["role"], erin["signsInWith"]) == ("editor", ["sso"])
    # the session holds: another console page opens without signing in again
    page.goto(sso_site.console + "/console/segments")
    assert page.url == sso_site.console + "/console/segments"


def test_a_disallowed_email_domain_is_sent_back_to_sign_in_with_the_reason(
    sso_site: SsoSite, context: Any, tmp_path: Path
) -> None:
    page = context.new_page()
    sign_in_at_the_provider(page, sso_site, "carol")  # carol@example.org
    page.wait_for_url(sso_site.console + "/console/sso/callback?**")
    assert page.get_by_role("heading", name="Sign in to Vane").is_visible()
    assert page.get_by_role("alert").inner_text() == (
        "Single sign-on refused: example.org is not an allowed email domain"
    )
    assert page.locator("header .who").count() == 0
    page.screenshot(path=str(tmp_path / "sso-refused.png"), full_page=True)
    # not signed in: the console still asks to sign in, and no one was created
    page.goto(sso_site.console + "/console/flags")
    assert "/console/sign-in" in page.url
    assert "carol@example.org" not in sso_site.people()
