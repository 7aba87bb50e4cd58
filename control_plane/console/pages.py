"""The shape most console screens share: a list with a create form and row actions; and the
one way a form's post is written: the API's unit of work, then a redirect or the page again with
the API's error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from litestar import Controller, Request
from litestar.di import Provide
from litestar.response import Redirect, Response, Template

from control_plane.console.web import Who, field_errors, page, provide_signed, reading, writing
from control_plane.domain.common import Scope
from control_plane.errors import ApiError


async def do(
    request: Request[Any, Any, Any],
    who: Who,
    work: Callable[[Scope], Awaitable[Any]],
    *,
    version: str | None = None,
) -> tuple[Any, ApiError | None]:
    """Run one write through the API's unit of work: (its answer, None) or (None, the error)."""
    try:
        async with writing(request, who, version=version) as scope:
            return await work(scope), None
    except ApiError as exc:
        return None, exc


async def write_or_show(
    request: Request[Any, Any, Any],
    who: Who,
    work: Callable[[Scope], Awaitable[Any]],
    *,
    done: Callable[[Any], str],
    shown: Callable[[ApiError], Awaitable[Response[Any]]],
    version: str | None = None,
) -> Response[Any]:
    """A form's post: do ``work``; then redirect (303) to ``done(answer)``, or answer
    ``shown(error)``, the page the form is on again with the API's error (nothing written)."""
    answer, error = await do(request, who, work, version=version)
    if error is not None:
        return await shown(error)
    return Redirect(done(answer), status_code=303)


class ListPage(Controller):
    """A list with a create form and row actions, the shape most console screens share: the
    list (``context``), a write that re-shows the list with the API's error (``write``)."""

    dependencies = {"who": Provide(provide_signed)}
    include_in_schema = False
    template: ClassVar[str] = ""
    title: ClassVar[str] = ""

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def listing(
        self, request: Request[Any, Any, Any], who: Who, status: int = 200, **extra: Any
    ) -> Template:
        async with reading(request, who) as scope:
            found = await self.context(scope, request)
        return page(request, who, self.template, status=status, title=self.title, **found, **extra)

    async def write(
        self,
        request: Request[Any, Any, Any],
        who: Who,
        work: Callable[[Scope], Awaitable[Any]],
        *,
        done: Callable[[Any], str] | None,
        form: Mapping[str, Any] | None = None,
        version: str | None = None,
    ) -> Response[Any]:
        """Do ``work``; then redirect to ``done(answer)``, or (``done`` None) show the list with
        the answer as ``created``. A create form's error (``form`` given) is shown in that form,
        any other above the list."""

        async def shown(error: ApiError) -> Response[Any]:
            if form is None:
                return await self.listing(request, who, error.status, error=error.message)
            return await self.listing(
                request,
                who,
                error.status,
                create_error=error.message,
                create_errors=field_errors(error.details),
                create_form=dict(form),
            )

        if done is not None:
            return await write_or_show(request, who, work, done=done, shown=shown, version=version)
        answer, error = await do(request, who, work, version=version)
        if error is not None:
            return await shown(error)
        return await self.listing(request, who, 201, created=answer)
