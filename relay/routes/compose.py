"""The composition root of the relay's HTTP side: one function registers every route."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from relay.http import HttpApp, Router
from relay.prometheus import RelayMetrics
from relay.routes import events, experiments, feed, ofrep, ops, sdk, sse, tracker
from relay.routes.admission import Gate
from relay.settings import RelaySettings
from relay.spool import Spool
from relay.store import Store

RouteRegistrar = Callable[[Router, Gate], None]
"""Adds routes of another part of the relay (experiments, browser events, the tracker script).

It gets the router and the ``Gate`` gate, so a ``pk_`` endpoint registered with ``cors=True``
is admitted (key, origin, rate limit, body cap, state) exactly like the flag endpoints::

    async def experiments(request: Request) -> Response:
        admitted = await gate.admit(request, vane_error_body)
        if not isinstance(admitted, Admission):
            return admitted
        ...
        return Response(200, body, admitted.headers)

    router.add("POST", "/sdk/v1/experiments", experiments, cors=True)
"""


def build_http_app(
    store: Store,
    settings: RelaySettings,
    metrics: RelayMetrics,
    *,
    spool: Spool | None = None,
    extra_routes: Iterable[RouteRegistrar] = (),
    sse_keepalive_s: float = 15.0,
) -> HttpApp:
    """The relay's HTTP application (``http`` scopes only; the caller handles ``lifespan``).

    Every route of the relay is registered here. ``spool`` adds the endpoints that write to it
    (browser and backend events, experiment assignments and their exposures); ``extra_routes``
    adds routes of the caller's own (tests).
    """
    router = Router()
    gate = Gate(store, settings, metrics)
    ops.register(router, store, metrics)
    sdk.register(router, gate)
    tracker.register(router, gate)
    streams = sse.EventStreams(gate, keepalive_s=sse_keepalive_s)
    ofrep.register(router, gate, streams)
    streams.register(router)
    feed.SnapshotFeed(gate, streams.hub).register(router)
    metrics.register_gauge_callback(
        "sse_streams", "Open OFREP event streams.", streams.hub.open_streams
    )
    metrics.register_gauge_callback(
        "sse_streams_max", "Event streams this relay holds at most.", lambda: streams.max_streams
    )
    metrics.register_gauge_callback(
        "sse_streams_refused",
        "Event streams refused (503) for being over the maximum.",
        lambda: streams.refused_full,
    )
    metrics.register_status(
        "streams",
        lambda: {
            "open": streams.hub.open_streams(),
            "max": streams.max_streams,
            "refused": streams.refused_full,
        },
    )
    if spool is not None:
        events.register(router, gate, spool)
        experiments.register(router, gate, spool)
    for register in extra_routes:
        register(router, gate)
    return HttpApp(router, metrics.count_request, on_stop=[streams.hub.close_all])
