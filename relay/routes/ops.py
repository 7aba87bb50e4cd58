"""Operations endpoints, no key: ``/healthz`` (the process answers), ``/readyz`` (a snapshot for
every environment the control plane named), ``/metrics`` (Prometheus text format) and
``/openapi.json`` (the relay's API).

``/readyz`` also says what each fault looks like: the upstream connected to (or tried last),
whether it is stale, per environment the version served, its age, how many versions behind
upstream's announcements it is and whether a version it refused (one that does not compile)
holds it back (then not ready, with the reason), and the sections other parts register (the event
spool's depth and write errors, the forwarder's failures, open event streams). ``notReady``
(present only then) names each registered condition that fails, with why (a stalled forwarder);
any makes the answer 503."""

from __future__ import annotations

import time

from relay.http import CONTENT_JSON, Request, Response, Router, json_encode
from relay.openapi import document
from relay.prometheus import RelayMetrics
from relay.store import Store

_HEALTHY = json_encode({"status": "ok"})


def register(router: Router, store: Store, metrics: RelayMetrics) -> None:
    async def healthz(request: Request) -> Response:
        return Response(200, _HEALTHY, [CONTENT_JSON, (b"cache-control", b"no-store")])

    def served(env: str, now: float) -> dict[str, object]:
        state = store.get(env)
        if state is None:
            return {"version": None}
        return {
            "version": state.version,
            "ageSeconds": round(now - state.received_at, 3),
            "versionsBehind": store.versions_behind(env),
        }

    def refusals(env: str) -> dict[str, object]:
        """Whether a refused version holds the environment back (not ready), and why."""
        refused = store.refusing.get(env)
        return {
            "ready": refused is None,
            "refused": (
                None if refused is None else {"version": refused.version, "reason": refused.reason}
            ),
            "refusedVersions": store.refused_versions.get(env, 0),
        }

    async def readyz(request: Request) -> Response:
        now = time.time()
        not_ready = metrics.not_ready()  # the conditions other parts register (the forwarder)
        ready = store.ready and not not_ready
        body = {
            "ready": ready,
            **({"notReady": not_ready} if not_ready else {}),
            "stale": store.stale,
            "connected": store.connected,
            "upstream": store.upstream,
            "environments": {
                env: {**served(env, now), **refusals(env)}
                for env in sorted({*store.states, *store.refusing})
            },
            **metrics.status(),
        }
        headers = [CONTENT_JSON, (b"cache-control", b"no-store")]
        return Response(200 if ready else 503, json_encode(body), headers)

    async def scrape(request: Request) -> Response:
        body = metrics.render()
        return Response(200, body, [(b"content-type", metrics.content_type.encode())])

    async def openapi(request: Request) -> Response:
        return Response(200, document(), [CONTENT_JSON, (b"cache-control", b"max-age=3600")])

    router.add("GET", "/openapi.json", openapi)
    router.add("GET", "/healthz", healthz)
    router.add("GET", "/readyz", readyz)
    router.add("GET", "/metrics", scrape)
