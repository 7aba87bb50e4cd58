"""Experiment decisions sent to webhooks once each: a winner appears, the SRM check fails.

Results are computed on every read; what makes a decision an event is that it was not announced
before. ``experiment_decisions`` remembers what was (an INSERT that does nothing on a repeat, so
two readers at once announce it once), and the event goes to the outbox in the same transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from control_plane.db.models import Experiment, ExperimentDecision
from control_plane.domain.common import Scope


async def _first_time(scope: Scope, experiment_id: str, kind: str, value: str) -> bool:
    known = await scope.session.scalar(
        select(ExperimentDecision.kind).where(
            ExperimentDecision.experiment_id == experiment_id,
            ExperimentDecision.kind == kind,
            ExperimentDecision.value == value,
        )
    )
    if known is not None:  # announced before: a read stays a read (no write lock on SQLite)
        return False
    dialect = scope.session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    inserted = await scope.session.scalar(
        insert(ExperimentDecision)
        .values(experiment_id=experiment_id, kind=kind, value=value)
        .on_conflict_do_nothing()
        .returning(ExperimentDecision.kind)
    )
    return inserted is not None


async def announce(scope: Scope, row: Experiment, results: dict[str, Any]) -> None:
    experiment = {"id": row.id, "key": row.key, "name": row.name, "status": row.status}
    winner = results.get("winner")
    if winner and await _first_time(scope, row.id, "winner", str(winner)[:128]):
        scope.announce(
            "experiment.winner",
            {
                "experiment": experiment,
                "winner": winner,
                "reason": results.get("winnerReason"),
                "engine": results.get("engine"),
                "metric": results.get("metric"),
            },
        )
    srm = results.get("srm") or {}
    if srm.get("flagged") and await _first_time(scope, row.id, "srm", "failed"):
        scope.announce(
            "experiment.srm_failed",
            {"experiment": experiment, "srm": srm},
        )
