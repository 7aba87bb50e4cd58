"""First exposures: one row per (experiment or flag, unit); the first one recorded wins.

A base of the domains (beside ``common`` and ``validation``): the event ingest records the
exposures that events claim, the experiments record those their assign endpoint makes, and
neither imports the other.

Exposures arrive two ways: the control plane's assign endpoint, and ``$exposure`` /
``$flag_exposure`` events: those a relay records of its own assignments and evaluations (through
the lossless event path), and those a backend claims with a server or management key, which are
checked against the experiment's status and the unit's deterministic variant. A page never
establishes an exposure (``$`` names are refused from public keys). Both insert with
``ON CONFLICT DO NOTHING``, so repeats — from retries, several relays, or both paths — never move a
unit's first exposure or count it twice.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import Experiment, Exposure, Flag
from shared.engine.experiments import exposure_claim_problem, flag_exposure_claim_problem
from shared.wire.events import EXPERIMENT_EXPOSURE, FLAG_EXPOSURE, EventIn


@dataclass(frozen=True, slots=True)
class FirstExposure:
    kind: str  # experiment | flag
    subject: str  # experiment id | flag key
    unit: str
    arm: str
    exposed_at: int


async def record(session: AsyncSession, project_id: str, exposures: Sequence[FirstExposure]) -> int:
    """Insert first exposures; returns how many were new."""
    if not exposures:
        return 0
    rows = [
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
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = (
        insert(Exposure)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["project_id", "kind", "subject", "unit"])
        .returning(Exposure.unit)
    )
    return len((await session.execute(statement)).all())


@dataclass(slots=True)
class Claims:
    """What exposure events in a batch refer to, loaded once: the experiments (by key) and flags
    they name. ``check`` decides, per event, whether it is an exposure Vane records."""

    experiments: dict[str, Experiment]
    flags: dict[str, Collection[int]]

    @classmethod
    async def load(cls, session: AsyncSession, project_id: str, items: Sequence[EventIn]) -> Claims:
        experiment_keys: set[str] = set()
        flag_keys: set[str] = set()
        for item in items:
            props = item.props or {}
            if item.event == EXPERIMENT_EXPOSURE and isinstance(props.get("experiment"), str):
                experiment_keys.add(props["experiment"])
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
        return cls(experiments, flags)

    def _running(self, key: str) -> tuple[list[str], list[int | None]] | None:
        row = self.experiments.get(key)
        if row is None or row.status != "running":
            return None
        return [v["key"] for v in row.variants], [v.get("weight") for v in row.variants]

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
        if trusted:
            known = self._any_status(str(props.get("experiment")))
            if known is None or props.get("variant") not in known[0]:
                return None, ("props", "no such experiment and variant")
        else:
            problem = exposure_claim_problem(props, item.unit, self._running)
            if problem is not None:
                return None, problem
        row = self.experiments[props["experiment"]]
        return FirstExposure("experiment", row.id, item.unit, props["variant"], ts), None
