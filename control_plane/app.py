"""The control plane's Litestar application."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import anyio
from litestar import Litestar, Response, Router
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.di import Provide
from litestar.handlers import HTTPRouteHandler
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig
from litestar.types import ASGIApp, ControllerRouterHandler, Method, RouteHandlerType
from sqlalchemy.ext.asyncio import async_sessionmaker

from control_plane.api_docs import swagger_assets, swagger_plugin
from control_plane.auth import KeyAuthenticationMiddleware
from control_plane.compression import COMPRESSION, send_streams_as_made
from control_plane.console.routes import TEMPLATES, console_router
from control_plane.db import migrate
from control_plane.db.engine import make_async_engine
from control_plane.deps import provide_scope
from control_plane.domain.audit.controllers import (
    AuditController,
    FlagHistoryController,
    SegmentHistoryController,
)
from control_plane.domain.changes.controllers import ChangeRequestController
from control_plane.domain.changes.runner import ChangeRequestRunner
from control_plane.domain.coderefs.controllers import CodeRefController
from control_plane.domain.environments.controllers import EnvironmentController
from control_plane.domain.events.controllers import EventController
from control_plane.domain.experiments.controllers import ExperimentController
from control_plane.domain.flags.controllers import FlagController
from control_plane.domain.flags.services import apply_scheduled
from control_plane.domain.keys.controllers import KeyController
from control_plane.domain.keys.services import revoke_key
from control_plane.domain.layers.controllers import HoldoutController, LayerController
from control_plane.domain.metrics.controllers import FlagMetricController, MetricController
from control_plane.domain.people.controllers import PeopleController, TokenController
from control_plane.domain.schedules.controllers import ScheduleController
from control_plane.domain.schedules.runner import ScheduleRunner
from control_plane.domain.segments.controllers import SegmentController
from control_plane.domain.webhooks.controllers import WebhookController
from control_plane.domain.webhooks.dispatcher import Dispatcher, DispatchSettings
from control_plane.domain.webhooks.outbox import OUTBOX
from control_plane.entry.bootstrap import IssuedKey, bootstrap
from control_plane.errors import ERROR_RESPONSES, EXCEPTION_HANDLERS, etag
from control_plane.health import healthz, metrics, readyz
from control_plane.publishing.hub import Hub, run_reconciler
from control_plane.publishing.provider_feed import snapshot_stream
from control_plane.publishing.publisher import LocalPublisher, Publisher, RedisPublisher
from control_plane.publishing.stream import relay_stream
from control_plane.ratelimit import RedisLimiter, make_limiter
from control_plane.settings import Settings
from control_plane.text_params import TextParamsMiddleware

logger = logging.getLogger("vane.control_plane")

API_CONTROLLERS: list[ControllerRouterHandler] = [
    AuditController,
    FlagController,
    FlagHistoryController,
    SegmentController,
    SegmentHistoryController,
    EnvironmentController,
    KeyController,
    CodeRefController,
    EventController,
    MetricController,
    FlagMetricController,
    ExperimentController,
    LayerController,
    HoldoutController,
    ScheduleController,
    ChangeRequestController,
    WebhookController,
    PeopleController,
    TokenController,
    relay_stream,
    snapshot_stream,
]
API_PREFIX = "/api/v1"
ALIAS = "/v1"
"""The API's short prefix: ``/v1/flags`` is ``/api/v1/flags`` (see ``serve_alias``)."""
RoutingResult = tuple[ASGIApp, RouteHandlerType, str, dict[str, Any], str]
UNAUTHENTICATED = ["^/healthz$", "^/readyz$", "^/metrics$", "^/schema", "^/$", "^/console"]
"""Paths without a bearer key: operations, the OpenAPI document, and the console (which signs
people in with a management key and keeps a session of its own)."""


class ApiRouter(Router):
    """The API's router, made for one app: registering it takes it as it is.

    Litestar deep-copies every router it registers, so that one router may serve several apps;
    ``create_app`` builds this one for its app alone, and the copy was a quarter of the app's
    construction."""

    def __deepcopy__(self, memo: dict[int, Any]) -> ApiRouter:
        return self


