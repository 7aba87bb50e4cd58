"""A project's rows as several domains find them, by the names the API uses, and the small rules
on them that belong to no one use case.

A base of the domains (beside ``common``, ``problems`` and ``targeting``): every domain finds
its rows by the key (or the id) its routes name, 404 when there is none (``find_by_key``); flags,
schedules and flag metrics all find a flag by its key and a flag's setting in an environment;
experiments and flag metrics both name a metric by its id or its key. Each rule is written here
once, so no domain imports another for it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec
from sqlalchemy import Insert, delete, or_, select
from sqlalchemy.exc import IntegrityError

from control_plane.db.models import (
    Base,
    Environment,
    Exposure,
    Flag,
    FlagRow,
    FlagSetting,
    Metric,
)
from control_plane.db.types import utcnow
from control_plane.domain.common import Scope
from control_plane.errors import ApiError, conflict, not_found

Row = TypeVar("Row", bound=Base)

BY_KEY = ("key",)
BY_ID = ("id",)
BY_ID_OR_KEY = ("id", "key")
"""What a route's name of a resource may be: its key (flags, segments), its id (webhooks), or
either (experiments, layers, holdouts, metrics)."""


async def lookup(
    scope: Scope,
    model: type[Row],
    key: str,
    *,
    by: tuple[str, ...] = BY_KEY,
) -> Row | None:
    """The project's ``model`` row whose column ``by`` (any one of them) is ``key``, or None."""
    # every model a route names has a project_id (not on Base: mypy cannot know it)
    owned = getattr(model, "project_id") == scope.project_id  # noqa: B009
    named = or_(*(getattr(model, column) == key for column in by))
    return await scope.session.scalar(select(model).where(owned, named))


async def find_by_key(
    scope: Scope,
    model: type[Row],
    what: str,
    key: str,
    *,
    by: tuple[str, ...] = BY_KEY,
) -> Row:
    """The project's ``model`` row named ``key`` (``lookup``), or 404 "``what`` 'key' not
    found" (``what`` is the resource without its article: "flag", "webhook")."""
    row = await lookup(scope, model, key, by=by)
    if row is None:
        raise not_found(what, key)
    return row


async def find_flag(scope: Scope, key: str) -> Flag:
    """The project's flag ``key`` (archived or not), or 404."""
    return await find_by_key(scope, Flag, "flag", key)


async def flag_setting(
    scope: Scope, key: str, env_key: str
) -> tuple[Flag, Environment, FlagSetting]:
    """The flag ``key``, the environment ``env_key`` and the flag's setting there, or 404."""
    flag = await find_flag(scope, key)
    env = await scope.environment(env_key)
    setting = await scope.session.get(FlagSetting, (flag.id, env.id))
    if setting is None:  # every flag has a row per environment; this guards a broken database
        raise not_found("flag setting", f"{key}/{env_key}")
    return flag, env, setting


def variation_indexes(flag: FlagRow) -> frozenset[int]:
    """The indexes a serve, a target or a metric may name: the flag's variations'."""
    return frozenset(int(x["idx"]) for x in flag.variations)


def refuse_archived(flag: FlagRow) -> None:
    """An archived flag's settings do not change (by a user, a schedule or an API call)."""
    if flag.archived:
        raise ApiError(
            409, f"flag {flag.key!r} is archived: restore it before changing its settings"
        )


async def touch_all_settings(scope: Scope, flag: Flag) -> None:
    """A new version of each of the flag's settings, to publish (what it serves is unchanged,
    what relays report of it is not: its exposures are tracked once it has metrics)."""
    settings = list(
        await scope.session.scalars(select(FlagSetting).where(FlagSetting.flag_id == flag.id))
    )
    now = utcnow()
    for setting in settings:
        setting.version += 1
        setting.updated_at = now
    await scope.changed((x.environment_id for x in settings), flags=[flag.key])


async def find_metric(scope: Scope, id_or_key: str) -> Metric | None:
    """The project's metric named by its id or its key, or None."""
    return await lookup(scope, Metric, id_or_key, by=BY_ID_OR_KEY)


def private_attributes(scope: Scope) -> tuple[str, ...]:
    """The private attributes of the key a request came with: what the event store and the
    captured dimensions never hold (a relay leaves out those of the keys it admits). Read with
    the key itself, in the request's own transaction (``auth``): no query of its own, which
    every ingested batch paid."""
    return scope.actor.private_attributes


def key_taken(what: str, key: str | None) -> ApiError:
    """409 "``what`` with key … already exists" (``what``: the resource with its article, "a
    flag"; ``key`` None: one of many written together)."""
    if key is None:
        return conflict(f"{what} with one of these keys already exists")
    return conflict(f"{what} with key {key!r} already exists")


async def written_once(scope: Scope, what: str, key: str | None, row: Any | None = None) -> None:
    """Write ``row`` (added here) or the pending changes now; ``key_taken`` when a unique key is
    taken. The database's unique constraint is the one home of the rule (a check before the
    write would race another request's insert); ``key`` None: the pending rows are many."""
    if row is not None:
        scope.session.add(row)
    try:
        await scope.session.flush()
    except IntegrityError as exc:
        raise key_taken(what, key) from exc


async def inserted_once(
    scope: Scope, what: str, statement: Insert, rows: list[dict[str, Any]]
) -> None:
    """Write many new rows in one statement (``insert(Model)`` and each row's columns), as
    ``written_once`` writes one: ``key_taken`` when a unique key is taken."""
    if not rows:
        return
    try:
        await scope.session.execute(statement, rows)
    except IntegrityError as exc:
        raise key_taken(what, None) from exc


async def forget_exposures(
    scope: Scope, kind: Literal["flag", "experiment", "holdout"], subject: str
) -> None:
    """Delete what was recorded of units meeting ``subject`` (a flag's key, an experiment's or
    a holdout's id) as a subject of that kind is deleted for good: results computed from them
    are no longer current (``events_written`` moves the ingest generation on after commit)."""
    await scope.session.execute(
        delete(Exposure).where(
            Exposure.project_id == scope.project_id,
            Exposure.kind == kind,
            Exposure.subject == subject,
        )
    )
    scope.events_written = True


def take_given(row: Any, body: msgspec.Struct, *fields: str) -> None:
    """Set on ``row`` each of ``fields`` (the same attribute names on both) that ``body`` gives:
    a field a PATCH body leaves out (``msgspec.UNSET``) stays as it is. Fields whose stored form
    differs from the body's are written by their service."""
    for name in fields:
        value = getattr(body, name)
        if value is not msgspec.UNSET:
            setattr(row, name, value)
