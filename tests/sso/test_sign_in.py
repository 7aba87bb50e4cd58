"""Signing in with OpenID Connect against a real provider (``oidc-provider``, see conftest.py):
the flow a person goes through, and each way it is refused, with the reason they read."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import msgspec
import pytest

from control_plane import sso
from control_plane.access import Role
from control_plane.sso import PendingSignIn, SsoIdentity, SsoRefused, SsoSettings
from tests.sso.conftest import OpenIdProvider, running_provider

pytestmark = pytest.mark.e2e


def sign_in(
    provider: OpenIdProvider, settings: SsoSettings, account: str, **finish: Any
) -> SsoIdentity:
    url, pending = asyncio.run(sso.begin(settings))
    query = provider.sign_in(url, account)
    return asyncio.run(sso.finish(settings, pending, query, **finish))


def refusal(provider: OpenIdProvider, settings: SsoSettings, account: str) -> str:
    with pytest.raises(SsoRefused) as refused:
        sign_in(provider, settings, account)
    return refused.value.reason


def test_a_person_signs_in_with_the_role_their_groups_map_to(oidc_provider: OpenIdProvider) -> None:
    identity = sign_in(oidc_provider, oidc_provider.settings(), "alice")
    assert identity == SsoIdentity(
        subject="alice", email="alice@example.com", name="Alice Admin", role=Role.ADMIN
    )
    erin = sign_in(oidc_provider, oidc_provider.settings(), "erin")  # the claim as one string
    assert (erin.email, erin.role) == ("erin@example.com", "editor")
    nobody = sign_in(oidc_provider, oidc_provider.settings(), "nobody")
    assert nobody.role is None
    unmapped = sign_in(oidc_provider, oidc_provider.settings(role_claim=None), "alice")
    assert unmapped.role is None


def test_the_authorization_url_asks_for_a_code_with_pkce(oidc_provider: OpenIdProvider) -> None:
    url, pending = asyncio.run(sso.begin(oidc_provider.settings()))
    asked = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    assert asked["response_type"] == "code"
    assert asked["client_id"] == "vane"
    assert asked["scope"] == "openid email profile"
    assert asked["state"] == pending.state
    assert asked["nonce"] == pending.nonce
    assert asked["code_challenge_method"] == "S256"
    assert asked["code_challenge"] != pending.code_verifier
    assert "code_verifier" not in asked
    assert PendingSignIn.decode(pending.encode()) == pending


def test_allowed_domains_let_in_their_own_and_no_other(oidc_provider: OpenIdProvider) -> None:
    settings = oidc_provider.settings(allowed_domains=("EXAMPLE.com",))
    assert sign_in(oidc_provider, settings, "alice").email == "alice@example.com"
    assert refusal(oidc_provider, settings, "carol") == "example.org is not an allowed email domain"


def test_an_unverified_email_is_refused(oidc_provider: OpenIdProvider) -> None:
    reason = refusal(oidc_provider, oidc_provider.settings(), "bob")
    assert reason == "the identity provider has not verified this email address"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"state": "forged"}, "the sign-in state does not match: start again"),
        ({"state": None}, "the sign-in state does not match: start again"),
        ({"code": None}, "the identity provider sent no authorization code"),
        ({"code": "made-up"}, "the identity provider refused the code: "),
    ],
)
def test_a_tampered_redirect_is_refused(
    oidc_provider: OpenIdProvider, change: dict[str, str | None], reason: str
) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    query: dict[str, str] = oidc_provider.sign_in(url, "alice")
    for name, value in change.items():
        query.pop(name)
        if value is not None:
            query[name] = value
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(sso.finish(settings, pending, query))
    assert refused.value.reason.startswith(reason)


def test_a_code_is_good_once(oidc_provider: OpenIdProvider) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    query = oidc_provider.sign_in(url, "alice")
    assert asyncio.run(sso.finish(settings, pending, query)).subject == "alice"
    with pytest.raises(SsoRefused, match="the identity provider refused the code: "):
        asyncio.run(sso.finish(settings, pending, query))


def test_a_wrong_client_secret_is_refused(oidc_provider: OpenIdProvider) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    query = oidc_provider.sign_in(url, "alice")
    wrong = oidc_provider.settings(client_secret="not-the-secret")
    with pytest.raises(SsoRefused, match="the identity provider refused the code: "):
        asyncio.run(sso.finish(wrong, pending, query))


def test_a_person_who_declines_at_the_provider_is_told_so(oidc_provider: OpenIdProvider) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    query = oidc_provider.sign_in(url, "alice", decline=True)
    assert query["error"] == "access_denied"
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(sso.finish(settings, pending, query))
    assert refused.value.reason == (
        "the sign-in was declined at the identity provider: The user declined to sign in"
    )


def test_a_nonce_other_than_the_one_sent_is_refused(oidc_provider: OpenIdProvider) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    _, other = asyncio.run(sso.begin(settings))
    query = oidc_provider.sign_in(url, "alice")
    kept = msgspec.structs.replace(pending, nonce=other.nonce)  # the same state, another nonce
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(sso.finish(settings, kept, query))
    assert refused.value.reason == "the nonce does not match"


def test_an_expired_id_token_is_refused(oidc_provider: OpenIdProvider) -> None:
    """A real token (it lives 300 s, see conftest.py) checked by a clock an hour ahead."""
    settings = oidc_provider.settings()
    later = datetime.now(UTC) + timedelta(hours=1)
    url, pending = asyncio.run(sso.begin(settings, now=later))
    query = oidc_provider.sign_in(url, "alice")
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(sso.finish(settings, pending, query, now=later + timedelta(minutes=1)))
    assert refused.value.reason == "the ID token has expired"


def test_a_sign_in_left_for_more_than_ten_minutes_is_refused(
    oidc_provider: OpenIdProvider,
) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    query = oidc_provider.sign_in(url, "alice")
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(
            sso.finish(settings, pending, query, now=pending.created_at + timedelta(minutes=11))
        )
    assert refused.value.reason == "the sign-in took longer than 10 minutes: start again"


def test_an_id_token_issued_to_another_client_is_refused(oidc_provider: OpenIdProvider) -> None:
    """The provider's real ID token for another registered client, presented to Vane's."""
    other = oidc_provider.settings("other-app")
    url, pending = asyncio.run(sso.begin(other))
    query = oidc_provider.sign_in(url, "alice")
    token_endpoint = f"{oidc_provider.issuer}/token"
    answer = httpx.post(
        token_endpoint,
        auth=("other-app", "other-secret"),
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "redirect_uri": other.redirect_url,
            "code_verifier": pending.code_verifier,
        },
    )
    assert answer.status_code == 200, answer.text
    id_token = answer.json()["id_token"]
    assert asyncio.run(sso.validate_id_token(other, pending, id_token)).subject == "alice"
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(sso.validate_id_token(oidc_provider.settings(), pending, id_token))
    assert refused.value.reason == "the ID token was issued for another client"


def test_a_token_not_signed_by_the_provider_is_refused(oidc_provider: OpenIdProvider) -> None:
    settings = oidc_provider.settings()
    url, pending = asyncio.run(sso.begin(settings))
    query = oidc_provider.sign_in(url, "alice")
    answer = httpx.post(
        f"{oidc_provider.issuer}/token",
        auth=("vane", "vane-secret"),
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "redirect_uri": settings.redirect_url,
            "code_verifier": pending.code_verifier,
        },
    )
    header, payload, signature = answer.json()["id_token"].split(".")
    forged = ".".join(
        (header, payload, signature[:-6] + ("AAAAAA" if signature[-6:] != "AAAAAA" else "BBBBBB"))
    )
    with pytest.raises(SsoRefused) as refused:
        asyncio.run(sso.validate_id_token(settings, pending, forged))
    assert refused.value.reason == "the ID token's signature is not valid"


def test_a_key_rotation_at_the_provider_is_followed() -> None:
    """The keys are cached; a token signed with a key not seen yet has them fetched again."""
    with running_provider() as before:
        settings = before.settings()
        assert sign_in(before, settings, "alice").subject == "alice"  # keys now cached
        port = urlsplit(before.issuer).port
    assert port is not None
    with running_provider(port) as after:  # the same issuer, signing with a new key
        assert after.issuer == settings.issuer
        assert sign_in(after, settings, "erin").subject == "erin"