def configure_logging() -> None:
    """Plain stderr logging, unless the host (a test runner, a server) configured it already."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    logging.getLogger("httpx").setLevel(logging.WARNING)


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the app; the database is migrated (and bootstrapped when empty) at start-up."""
    settings = settings or Settings.from_env()
    configure_logging()
    engine = make_async_engine(settings.database_url)
    sessionmaker = async_sessionmaker(engine, expire_on_commit=False)
    hub = Hub(sessionmaker)
    publisher: Publisher = (
        RedisPublisher(hub, settings.redis_url, settings.replica_id)
        if settings.redis_url
        else LocalPublisher(hub)
    )
    background: list[asyncio.Task[None]] = []
    limiter = make_limiter(settings.rate_limit_per_s, settings.rate_limit_burst, settings.redis_url)

    schedules = ScheduleRunner(
        sessionmaker,
        replica_id=settings.replica_id,
        publish=publisher.publish,
        apply=apply_scheduled,
        poll_s=settings.schedule_poll_s,
        bayesian_prior_sd=settings.bayesian_prior_sd,
        hooks=OUTBOX,
    )
    change_requests = ChangeRequestRunner(
        sessionmaker,
        publish=publisher.publish,
        poll_s=settings.schedule_poll_s,
        bayesian_prior_sd=settings.bayesian_prior_sd,
        hooks=OUTBOX,
    )
    dispatcher = Dispatcher(
        sessionmaker,
        DispatchSettings(
            replica_id=settings.replica_id,
            poll_s=settings.webhook_poll_s,
            timeout_s=settings.webhook_timeout_s,
            max_attempts=settings.webhook_max_attempts,
            backoff_s=settings.webhook_backoff_s,
            backoff_cap_s=settings.webhook_backoff_cap_s,
            private=settings.webhook_private,
            retention=timedelta(days=settings.webhook_retention_days),
        ),
    )

    async def on_startup(app: Litestar) -> None:
        await anyio.to_thread.run_sync(migrate.upgrade, settings.database_url)
        app.state.issued_keys = []
        if settings.bootstrap:
            issued = await bootstrap(sessionmaker)
            app.state.issued_keys = issued
            log_issued_keys(issued)
        await publisher.start()
        background.append(asyncio.create_task(run_reconciler(hub, settings.reconcile_s)))
        background.append(asyncio.create_task(schedules.run()))
        background.append(asyncio.create_task(change_requests.run()))
        background.append(asyncio.create_task(dispatcher.run()))

    async def on_shutdown(app: Litestar) -> None:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await publisher.stop()
        if isinstance(limiter, RedisLimiter):
            await limiter.close()
        await engine.dispose()

    app = Litestar(
        route_handlers=[
            healthz,
            readyz,
            metrics,
            ApiRouter(path=API_PREFIX, route_handlers=API_CONTROLLERS),
            console_router(),
            swagger_assets(),
        ],
        template_config=TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine),
        state=State(
            {
                "sessionmaker": sessionmaker,
                "engine": engine,
                "hub": hub,
                "publisher": publisher,
                "settings": settings,
                "limiter": limiter,
                "hooks": OUTBOX,  # every unit of work's (Scope.hooks): the webhooks' outbox
            }
        ),
        dependencies={
            "ctx": Provide(provide_scope),
            # deleting an environment with ?revokeKeys=true revokes its keys as the keys do
            "revoke_key": Provide(lambda: revoke_key, sync_to_thread=False),
        },
        middleware=[
            DefineMiddleware(KeyAuthenticationMiddleware, exclude=UNAUTHENTICATED),
            TextParamsMiddleware(),  # after the key is known: a stranger gets 401, not 422
        ],
        cors_config=(
            CORSConfig(
                allow_origins=list(settings.admin_origins),
                allow_headers=["Authorization", "Content-Type", "If-Match", "If-None-Match"],
                expose_headers=["ETag", "Retry-After"],
                allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
            )
            if settings.admin_origins
            else None
        ),
        compression_config=COMPRESSION,
        exception_handlers=EXCEPTION_HANDLERS,
        after_request=version_etag,
        request_max_body_size=settings.max_body_bytes,
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        openapi_config=OpenAPIConfig(
            title="Vane control plane",
            version="1.0.0",
            path="/schema",
            render_plugins=[swagger_plugin()],
        ),
        logging_config=None,
        debug=False,
    )
    document_errors(app)
    send_streams_as_made(app)
    serve_alias(app)
    return app


def serve_alias(app: Litestar) -> None:
    """``/v1/...`` is routed to the handler of ``/api/v1/...``, as if registered under both.

    Registering the API a second time under ``/v1`` doubled the app's construction (about 0.3 s
    of CPU a start, the most of it). Routing is the only step that reads the prefix: the scope
    keeps the path asked (``/v1/...``) and its template, so a handler, a 404 or 405 naming the
    path, and the OpenAPI document (which never listed ``/v1``) see what they saw before.
    """
    router = app.asgi_router
    route = router.handle_routing

    def handle_routing(path: str, method: Method | None) -> RoutingResult:
        if path != ALIAS and not path.startswith(ALIAS + "/"):
            return route(path, method)
        asgi_app, handler, resolved, params, template = route(
            API_PREFIX + path[len(ALIAS) :], method
        )
        return asgi_app, handler, alias(resolved), params, alias(template)

    def alias(path: str) -> str:
        return ALIAS + path[len(API_PREFIX) :] if path.startswith(API_PREFIX) else path

    router.handle_routing = handle_routing  # type: ignore[assignment]


async def version_etag(response: Response[Any]) -> Response[Any]:
    """Every resource answer that carries its ``version`` also carries it as the ``ETag`` a
    write sends back in ``If-Match``. A file or other ASGI answer (the API docs' assets) has no
    ``content`` and no version."""
    version = getattr(getattr(response, "content", None), "version", None)
    if (
        isinstance(version, int)
        and not isinstance(version, bool)
        and (response.status_code or 200) < 300
    ):
        response.headers["ETag"] = etag(version)
    return response


def document_errors(app: Litestar) -> None:
    """Every operation documents Vane's error answers (``errors.ERROR_RESPONSES``)."""
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            if isinstance(handler, HTTPRouteHandler):
                handler.responses = {**ERROR_RESPONSES, **(handler.responses or {})}


def log_issued_keys(issued: list[IssuedKey]) -> None:
    for key in issued:
        where = f" ({key.environment})" if key.environment else ""
        logger.warning("first %s key%s: %s", key.kind.value, where, key.token)
