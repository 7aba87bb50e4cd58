"""Operations endpoints, no key: ``/healthz`` (the process answers), ``/readyz`` (the database
answers and publishing works) and ``/metrics`` (Prometheus text format).

A control plane that cannot publish says so: an environment whose last publication failed makes
``/readyz`` answer 503 with the reason, and a flag, segment or experiment left out of what relays
are sent (a value the wire cannot carry) is listed there, with 200 and ``"status": "degraded"``; so is an environment a relay connected
here refuses (``refusedBy``: relay id -> the version and why), which is the relays' trouble,
not this replica's: a load balancer keeps it (it is where the data gets fixed).
``/metrics`` counts the same, for alerting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from litestar import MediaType, Response, get
from litestar.datastructures import State
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import text

from control_plane.publishing.hub import Hub

PREFIX = "vane_"


@get("/healthz", include_in_schema=False, media_type=MediaType.JSON)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def publishing_status(hub: Hub) -> dict[str, Any]:
    """What publishing reports: environments failing and items left out, by environment key."""
    name = hub.names.get
    refused = hub.refused_by()
    degraded = hub.left_out or refused
    return {
        "status": "failing" if hub.failing else "degraded" if degraded else "ok",
        "failing": {name(env, env): why for env, why in sorted(hub.failing.items())},
        "leftOut": {name(env, env): dict(items) for env, items in sorted(hub.left_out.items())},
        "refusedBy": {
            env: {
                relay: {"version": refusal.version, "reason": refusal.reason}
                for relay, refusal in sorted(relays.items())
            }
            for env, relays in sorted(refused.items())
        },
        "connections": len(hub.connections),
    }


@get("/readyz", include_in_schema=False, media_type=MediaType.JSON)
async def readyz(state: State) -> Response[dict[str, Any]]:
    try:
        async with state.sessionmaker() as session:
            await session.execute(text("SELECT 1"))
    except Exception as exc:
        return Response({"status": "unavailable", "database": str(exc)}, status_code=503)
    publishing = publishing_status(state.hub)
    status = {"ok": "ready", "degraded": "degraded", "failing": "unavailable"}
    return Response(
        {"status": status[publishing["status"]], "database": "ok", "publishing": publishing},
        status_code=503 if publishing["status"] == "failing" else 200,
    )


class PublishingCollector(Collector):
    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        hub = self.hub
        failures = CounterMetricFamily(
            PREFIX + "publish_failures",
            "Publications of an environment to relays that failed (retried by the reconciler), "
            "or that a relay connected here refused (each version once per relay).",
            labels=["environment"],
        )
        for env, n in sorted(hub.failures.items()):
            failures.add_metric([env], n)
        yield failures
        refusing = GaugeMetricFamily(
            PREFIX + "publish_refusing_relays",
            "Relays connected here that refuse the newest version they were sent.",
            labels=["environment"],
        )
        for env, relays in sorted(hub.refused_by().items()):
            refusing.add_metric([env], len(relays))
        yield refusing
        yield GaugeMetricFamily(
            PREFIX + "publish_failing_environments",
            "Environments whose last publication failed: relays do not get their changes.",
            value=len(hub.failing),
        )
        left_out = GaugeMetricFamily(
            PREFIX + "publish_left_out_items",
            "Flags, segments and experiments left out of what relays are sent (not encodable).",
            labels=["environment"],
        )
        version = GaugeMetricFamily(
            PREFIX + "publish_snapshot_version",
            "The snapshot version this replica serves its relays, per environment.",
            labels=["environment"],
        )
        for env, items in sorted(hub.left_out.items()):
            left_out.add_metric([hub.names.get(env, env)], len(items))
        for history in sorted(hub.histories.values(), key=lambda history: history.key):
            version.add_metric([history.key], history.version)
        yield left_out
        yield version
        yield GaugeMetricFamily(
            PREFIX + "relay_connections",
            "Relays and in-process providers connected to this replica.",
            value=len(hub.connections),
        )


@get("/metrics", include_in_schema=False)
async def metrics(state: State) -> Response[bytes]:
    registry: CollectorRegistry | None = getattr(state, "metrics_registry", None)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(PublishingCollector(state.hub))
        state.metrics_registry = registry
    return Response(
        generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8"
    )
