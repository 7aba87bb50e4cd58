"""Put exposures and events straight into a test database, as older data or other writers
may have left them (values beyond what ingest accepts today included)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, create_engine, insert, select, update

from control_plane.db.engine import sync_url
from control_plane.db.generation import advance_statement
from control_plane.db.models import Event, Experiment, Exposure, ExposureAttribute, Project
from control_plane.db.types import utcnow
from tests.conftest import Api

DAY_MS = 24 * 3600 * 1000
BASE_MS = 1_760_000_000_000  # 2025-10-09, a Thursday
_ids = itertools.count()


def create_experiment(api: Api, body: Mapping[str, Any]) -> dict[str, Any]:
    response = api.post("/experiments", dict(body))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def metric(api: Api, body: Mapping[str, Any]) -> dict[str, Any]:
    response = api.post("/metrics", dict(body))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def seed(
    api: Api,
    experiment_key: str,
    arms: Mapping[str, Sequence[Sequence[int | None]]],
    *,
    event: str,
    exposed_at: int = BASE_MS,
    unit_prefix: str = "u",
    event_ts: Iterable[int] | None = None,
) -> None:
    """Per arm, one list per unit of the values of its ``event`` events (``None``: no value),
    each unit exposed at ``exposed_at`` and its events one second later (or at ``event_ts``)."""
    engine = create_engine(sync_url(api.database_url))
    times = iter(event_ts) if event_ts is not None else None
    try:
        with engine.begin() as connection:
            project = connection.scalar(select(Project.id).where(Project.key == "default"))
            subject = connection.scalar(
                select(Experiment.id).where(Experiment.key == experiment_key)
            )
            exposures: list[dict[str, Any]] = []
            events: list[dict[str, Any]] = []
            for arm, units in arms.items():
                for values in units:
                    unit = f"{unit_prefix}{next(_ids)}"
                    exposures.append(
                        {
                            "project_id": project,
                            "kind": "experiment",
                            "subject": subject,
                            "unit": unit,
                            "arm": arm,
                            "exposed_at": exposed_at,
                        }
                    )
                    for value in values:
                        ts = next(times) if times is not None else exposed_at + 1000
                        events.append(
                            {
                                "project_id": project,
                                "event_id": f"seed-{next(_ids)}",
                                "unit": unit,
                                "event": event,
                                "value": value,
                                "ts": ts,
                                "received_at": ts,
                                "source": "server",
                            }
                        )
            if exposures:
                connection.execute(insert(Exposure), exposures)
            if events:
                connection.execute(insert(Event), events)
        advance(engine)
    finally:
        engine.dispose()


def backdate(
    api: Api, experiment_key: str, *, started: timedelta, stopped: timedelta | None = None
) -> tuple[datetime, datetime | None]:
    """Move an experiment's start ``started`` into the past (and its stop ``stopped`` ago, if
    given), as an experiment started days ago has them; returns the (start, stop) written."""
    now = utcnow()
    values: dict[str, Any] = {"started_at": now - started}
    if stopped is not None:
        values["stopped_at"] = now - stopped
    engine = create_engine(sync_url(api.database_url))
    try:
        with engine.begin() as connection:
            connection.execute(
                update(Experiment).where(Experiment.key == experiment_key).values(**values)
            )
    finally:
        engine.dispose()
    return values["started_at"], values.get("stopped_at")


def advance(engine: Engine) -> None:
    """What every writer of events does after it commits: move the ingest generation on, so
    that results cached before the write are computed afresh (control_plane.db.generation)."""
    with engine.begin() as connection:
        connection.execute(advance_statement(engine.dialect.name))
    if engine.dialect.name == "postgresql":
        # A running server's autovacuum analyzes a table within a minute of a bulk write; a test
        # reads results at once. Without statistics PostgreSQL multiplies default selectivities
        # of the key's columns to one row, and joins two tables by a nested loop that compares
        # every pair (3,000 units: 2 s a query, a minute a test); with them, as in service, the
        # plans are the ones the benchmarks time.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("ANALYZE exposures, events, exposure_attributes")


def units(count: int, *values: int | None) -> list[list[int | None]]:
    """``count`` units with the same events."""
    return [list(values) for _ in range(count)]


def seed_rows(
    api: Api,
    experiment_key: str,
    exposures: Sequence[tuple[str, str, int]],
    events: Sequence[tuple[str, str, int | None, int]],
) -> None:
    """Exposures ``(unit, arm, exposed_at)`` and events ``(unit, event, value, ts)`` as given."""
    engine = create_engine(sync_url(api.database_url))
    try:
        with engine.begin() as connection:
            project = connection.scalar(select(Project.id).where(Project.key == "default"))
            subject = connection.scalar(
                select(Experiment.id).where(Experiment.key == experiment_key)
            )
            if exposures:
                connection.execute(
                    insert(Exposure),
                    [
                        {
                            "project_id": project,
                            "kind": "experiment",
                            "subject": subject,
                            "unit": unit,
                            "arm": arm,
                            "exposed_at": at,
                        }
                        for unit, arm, at in exposures
                    ],
                )
            if events:
                connection.execute(
                    insert(Event),
                    [
                        {
                            "project_id": project,
                            "event_id": f"rows-{next(_ids)}",
                            "unit": unit,
                            "event": name,
                            "value": value,
                            "ts": ts,
                            "received_at": ts,
                            "source": "server",
                        }
                        for unit, name, value, ts in events
                    ],
                )
        advance(engine)
    finally:
        engine.dispose()


def seed_attributes(api: Api, experiment_key: str, name: str, values: Mapping[str, str]) -> None:
    """A captured attribute ``name`` per unit, as a first exposure writes it."""
    engine = create_engine(sync_url(api.database_url))
    try:
        with engine.begin() as connection:
            project = connection.scalar(select(Project.id).where(Project.key == "default"))
            subject = connection.scalar(
                select(Experiment.id).where(Experiment.key == experiment_key)
            )
            connection.execute(
                insert(ExposureAttribute),
                [
                    {
                        "project_id": project,
                        "kind": "experiment",
                        "subject": subject,
                        "name": name,
                        "unit": unit,
                        "value": value,
                    }
                    for unit, value in values.items()
                ],
            )
        advance(engine)
    finally:
        engine.dispose()


def seed_props(api: Api, events: Sequence[tuple[str, str, dict[str, Any], int]]) -> None:
    """Events ``(unit, event, props, ts)`` without a value."""
    engine = create_engine(sync_url(api.database_url))
    try:
        with engine.begin() as connection:
            project = connection.scalar(select(Project.id).where(Project.key == "default"))
            connection.execute(
                insert(Event),
                [
                    {
                        "project_id": project,
                        "event_id": f"props-{next(_ids)}",
                        "unit": unit,
                        "event": name,
                        "props": props,
                        "ts": ts,
                        "received_at": ts,
                        "source": "server",
                    }
                    for unit, name, props, ts in events
                ],
            )
        advance(engine)
    finally:
        engine.dispose()
