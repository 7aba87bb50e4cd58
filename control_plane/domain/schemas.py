"""Shared API struct bases: camelCase JSON, unknown fields refused, keyword-only construction."""

from __future__ import annotations

import msgspec


class ApiIn(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Base of request bodies."""


class ApiOut(msgspec.Struct, rename="camel", kw_only=True):
    """Base of response bodies."""
