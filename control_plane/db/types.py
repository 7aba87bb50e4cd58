"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from sqlalchemy import JSON, DateTime, Label, String, Text, cast
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.types import TypeDecorator

Json = JSON().with_variant(JSONB(), "postgresql")


class JsonText(TypeDecorator[Any]):
    """A ``Json`` column selected as its text (``as_json_text``) and decoded by msgspec: for
    reads of many thousand rows, where the drivers' ``json.loads`` cost several times as much
    (SQLite's and psycopg's both)."""

    impl = Text
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else msgspec.json.decode(value)


def as_json_text(column: InstrumentedAttribute[Any]) -> Label[Any]:
    """``column`` (a ``Json`` one) read through ``JsonText``, under its own name."""
    return cast(column, JsonText()).label(column.key)


def Key(length: int) -> String:
    """A string compared byte-wise on PostgreSQL (``COLLATE "C"``): the columns analysis joins,
    sorts and ranges on. Byte order is what merge joins and ``unit`` ranges need, and it skips the
    locale's ``strcoll`` on every comparison."""
    return String(length).with_variant(String(length, collation="C"), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes; SQLite hands back naive values, which are UTC by contract."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def utcnow() -> datetime:
    return datetime.now(UTC)
