"""The console's router: sign-in and sign-out, the live stream, static files, and every page."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from litestar import Request, Response, Router, get, post
from litestar.di import Provide
from litestar.response import Redirect, ServerSentEvent, ServerSentEventMessage
from litestar.static_files import create_static_files_router
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.auth import request_session
from control_plane.console.admin import (
    AuditPages,
    EnvironmentPages,
    KeyPages,
    MetricPages,
    SegmentPages,
    WebhookPages,
)
from control_plane.console.changes import ChangeRequestPages
from control_plane.console.experiments import ExperimentPages
from control_plane.console.flags import FlagPages
from control_plane.console.people import PeoplePages
from control_plane.console.sessions import COOKIE, sign_out, signed_in
from control_plane.console.signing import (
    sign_in_page,
    sign_in_submit,
    sso_callback,
    sso_start,
    welcome_page,
    welcome_submit,
)
from control_plane.console.web import (
    CrossSiteRefused,
    SignInRequired,
    Who,
    api_error_page,
    cross_site_refused,
    idle,
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


@get("/", include_in_schema=False)
async def root() -> Redirect:
    return Redirect("/console/", status_code=302)


@get("/console", include_in_schema=False)
async def console_home() -> Redirect:
    return Redirect("/console/flags", status_code=302)


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
    on another replica) as an event, so open pages refresh what they show. The stream lives as
    long as its console session: before each event and keep-alive it asks again, and a session
    that ended (signed out, everywhere too; its person deactivated or gone from the project; idle)
    ends the stream with ``signed-out``, which sends the page to the sign-in page."""
    session = request_session(request.scope)
    if session is not None:
        await session.close()  # the stream may stay open for hours
    sessionmaker: async_sessionmaker[AsyncSession] = request.app.state.sessionmaker
    cookie, idle_for = request.cookies.get(COOKIE, ""), idle(request.app.state)

    async def still_signed_in() -> bool:
        async with sessionmaker() as asked:
            return await signed_in(asked, cookie, idle_for, touch=False) is not None

    hub: Hub = request.app.state.hub
    environments = await hub.environments_of(who.principal.project_id, None)
    connection = Connection(
        relay_id=f"console-{secrets.token_hex(3)}",
        project_id=who.principal.project_id,
        environment_ids=frozenset(e.id for e in environments),
    )
    return ServerSentEvent(_changes(hub, connection, still_signed_in))


async def _changes(
    hub: Hub, connection: Connection, still_signed_in: Callable[[], Awaitable[bool]]
) -> AsyncIterator[ServerSentEventMessage]:
    hub.attach(connection)
    try:
        yield ServerSentEventMessage(event="open", data="{}")
        async for marked in connection.changes(KEEPALIVE_S):
            if not await still_signed_in():
                yield ServerSentEventMessage(event="signed-out", data="{}")
                return
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
            sso_start,
            sso_callback,
            sign_out_submit,
            live,
            FlagPages,
            ChangeRequestPages,
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
