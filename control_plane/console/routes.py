"""The console's router: sign-in and sign-out, the live stream, static files, and every page."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from litestar import Request, Response, Router, get, post
from litestar.di import Provide
from litestar.params import FromPath
from litestar.response import Redirect, ServerSentEvent, ServerSentEventMessage, Template
from litestar.static_files import create_static_files_router
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.auth import request_session
from control_plane.console import forms
from control_plane.console.admin import (
    AuditPages,
    EnvironmentPages,
    KeyPages,
    MetricPages,
    SegmentPages,
    WebhookPages,
)
from control_plane.console.experiments import ExperimentPages
from control_plane.console.flags import FlagPages
from control_plane.console.people import PeoplePages
from control_plane.console.sessions import COOKIE, open_session, sign_in, sign_out
from control_plane.console.web import (
    CrossSiteRefused,
    SignInRequired,
    Who,
    api_error_page,
    cross_site_refused,
    field_errors,
    page,
    provide_signed,
    secure_headers,
    sign_in_redirect,
)
from control_plane.domain.people.signin import (
    MIN_PASSWORD,
    Refused,
    Throttled,
    pending_link,
    sign_in_with_password,
    use_link,
)
from control_plane.errors import ApiError
from control_plane.publishing.hub import Connection, Hub

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
KEEPALIVE_S = 15.0
LOGIN_COOKIE = "vane_login"


@get("/", include_in_schema=False)
async def root() -> Redirect:
    return Redirect("/console/", status_code=302)


@get("/console", include_in_schema=False)
async def console_home() -> Redirect:
    return Redirect("/console/flags", status_code=302)


def _over_https(request: Request[Any, Any, Any]) -> bool:
    """Whether the browser speaks https to us (directly, or to a proxy that says so)."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",", 1)[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def _next(target: str | None) -> str:
    """Where to go after signing in: a console path of this site, never another site."""
    if not target:
        return "/console/flags"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/console"):
        return "/console/flags"
    return parts.path + (f"?{parts.query}" if parts.query else "")


@get("/console/sign-in", include_in_schema=False)
async def sign_in_page(request: Request[Any, Any, Any]) -> Template:
    return _sign_in_form(request, 200, None, _next(request.query_params.get("next")))


def _sign_in_form(
    request: Request[Any, Any, Any], status: int, error: str | None, target: str
) -> Template:
    """The sign-in form, carrying a token also set as a cookie (double submit): a sign-in
    posted from another site (login CSRF) lacks it."""
    token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = page(
        request,
        None,
        "sign_in.html",
        status=status,
        title="Sign in",
        next=target,
        error=error,
        login_token=token,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=_over_https(request),
    )
    return response


@post("/console/sign-in", include_in_schema=False)
async def sign_in_submit(request: Request[Any, Any, Any]) -> Response[Any]:
    """A person's email and password, or a management key (a service account)."""
    form = await request.form()
    target = _next(forms.text(form, "next"))
    if not _login_token_matches(request, form):
        message = "This sign-in form expired or came from another site: try again."
        return _sign_in_form(request, 403, message, target)
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        if forms.text(form, "key"):
            signed = await sign_in(session, forms.text(form, "key"))
            if signed is None:
                return _sign_in_form(
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
                response = _sign_in_form(request, 429, exc.message, target)
                response.headers["Retry-After"] = str(exc.retry_after)
                return response
            if isinstance(who, Refused):
                return _sign_in_form(request, 401, who.message, target)
            signed = await open_session(session, who)
    return _signed_in(request, signed[0], target)


def _login_token_matches(request: Request[Any, Any, Any], form: Any) -> bool:
    """The double-submit check of a sign-in form (login CSRF: another site's form lacks it)."""
    sent, expected = forms.text(form, "_login"), request.cookies.get(LOGIN_COOKIE) or ""
    return bool(expected) and secrets.compare_digest(str(sent), expected)


def client_address(request: Request[Any, Any, Any]) -> str:
    """The client's address, for throttling sign-ins (the socket's peer: a proxy in front
    should be trusted explicitly, which Vane does not assume)."""
    return request.client.host if request.client else "unknown"


def _signed_in(request: Request[Any, Any, Any], cookie: str, target: str) -> Response[Any]:
    response: Response[Any] = Redirect(target, status_code=303)
    response.set_cookie(
        COOKIE,
        cookie,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=_over_https(request),
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
    login = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = page(
        request,
        None,
        "welcome.html",
        status=status,
        title="Welcome" if link else "Link not valid",
        link=link,
        token=token,
        error=error,
        errors=errors,
        login_token=login,
        min_password=MIN_PASSWORD,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        login,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=_over_https(request),
    )
    return response


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
    return _signed_in(request, cookie, "/console/flags")


@post("/console/sign-out", dependencies={"who": Provide(provide_signed)}, include_in_schema=False)
async def sign_out_submit(request: Request[Any, Any, Any], who: Who) -> Response[Any]:
    session = request_session(request.scope)
    assert session is not None
    await sign_out(session, request.cookies.get(COOKIE, ""))
    response: Response[Any] = Redirect("/console/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path="/console")
    return response


@get("/console/live", dependencies={"who": Provide(provide_signed)}, include_in_schema=False)
async def live(request: Request[Any, Any, Any], who: Who) -> ServerSentEvent:
    """A change to any environment of the project (made here, through the API, by a schedule or
    on another replica) as an event, so open pages refresh what they show."""
    session = request_session(request.scope)
    if session is not None:
        await session.close()  # the stream may stay open for hours
    hub: Hub = request.app.state.hub
    environments = await hub.environments_of(who.principal.project_id, None)
    connection = Connection(
        relay_id=f"console-{secrets.token_hex(3)}",
        project_id=who.principal.project_id,
        environment_ids=frozenset(e.id for e in environments),
    )
    return ServerSentEvent(_changes(hub, connection))


async def _changes(hub: Hub, connection: Connection) -> AsyncIterator[ServerSentEventMessage]:
    hub.attach(connection)
    try:
        yield ServerSentEventMessage(event="open", data="{}")
        async for marked in connection.changes(KEEPALIVE_S):
            if marked is None:
                yield ServerSentEventMessage(comment="keep-alive")
            else:
                yield ServerSentEventMessage(event="change", data=",".join(sorted(marked)))
    finally:
        hub.detach(connection)


async def _after(response: Response[Any]) -> Response[Any]:
    return secure_headers(response)


def console_router() -> Router:
    static = create_static_files_router(
        path="/console/static",
        directories=[STATIC],
        include_in_schema=False,
        cache_control=None,
    )
    return Router(
        path="/",
        route_handlers=[
            root,
            console_home,
            sign_in_page,
            sign_in_submit,
            welcome_page,
            welcome_submit,
            sign_out_submit,
            live,
            FlagPages,
            SegmentPages,
            ExperimentPages,
            MetricPages,
            EnvironmentPages,
            KeyPages,
            WebhookPages,
            AuditPages,
            PeoplePages,
            static,
        ],
        after_request=_after,
        exception_handlers={
            SignInRequired: sign_in_redirect,
            CrossSiteRefused: cross_site_refused,
            ApiError: api_error_page,
        },
        include_in_schema=False,
    )
