"""The relay's Prometheus metrics, on a registry of its own.

Counters on the request path are plain ``dict`` increments (a labelled prometheus_client
counter takes a lock and builds a label tuple per call, a noticeable share of a relay request);
a custom collector turns them, the store's per-environment state and any registered gauge
callbacks into metric families when ``/metrics`` is scraped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from relay.store import Store

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

PREFIX = "vane_relay_"

GaugeValue = float | Mapping[tuple[str, ...], float]


class RelayMetrics:
    """Counts what the relay serves; reads snapshot versions and ages from the store at scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.evaluations: dict[str, int] = {}
        self.requests: dict[tuple[str, int], int] = {}
        self._gauges: list[tuple[str, str, Sequence[str], Callable[[], GaugeValue]]] = []
        self._status: dict[str, Callable[[], object]] = {}
        self._readiness: dict[str, Callable[[], str | None]] = {}
        # prometheus_client is loaded at the first scrape: a relay nobody scrapes saves its MiBs
        self._registry: CollectorRegistry | None = None

    def count_evaluations(self, environment: str, n: int) -> None:
        self.evaluations[environment] = self.evaluations.get(environment, 0) + n

    def count_request(self, route: str, status: int) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def register_gauge_callback(
        self,
        name: str,
        help: str,
        fn: Callable[[], GaugeValue],
        labels: Sequence[str] = (),
    ) -> None:
        """Add a gauge whose value ``fn`` computes at each scrape.

        ``name`` gets the ``vane_relay_`` prefix. Without ``labels`` ``fn`` returns a number;
        with them it returns ``{(label values...): number}``. For example the event spool::

            metrics.register_gauge_callback("spool_depth", "Events waiting upstream.", spool.depth)
        """
        self._gauges.append((PREFIX + name, help, tuple(labels), fn))

    def register_status(self, name: str, fn: Callable[[], object]) -> None:
        """Add a section to ``/readyz``: ``fn`` returns a JSON-able value at each call."""
        self._status[name] = fn

    def register_readiness(self, name: str, fn: Callable[[], str | None]) -> None:
        """Add a condition of ``/readyz``: ``fn`` returns why the relay is not ready, or None."""
        self._readiness[name] = fn

    def not_ready(self) -> dict[str, str]:
        """Why each registered condition fails (empty: all hold)."""
        found = {name: fn() for name, fn in self._readiness.items()}
        return {name: reason for name, reason in found.items() if reason is not None}

    def status(self) -> dict[str, object]:
        return {name: fn() for name, fn in self._status.items()}

    @property
    def content_type(self) -> str:
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        return CONTENT_TYPE_LATEST

    @property
    def registry(self) -> CollectorRegistry:
        if self._registry is None:
            from prometheus_client import CollectorRegistry
            from prometheus_client.registry import Collector

            metrics = self

            class RelayCollector(Collector):
                def collect(self) -> Iterator[Metric]:
                    return metrics.collect()

            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(RelayCollector())
        return self._registry

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        evaluations = CounterMetricFamily(
            PREFIX + "evaluations",
            "Flag evaluations served to browsers.",
            labels=["environment"],
        )
        for env, n in sorted(self.evaluations.items()):
            evaluations.add_metric([env], n)
        yield evaluations

        requests = CounterMetricFamily(
            PREFIX + "http_requests",
            "HTTP requests answered, by route template and status.",
            labels=["route", "status"],
        )
        for (route, status), n in sorted(self.requests.items()):
            requests.add_metric([route, str(status)], n)
        yield requests

        version = GaugeMetricFamily(
            PREFIX + "snapshot_version",
            "Snapshot version served per environment.",
            labels=["environment"],
        )
        age = GaugeMetricFamily(
            PREFIX + "snapshot_age_seconds",
            "Seconds since the served snapshot version was received (or loaded from disk).",
            labels=["environment"],
        )
        behind = GaugeMetricFamily(
            PREFIX + "versions_behind",
            "Versions the upstream has announced that the relay does not serve (0: current).",
            labels=["environment"],
        )
        now = time.time()
        for env, state in sorted(self.store.states.items()):
            version.add_metric([env], state.version)
            age.add_metric([env], max(0.0, now - state.received_at))
            behind.add_metric([env], self.store.versions_behind(env))
        yield version
        yield age
        yield behind
        yield from self._refusals()

        yield GaugeMetricFamily(
            PREFIX + "upstream_connected",
            "1 while the websocket to the control plane is up.",
            value=1.0 if self.store.connected else 0.0,
        )
        yield GaugeMetricFamily(
            PREFIX + "stale",
            "1 while the relay is cut off from the control plane (serving last known good).",
            value=1.0 if self.store.stale else 0.0,
        )

        for name, help, labels, fn in self._gauges:
            value = fn()
            if isinstance(value, Mapping):
                gauge = GaugeMetricFamily(name, help, labels=list(labels))
                for label_values, number in value.items():
                    gauge.add_metric(list(label_values), float(number))
                yield gauge
            else:
                yield GaugeMetricFamily(name, help, value=float(value))

    def _refusals(self) -> Iterator[Metric]:
        """Versions refused because their snapshot does not compile, per environment."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        refused = CounterMetricFamily(
            PREFIX + "refused_versions",
            "Versions refused because their snapshot does not compile (the last good one is "
            "served meanwhile).",
            labels=["environment"],
        )
        for env, n in sorted(self.store.refused_versions.items()):
            refused.add_metric([env], n)
        yield refused
        refusing = GaugeMetricFamily(
            PREFIX + "refusing",
            "The version refused while it holds the environment back (absent once recovered).",
            labels=["environment"],
        )
        for env, held_back in sorted(self.store.refusing.items()):
            refusing.add_metric([env], held_back.version)
        yield refusing
