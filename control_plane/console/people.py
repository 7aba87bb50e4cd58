"""People: who is in the project and with what role, invitations, and your own tokens; every
action through the people domain's services, as the API's ``/users`` and ``/tokens`` call them."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Response, Template

from control_plane.access import ROLE_NAMES, ROLES
from control_plane.console import forms
from control_plane.console.pages import ListPage
from control_plane.console.web import Who
from control_plane.deps import public_url
from control_plane.domain.common import Scope
from control_plane.domain.people import schemas as s
from control_plane.domain.people import services as people


def _role(value: str) -> Any:
    return value if value in ROLE_NAMES else "viewer"


class PeoplePages(ListPage):
    path = "/console/people"
    template = "people.html"
    title = "People"

    async def context(self, scope: Scope, request: Request[Any, Any, Any]) -> dict[str, Any]:
        found = await people.list_people(scope)
        tokens = await people.list_tokens(scope) if scope.actor.user_id else None
        return {
            "people": found.people,
            "invitations": found.invitations,
            "tokens": tokens.tokens if tokens else None,
            "roles": ROLE_NAMES,
            # a token's role: the person's own or less (the service refuses more anyway)
            "token_roles": ROLE_NAMES[: ROLES.index(scope.actor.role) + 1],
        }

    @get("/")
    async def people(self, request: Request[Any, Any, Any], who: Who) -> Template:
        return await self.listing(request, who)

    @post("/invite")
    async def invite(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        body = s.InvitationCreate(
            email=forms.text(form, "email"), role=_role(forms.text(form, "role"))
        )
        base = public_url(request.app.state, request)
        # no redirect: the link is shown on this answer, once
        return await self.write(
            request, who, lambda scope: people.invite(scope, body, base), done=None, form=form
        )

    @post("/invitations/{invitation_id:str}/withdraw")
    async def withdraw(
        self, request: Request[Any, Any, Any], who: Who, invitation_id: FromPath[str]
    ) -> Response[Any]:
        return await self.write(
            request,
            who,
            lambda scope: people.revoke_invitation(scope, invitation_id),
            done=lambda _: "/console/people",
        )

    @post("/{user_id:str}")
    async def update(
        self, request: Request[Any, Any, Any], who: Who, user_id: FromPath[str]
    ) -> Response[Any]:
        form = await request.form()
        action = forms.text(form, "action")
        if action == "deactivate":
            body = s.PersonPatch(state="deactivated")
        elif action == "reactivate":
            body = s.PersonPatch(state="active")
        else:
            body = s.PersonPatch(
                role=_role(forms.text(form, "role")),
                may_turn_off=forms.text(form, "mayTurnOff") == "on",
            )
        return await self.write(
            request,
            who,
            lambda scope: people.patch_person(scope, user_id, body),
            done=lambda _: "/console/people",
        )

    @post("/{user_id:str}/sign-out-everywhere")
    async def sign_out_everywhere(
        self, request: Request[Any, Any, Any], who: Who, user_id: FromPath[str]
    ) -> Response[Any]:
        target = "/console/people" if who.principal.user_id != user_id else "/console/sign-in"
        return await self.write(
            request,
            who,
            lambda scope: people.sign_out_everywhere(scope, user_id),
            done=lambda _: target,
        )

    @post("/tokens")
    async def create_token(self, request: Request[Any, Any, Any], who: Who) -> Response[Any]:
        form = await request.form()
        role = forms.text(form, "role")
        # "may turn off": the box (ticked: "on") comes with a hidden "off", so that a form that
        # offered it says yes or no; a form without it (a person who may not turn off, or a
        # client that leaves the field out) gets the API's default, as a body without it does
        box = forms.texts(form, "mayTurnOff")
        body = s.TokenCreate(
            name=forms.text(form, "name"),
            role=_role(role) if role else None,
            may_turn_off="on" in box if box else None,
        )
        return await self.write(
            request,
            who,
            lambda scope: people.create_token(scope, body),
            done=None,
            form=form,
        )

    @post("/tokens/{token_id:str}/revoke")
    async def revoke_token(
        self, request: Request[Any, Any, Any], who: Who, token_id: FromPath[str]
    ) -> Response[Any]:
        return await self.write(
            request,
            who,
            lambda scope: people.revoke_token(scope, token_id),
            done=lambda _: "/console/people",
        )
