from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from control_plane.domain.schemas import ApiIn, ApiOut

RoleName = Literal["viewer", "editor", "admin"]
StateName = Literal["active", "deactivated"]


class Person(ApiOut):
    id: str
    email: str
    name: str
    state: str
    role: str  # in this project
    may_turn_off: bool
    signs_in_with: list[str]  # "password", "sso": what they have set up
    created_at: datetime
    deactivated_at: datetime | None


class Invitation(ApiOut):
    id: str
    email: str
    role: str
    invited_by: str
    created_at: datetime
    expires_at: datetime


class CreatedInvitation(Invitation):
    url: str  # the single-use link, shown this once (its token is stored only as a hash)


class People(ApiOut):
    people: list[Person]
    invitations: list[Invitation]  # pending: not used, not expired


class InvitationCreate(ApiIn):
    email: str
    role: RoleName = "viewer"


class PersonPatch(ApiIn):
    role: RoleName | UnsetType = UNSET
    may_turn_off: bool | UnsetType = UNSET
    state: StateName | UnsetType = UNSET


class SignedOut(ApiOut):
    id: str
    sessions_ended: int


class TokenCreate(ApiIn):
    name: str
    # the role the token acts with: its person's, or less (never more, even if they gain one)
    role: RoleName | None = None
    # whether it may turn a flag off in a protected environment: only if its person may (as a
    # grant, or as an admin); by default their grant when the token has their role, else not
    may_turn_off: bool | None = None


class Token(ApiOut):
    id: str
    name: str
    hint: str
    role: str
    may_turn_off: bool  # as made: the token acts with it only while its person holds it too
    created_at: datetime
    revoked_at: datetime | None


class CreatedToken(Token):
    token: str  # shown this once


class Tokens(ApiOut):
    tokens: list[Token] = msgspec.field(default_factory=list)
