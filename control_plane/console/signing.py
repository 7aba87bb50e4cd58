"""How people come into the console: a password or a management key (the sign-in page), a
single-use link (an invitation, or the first admin's), or the identity provider (single
sign-on). Every way ends in ``sessions.open_session`` and the same cookie.

Forms posted without a session carry a double-submit token instead of the session's CSRF
token (``LOGIN_COOKIE``): another site's form lacks it, so nobody is signed in, or joined, by a
page elsewhere (login CSRF).

Single sign-on (``VANE_OIDC_*``): leave for the provider with a state, a nonce and a PKCE
challenge (``control_plane.sso.begin``), come back with a code that is exchanged and checked
there (``finish``), and open a session for the person the provider vouches for
(``people.signin.sign_in_with_sso``). What must survive the trip is kept on the server
(``sso_pending``, keyed by a hash of the state, ten minutes, used once); the browser keeps only
the state, in a cookie of its path, so a callback opened in another browser finds no match.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane import proxies
from control_plane.console import forms
from control_plane.console.sessions import COOKIE, open_session, sign_in
from control_plane.console.web import field_errors, page
from control_plane.db.models import SsoPending
from control_plane.db.types import utcnow
from control_plane.domain.people.signin import (
    MIN_PASSWORD,
    Refused,
    Throttled,
    pending_link,
    sign_in_with_password,
    sign_in_with_sso,
    use_link,
)
from control_plane.errors import ApiError
from control_plane.sso import (
    PENDING_LIFETIME,
    PendingSignIn,
    SsoRefused,
    SsoSettings,
    begin,
    finish,
)
from shared.keys import hash_token

LOGIN_COOKIE = "vane_login"


def over_https(request: Request[Any, Any, Any]) -> bool:
    """Whether the browser speaks https to us (directly, or to a proxy that says so)."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",", 1)[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path of this site, never another site."""
    if not target:
        return "/console/flags"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console"):
        return "/console/flags"
    return parts.path + (f"?{parts.query}" if parts.query else "")


@get("/console/sign-in", include_in_schema=False)
async def sign_in_page(request: Request[Any, Any, Any]) -> Template:
    return sign_in_form(request, 200, None, safe_next(request.query_params.get("next")))


def sign_in_form(
    request: Request[Any, Any, Any], status: int, error: str | None, target: str
) -> Template:
    """The sign-in form, carrying a token also set as a cookie (double submit): a sign-in
    posted from another site (login CSRF) lacks it."""
    return _with_login_token(
        request,
        "sign_in.html",
        status=status,
        title="Sign in",
        next=target,
        error=error,
        sso=provider_name(request.app.state.settings.sso),
    )


def _with_login_token(
    request: Request[Any, Any, Any], template: str, *, status: int, **context: Any
) -> Template:
    """A form posted without a session (signing in, joining by a link), with the double-submit
    token (``login_token``) it carries and the cookie it must match."""
    token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = page(request, None, template, status=status, login_token=token, **context)
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=over_https(request),
    )
    return response


@post("/console/sign-in", include_in_schema=False)
async def sign_in_submit(request: Request[Any, Any, Any]) -> Response[Any]:
    """A person's email and password, or a management key (a service account)."""
    form = await request.form()
    target = safe_next(forms.text(form, "next"))
    if not _login_token_matches(request, form):
        message = "This sign-in form expired or came from another site: try again."
        return sign_in_form(request, 403, message, target)
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        if forms.text(form, "key"):
            signed = await sign_in(session, forms.text(form, "key"))
            if signed is None:
                return sign_in_form(
                    request, 401, "That is not a live management key (vsk_live_…).", target
                )
        else:
            try:
                who = await sign_in_with_password(
                    session,
                    forms.text(form, "email"),
                    forms.text(form, "password"),
                    client_address(request),
                )
            except Throttled as exc:
                response = sign_in_form(request, 429, exc.message, target)
                response.headers["Retry-After"] = str(exc.retry_after)
                return response
            if isinstance(who, Refused):
                return sign_in_form(request, 401, who.message, target)
            signed = await open_session(session, who)
    return signed_in_response(request, signed[0], target)


def _login_token_matches(request: Request[Any, Any, Any], form: Any) -> bool:
    """The double-submit check of a sign-in form (login CSRF: another site's form lacks it)."""
    sent, expected = forms.text(form, "_login"), request.cookies.get(LOGIN_COOKIE) or ""
    return bool(expected) and secrets.compare_digest(str(sent), expected)


def client_address(request: Request[Any, Any, Any]) -> str:
    """The client's address, for throttling sign-ins and the audit of a failed one: the
    socket's peer, or behind a proxy of ``VANE_TRUSTED_PROXIES`` the address it forwards."""
    return proxies.client_address(
        request.client.host if request.client else None,
        request.headers.getall("x-forwarded-for", []),
        request.app.state.settings.trusted_proxies,
    )


def signed_in_response(request: Request[Any, Any, Any], cookie: str, target: str) -> Response[Any]:
    response: Response[Any] = Redirect(target, status_code=303)
    return _with_session(request, response, cookie)


