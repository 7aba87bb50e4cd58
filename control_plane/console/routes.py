"""The console's router: sign-in and sign-out, the live stream, static files, and every page."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from litestar import Request, Response, Router, get, post
from litestar.di import Provide
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
from control_plane.console.sessions import COOKIE, sign_in, sign_out
from control_plane.console.web import (
    CrossSiteRefused,
    SignInRequired,
    Who,
    api_error_page,
    cross_site_refused,
    page,
    provide_signed,
    secure_headers,
    sign_in_redirect,
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
    form = await request.form()
    target = _next(forms.text(form, "next"))
    sent, expected = forms.text(form, "_login"), request.cookies.get(LOGIN_COOKIE) or ""
    if not expected or not secrets.compare_digest(str(sent), expected):
        message = "This sign-in form expired or came from another site: try again."
        return _sign_in_form(request, 403, message, target)
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    async with sessionmaker() as session:
        signed = await sign_in(session, forms.text(form, "key"))
    if signed is None:
        return _sign_in_form(
            request, 401, "That is not a live management key (vsk_live_…).", target
        )
    cookie, _who = signed
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
