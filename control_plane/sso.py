"""Single sign-on: the OpenID Connect authorization code flow with PKCE (S256).

``begin`` gives the URL to send a person to and what the control plane keeps until they come
back (a ``PendingSignIn``); ``finish`` takes the query of the redirect back, exchanges the code
and validates the ID token, and returns who signed in (an ``SsoIdentity``) or raises
``SsoRefused`` with a reason a person can read. Authlib's client makes the requests (with
httpx2, the HTTP client Authlib 1.9 is built on); joserfc, Authlib's JOSE library, checks the
ID token's signature. The provider's discovery document and keys are fetched once per process
and the keys again, once, when a token is signed with a key not yet seen (a key rotation).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

import httpx2
import msgspec
from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from control_plane.access import ROLE_NAMES, ROLES, Role, parse_role

# roles are control_plane.access's: when a claim maps to several, the highest (last) wins

SCOPE = "openid email profile"
PENDING_LIFETIME = timedelta(minutes=10)
LEEWAY = timedelta(seconds=60)
"""How far the provider's clock may be from ours for ``exp`` and ``iat``."""
TIMEOUT = 10.0


class SsoRefused(Exception):
    """A sign-in that cannot go on; ``reason`` says why, in words for the person signing in."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SsoSettings(msgspec.Struct, frozen=True, kw_only=True):
    issuer: str
    client_id: str
    client_secret: str
    redirect_url: str
    allowed_domains: tuple[str, ...] = ()
    """Email domains that may sign in (lowercase); empty: any."""
    role_claim: str | None = None
    """The ID token claim (a string or a list of strings) mapped through ``role_map``."""
    role_map: Mapping[str, Role] = msgspec.field(default_factory=dict)
    default_role: Role = Role.VIEWER
    """The role of a person signing in for the first time whose claim maps to none."""


class PendingSignIn(msgspec.Struct, frozen=True, kw_only=True):
    """What the control plane keeps server-side between ``begin`` and ``finish``."""

    state: str
    nonce: str
    code_verifier: str
    created_at: datetime

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def decode(cls, data: bytes | str) -> PendingSignIn:
        return msgspec.json.decode(data, type=cls)


class SsoIdentity(msgspec.Struct, frozen=True, kw_only=True):
    subject: str
    email: str
    """Lowercased."""
    name: str
    role: Role | None
    """From the role claim through ``role_map`` (the highest wins), None when nothing maps."""


def sso_settings_from_env(environ: Mapping[str, str]) -> SsoSettings | None:
    """The ``VANE_OIDC_*`` settings; None when ``VANE_OIDC_ISSUER`` is unset or empty."""
    issuer = environ.get("VANE_OIDC_ISSUER", "").strip()
    if not issuer:
        return None
    scheme, host = urlsplit(issuer).scheme, urlsplit(issuer).hostname
    if not host or not (scheme == "https" or host in {"127.0.0.1", "localhost", "::1"}):
        raise ValueError(
            "VANE_OIDC_ISSUER must be an https URL (http only on 127.0.0.1 or localhost)"
        )
    required = {}
    for name in ("VANE_OIDC_CLIENT_ID", "VANE_OIDC_CLIENT_SECRET", "VANE_OIDC_REDIRECT_URL"):
        required[name] = environ.get(name, "").strip()
        if not required[name]:
            raise ValueError(f"{name} must be set when VANE_OIDC_ISSUER is")
    domains = environ.get("VANE_OIDC_ALLOWED_DOMAINS", "")
    return SsoSettings(
        issuer=issuer,
        client_id=required["VANE_OIDC_CLIENT_ID"],
        client_secret=required["VANE_OIDC_CLIENT_SECRET"],
        redirect_url=required["VANE_OIDC_REDIRECT_URL"],
        allowed_domains=tuple(d.strip().lower() for d in domains.split(",") if d.strip()),
        role_claim=environ.get("VANE_OIDC_ROLE_CLAIM", "").strip() or None,
        role_map=_role_map(environ.get("VANE_OIDC_ROLE_MAP", "")),
        default_role=_role(
            "VANE_OIDC_DEFAULT_ROLE", environ.get("VANE_OIDC_DEFAULT_ROLE", "").strip() or "viewer"
        ),
    )


def _role(variable: str, value: str) -> Role:
    role = parse_role(value)
    if role is None:
        names = ", ".join(ROLE_NAMES)
        raise ValueError(f"{variable}: {value!r} is not a role (one of {names})")
    return role


def _role_map(text: str) -> dict[str, Role]:
    mapping: dict[str, Role] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        claim_value, equals, role = entry.rpartition("=")
        if not equals or not claim_value.strip():
            raise ValueError(
                f"VANE_OIDC_ROLE_MAP: {entry!r} is not claim-value=role (e.g. vane-admins=admin)"
            )
        mapping[claim_value.strip()] = _role("VANE_OIDC_ROLE_MAP", role.strip())
    return mapping


@dataclass
class _Provider:
    metadata: dict[str, Any]
    keys: KeySet


_providers: dict[str, _Provider] = {}
"""The discovery document and keys of each issuer, fetched once per process."""


def _client(settings: SsoSettings, **kwargs: Any) -> Any:
    return AsyncOAuth2Client(
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        redirect_uri=settings.redirect_url,
        scope=SCOPE,
        code_challenge_method="S256",
        timeout=TIMEOUT,
        **kwargs,
    )


async def _get_json(client: Any, url: str, what: str) -> dict[str, Any]:
    try:
        response = await client.request("GET", url, withhold_token=True)
        response.raise_for_status()
        document = response.json()
    except (httpx2.HTTPError, ValueError) as error:
        raise SsoRefused(f"the identity provider's {what} could not be read: {error}") from error
    if not isinstance(document, dict):
        raise SsoRefused(f"the identity provider's {what} is not a JSON object")
    return document


async def _fetch_keys(client: Any, metadata: Mapping[str, Any]) -> KeySet:
    document = await _get_json(client, str(metadata["jwks_uri"]), "signing keys")
    try:
        return KeySet.import_key_set(cast(Any, document))
    except (JoseError, ValueError, KeyError, TypeError) as error:
        raise SsoRefused(f"the identity provider's signing keys are unusable: {error}") from error


async def _provider(client: Any, settings: SsoSettings) -> _Provider:
    known = _providers.get(settings.issuer)
    if known is not None:
        return known
    url = settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
    metadata = await _get_json(client, url, "discovery document")
    if metadata.get("issuer") != settings.issuer:
        raise SsoRefused(
            f"the identity provider's discovery document names the issuer "
            f"{metadata.get('issuer')!r}, not {settings.issuer!r}"
        )
    for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(metadata.get(field), str):
            raise SsoRefused(f"the identity provider's discovery document has no {field}")
    provider = _Provider(metadata, await _fetch_keys(client, metadata))
    _providers[settings.issuer] = provider
    return provider


async def begin(settings: SsoSettings, *, now: datetime | None = None) -> tuple[str, PendingSignIn]:
    """The URL to send the person to, and what to keep until they come back."""
    pending = PendingSignIn(
        state=secrets.token_urlsafe(32),
        nonce=secrets.token_urlsafe(32),
        code_verifier=secrets.token_urlsafe(64),  # 86 characters: within RFC 7636's 43 to 128
        created_at=now or datetime.now(UTC),
    )
    async with _client(settings) as client:
        provider = await _provider(client, settings)
        url, _ = client.create_authorization_url(
            provider.metadata["authorization_endpoint"],
            state=pending.state,
            code_verifier=pending.code_verifier,
            nonce=pending.nonce,
        )
    return str(url), pending


async def finish(
    settings: SsoSettings,
    pending: PendingSignIn,
    query: Mapping[str, str],
    *,
    now: datetime | None = None,
) -> SsoIdentity:
    """Who signed in, from the query of the provider's redirect back to ``redirect_url``."""
    now = now or datetime.now(UTC)
    if now - pending.created_at > PENDING_LIFETIME:
        raise SsoRefused("the sign-in took longer than 10 minutes: start again")
    if not hmac.compare_digest(query.get("state", "").encode(), pending.state.encode()):
        raise SsoRefused("the sign-in state does not match: start again")
    if "error" in query:
        raise SsoRefused(_provider_error(query["error"], query.get("error_description")))
    code = query.get("code")
    if not code:
        raise SsoRefused("the identity provider sent no authorization code")

    async with _client(settings) as client:
        provider = await _provider(client, settings)
        client.token_endpoint_auth_method = _auth_method(provider.metadata)
        try:
            token = await client.fetch_token(
                provider.metadata["token_endpoint"],
                grant_type="authorization_code",
                code=code,
                code_verifier=pending.code_verifier,
            )
        except OAuthError as error:
            raise SsoRefused(
                f"the identity provider refused the code: {error.description or error.error}"
            ) from error
        except (httpx2.HTTPError, ValueError) as error:
            raise SsoRefused(f"the identity provider could not be reached: {error}") from error
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise SsoRefused("the identity provider sent no ID token")
    return await validate_id_token(settings, pending, id_token, now=now)


