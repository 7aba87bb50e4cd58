from __future__ import annotations

from typing import Any

from litestar import Controller, Request, delete, get, patch, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, public_url
from control_plane.domain.people import schemas as s
from control_plane.domain.people import services
from control_plane.errors import StrictBody


class PeopleController(Controller):
    path = "/users"
    tags = ["people"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="The project's people (with their roles) and pending invitations")
    async def list_people(self, ctx: Ctx) -> s.People:
        return await services.list_people(ctx)

    @post(
        "/invitations",
        dto=StrictBody[s.InvitationCreate],
        return_dto=None,
        summary="Invite a person by email and role: a single-use link, shown once",
        description="The link expires after 7 days and works once; only a hash of its token is "
        "stored. The webhook event `user.invited` carries it, so a team can deliver it (no mail "
        "server is needed). Needs `admin`.",
    )
    async def invite(
        self,
        ctx: Ctx,
        data: JSONBody[s.InvitationCreate],
        state: State,
        request: Request[Any, Any, Any],
    ) -> s.CreatedInvitation:
        return await services.invite(ctx, data, public_url(state, request))

    @delete(
        "/invitations/{invitation_id:str}",
        status_code=200,
        summary="Withdraw a pending invitation; its link stops working",
    )
    async def revoke_invitation(self, ctx: Ctx, invitation_id: FromPath[str]) -> s.Invitation:
        return await services.revoke_invitation(ctx, invitation_id)

    @get("/{user_id:str}", summary="A person of the project")
    async def get_person(self, ctx: Ctx, user_id: FromPath[str]) -> s.Person:
        return await services.get_person(ctx, user_id)

    @patch(
        "/{user_id:str}",
        dto=StrictBody[s.PersonPatch],
        return_dto=None,
        summary="Change a person's role, 'may turn off', or state (deactivate, reactivate)",
        description="Deactivating ends the person's console sessions at once and their tokens "
        "at their next request; their history stays. Nobody demotes or deactivates themselves, "
        "and a project keeps one active admin (409). Needs `admin`.",
    )
    async def patch_person(
        self, ctx: Ctx, user_id: FromPath[str], data: JSONBody[s.PersonPatch]
    ) -> s.Person:
        return await services.patch_person(ctx, user_id, data)

    @post(
        "/{user_id:str}/sign-out-everywhere",
        status_code=200,
        summary="End every console session of a person (yourself, or anyone for an admin)",
    )
    async def sign_out_everywhere(self, ctx: Ctx, user_id: FromPath[str]) -> s.SignedOut:
        return await services.sign_out_everywhere(ctx, user_id)


class TokenController(Controller):
    path = "/tokens"
    tags = ["people"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="Your personal tokens (never their secrets)")
    async def list_tokens(self, ctx: Ctx) -> s.Tokens:
        return await services.list_tokens(ctx)

    @post(
        "/",
        dto=StrictBody[s.TokenCreate],
        return_dto=None,
        summary="A personal token: it acts as you, with your role or less; shown once",
        description="Only a person has personal tokens (a management key is a service account "
        "of its own: 403). The token stops working when it is revoked, or when you are "
        "deactivated or leave the project.",
    )
    async def create_token(self, ctx: Ctx, data: JSONBody[s.TokenCreate]) -> s.CreatedToken:
        return await services.create_token(ctx, data)

    @delete("/{token_id:str}", status_code=200, summary="Revoke a personal token, at once")
    async def revoke_token(self, ctx: Ctx, token_id: FromPath[str]) -> s.Token:
        return await services.revoke_token(ctx, token_id)
