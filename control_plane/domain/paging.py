"""Keyset paging shared by every list endpoint: ``limit`` (default 50, at most 500) and an opaque
``cursor`` (the previous answer's ``nextCursor``).

A cursor names the list it came from and the sort value of the last item shown; the next page
starts strictly after it, so items created or deleted between two requests never make another
item appear twice or be skipped. Each list is ordered by one unique column (a flag's key, an
experiment's time-sortable id, ...).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import msgspec
from litestar.params import QueryParameter
from sqlalchemy import Select, func, select
from sqlalchemy.orm import InstrumentedAttribute

from control_plane.domain.common import Scope
from control_plane.errors import invalid

DEFAULT_LIMIT = 50
MAX_LIMIT = 500

Limit = Annotated[
    int,
    QueryParameter(
        ge=1,
        le=MAX_LIMIT,
        description=f"Items per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})",
    ),
]
Cursor = Annotated[
    str | None,
    QueryParameter(
        max_length=1024,
        description="Where to continue: the previous page's `nextCursor`, as given",
    ),
]

T = TypeVar("T")


class _Position(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    list: str
    after: str


def encode_cursor(list_name: str, after: str) -> str:
    raw = msgspec.json.encode(_Position(list_name, after))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(list_name: str, cursor: str) -> str:
    """The sort value a cursor continues after; 422 naming ``cursor`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        position = msgspec.json.decode(raw, type=_Position)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        position = None
    if position is None or position.list != list_name:
        raise invalid("cursor", "not a cursor from a previous page of this list (use nextCursor)")
    return position.after


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None


async def paged(
    scope: Scope,
    query: Select[*tuple[Any, ...]],
    order: InstrumentedAttribute[str],
    *,
    list_name: str,
    limit: int,
    cursor: str | None,
    convert: Callable[[list[Any]], Awaitable[list[T]]],
    descending: bool = False,
    offset: int = 0,
) -> Page[T]:
    """One page of ``query`` ordered by the unique column ``order`` (newest first with
    ``descending`` and a time-sortable id). ``convert`` gets what the query selects per row: the
    entity when it selects one, else the row's tuple. ``offset`` skips that many items first
    (a numbered page, as the console's lists show them; the API continues by cursor)."""
    if cursor is not None:
        after = decode_cursor(list_name, cursor)
        query = query.where(order < after if descending else order > after)
    query = (
        query.add_columns(order.label("page_position"))
        .order_by(order.desc() if descending else order)
        .offset(max(offset, 0))
        .limit(limit + 1)
    )
    rows = list((await scope.session.execute(query)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    last: str | None = rows[-1].page_position if more and rows else None
    selected = [row[0] if len(row) == 2 else tuple(row)[:-1] for row in rows]
    return Page(await convert(selected), encode_cursor(list_name, last) if last else None)


async def counted(scope: Scope, query: Select[*tuple[Any, ...]]) -> int:
    """How many items ``query`` selects (the "of N" of a numbered page)."""
    total = await scope.session.scalar(
        select(func.count()).select_from(query.order_by(None).subquery())
    )
    return int(total or 0)
