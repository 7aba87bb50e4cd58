"""The live experiments, layers, holdouts, webhooks and keys (never their secrets) as the document's structs, sorted by key, each read
through its domain's own answer (``experiment_out``, ``holdout_out``), so the document says what
the API says; results never."""

from __future__ import annotations

from sqlalchemy import select

from control_plane.db.models import ApiKey, Environment, Experiment, Holdout, Layer, Webhook
from control_plane.domain.common import Scope
from control_plane.domain.experiments import schemas as ex
from control_plane.domain.experiments.services import experiment_out
from control_plane.domain.layers.services import holdout_out
from control_plane.domain.projectfile import schemas as s


def experiment_doc(out: ex.Experiment) -> s.ExperimentDoc:
    return s.ExperimentDoc(
        key=out.key,
        name=out.name,
        description=out.description,
        type=out.type,  # type: ignore[arg-type]  # stored from ExperimentType
        status=out.status,  # type: ignore[arg-type]  # stored from Status
        url=out.url,
        selector=out.selector,
        goal=out.goal,
        stats_engine=out.stats_engine,  # type: ignore[arg-type]  # stored from Engine
        variants=[
            ex.VariantIn(
                key=v.key, content=v.content, href=v.href, bg=v.bg, color=v.color, weight=v.weight
            )
            for v in out.variants
        ],
        cuped=out.cuped,
        unit_kind=out.unit_kind,
        layer=out.layer,
        traffic=out.traffic,
        dimensions=list(out.dimensions),
        primary=out.primary,
        guardrails=list(out.guardrails),
    )


async def experiments(
    scope: Scope, versions: dict[str, int], exposed: dict[str, int]
) -> list[s.ExperimentDoc]:
    """Each experiment, its version noted in ``versions`` and its units exposed in ``exposed``
    (what can still change depends on them)."""
    rows = await scope.session.scalars(
        select(Experiment).where(Experiment.project_id == scope.project_id).order_by(Experiment.key)
    )
    out = []
    for row in rows:
        answer = await experiment_out(scope, row)
        out.append(experiment_doc(answer))
        versions[f"experiment:{row.key}"] = row.version
        exposed[row.key] = answer.exposed
    return out


async def layers(scope: Scope, versions: dict[str, int]) -> list[s.LayerDoc]:
    rows = await scope.session.scalars(
        select(Layer).where(Layer.project_id == scope.project_id).order_by(Layer.key)
    )
    out = []
    for row in rows:
        out.append(s.LayerDoc(key=row.key, name=row.name, description=row.description))
        versions[f"layer:{row.key}"] = row.version
    return out


async def holdouts(scope: Scope, versions: dict[str, int]) -> list[s.HoldoutDoc]:
    rows = await scope.session.scalars(
        select(Holdout).where(Holdout.project_id == scope.project_id).order_by(Holdout.key)
    )
    out = []
    for row in rows:
        answer = await holdout_out(scope, row)
        out.append(
            s.HoldoutDoc(
                key=answer.key,
                name=answer.name,
                description=answer.description,
                share=answer.share,
                layer=answer.layer,
                metrics=list(answer.metrics),
                status=answer.status,  # type: ignore[arg-type]  # stored from HoldoutStatus
            )
        )
        versions[f"holdout:{row.key}"] = row.version
    return out


async def webhooks(scope: Scope, versions: dict[str, int]) -> list[s.WebhookDoc]:
    """Each webhook by its url, its secret left out; two with the same url are both listed (a
    document naming that url is refused until one is changed or deleted with the API)."""
    rows = await scope.session.scalars(
        select(Webhook)
        .where(Webhook.project_id == scope.project_id)
        .order_by(Webhook.url, Webhook.id)
    )
    out = []
    for row in rows:
        out.append(
            s.WebhookDoc(
                url=row.url,
                events=list(row.events),
                description=row.description,
                enabled=row.enabled,
            )
        )
        versions[f"webhook:{row.url}"] = max(versions.get(f"webhook:{row.url}", 0), row.version)
    return out


async def keys(scope: Scope) -> list[s.KeyDoc]:
    """The project's keys not revoked (personal tokens are their people's, not the project's),
    by kind, environment, name and then issue order; never a token nor its hint."""
    rows = (
        await scope.session.execute(
            select(ApiKey, Environment.key)
            .outerjoin(Environment, Environment.id == ApiKey.environment_id)
            .where(
                ApiKey.project_id == scope.project_id,
                ApiKey.user_id.is_(None),
                ApiKey.revoked_at.is_(None),
            )
        )
    ).all()
    ordered = sorted(rows, key=lambda r: (r[0].kind, r[1] or "", r[0].name, r[0].id))
    return [
        s.KeyDoc(
            kind=row.kind,  # type: ignore[arg-type]  # stored from KindName
            name=row.name,
            environment=env_key,
            role=row.role if row.kind == "management" else None,  # type: ignore[arg-type]
        )
        for row, env_key in ordered
    ]