async def validate_id_token(
    settings: SsoSettings, pending: PendingSignIn, id_token: str, *, now: datetime | None = None
) -> SsoIdentity:
    """The part of ``finish`` after the code exchange: the ID token's signature (with the
    provider's published keys), issuer, audience, times and nonce, then the person's email
    (verified, of an allowed domain) and role."""
    async with _client(settings) as client:
        provider = await _provider(client, settings)
        claims = await _verified_claims(client, provider, id_token)
    _check_claims(claims, settings, pending, now or datetime.now(UTC))
    return _identity(claims, settings)


def _provider_error(error: str, description: str | None) -> str:
    if error == "access_denied":
        return "the sign-in was declined at the identity provider" + (
            f": {description}" if description else ""
        )
    return f"the identity provider refused the sign-in ({error})" + (
        f": {description}" if description else ""
    )


def _auth_method(metadata: Mapping[str, Any]) -> str:
    supported = metadata.get("token_endpoint_auth_methods_supported", ["client_secret_basic"])
    for method in ("client_secret_basic", "client_secret_post"):
        if method in supported:
            return method
    raise SsoRefused(
        "the identity provider accepts neither client_secret_basic nor client_secret_post"
    )


async def _verified_claims(client: Any, provider: _Provider, id_token: str) -> dict[str, Any]:
    algorithms = [
        alg
        for alg in provider.metadata.get("id_token_signing_alg_values_supported", ["RS256"])
        if alg != "none" and not str(alg).startswith("HS")
    ]
    for attempt in ("cached keys", "refetched keys"):
        try:
            return dict(jwt.decode(id_token, provider.keys, algorithms=algorithms).claims)
        except InvalidKeyIdError as error:
            if attempt == "refetched keys":
                raise SsoRefused(
                    "the ID token is signed with a key the identity provider does not publish"
                ) from error
            provider.keys = await _fetch_keys(client, provider.metadata)
        except BadSignatureError as error:
            raise SsoRefused("the ID token's signature is not valid") from error
        except (JoseError, ValueError) as error:
            raise SsoRefused(f"the ID token cannot be read: {error}") from error
    raise AssertionError("unreachable")