def _with_session(
    request: Request[Any, Any, Any], response: Response[Any], cookie: str
) -> Response[Any]:
    response.set_cookie(
        COOKIE,
        cookie,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=over_https(request),
    )
    response.delete_cookie(LOGIN_COOKIE, path="/console")
    return response


@get("/console/welcome/{token:str}", include_in_schema=False)
async def welcome_page(request: Request[Any, Any, Any], token: FromPath[str]) -> Template:
    """An invitation or a one-time sign-in link: set a name and a password, once."""
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        link = await pending_link(session, token)
    return _welcome_form(request, token, link, 200 if link else 404, None, {})


def _welcome_form(
    request: Request[Any, Any, Any],
    token: str,
    link: Any,
    status: int,
    error: str | None,
    errors: Mapping[str, str],
) -> Template:
    return _with_login_token(
        request,
        "welcome.html",
        status=status,
        title="Welcome" if link else "Link not valid",
        link=link,
        token=token,
        error=error,
        errors=errors,
        min_password=MIN_PASSWORD,
    )


@post("/console/welcome/{token:str}", include_in_schema=False)
async def welcome_submit(request: Request[Any, Any, Any], token: FromPath[str]) -> Response[Any]:
    form = await request.form()
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        link = await pending_link(session, token)
        if not _login_token_matches(request, form):
            message = "This form expired or came from another site: try again."
            return _welcome_form(request, token, link, 403, message, {})
        try:
            who = await use_link(
                session, token, forms.text(form, "name"), forms.text(form, "password")
            )
        except ApiError as exc:
            await session.rollback()
            link = await pending_link(session, token)  # as it stands: nothing was used up
            return _welcome_form(
                request, token, link, exc.status, exc.message, field_errors(exc.details)
            )
        cookie, _signed = await open_session(session, who)
    return signed_in_response(request, cookie, "/console/flags")


STATE_COOKIE = "vane_sso"
CALLBACK = "/console/sso/callback"


def provider_name(settings: SsoSettings | None) -> str | None:
    """What the sign-in page's button calls the provider (its host), or None without SSO."""
    if settings is None:
        return None
    return settings.issuer.split("//", 1)[-1].split("/", 1)[0]


@get("/console/sso/start", include_in_schema=False)
async def sso_start(request: Request[Any, Any, Any]) -> Response[Any]:
    settings: SsoSettings | None = request.app.state.settings.sso
    target = safe_next(request.query_params.get("next"))
    if settings is None:
        return sign_in_form(request, 404, "Single sign-on is not set up here.", target)
    try:
        url, pending = await begin(settings)
    except SsoRefused as exc:
        return sign_in_form(request, 502, exc.reason, target)
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        # the sign-ins that never came back are forgotten as new ones start
        await session.execute(
            delete(SsoPending).where(SsoPending.created_at < utcnow() - PENDING_LIFETIME)
        )
        session.add(
            SsoPending(id=hash_token(pending.state), pending=pending.encode().decode(), next=target)
        )
        await session.commit()
    response: Response[Any] = Redirect(url, status_code=303)
    response.set_cookie(
        STATE_COOKIE,
        pending.state,
        path="/console/sso",
        max_age=int(PENDING_LIFETIME / timedelta(seconds=1)),
        httponly=True,
        samesite="lax",  # sent on the provider's redirect back (a top-level GET)
        secure=over_https(request),
    )
    return response


@get(CALLBACK, include_in_schema=False)
async def sso_callback(request: Request[Any, Any, Any]) -> Response[Any]:
    settings: SsoSettings | None = request.app.state.settings.sso
    if settings is None:
        return sign_in_form(request, 404, "Single sign-on is not set up here.", "/console/flags")
    query = dict(request.query_params)
    state = query.get("state", "")
    kept = request.cookies.get(STATE_COOKIE, "")
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        row = None
        if state and kept and hmac.compare_digest(state, kept):
            row = await session.scalar(select(SsoPending).where(SsoPending.id == hash_token(kept)))
        if row is None:
            return _refused(
                request,
                "This sign-in did not start in this browser, or took too long: start again.",
            )
        target = row.next
        await session.delete(row)  # used once, whatever comes of it
        await session.commit()
        try:
            identity = await finish(settings, PendingSignIn.decode(row.pending), query)
        except SsoRefused as exc:
            return _refused(request, exc.reason)
        who = await sign_in_with_sso(
            session,
            subject=identity.subject,
            email=identity.email,
            name=identity.name,
            role=identity.role,
            default_role=settings.default_role,
        )
        if isinstance(who, Refused):
            return _refused(request, who.message)
        cookie, _signed = await open_session(session, who)
    # a page that goes on to the target itself, not a redirect: the person arrived from the
    # provider's site, and a browser leaves the SameSite=Strict session cookie off every request
    # of a navigation another site started, redirects included (they would land on sign-in)
    response = _with_session(
        request, page(request, None, "sso_signed_in.html", title="Signed in", next=target), cookie
    )
    response.delete_cookie(STATE_COOKIE, path="/console/sso")
    return response


def _refused(request: Request[Any, Any, Any], reason: str) -> Template:
    response = sign_in_form(request, 401, f"Single sign-on refused: {reason}", "/console/flags")
    response.delete_cookie(STATE_COOKIE, path="/console/sso")
    return response
