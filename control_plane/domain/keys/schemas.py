from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

KindName = Literal["management", "server", "relay", "public"]
RoleName = Literal["viewer", "editor", "admin"]


class KeyCreate(ApiIn):
    kind: KindName
    name: str = ""
    environment: str | None = None
    origins: list[str] = msgspec.field(default_factory=list)
    # attribute names or references (``/address/street``) kept out of the props of every event
    # sent with the key: not in the event store, a relay's spool or a log line
    private_attributes: list[str] = msgspec.field(default_factory=list)
    # a management key is a service account: the role it acts with, and whether it may turn a
    # flag off at once in a protected environment (control_plane/access.py)
    role: RoleName = "admin"
    may_turn_off: bool = False


class KeyPatch(ApiIn):
    """An admin's change of a key: its name, and a management key's role and grant (a key of
    another kind has neither). What is left out stays."""

    name: str | UnsetType = UNSET
    role: RoleName | UnsetType = UNSET
    may_turn_off: bool | UnsetType = UNSET


class Key(ApiOut):
    id: str
    kind: str
    name: str
    hint: str
    environment: str | None
    origins: list[str]
    private_attributes: list[str]
    created_at: datetime
    revoked_at: datetime | None
    role: str | None  # a management key's (a service account's); None for other kinds
    may_turn_off: bool


class CreatedKey(Key):
    key: str  # the token, shown this once


class KeyList(ApiOut):
    keys: list[Key]
    count: int  # items on this page
    next_cursor: str | None = None
    has_more: bool = False