def _check_claims(
    claims: Mapping[str, Any], settings: SsoSettings, pending: PendingSignIn, now: datetime
) -> None:
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise SsoRefused("the ID token names no subject")
    if claims.get("iss") != settings.issuer:
        raise SsoRefused("the ID token was issued by another identity provider")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or settings.client_id not in audiences:
        raise SsoRefused("the ID token was issued for another client")
    if (len(audiences) > 1 or "azp" in claims) and claims.get("azp") != settings.client_id:
        raise SsoRefused("the ID token was issued for another client")
    expires, issued = claims.get("exp"), claims.get("iat")
    if not isinstance(expires, int | float) or not isinstance(issued, int | float):
        raise SsoRefused("the ID token has no expiry or issue time")
    seconds, leeway = now.timestamp(), LEEWAY.total_seconds()
    if seconds > expires + leeway:
        raise SsoRefused("the ID token has expired")
    if issued > seconds + leeway:
        raise SsoRefused("the ID token was issued in the future: check the clocks")
    if not hmac.compare_digest(str(claims.get("nonce", "")).encode(), pending.nonce.encode()):
        raise SsoRefused("the nonce does not match")


def _identity(claims: Mapping[str, Any], settings: SsoSettings) -> SsoIdentity:
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        raise SsoRefused("the identity provider sent no email address")
    if claims.get("email_verified") is not True:
        raise SsoRefused("the identity provider has not verified this email address")
    email = email.strip().lower()
    domain = email.rpartition("@")[2]
    allowed = {allowed.lower() for allowed in settings.allowed_domains}
    if allowed and domain not in allowed:
        raise SsoRefused(f"{domain} is not an allowed email domain")
    name = claims.get("name")
    return SsoIdentity(
        subject=str(claims["sub"]),
        email=email,
        name=name if isinstance(name, str) and name.strip() else email,
        role=_mapped_role(claims, settings),
    )


def _mapped_role(claims: Mapping[str, Any], settings: SsoSettings) -> Role | None:
    if settings.role_claim is None:
        return None
    value = claims.get(settings.role_claim)
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    roles = [settings.role_map[v] for v in values if isinstance(v, str) and v in settings.role_map]
    return max(roles, key=ROLES.index, default=None)
