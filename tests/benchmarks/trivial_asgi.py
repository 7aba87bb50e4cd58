"""Ceilings for ``bench_relay_http``: the smallest apps the relay's stack can serve.

``raw_app``: a raw ASGI callable answering every request with a precomputed 76-byte JSON body
(the relay is a raw ASGI app under granian, so this is its floor). ``litestar_app``: the peer
anchors' Litestar baseline (``../shared/bench/peers/http/litestar_app.py``), ``GET /small``
returning the same dict serialised on every request.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar, get

SMALL = {"flag-000": True, "flag-001": False, "flag-002": True, "variant": "control", "v": 1}
BODY = b'{"flag-000":true,"flag-001":false,"flag-002":true,"variant":"control","v":1}'
HEADERS = [(b"content-type", b"application/json")]


async def raw_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


@get("/small", sync_to_thread=False)
def small() -> dict[str, Any]:
    return SMALL


litestar_app = Litestar(route_handlers=[small], openapi_config=None, debug=False)
