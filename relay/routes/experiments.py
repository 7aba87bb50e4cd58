"""Experiments on the relay, assigned exactly as the control plane assigns
(``shared.engine.experiments``):

- ``POST /sdk/v1/experiments`` ``{unit, units, url}`` (public key) → the element and cta experiments
  running on that page, with the unit's variant and what to render. Manual experiments have no
  effect on a page and are not listed.
- ``POST /sdk/v1/experiments/{key}/assign`` ``{unit, url}`` (public key, or a server key bound to
  an environment) → ``{experiment, variant, assigned, reason, content}`` for one experiment, as
  the control plane's assign endpoint answers: the path of manual experiments (a backend's
  server-side test, with a server key). A public key is answered the unit's variant of a manual
  experiment with ``assigned: false`` and nothing recorded: only a backend exposes one.

``unit`` is the user (a page's visitor, or a signed-in user); ``units`` gives the keys of other
context kinds (``{"organization": "acme"}``). An experiment randomizes on its ``unitKind``: on
``user`` by ``unit``, on another kind by that kind's key in ``units``, hashed and exposed as the
qualified unit (``shared.wire.kinds``); a page that gives no key of the experiment's kind is not
in it (not listed; one experiment's assign answers 422 naming ``units.<kind>``).

Layers and holdouts (``shared.engine.experiments.place``, the rule the control plane applies): a
unit outside an experiment's share of its layer is not in it (not listed; assign answers
``assigned: false``). A unit a holdout keeps out is served the control (listed with it; assign
answers the control with ``assigned: false``) and never exposed to the experiment.

Each first assignment is reported upstream as a ``$exposure`` event through the event spool
(fsync'd, forwarded losslessly), at the relay's clock. Its ``eventId`` is
``exp:<experiment>:<unit>``, the same on every relay, so the control plane stores one exposure per
unit however many relays saw it; a bounded in-memory set spares the spool repeats from this relay.
A unit reaching an experiment a running holdout covers is reported to the holdout as well, once:
``$exposure`` with props ``{holdout, group}`` (``holdout`` or ``general``) and ``eventId``
``holdout:<holdout>:<unit>``. Every exposure the relay makes is built by
``shared.wire.events.recorded_exposure`` (ids by ``exposure_event_id``: the unit part hashed when
the id would pass 200 characters), held to the rules every event is, so the control plane never
refuses one (issue #33); one that could not pass is not recorded.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from relay.http import Request, Response, Router, vane_error_body
from relay.routes.admission import Admission, Gate
from relay.routes.events import invalid, malformed
from relay.spool import Spool, SpoolFull
from relay.store import EnvironmentState
from shared.clock import now_ms
from shared.engine import Evaluation
from shared.engine.experiments import Placement, dimension_values, place, url_matches
from shared.wire import events
from shared.wire.body import MalformedBody, decode
from shared.wire.events import convert_problem
from shared.wire.kinds import USER, qualified_unit
from shared.wire.snapshot import ExperimentSnapshot

SEEN_LIMIT = 200_000
MAX_UNIT = 200


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    unit: str
    url: str | None = None
    expose: bool = True  # False: list without recording (the tracker exposes what it shows)
    units: dict[str, str] | None = None  # keys of other context kinds than the user
    # the unit's context (LaunchDarkly's shape): the experiments' dimensions are read from it
    context: dict[str, Any] | None = None
    # when the page showed the variant, and sent this, on its clock (as an event batch's ``ts``
    # and ``sentAt``): the exposure's time, on the relay's clock by the events' rule; none: now
    ts: int | None = None
    sent_at: int | None = msgspec.field(default=None, name="sentAt")

    def unit_of(self, experiment: ExperimentSnapshot) -> tuple[str, str] | None:
        """(the key, the qualified unit) the experiment randomizes on, None if not given."""
        kind = experiment.unit_kind
        key = self.unit if kind == USER else (self.units or {}).get(kind)
        return None if key is None else (key, qualified_unit(kind, key))


_body_decoder = msgspec.json.Decoder(_Body, strict=True)


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
    def __init__(self, spool: Spool, gate: Gate) -> None:
        self.spool = spool
        self.gate = gate
        self.seen = Seen()

    async def _admit(
        self, request: Request, *, backends: bool
    ) -> tuple[Admission, _Body, int] | Response:
        """The request admitted, its body, and when its exposures happened, on this relay's
        clock (``events.on_receivers_clock``: a page's exposure and the purchase after it keep
        the order the page's clock gave them, whichever request the relay handles first)."""
        admitted = await self.gate.admit(request, vane_error_body, backends=backends)
        if not isinstance(admitted, Admission):
            return admitted
        headers = admitted.headers
        try:
            body = decode(admitted.body, _body_decoder)
        except msgspec.ValidationError as exc:
            field, message = convert_problem("", exc)
            return invalid([(field or "body", message)], headers)
        except MalformedBody as exc:
            return malformed(exc, headers)
        # the unit and url go into the exposure spooled upstream: held to the rules every event
        # is (a NUL, a url past 2048 characters), or the forwarded batch, other visitors'
        # events with it, would be refused there
        now = now_ms()
        shift, problems = events.clock_shift(body.sent_at, now)
        at = now if body.ts is None else events.on_receivers_clock(body.ts, shift, now)
        exposure = events.EventIn(
            unit=body.unit, event=events.EXPERIMENT_EXPOSURE, url=body.url, ts=at
        )
        problems += events.check_event(exposure, now)
        for kind, key in (body.units or {}).items():
            other = events.EventIn(unit=key, unit_kind=kind, event=events.EXPERIMENT_EXPOSURE)
            problems += [
                (f"units.{kind}" if field in ("unit", "unitKind") else field, message)
                for field, message in events.check_event(other, now)
            ]
        if problems:
            return invalid(problems, headers)
        return admitted, body, at

    def _exposures(
        self,
        experiment: ExperimentSnapshot,
        unit: tuple[str, str],
        placement: Placement,
        body: _Body,
        admission: Admission,
        at: int,
    ) -> list[dict[str, Any]]:
        """The ``$exposure`` events to spool for a unit's placement here (to the experiment when
        it is assigned, with the dimensions it captures; to the holdouts that cover it), leaving
        out those reported before."""
        key, qualified = unit
        kind = experiment.unit_kind
        found: list[tuple[str, dict[str, Any]]] = [
            (
                events.exposure_event_id("holdout", holdout, qualified),
                {"holdout": holdout, "group": group},
            )
            for holdout, group in placement.holdouts
        ]
        if placement.assigned:
            variant = experiment.variants[placement.variant].key
            props: dict[str, Any] = {"experiment": experiment.key, "variant": variant}
            captured = dimension_values(
                body.context,
                kind,
                experiment.dimensions,
                admission.caller.key.private_attributes,  # never spooled
            )
            if captured:
                props["dimensions"] = captured
            found.append((events.exposure_event_id("exp", experiment.key, qualified), props))
        recorded = []
        for event_id, found_props in found:
            if not self.seen.add(event_id):  # reported before (or could never be)
                continue
            exposure = events.recorded_exposure(
                events.EXPERIMENT_EXPOSURE,
                key,
                None if kind == USER else kind,
                event_id,
                found_props,
                at,
                body.url,
            )
            if exposure is not None:
                recorded.append(exposure)
        return recorded

    async def _record(self, exposures: list[dict[str, Any]]) -> None:
        if exposures:
            try:
                await self.spool.append(exposures)
            except SpoolFull:  # still answered; reported again on the unit's next visit
                self.seen.forget(str(e["eventId"]) for e in exposures)

    async def page(self, request: Request) -> Response:
        """``POST /sdk/v1/experiments``: the element and cta experiments running on a page."""
        admitted = await self._admit(request, backends=False)
        if isinstance(admitted, Response):
            return admitted
        admission, body, at = admitted
        running = []
        exposures = []
        for experiment in on_page(admission.state.snapshot.experiments.values(), body.url):
            unit = body.unit_of(experiment)
            if unit is None:  # randomized on a kind the page gave no key of
                continue
            placement = place(experiment, unit[1])
            if placement.outcome == "outside":  # not in it: the page is left as it is
                continue
            running.append(render(experiment, placement.variant))
            if body.expose:
                exposures += self._exposures(experiment, unit, placement, body, admission, at)
        await self._record(exposures)
        return Response(200, msgspec.json.encode({"experiments": running}), admission.headers)

    async def assign(self, request: Request) -> Response:
        """``POST /sdk/v1/experiments/{key}/assign``: one experiment's variant for a unit, as the
        control plane's assign endpoint answers it (public key, or a bound server key)."""
        admitted = await self._admit(request, backends=True)
        if isinstance(admitted, Response):
            return admitted
        admission, body, at = admitted
        key = request.param or ""
        experiment = admission.state.snapshot.experiments.get(key)
        unit = None if experiment is None else body.unit_of(experiment)
        if experiment is None:  # relays hold running experiments only
            answer = _assignment(key, "control", False, f"no running experiment {key!r}", None)
        elif unit is None:
            kind = experiment.unit_kind
            message = f"experiment {key!r} randomizes on {kind!r}: give its key in units.{kind}"
            return invalid([(f"units.{kind}", message)], admission.headers)
        elif not url_matches(experiment.url, body.url):
            control = next(v for v in experiment.variants if v.key == "control")
            reason = "the experiment does not run on this url"
            answer = _assignment(key, control.key, False, reason, control.content)
        else:
            placement = place(experiment, unit[1])
            variant = experiment.variants[placement.variant]
            if not placement.assigned:
                answer = _assignment(key, variant.key, False, placement.reason, variant.content)
            elif experiment.type == "manual" and not admission.trusted:
                # a backend's experiment: a page learns the unit's variant (so it renders what
                # the backend serves) but never exposes it, or a page could fill it with
                # invented units
                answer = _assignment(key, variant.key, False, PAGE_NEVER_EXPOSES, variant.content)
            else:
                answer = _assignment(key, variant.key, True, "assigned", variant.content)
            # a page never exposes a unit to a manual experiment, nor to the holdouts through one
            exposes = experiment.type != "manual" or admission.trusted
            if placement.outcome != "outside" and exposes:
                await self._record(
                    self._exposures(experiment, unit, placement, body, admission, at)
                )
        return Response(200, msgspec.json.encode(answer), admission.headers)


PAGE_NEVER_EXPOSES = (
    "a manual experiment is exposed by a backend (a server key), never by a page: this is the "
    "unit's variant, and nothing was recorded"
)


def unit_problem(unit: str) -> str | None:
    """What is wrong with a unit a page or backend names (None: nothing)."""
    if not unit.strip() or len(unit) > MAX_UNIT:
        return f"1 to {MAX_UNIT} characters"
    return None


def on_page(experiments: Iterable[ExperimentSnapshot], url: str | None) -> list[ExperimentSnapshot]:
    """The experiments that change a page at ``url``: element and cta experiments running there
    (manual experiments have no effect on a page: they are assigned on request)."""
    return [e for e in experiments if e.type != "manual" and url_matches(e.url, url)]


def variant_index(experiment: ExperimentSnapshot, unit: str) -> int | None:
    """The variant a page shows a qualified ``unit`` (for a user, its key): its own, or the
    control when a holdout keeps it out; None when it is outside the experiment's share of its
    layer (not in it: the page is left as it is)."""
    placement = place(experiment, unit)
    return None if placement.outcome == "outside" else placement.variant


def _assignment(
    key: str, variant: str, assigned: bool, reason: str, content: str | None
) -> dict[str, Any]:
    return {
        "experiment": key,
        "variant": variant,
        "assigned": assigned,
        "reason": reason,
        "content": content,
    }


class FlagExposures:
    """Reports the first evaluation of each (flag, unit, variation) of flags with metrics
    (``track_exposures``) as a ``$flag_exposure`` event, without delaying the response."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.seen = Seen()
        self._tasks: set[asyncio.Task[None]] = set()

    def report(
        self,
        state: EnvironmentState,
        unit: tuple[str, str | None] | None,
        evaluations: Mapping[str, Evaluation],
    ) -> None:
        """``unit``: the key and kind (None: a user) the exposures record."""
        tracked = state.tracked  # kept up to date by each patch (``relay.store``)
        if not tracked or unit is None:
            return
        key_, kind = unit
        qualified = qualified_unit(kind, key_)
        now = now_ms()
        found = []
        for key in tracked.intersection(evaluations):
            variation = evaluations[key].variation
            if variation is None:
                continue
            event_id = events.exposure_event_id("flagexp", key, qualified, str(variation))
            if not self.seen.add(event_id):  # reported before (or could never be)
                continue
            props = {"flag": key, "variation": variation}
            event = events.recorded_exposure(events.FLAG_EXPOSURE, key_, kind, event_id, props, now)
            if event is not None:
                found.append(event)
        if found:
            task = asyncio.get_running_loop().create_task(self._append(found))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _append(self, events: list[dict[str, Any]]) -> None:
        try:
            await self.spool.append(events)
        except (SpoolFull, OSError):  # not recorded: report again on the next evaluation
            self.seen.forget(str(e["eventId"]) for e in events)


def register(router: Router, gate: Gate, spool: Spool) -> None:
    """Experiment assignment for pages and backends, and flag exposures reported to the spool."""
    routes = ExperimentRoutes(spool, gate)
    router.add("POST", "/sdk/v1/experiments", routes.page, cors=True)
    router.add("POST", "/sdk/v1/experiments/{key}/assign", routes.assign, cors=True)
    gate.exposures = FlagExposures(spool)
