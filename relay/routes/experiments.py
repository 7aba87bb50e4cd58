"""``POST /sdk/v1/experiments`` ``{unit, url}`` → the running experiments on that page, with the
unit's variant and what to render — assigned exactly as the control plane assigns
(``shared.engine.experiments``).

Each first assignment is reported upstream as a ``$exposure`` event through the event spool
(fsync'd, forwarded losslessly). Its ``eventId`` is ``exp:<experiment>:<unit>``, the same on every
relay, so the control plane stores one exposure per unit however many relays saw it; a bounded
in-memory set spares the spool repeats from this relay.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from relay.http import Request, Response, Router, vane_error, vane_error_body
from relay.routes import Admission, Browser
from relay.spool import Spool, SpoolFull
from relay.store import EnvironmentState
from shared.engine import Evaluation
from shared.engine.experiments import choose_variant, thresholds, url_matches
from shared.wire.snapshot import ExperimentSnapshot

SEEN_LIMIT = 200_000


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    unit: str
    url: str | None = None


class Seen:
    """A bounded set of recently reported exposures (oldest forgotten first)."""

    def __init__(self, limit: int = SEEN_LIMIT) -> None:
        self.limit = limit
        self._items: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> bool:
        """True if ``key`` is new."""
        if key in self._items:
            self._items.move_to_end(key)
            return False
        self._items[key] = None
        if len(self._items) > self.limit:
            self._items.popitem(last=False)
        return True

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._items.pop(key, None)


def render(experiment: ExperimentSnapshot, variant_index: int) -> dict[str, Any]:
    variant = experiment.variants[variant_index]
    out: dict[str, Any] = {
        "key": experiment.key,
        "type": experiment.type,
        "variant": variant.key,
        "goal": experiment.goal,
        "content": variant.content,
    }
    if experiment.selector is not None:
        out["selector"] = experiment.selector
    for name in ("href", "bg", "color"):
        value = getattr(variant, name)
        if value is not None:
            out[name] = value
    return out


class ExperimentRoutes:
    def __init__(self, spool: Spool, browser: Browser) -> None:
        self.spool = spool
        self.browser = browser
        self.seen = Seen()

    async def assign(self, request: Request) -> Response:
        admitted = await self.browser.admit(request, vane_error_body)
        if not isinstance(admitted, Admission):
            return admitted
        headers = admitted.headers
        try:
            body = msgspec.json.decode(admitted.body, type=_Body, strict=True)
        except msgspec.ValidationError as exc:
            return Response(422, vane_error(422, str(exc), details=(("body", str(exc)),)), headers)
        except msgspec.DecodeError as exc:
            return Response(
                400,
                vane_error(400, f"request body is not valid JSON: {exc}", code="malformed_json"),
                headers,
            )
        if not body.unit.strip() or len(body.unit) > 200:
            return Response(
                422,
                vane_error(
                    422, "unit: 1 to 200 characters", details=(("unit", "1 to 200 characters"),)
                ),
                headers,
            )
        now = time.time_ns() // 1_000_000
        running = []
        exposures = []
        for experiment in admitted.state.snapshot.experiments.values():
            if not url_matches(experiment.url, body.url):
                continue
            bounds = thresholds([v.weight for v in experiment.variants])
            index = choose_variant(experiment.key, body.unit, bounds)
            running.append(render(experiment, index))
            event_id = f"exp:{experiment.key}:{body.unit}"
            if self.seen.add(event_id):
                exposures.append(
                    {
                        "unit": body.unit,
                        "event": "$exposure",
                        "eventId": event_id,
                        "ts": now,
                        "source": "browser",
                        "props": {
                            "experiment": experiment.key,
                            "variant": experiment.variants[index].key,
                        },
                        **({"url": body.url} if body.url else {}),
                    }
                )
        if exposures:
            try:
                await self.spool.append(exposures)
            except SpoolFull:  # still answered; reported again on the unit's next visit
                self.seen.forget(str(e["eventId"]) for e in exposures)
        return Response(200, msgspec.json.encode({"experiments": running}), headers)


class FlagExposures:
    """Reports the first evaluation of each (flag, unit, variation) of flags with metrics
    (``track_exposures``) as a ``$flag_exposure`` event, without delaying the response."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.seen = Seen()
        self._tracked: tuple[EnvironmentState | None, frozenset[str]] = (None, frozenset())
        self._tasks: set[asyncio.Task[None]] = set()

    def tracked(self, state: EnvironmentState) -> frozenset[str]:
        cached_state, keys = self._tracked
        if cached_state is not state:
            keys = frozenset(k for k, f in state.snapshot.flags.items() if f.track_exposures)
            self._tracked = (state, keys)
        return keys

    def report(
        self, state: EnvironmentState, unit: str | None, evaluations: Mapping[str, Evaluation]
    ) -> None:
        tracked = self.tracked(state)
        if not tracked or unit is None:
            return
        now = time.time_ns() // 1_000_000
        events = []
        for key in tracked.intersection(evaluations):
            variation = evaluations[key].variation
            if variation is None:
                continue
            event_id = f"flagexp:{key}:{unit}:{variation}"
            if self.seen.add(event_id):
                events.append(
                    {
                        "unit": unit,
                        "event": "$flag_exposure",
                        "eventId": event_id,
                        "ts": now,
                        "source": "browser",
                        "props": {"flag": key, "variation": variation},
                    }
                )
        if events:
            task = asyncio.get_running_loop().create_task(self._append(events))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _append(self, events: list[dict[str, Any]]) -> None:
        try:
            await self.spool.append(events)
        except (SpoolFull, OSError):  # not recorded: report again on the next evaluation
            self.seen.forget(str(e["eventId"]) for e in events)


def registrar(spool: Spool) -> Any:
    """The ``extra_routes`` hook of ``relay.http.build_http_app``: experiments and exposures."""

    def register(router: Router, browser: Browser) -> None:
        router.add(
            "POST", "/sdk/v1/experiments", ExperimentRoutes(spool, browser).assign, cors=True
        )
        browser.exposures = FlagExposures(spool)

    return register
