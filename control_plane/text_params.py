"""Query and path parameters hold text a database can store, on every request (one check).

A JSON body is checked where it is decoded (``errors.decode_json_body``); parameters are checked
here, before any handler reads them: ``?q=a%00b`` is a 422 naming ``q`` on SQLite and PostgreSQL
alike, where PostgreSQL would otherwise fail the query with a 500. The rule itself is
``shared.wire.body.text_problem``.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from control_plane.errors import invalid
from shared.wire.body import text_problem


def refuse_unstorable_params(scope: Scope) -> None:
    """422 naming the first query or path parameter (name or value) that is not storable text."""
    request: Request[Any, Any, Any] = Request(scope)
    for name, value in request.query_params.multi_items():
        if (problem := text_problem(name)) is not None:
            raise invalid("query", f"{problem} (in a parameter name)")
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            raise invalid(name, problem)
    for name, value in (scope.get("path_params") or {}).items():
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            raise invalid(name, problem)


class TextParamsMiddleware(ASGIMiddleware):
    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        refuse_unstorable_params(scope)
        await next_app(scope, receive, send)
