"""First exposures: one row per (experiment, flag or holdout, unit); the first one recorded wins.

A base of the domains (beside ``common`` and ``problems``): the event ingest records the
exposures that events claim, the experiments record those their assign endpoint makes, and
neither imports the other.

Exposures arrive two ways: the control plane's assign endpoint, and ``$exposure`` /
``$flag_exposure`` events: those a relay records of its own assignments and evaluations (through
the lossless event path), and those a backend claims with a server or management key, which are
checked against the experiment's status and the unit's deterministic variant. A page never
establishes an exposure (``$`` names are refused from public keys). Both insert with
``ON CONFLICT DO NOTHING``, so repeats — from retries, several relays, or both paths — never move a
unit's first exposure or count it twice.

An exposure event counts from its ``ts``, within its experiment's (or holdout's) run
(:func:`within_run`): one stamped before the start counts from the start (a clock behind, or a
backend stamping when it decided rather than when it served), and one stamped after the stop is
not an exposure (a relay's spool may deliver late, so the stop is judged by ``ts``, never by the
arrival). Recorded here, the one time the results, the time series and the pace all read.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import Experiment, Exposure, ExposureAttribute, Flag, Holdout
from control_plane.domain import allocation
from shared.engine.experiments import (
    GENERAL,
    HOLDOUT,
    captured_dimensions,
    exposure_claim_problem,
    flag_exposure_claim_problem,
)
from shared.wire.events import EXPERIMENT_EXPOSURE, FLAG_EXPOSURE, EventIn
from shared.wire.snapshot import ExperimentSnapshot, HoldoutSnapshot


@dataclass(frozen=True, slots=True)
class FirstExposure:
    kind: str  # experiment | flag | holdout
    subject: str  # experiment id | flag key | holdout id
    unit: str
    arm: str
    exposed_at: int
    # the experiment's dimensions captured with it: (name, value) pairs
    attributes: tuple[tuple[str, str], ...] = ()


_ATTRIBUTE_ROWS = 2_000


async def record(session: AsyncSession, project_id: str, exposures: Sequence[FirstExposure]) -> int:
    """Insert first exposures, and the dimensions captured with them (each attribute's first
    value wins); returns how many exposures were new."""
    if not exposures:
        return 0
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    attributes = {
        (e.kind, e.subject, name, e.unit): value for e in exposures for name, value in e.attributes
    }
    exposure_rows = [
        {
            "project_id": project_id,
            "kind": e.kind,
            "subject": e.subject,
            "unit": e.unit,
            "arm": e.arm,
            "exposed_at": e.exposed_at,
        }
        for e in exposures
    ]
    rows = [
        {
            "project_id": project_id,
            "kind": kind,
            "subject": subject,
            "name": name,
            "unit": unit,
            "value": value,
        }
        for (kind, subject, name, unit), value in attributes.items()
    ]
    for start in range(0, len(rows), _ATTRIBUTE_ROWS):  # within SQLite's bound variables
        await session.execute(
            insert(ExposureAttribute)
            .values(rows[start : start + _ATTRIBUTE_ROWS])
            .on_conflict_do_nothing(
                index_elements=["project_id", "kind", "subject", "name", "unit"]
            )
        )
    statement = (
        insert(Exposure)
        .values(exposure_rows)
        .on_conflict_do_nothing(index_elements=["project_id", "kind", "subject", "unit"])
        .returning(Exposure.unit)
    )
    return len((await session.execute(statement)).all())


def within_run(
    ts: int, started: datetime | None, stopped: datetime | None
) -> tuple[int | None, str | None]:
    """The time an exposure stamped ``ts`` (epoch ms) counts from in a run from ``started`` to
    ``stopped`` (None: still running): ``ts``, or the start when it is earlier; or None and why
    when it is stamped after the stop, or the run never started."""
    if started is None:
        return None, "it has never started"
    if stopped is not None and ts > _ms(stopped):
        return None, f"stamped after it stopped at {stopped.isoformat()}"
    return max(ts, _ms(started)), None


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


@dataclass(slots=True)
class Claims:
    """What exposure events in a batch refer to, loaded once: the experiments (by key, with the
    snapshots of the running ones), holdouts and flags they name. ``check`` decides, per event,
    whether it is an exposure Vane records.

    An exposure to a holdout is an ``$exposure`` whose props name ``holdout`` and ``group``
    (holdout or general) instead of an experiment and variant."""

    experiments: dict[str, Experiment]
    flags: dict[str, Collection[int]]
    running: dict[str, ExperimentSnapshot] = field(default_factory=dict)
    holdouts: dict[str, Holdout] = field(default_factory=dict)

    @classmethod
    async def load(cls, session: AsyncSession, project_id: str, items: Sequence[EventIn]) -> Claims:
        experiment_keys: set[str] = set()
        holdout_keys: set[str] = set()
        flag_keys: set[str] = set()
        for item in items:
            props = item.props or {}
            if item.event == EXPERIMENT_EXPOSURE and isinstance(props.get("experiment"), str):
                experiment_keys.add(props["experiment"])
            elif item.event == EXPERIMENT_EXPOSURE and isinstance(props.get("holdout"), str):
                holdout_keys.add(props["holdout"])
            elif item.event == FLAG_EXPOSURE and isinstance(props.get("flag"), str):
                flag_keys.add(props["flag"])
        experiments: dict[str, Experiment] = {}
        flags: dict[str, Collection[int]] = {}
        if experiment_keys:
            rows = await session.scalars(
                select(Experiment).where(
                    Experiment.project_id == project_id, Experiment.key.in_(experiment_keys)
                )
            )
            experiments = {row.key: row for row in rows}
        if flag_keys:
            found = await session.execute(
                select(Flag.key, Flag.variations).where(
                    Flag.project_id == project_id,
                    Flag.key.in_(flag_keys),
                    Flag.archived.is_(False),
                )
            )
            flags = {key: {int(v["idx"]) for v in variations} for key, variations in found}
        running = await allocation.snapshots(
            session, project_id, [row for row in experiments.values() if row.status == "running"]
        )
        holdouts: dict[str, Holdout] = {}
        if holdout_keys:
            found_holdouts = await session.scalars(
                select(Holdout).where(
                    Holdout.project_id == project_id, Holdout.key.in_(holdout_keys)
                )
            )
            holdouts = {row.key: row for row in found_holdouts}
        return cls(experiments, flags, running, holdouts)

    def _running_holdout(self, key: str) -> HoldoutSnapshot | None:
        row = self.holdouts.get(key)
        if row is None or row.status != "running":
            return None
        return HoldoutSnapshot(key=row.key, share=row.share)

    def _any_status(self, key: str) -> tuple[list[str], list[int | None]] | None:
        row = self.experiments.get(key)
        if row is None:
            return None
        keys = [v["key"] for v in row.variants]
        return keys, [None] * len(keys)

    def check(
        self, item: EventIn, now: int, *, trusted: bool
    ) -> tuple[FirstExposure | None, tuple[str, str] | None]:
        """The first exposure ``item`` establishes, or the problem with it.

        ``trusted``: a relay's own record of its assignment or evaluation. Its experiment may have
        stopped since, so only the experiment and variant are checked to exist; a backend's claim
        (``trusted`` false) must name a running experiment and the unit's deterministic variant.
        """
        ts = now if item.ts is None else item.ts
        props = item.props or {}
        if item.event == FLAG_EXPOSURE:
            problem = flag_exposure_claim_problem(props, self.flags.get)
            if problem is not None:
                return None, problem
            return FirstExposure(
                "flag", props["flag"], item.unit, str(props["variation"]), ts
            ), None
        if "holdout" in props and "experiment" not in props:
            return self._holdout(item, props, ts, trusted=trusted)
        if trusted:
            known = self._any_status(str(props.get("experiment")))
            if known is None or props.get("variant") not in known[0]:
                return None, ("props", "no such experiment and variant")
        else:
            problem = exposure_claim_problem(
                props, item.unit, self.running.get, self._running_holdout
            )
            if problem is not None:
                return None, problem
        row = self.experiments[props["experiment"]]
        at, outside = within_run(ts, row.started_at, row.stopped_at)
        if at is None:
            return None, ("ts", f"not an exposure to experiment {row.key!r}: {outside}")
        captured = captured_dimensions(props.get("dimensions"), row.dimensions or ())
        return FirstExposure(
            "experiment", row.id, item.unit, props["variant"], at, tuple(captured.items())
        ), None

    def _holdout(
        self, item: EventIn, props: dict[str, Any], ts: int, *, trusted: bool
    ) -> tuple[FirstExposure | None, tuple[str, str] | None]:
        """A relay's record of a holdout exposure (its holdout may have stopped since: the
        holdout and group must exist), or a backend's claim (checked like an experiment's)."""
        if trusted:
            if props.get("holdout") not in self.holdouts or props.get("group") not in (
                HOLDOUT,
                GENERAL,
            ):
                return None, ("props", "no such holdout and group")
        else:
            problem = exposure_claim_problem(
                props, item.unit, self.running.get, self._running_holdout
            )
            if problem is not None:
                return None, problem
        row = self.holdouts[props["holdout"]]
        at, outside = within_run(ts, row.started_at, row.stopped_at)
        if at is None:
            return None, ("ts", f"not an exposure to holdout {row.key!r}: {outside}")
        return FirstExposure("holdout", row.id, item.unit, str(props["group"]), at), None
