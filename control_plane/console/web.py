"""What every console page shares: who is signed in (and the CSRF check of each write), the
security headers, errors shown as pages, and writes through the API's unit of work."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from litestar import Request, Response
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from control_plane.access import Permission, holds
from control_plane.auth import REQUEST_SESSION, request_session
from control_plane.console import forms
from control_plane.console.sessions import COOKIE, SignedIn, signed_in
from control_plane.deps import unit_of_work
from control_plane.domain.common import Scope
from control_plane.errors import ApiError, invalid
from shared.wire import body

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
# the script asks for part of a page: its <main> (live refresh) or a part drawn apart
FRAGMENT = "x-vane-fragment"
CSRF_FIELD = "_csrf"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


Who = NamedDependency[SignedIn]
"""A console handler's parameter for the signed-in person (``who: Who``)."""


class SignInRequired(Exception):
    """No live session: the person is sent to sign in (and back here afterwards)."""


class CrossSiteRefused(Exception):
    """A write without this session's CSRF token, or from another site: refused, nothing done."""


async def provide_signed(state: State, request: Request[Any, Any, Any]) -> AsyncIterator[SignedIn]:
    """The request's signed-in person, in a database session the request's writes reuse; a
    write (any unsafe method) must carry the session's CSRF token and come from this origin."""
    sessionmaker: async_sessionmaker[AsyncSession] = state.sessionmaker
    async with sessionmaker() as session:
        request.scope.setdefault("state", {})[REQUEST_SESSION] = session
        cookie = request.cookies.get(COOKIE)
        who = await signed_in(session, cookie, idle(state)) if cookie else None
        if who is None:
            raise SignInRequired
        if request.method not in SAFE_METHODS:
            await check_same_site(request, who)
        yield who


def idle(state: State) -> timedelta:
    return timedelta(minutes=state.settings.console_idle_minutes)


async def check_same_site(request: Request[Any, Any, Any], who: SignedIn) -> None:
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        raise CrossSiteRefused
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != _host_of(request):
        raise CrossSiteRefused  # (the host only: behind a TLS proxy the scheme differs)
    token = request.headers.get(CSRF_HEADER)
    if token is None:
        form = await request.form()
        token = forms.text(form, CSRF_FIELD)
    if not isinstance(token, str) or not secrets.compare_digest(token, who.csrf):
        raise CrossSiteRefused


def _host_of(request: Request[Any, Any, Any]) -> str:
    """The host (and port) the browser addressed: its ``Host`` header, as a proxy forwards it."""
    return request.headers.get("host") or urlsplit(str(request.base_url)).netloc


def sign_in_redirect(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.method not in SAFE_METHODS:
        target = request.headers.get("referer") or "/console/"
        target = urlsplit(target).path or "/console/"
    response: Response[Any] = Redirect(f"/console/sign-in?next={quote(target)}", status_code=303)
    if COOKIE in request.cookies:
        # only a cookie this request carried, and that named no live session: a request without
        # it (another site's form: the Strict cookie is not sent) must not sign the person out
        response.delete_cookie(COOKIE, path="/console")
    return secure_headers(response)


def cross_site_refused(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return secure_headers(
        Template(
            template_name="error.html",
            context={
                "title": "Refused",
                "status": 403,
                "message": "This form did not come from your console session (a cross-site "
                "request, or a page open since before you signed in again). Nothing was changed: "
                "reload the page and try again.",
                "who": None,
            },
            status_code=403,
        )
    )


def api_error_page(request: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    """An API error no page answered itself, on a console path (the parameter rule's 422 for
    ``?q=a%00b``, raised before any page runs): the console's error page with the API's status
    and message, not the API's JSON."""
    title = "Not accepted" if exc.status == 422 else "Error"
    return secure_headers(
        page(request, None, "error.html", status=exc.status, title=title, message=exc.message)
    )


def secure_headers(response: Response[Any]) -> Response[Any]:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


@asynccontextmanager
async def writing(
    request: Request[Any, Any, Any], who: SignedIn, *, version: str | None = None
) -> AsyncIterator[Scope]:
    """The API's unit of work for the signed-in key: same services, audit and publishing;
    ``version`` is the form's copy of the version it was rendered from (``If-Match``).

    The posted form is held to the API's rule for text first (``body.text_problem``): a NUL or a
    lone surrogate is the API's 422 naming the form field (named as the API's), which the page
    shows beside it, on either database."""
    form = await request.form()
    for name, value in form.multi_items():
        if isinstance(value, str) and (problem := body.text_problem(value)) is not None:
            raise invalid(name, problem)
    async with unit_of_work(
        request.app.state, request, who.principal, if_match=version or None
    ) as scope:
        yield scope


@asynccontextmanager
async def reading(request: Request[Any, Any, Any], who: SignedIn) -> AsyncIterator[Scope]:
    async with unit_of_work(request.app.state, request, who.principal) as scope:
        yield scope


def page(
    request: Request[Any, Any, Any],
    who: SignedIn | None,
    template: str,
    *,
    status: int = 200,
    **context: Any,
) -> Template:
    """A console page: ``template`` with what every page shows (who, the CSRF token, the nav,
    and ``may``: the permissions the person holds, so a page offers only what they may do; the
    services refuse the rest anyway, hiding is never the safety)."""
    return Template(
        template_name=template,
        context={
            "who": who,
            "csrf": who.csrf if who else "",
            "path": request.url.path,
            "may": may_of(who),
            **context,
        },
        status_code=status,
    )


def may_of(who: SignedIn | None) -> dict[str, bool]:
    """``{"edit": …, "admin": …, "turn_off": …}`` for the signed-in person (all False without)."""
    if who is None:
        return {permission.name.lower(): False for permission in Permission}
    principal = who.principal
    return {
        permission.name.lower(): holds(principal.role, principal.may_turn_off, permission)
        for permission in Permission
    }


def error_page(
    request: Request[Any, Any, Any], who: SignedIn | None, exc: Any, title: str
) -> Template:
    """The API's error (an ``ApiError``) as a page: its status, its message."""
    return page(request, who, "error.html", status=exc.status, title=title, message=exc.message)


def back_to(request: Request[Any, Any, Any], fallback: str) -> str:
    """Where a form came from (same origin only), for the redirect after it is done."""
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        if parts.netloc == _host_of(request) and parts.path.startswith("/console"):
            return parts.path + (f"?{parts.query}" if parts.query else "")
    return fallback


def field_errors(details: list[Any]) -> Mapping[str, str]:
    """An API error's details by field, for the form to show each beside its input."""
    errors: dict[str, str] = {}
    for detail in details:
        errors.setdefault(detail.field, detail.message)
    return errors


def the_session(request: Request[Any, Any, Any]) -> AsyncSession:
    session = request_session(request.scope)
    assert session is not None
    return session
