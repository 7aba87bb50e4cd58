"""Promotion: flags' settings in one environment copied to another, as a project document.

``promote`` works on an exported document (plain JSON values, camelCase, as ``GET /export``
answers) and returns a partial document to plan and apply: each chosen flag with its own fields
as exported (so they plan as unchanged) and, under ``environments``, only the target, set to a
copy of the whole source setting (on or off, off variation, fallthrough or rollout, targets,
prerequisites, rules with their ids). Environments, segments, metrics and the flags not chosen
are left out, so they are left as they are. It is pure and imports nothing of the control
plane's database layer: the ``vane`` client promotes on its side, then plans and applies the
result, so a promotion has every guarantee an apply has (a change request where the target
requires approval, a refusal when anything moved since the plan, a prerequisite cycle refused)."""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from typing import Any

Json = dict[str, Any]
FORMAT = 1  # ``schemas.FORMAT``, not imported: the client loads no schemas of the API


class PromotionRefused(ValueError):
    """A promotion that cannot be made as asked; the message names the environment or flags."""


def _names(keys: Sequence[str]) -> str:
    return ", ".join(repr(k) for k in keys)


def _chosen(flags: dict[str, Json], named: Sequence[str] | None) -> list[Json]:
    if named is None:
        return [f for key, f in sorted(flags.items()) if not f.get("archived", False)]
    keys = list(dict.fromkeys(named))
    unknown = [k for k in keys if k not in flags]
    if unknown:
        raise PromotionRefused(f"no such flag in the document: {_names(unknown)}")
    archived = [k for k in keys if flags[k].get("archived", False)]
    if archived:
        raise PromotionRefused(
            f"archived flag(s) {_names(archived)}: restore them to promote their settings"
        )
    return [flags[k] for k in sorted(keys)]


def promote(
    document: Json,
    source: str,
    target: str,
    flags: Sequence[str] | None = None,
    *,
    targets: Collection[str] | None = None,
) -> Json:
    """A document setting each chosen flag's ``target`` environment to its ``source`` setting.

    ``flags``: the keys of the flags to promote; none: every flag that is not archived.
    ``targets``: the environments ``target`` may be (default: the document's own; the client
    passes the target instance's when the document was exported from another). Refused, naming
    them, when ``source`` is ``target``, an environment is unknown, a named flag is not in the
    document or is archived, or a chosen flag has no setting in ``source``."""
    if source == target:
        raise PromotionRefused(f"the source and target environment are both {source!r}")
    known = {str(e.get("key")) for e in document.get("environments", [])}
    if source not in known:
        raise PromotionRefused(f"no environment {source!r} in the document (source)")
    if target not in (known if targets is None else set(targets)):
        raise PromotionRefused(f"no environment {target!r} to promote to (target)")
    by_key = {str(f.get("key")): f for f in document.get("flags", [])}
    chosen = _chosen(by_key, flags)
    missing = [str(f["key"]) for f in chosen if source not in f.get("environments", {})]
    if missing:
        raise PromotionRefused(f"flag(s) {_names(missing)} have no setting in {source!r}")
    return {
        "version": FORMAT,
        "flags": [
            {
                **{k: copy.deepcopy(v) for k, v in flag.items() if k != "environments"},
                "environments": {target: copy.deepcopy(flag["environments"][source])},
            }
            for flag in chosen
        ],
    }
