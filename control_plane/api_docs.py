"""The API docs (``/schema``, ``/schema/swagger``): Swagger UI served by the control plane itself,
from the ``swagger-ui-bundle-v2`` package, so the page works offline and behind a firewall (no
CDN), and the browser loads nothing from another origin."""

from __future__ import annotations

from pathlib import Path

from litestar import Router
from litestar.datastructures import CacheControlHeader
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

SWAGGER_UI = Path(str(swagger_ui_path))
ASSETS = f"/schema/{SWAGGER_UI.name}"
"""Where the assets are served: the folder's name carries Swagger UI's version
(``swagger-ui-5.31.0``), so an upgrade changes every URL and the assets may be cached for good."""


def swagger_plugin() -> SwaggerRenderPlugin:
    return SwaggerRenderPlugin(
        js_url=f"{ASSETS}/swagger-ui-bundle.js",
        css_url=f"{ASSETS}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS}/swagger-ui-standalone-preset.js",
        favicon=f'<link rel="icon" type="image/png" href="{ASSETS}/favicon-32x32.png">',
    )


def swagger_assets() -> Router:
    return create_static_files_router(
        path=ASSETS,
        directories=[SWAGGER_UI],
        include_in_schema=False,
        cache_control=CacheControlHeader(max_age=365 * 24 * 3600, public=True),
    )
