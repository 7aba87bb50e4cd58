"""Evaluate compiled flags for a context. Never raises: every failure is an ``ERROR`` reason.

A context is a mapping ``{key, ...attributes}``: a user, unless ``kind`` names another kind or
``"multi"`` (then it holds one part per kind; see ``shared.engine.contexts``). Its key (each
part's) is ``key``, else OpenFeature's ``targetingKey``; it must be a non-empty string, or the
result is ``ERROR``/``USER_NOT_SPECIFIED`` (checked before the flag is looked up, as
LaunchDarkly does).

Resolution order: disabled → off variation (``OFF``); prerequisites, each of which must be
enabled and serve the required variation, else the off variation (``PREREQUISITE_FAILED``);
individual targets (``TARGET_MATCH``); rules top to bottom, first match wins (``RULE_MATCH``);
the fallthrough (``FALLTHROUGH``).

``now_ms`` (epoch milliseconds) is the caller's clock: the engine never reads one. No current
operator depends on it; it is part of the signature so time-dependent rules can be added without
changing every caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.engine.closures import FlagFn
from shared.engine.contexts import key_of, view
from shared.engine.model import EXCEPTION, FLAG_NOT_FOUND, USER_NOT_SPECIFIED, Evaluation
from shared.engine.snapshot import CompiledEnvironment


def context_key(context: Mapping[str, Any]) -> str | None:
    """A single-kind context's key: ``key``, else ``targetingKey``; ``None`` unless a non-empty
    string (a multi-kind context has none of its own)."""
    return key_of(context)


def _recover(context: Any, flag_key: Any) -> Evaluation:
    try:
        if not isinstance(context, Mapping) or view(context) is None:
            return USER_NOT_SPECIFIED
        if not isinstance(flag_key, str):
            return FLAG_NOT_FOUND
    except Exception:
        return USER_NOT_SPECIFIED
    return EXCEPTION


def evaluate(
    env: CompiledEnvironment, flag_key: str, context: Mapping[str, Any], now_ms: int
) -> Evaluation:
    """Evaluate one flag for one context."""
    try:
        key = context.get("key")
        if key.__class__ is not str or not key or "kind" in context:
            seen = view(context)
            if seen is None:
                return USER_NOT_SPECIFIED
            context, key = seen
        run = env.runs.get(flag_key)
        if run is None:
            return FLAG_NOT_FOUND
        return run(context, key)
    except Exception:
        return _recover(context, flag_key)


def _one(run: FlagFn, context: Mapping[str, Any], key: str) -> Evaluation:
    try:
        return run(context, key)
    except Exception:
        return EXCEPTION


def evaluate_all(
    env: CompiledEnvironment,
    context: Mapping[str, Any],
    now_ms: int,
    *,
    client_side_only: bool = False,
) -> dict[str, Evaluation]:
    """Evaluate every flag (or every client-side flag) for one context."""
    runs = env.client_runs if client_side_only else env.all_runs
    try:
        key = context.get("key")
        if key.__class__ is not str or not key or "kind" in context:
            seen = view(context)
            if seen is None:
                return dict.fromkeys([k for k, _ in runs], USER_NOT_SPECIFIED)
            context, key = seen
    except Exception:
        return dict.fromkeys([k for k, _ in runs], USER_NOT_SPECIFIED)
    try:
        return {flag_key: run(context, key) for flag_key, run in runs}
    except Exception:
        return {flag_key: _one(run, context, key) for flag_key, run in runs}
