"""The live project as a document, with the versions read: the one reader of export and plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi
from sqlalchemy import Row, select

from control_plane.db.models import Environment, Flag, FlagSetting, Metric, Segment
from control_plane.db.types import as_json_text
from control_plane.domain.common import Scope, to_json
from control_plane.domain.flags.reads import rules_out
from control_plane.domain.flags.schemas import (
    ClauseIn,
    PrerequisiteIn,
    RuleIn,
    ServeIn,
    TargetIn,
    VariationIn,
)
from control_plane.domain.metrics.services import metric_out
from control_plane.domain.projectfile import readers
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.segments.schemas import ContextKeysIn, SegmentRuleIn
from control_plane.domain.segments.services import segment_out
from control_plane.domain.targeting.schemas import serve_out

T = TypeVar("T")


@dataclass(slots=True)
class Live:
    """What is live: the project as a document, its versions, and which environment's flags
    use which segments (a segment's change there needs approval where the environment does)."""

    doc: s.ProjectDoc
    versions: dict[str, int]
    segment_users: dict[str, set[str]]  # segment key -> environment keys of flags using it
    exposed: dict[str, int] = field(default_factory=dict)  # experiment key -> units exposed


def as_input(value: Any, kind: type[T]) -> T:
    """An API answer in the shape of the matching input struct (same JSON, camelCase)."""
    return msgspec.convert(to_json(value), kind)


def plain(value: Any) -> Any:
    """Structs as plain JSON values, an optional field that is none left out; values (a
    variation's, a clause's) kept exactly, nulls inside them too."""
    if isinstance(value, msgspec.Struct):
        return _struct(type(value))(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return msgspec.to_builtins(value)


Convert = Callable[[Any], Any]
SCALARS = (mi.StrType, mi.IntType, mi.FloatType, mi.BoolType, mi.NoneType, mi.LiteralType)
BUILTIN = frozenset((str, int, float, bool, type(None)))


def _value(value: Any) -> Any:
    """A JSON scalar as it is (what ``msgspec.to_builtins`` answers for it), anything else
    through ``plain``."""
    return value if type(value) in BUILTIN else plain(value)


def _scalar(kind: mi.Type) -> bool:
    if isinstance(kind, mi.UnionType):
        return all(_scalar(t) for t in kind.types)
    return isinstance(kind, (*SCALARS, mi.AnyType))


def _converter(kind: mi.Type) -> Convert:
    """``plain`` of a field of type ``kind``, without asking at every value of a scalar or a
    list what it is (a plan turns each of a document's many flags into plain values twice)."""
    if _scalar(kind):
        return _value
    if isinstance(kind, mi.ListType) and _scalar(kind.item_type):
        return lambda value: [_value(v) for v in value] if type(value) is list else plain(value)
    return plain


@cache
def _struct(kind: type[msgspec.Struct]) -> Convert:
    """``plain`` of a struct of type ``kind``: its fields (name, JSON name, whether none is its
    default, how its value converts) read once per type."""
    info = mi.type_info(kind)
    assert isinstance(info, mi.StructType)
    fields = tuple(
        (f.name, f.encode_name, f.default is None, _converter(f.type)) for f in info.fields
    )

    def convert(value: Any) -> dict[str, Any]:
        out = {}
        for name, encoded, optional, field_value in fields:
            got = getattr(value, name)
            if not (optional and got is None):
                out[encoded] = field_value(got)
        return out

    return convert


def document_builtins(doc: s.ProjectDoc) -> dict[str, Any]:
    """The document as plain JSON values, absent fields left out: what is written to a file."""
    out: dict[str, Any] = plain(doc)
    return out


def _environment(env: Environment) -> s.EnvironmentDoc:
    return s.EnvironmentDoc(
        key=env.key,
        name=env.name,
        critical=env.critical,
        required_approvals=env.required_approvals,
    )


SETTING_COLUMNS = (
    FlagSetting.environment_id,
    FlagSetting.version,
    FlagSetting.enabled,
    FlagSetting.off_variation,
    as_json_text(FlagSetting.fallthrough),
    as_json_text(FlagSetting.targets),
    as_json_text(FlagSetting.prerequisites),
    as_json_text(FlagSetting.rules),
)
FLAG_COLUMNS = (
    Flag.key,
    Flag.name,
    Flag.description,
    Flag.type,
    as_json_text(Flag.variations),
    Flag.temporary,
    Flag.bucket_by,
    as_json_text(Flag.tags),
    Flag.client_side,
    Flag.archived,
    Flag.version,
)
"""What the document says of a flag and its settings, read as columns (many thousand flags: no
entity is built for a row that is only read, and JSON is decoded by msgspec)."""


def _rules(setting: Row[Any]) -> list[RuleIn]:
    return [
        RuleIn(
            id=rule.id,
            description=rule.description,
            clauses=[as_input(c, ClauseIn) for c in rule.clauses],
            serve=as_input(rule.serve, ServeIn),
        )
        for rule in rules_out(setting.rules)
    ]


def setting_doc(setting: Row[Any]) -> s.FlagEnvironmentDoc:
    return s.FlagEnvironmentDoc(
        enabled=setting.enabled,
        off_variation=setting.off_variation,
        fallthrough=as_input(serve_out(setting.fallthrough), ServeIn),
        targets=[msgspec.convert(t, TargetIn) for t in setting.targets],
        prerequisites=[msgspec.convert(p, PrerequisiteIn) for p in setting.prerequisites],
        rules=_rules(setting),
    )


def _flag(flag: Row[Any], settings: dict[str, s.FlagEnvironmentDoc]) -> s.FlagDoc:
    return s.FlagDoc(
        key=flag.key,
        name=flag.name,
        description=flag.description,
        type=flag.type,  # a column: stored from FlagType
        variations=[
            VariationIn(idx=x["idx"], value=x["value"], name=x.get("name", ""))
            for x in sorted(flag.variations, key=lambda x: int(x["idx"]))
        ],
        temporary=flag.temporary,
        bucket_by=flag.bucket_by,
        tags=list(flag.tags),
        client_side=flag.client_side,
        archived=flag.archived,
        environments=dict(sorted(settings.items())),
    )


def _segment(row: Segment) -> s.SegmentDoc:
    out = segment_out(row)
    return s.SegmentDoc(
        key=row.key,
        name=row.name,
        description=row.description,
        included=list(row.included),
        excluded=list(row.excluded),
        included_contexts=[as_input(c, ContextKeysIn) for c in out.included_contexts],
        excluded_contexts=[as_input(c, ContextKeysIn) for c in out.excluded_contexts],
        rules=[as_input(r, SegmentRuleIn) for r in out.rules],
    )


def _segments_used(setting: Row[Any]) -> set[str]:
    return {
        str(key)
        for rule in setting.rules
        for clause in rule.get("clauses", [])
        if clause.get("op") == "segmentMatch"
        for key in clause.get("values", [])
    }


async def _settings(scope: Scope, live: Live, env_keys: dict[str, str]) -> dict[str, Any]:
    by_flag: dict[str, dict[str, s.FlagEnvironmentDoc]] = {}
    rows = await scope.session.execute(
        select(Flag.key.label("flag_key"), *SETTING_COLUMNS)
        .join(Flag, Flag.id == FlagSetting.flag_id)
        .where(Flag.project_id == scope.project_id)
    )
    for setting in rows:
        flag_key = setting.flag_key
        env_key = env_keys[setting.environment_id]
        by_flag.setdefault(flag_key, {})[env_key] = setting_doc(setting)
        live.versions[f"setting:{flag_key}/{env_key}"] = setting.version
        for segment in _segments_used(setting):
            live.segment_users.setdefault(segment, set()).add(env_key)
    return by_flag


METRIC_ONLY = ("id", "version", "createdAt", "updatedAt")


def _metric(row: Metric) -> s.MetricDoc:
    out = {k: v for k, v in to_json(metric_out(row)).items() if k not in METRIC_ONLY}
    return msgspec.convert(out, s.MetricDoc)


async def _metrics(scope: Scope, live: Live) -> None:
    rows = await scope.session.scalars(
        select(Metric).where(Metric.project_id == scope.project_id).order_by(Metric.key)
    )
    for row in rows:
        live.doc.metrics.append(_metric(row))
        live.versions[f"metric:{row.key}"] = row.version


async def read_live(scope: Scope) -> Live:
    """The project as it is now, sorted by key: environments, segments, flags, metrics,
    layers, holdouts, experiments; webhooks by url; keys by kind, environment and name."""
    live = Live(s.ProjectDoc(), {}, {})
    envs = sorted(await scope.environments(), key=lambda e: e.key)
    live.doc.environments = [_environment(e) for e in envs]
    live.versions.update({f"environment:{e.key}": e.version for e in envs})
    settings = await _settings(scope, live, {e.id: e.key for e in envs})
    segments = await scope.session.scalars(
        select(Segment).where(Segment.project_id == scope.project_id).order_by(Segment.key)
    )
    for row in segments:
        live.doc.segments.append(_segment(row))
        live.versions[f"segment:{row.key}"] = row.version
    flags = await scope.session.execute(
        select(*FLAG_COLUMNS).where(Flag.project_id == scope.project_id).order_by(Flag.key)
    )
    for flag in flags:
        live.doc.flags.append(_flag(flag, settings.get(flag.key, {})))
        live.versions[f"flag:{flag.key}"] = flag.version
    await _metrics(scope, live)
    live.doc.layers = await readers.layers(scope, live.versions)
    live.doc.holdouts = await readers.holdouts(scope, live.versions)
    live.doc.experiments = await readers.experiments(scope, live.versions, live.exposed)
    live.doc.webhooks = await readers.webhooks(scope, live.versions)
    live.doc.keys = await readers.keys(scope)
    return live
