"""First exposures: one row per (experiment or flag, unit); the first one recorded wins.

Exposures arrive two ways: the control plane's assign endpoint, and ``$exposure`` /
``$flag_exposure`` events (from relays, through the lossless event path). Both insert with
``ON CONFLICT DO NOTHING``, so repeats — from retries, several relays, or both paths — never move a
unit's first exposure or count it twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import Experiment, Exposure

EXPERIMENT_EXPOSURE = "$exposure"
FLAG_EXPOSURE = "$flag_exposure"


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


async def from_events(
    session: AsyncSession, project_id: str, events: Iterable[Mapping[str, Any]]
) -> int:
    """First exposures carried by ``$exposure`` (props: experiment, variant) and
    ``$flag_exposure`` (props: flag, variation) events; malformed ones are ignored."""
    wanted: list[tuple[str, str, str, str, int]] = []
    for event in events:
        props = event.get("props") or {}
        name, unit, ts = event["event"], event["unit"], int(event["ts"])
        if name == EXPERIMENT_EXPOSURE:
            experiment, variant = props.get("experiment"), props.get("variant")
            if isinstance(experiment, str) and isinstance(variant, str):
                wanted.append(("experiment", experiment, unit, variant, ts))
        elif name == FLAG_EXPOSURE:
            flag, variation = props.get("flag"), props.get("variation")
            if (
                isinstance(flag, str)
                and isinstance(variation, int)
                and not isinstance(variation, bool)
            ):
                wanted.append(("flag", flag, unit, str(variation), ts))
    if not wanted:
        return 0
    keys = {subject for kind, subject, *_ in wanted if kind == "experiment"}
    ids = {
        key: (exp_id, {v["key"] for v in variants})
        for key, exp_id, variants in (
            await session.execute(
                select(Experiment.key, Experiment.id, Experiment.variants).where(
                    Experiment.project_id == project_id, Experiment.key.in_(keys)
                )
            )
        )
    }
    exposures = []
    for kind, subject, unit, arm, ts in wanted:
        if kind == "experiment":
            known = ids.get(subject)
            if known is None or arm not in known[1]:
                continue
            subject = known[0]
        exposures.append(FirstExposure(kind, subject, unit, arm, ts))
    return await record(session, project_id, exposures)
