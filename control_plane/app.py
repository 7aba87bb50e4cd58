"""The control plane's Litestar application."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
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
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

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
from control_plane.domain.flags.settings import apply_scheduled
from control_plane.domain.keys.controllers import KeyController
from control_plane.domain.keys.services import revoke_key
from control_plane.domain.layers.controllers import HoldoutController, LayerController
from control_plane.domain.metrics.controllers import FlagMetricController, MetricController
from control_plane.domain.people.controllers import PeopleController, TokenController
from control_plane.domain.projectfile.controllers import ProjectFileController, project_json_schema
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
from control_plane.ratelimit import Limiter, RedisLimiter, make_limiter
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
    ProjectFileController,
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


@dataclass(eq=False)
class Runtime:
    """What one start of the app owns, made from its settings: the database engine, the hub
    and the publisher, the rate limiter, and the runners (due scheduled changes, due change
    requests, webhook deliveries). Handlers reach it through ``app.state``."""

    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    hub: Hub
    publisher: Publisher
    limiter: Limiter | None
    schedules: ScheduleRunner
    change_requests: ChangeRequestRunner
    dispatcher: Dispatcher
    background: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    def of(cls, settings: Settings) -> Runtime:
        engine = make_async_engine(settings.database_url)
        sessionmaker = async_sessionmaker(engine, expire_on_commit=False)
        hub = Hub(sessionmaker)
        publisher: Publisher = (
            RedisPublisher(hub, settings.redis_url, settings.replica_id)
            if settings.redis_url
            else LocalPublisher(hub)
        )
        return cls(
            settings=settings,
            engine=engine,
            sessionmaker=sessionmaker,
            hub=hub,
            publisher=publisher,
            limiter=make_limiter(
                settings.rate_limit_per_s, settings.rate_limit_burst, settings.redis_url
            ),
            schedules=ScheduleRunner(
                sessionmaker,
                replica_id=settings.replica_id,
                publish=publisher.publish,
                apply=apply_scheduled,
                poll_s=settings.schedule_poll_s,
                bayesian_prior_sd=settings.bayesian_prior_sd,
                hooks=OUTBOX,
            ),
            change_requests=ChangeRequestRunner(
                sessionmaker,
                publish=publisher.publish,
                poll_s=settings.schedule_poll_s,
                bayesian_prior_sd=settings.bayesian_prior_sd,
                hooks=OUTBOX,
            ),
            dispatcher=Dispatcher(
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
            ),
        )

    def state(self) -> dict[str, Any]:
        return {
            "runtime": self,
            "sessionmaker": self.sessionmaker,
            "engine": self.engine,
            "hub": self.hub,
            "publisher": self.publisher,
            "settings": self.settings,
            "limiter": self.limiter,
            "hooks": OUTBOX,  # every unit of work's (Scope.hooks): the webhooks' outbox
            "metrics_registry": None,  # made at the first /metrics, over this runtime's hub
        }


async def on_startup(app: Litestar) -> None:
    """The database migrated (and bootstrapped when empty), then the runners started."""
    runtime: Runtime = app.state.runtime
    settings = runtime.settings
    await anyio.to_thread.run_sync(migrate.upgrade, settings.database_url)
    app.state.issued_keys = []
    if settings.bootstrap:
        issued = await bootstrap(runtime.sessionmaker)
        app.state.issued_keys = issued
        log_issued_keys(issued)
    await runtime.publisher.start()
    hub = runtime.hub
    runtime.background += [
        asyncio.create_task(run_reconciler(hub, settings.reconcile_s)),
        asyncio.create_task(runtime.schedules.run()),
        asyncio.create_task(runtime.change_requests.run()),
        asyncio.create_task(runtime.dispatcher.run()),
    ]


async def on_shutdown(app: Litestar) -> None:
    runtime: Runtime = app.state.runtime
    for task in runtime.background:
        task.cancel()
    await asyncio.gather(*runtime.background, return_exceptions=True)
    runtime.background.clear()
    await runtime.publisher.stop()
    if isinstance(runtime.limiter, RedisLimiter):
        await runtime.limiter.close()
    await runtime.engine.dispose()


REBUILT_ON_CONSTRUCTION = ("admin_origins", "max_body_bytes")
"""The settings ``create_app`` builds into the app itself (CORS, the body limit): ``rebind``
keeps an app only for settings that agree on these."""


def rebind(app: Litestar, settings: Settings) -> None:
    """Give a stopped app a new runtime for ``settings`` (another database, say), as if it were
    made anew: its construction is most of a start, so the tests build it once per process and
    rebind it for each test's database. Refused if ``settings`` differ in what the app's
    construction read (``REBUILT_ON_CONSTRUCTION``)."""
    old: Settings = app.state.settings
    for name in REBUILT_ON_CONSTRUCTION:
        if getattr(old, name) != getattr(settings, name):
            raise ValueError(f"{name} is built into the app: make a new one (create_app)")
    app.state.update(Runtime.of(settings).state())


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the app; the database is migrated (and bootstrapped when empty) at start-up."""
    settings = settings or Settings.from_env()
    configure_logging()
    runtime = Runtime.of(settings)

    app = Litestar(
        route_handlers=[
            healthz,
            readyz,
            metrics,
            ApiRouter(path=API_PREFIX, route_handlers=API_CONTROLLERS),
            console_router(),
            swagger_assets(),
            project_json_schema,
        ],
        template_config=TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine),
        state=State(runtime.state()),
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
