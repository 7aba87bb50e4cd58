"""Clauses and serves in the API's shape: what a request gives, what a response shows."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from control_plane.domain.common import percent
from control_plane.domain.schemas import ApiIn, ApiOut
from shared.wire import snapshot as w


class WeightIn(ApiIn):
    idx: int
    weight: float  # percent, up to 3 decimals


class ServeIn(ApiIn):
    """``{variation: idx}`` or ``{rollout: [{idx, weight}]}`` — exactly one."""

    variation: int | None = None
    rollout: list[WeightIn] | None = None
    bucket_by: str | None = None
    # the context kind whose bucketBy is hashed (then bucketBy is a reference); none: the user's
    context_kind: str | None = None


class ClauseIn(ApiIn):
    """``{attribute, op, values, negate, contextKind}`` or ``{segment, op: "segmentMatch"}``.
    With ``contextKind`` the clause reads that kind and ``attribute`` is a reference
    (``/address/city``); without, it reads the user and ``attribute`` is a literal name."""

    op: str | None = None
    attribute: str | None = None
    values: list[Any] | None = None
    segment: str | None = None
    negate: bool = False
    context_kind: str | None = None


class Weight(ApiOut):
    idx: int
    weight: float | int


class Serve(ApiOut):
    variation: int | UnsetType | None = UNSET
    rollout: list[Weight] | UnsetType = UNSET
    bucket_by: str | UnsetType = UNSET
    context_kind: str | UnsetType = UNSET


class Clause(ApiOut):
    op: str
    values: list[Any]
    attribute: str | UnsetType = UNSET
    negate: bool = False
    context_kind: str | UnsetType = UNSET


def serve_out(stored: dict[str, Any]) -> Serve:
    served: w.Serve = msgspec.convert(stored, w.Serve)
    if served.rollout is not None:
        return Serve(
            rollout=[Weight(idx=i.idx, weight=percent(i.weight)) for i in served.rollout],
            bucket_by=served.bucket_by if served.bucket_by else msgspec.UNSET,
            context_kind=_or_unset(served.context_kind),
        )
    return Serve(variation=served.variation)


def clause_out(clause: w.Clause) -> Clause:
    return Clause(
        op=clause.op,
        values=list(clause.values),
        attribute=_or_unset(clause.attribute),
        negate=clause.negate,
        context_kind=_or_unset(clause.context_kind),
    )


def _or_unset(value: str | None) -> str | UnsetType:
    return value if value is not None else msgspec.UNSET
