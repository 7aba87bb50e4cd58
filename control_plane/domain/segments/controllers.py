from __future__ import annotations

from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from control_plane.auth import KeyKind, requires
from control_plane.deps import Ctx, IfMatch
from control_plane.domain.paging import DEFAULT_LIMIT, Cursor, Limit
from control_plane.domain.protection import GATED_RESPONSES
from control_plane.domain.segments import schemas as s
from control_plane.domain.segments import services
from control_plane.errors import StrictBody


class SegmentController(Controller):
    path = "/segments"
    tags = ["segments"]
    guards = [requires(KeyKind.MANAGEMENT)]

    @get("/", summary="List segments")
    async def list_segments(
        self, ctx: Ctx, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
    ) -> s.SegmentList:
        found = await services.list_segments(ctx, limit=limit, cursor=cursor)
        return s.SegmentList(
            segments=found.items,
            count=len(found.items),
            next_cursor=found.next_cursor,
            has_more=found.has_more,
        )

    @post("/", dto=StrictBody[s.SegmentCreate], return_dto=None, summary="Create a segment")
    async def create_segment(self, ctx: Ctx, data: JSONBody[s.SegmentCreate]) -> s.Segment:
        return await services.create_segment(ctx, data)

    @get("/{key:str}", summary="Get a segment")
    async def get_segment(self, ctx: Ctx, key: FromPath[str]) -> s.Segment:
        return await services.get_segment(ctx, key)

    @patch(
        "/{key:str}",
        dto=StrictBody[s.SegmentPatch],
        return_dto=None,
        summary="Update a segment",
        responses=GATED_RESPONSES,
    )
    async def patch_segment(
        self, ctx: Ctx, key: FromPath[str], data: JSONBody[s.SegmentPatch], if_match: IfMatch = None
    ) -> s.Segment:
        return await services.patch_segment(ctx, key, data)

    @delete(
        "/{key:str}",
        status_code=200,
        summary="Delete a segment no rule uses",
        responses=GATED_RESPONSES,
    )
    async def delete_segment(
        self, ctx: Ctx, key: FromPath[str], if_match: IfMatch = None
    ) -> s.Deleted:
        return await services.delete_segment(ctx, key)
