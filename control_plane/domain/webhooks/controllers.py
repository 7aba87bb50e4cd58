"""Webhook endpoints (management key)."""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import Controller, delete, get, patch, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.webhooks import schemas as s
from control_plane.domain.webhooks import services
from control_plane.errors import StrictBody


class WebhookController(Controller):
    path = "/webhooks"
    tags = ["webhooks"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List webhooks, oldest first")
    async def list_webhooks(
        self,
        ctx: Ctx,
        limit: Annotated[int, QueryParameter(ge=1, le=500)] = 50,
        cursor: FromQuery[str | None] = None,
    ) -> s.WebhookList:
        return await services.list_webhooks(ctx, limit=limit, cursor=cursor)

    @post(
        "/",
        dto=StrictBody[s.WebhookCreate],
        return_dto=None,
        summary="Create a webhook (the secret is answered only if Vane generated it)",
    )
    async def create_webhook(
        self, ctx: Ctx, state: State, data: JSONBody[s.WebhookCreate]
    ) -> s.Webhook:
        return await services.create_webhook(ctx, data, state.settings.webhook_private)

    @get("/{webhook_id:str}", summary="Get a webhook")
    async def get_webhook(self, ctx: Ctx, webhook_id: FromPath[str]) -> s.Webhook:
        return await services.get_webhook(ctx, webhook_id)

    @patch(
        "/{webhook_id:str}",
        dto=StrictBody[s.WebhookPatch],
        return_dto=None,
        summary="Change a webhook's address, events or secret, or disable it",
    )
    async def patch_webhook(
        self,
        ctx: Ctx,
        state: State,
        webhook_id: FromPath[str],
        data: JSONBody[s.WebhookPatch],
        if_match: IfMatch = None,
    ) -> s.Webhook:
        return await services.patch_webhook(ctx, webhook_id, data, state.settings.webhook_private)

    @delete("/{webhook_id:str}", status_code=200, summary="Delete a webhook and its deliveries")
    async def delete_webhook(
        self, ctx: Ctx, webhook_id: FromPath[str], if_match: IfMatch = None
    ) -> s.Deleted:
        return await services.delete_webhook(ctx, webhook_id)

    @get("/{webhook_id:str}/deliveries", summary="A webhook's deliveries, newest first")
    async def deliveries(
        self,
        ctx: Ctx,
        webhook_id: FromPath[str],
        limit: Annotated[int, QueryParameter(ge=1, le=500)] = 50,
        cursor: FromQuery[str | None] = None,
        status: FromQuery[Literal["pending", "delivered", "failed"] | None] = None,
    ) -> s.DeliveryList:
        return await services.deliveries(ctx, webhook_id, limit=limit, cursor=cursor, status=status)

    @post(
        "/{webhook_id:str}/deliveries/{delivery_id:str}/redeliver",
        status_code=200,
        summary="Send a delivery again now, with the same id",
    )
    async def redeliver(
        self, ctx: Ctx, webhook_id: FromPath[str], delivery_id: FromPath[str]
    ) -> s.Delivery:
        return await services.redeliver(ctx, webhook_id, delivery_id)
