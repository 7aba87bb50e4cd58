"""Keyset paging shared by every list endpoint: ``limit`` (default 50, at most 500) and an opaque
``cursor`` (the previous answer's ``nextCursor``).

A cursor names the list it came from and the sort value of the last item shown; the next page
starts strictly after it, so items created or deleted between two requests never make another
item appear twice or be skipped. Each list is ordered by one unique column (a flag's key, an
experiment's time-sortable id, ...), or by columns unique together (the events: time, then id).

Every list's cursor is opaque (``OPAQUE``), but two answered theirs before this module was theirs
and keep them, as clients may hold them: the audit's is its last entry's id, the events' their
last one's ``ts:id``. Their ``CursorFormat`` is written by their service.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import msgspec
from litestar.params import QueryParameter
from sqlalchemy import ColumnElement, Select, and_, func, or_, select
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


Position = tuple[Any, ...]
"""The values of a list's order columns at an item: where the next page starts after."""


@dataclass(frozen=True, slots=True)
class CursorFormat:
    """How a list spells a position as a cursor (``encode(list_name, position)``) and reads it
    back (``decode(list_name, cursor)``: the position, or 422 naming ``cursor``)."""

    encode: Callable[[str, Position], str]
    decode: Callable[[str, str], Position]


OPAQUE = CursorFormat(
    encode=lambda list_name, position: encode_cursor(list_name, position[0]),
    decode=lambda list_name, cursor: (decode_cursor(list_name, cursor),),
)
"""The cursor of every list but the audit's and the events': the list's name and the last item's
sort value (one column, a string), in base64."""


def _beyond(
    columns: Sequence[InstrumentedAttribute[Any]], position: Position, descending: bool
) -> ColumnElement[bool]:
    """The rows strictly after ``position`` in the order of ``columns``: (a, b) after (x, y) is
    a after x, or a = x and b after y."""
    first, value = columns[0], position[0]
    after: ColumnElement[bool] = first < value if descending else first > value
    if len(columns) == 1:
        return after
    return or_(after, and_(first == value, _beyond(columns[1:], position[1:], descending)))


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
    order: InstrumentedAttribute[str] | tuple[InstrumentedAttribute[Any], ...],
    *,
    list_name: str,
    limit: int,
    cursor: str | None,
    convert: Callable[[list[Any]], Awaitable[list[T]]],
    descending: bool = False,
    offset: int = 0,
    cursors: CursorFormat = OPAQUE,
) -> Page[T]:
    """One page of ``query`` ordered by the unique column ``order``, or by the columns of a
    tuple (unique together, the first first), newest first with ``descending`` and a
    time-sortable id. ``convert`` gets what the query selects per row: the entity when it
    selects one, else the row's tuple. ``offset`` skips that many items first (a numbered page,
    as the console's lists show them; the API continues by cursor). ``cursors`` spells the
    cursor (``OPAQUE`` but for the lists that answered their own before)."""
    columns = order if isinstance(order, tuple) else (order,)
    if cursor is not None:
        query = query.where(_beyond(columns, cursors.decode(list_name, cursor), descending))
    query = (
        query.add_columns(*(c.label(f"page_position_{i}") for i, c in enumerate(columns)))
        .order_by(*(c.desc() if descending else c for c in columns))
        .offset(max(offset, 0))
        .limit(limit + 1)
    )
    rows = list((await scope.session.execute(query)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    width = len(columns)
    last = tuple(rows[-1])[-width:] if more and rows else None
    selected = [row[0] if len(row) == width + 1 else tuple(row)[:-width] for row in rows]
    return Page(await convert(selected), cursors.encode(list_name, last) if last else None)


async def counted(scope: Scope, query: Select[*tuple[Any, ...]]) -> int:
    """How many items ``query`` selects (the "of N" of a numbered page)."""
    total = await scope.session.scalar(
        select(func.count()).select_from(query.order_by(None).subquery())
    )
    return int(total or 0)
