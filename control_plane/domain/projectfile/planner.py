"""A document against what is live: per resource and environment, what would be created,
changed (field by field) or left alone, and the steps that would do it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from control_plane.domain.changes.schemas import ChangeIn
from control_plane.domain.projectfile import compare, experiments, keys, layers, steps, webhooks
from control_plane.domain.projectfile import schemas as s
from control_plane.domain.projectfile.export import Live
from control_plane.domain.projectfile.steps import Phase, Run, Step


def _segment_keys(rules: list[dict[str, Any]]) -> list[str]:
    return [
        str(key)
        for rule in rules
        for clause in rule["clauses"]
        if clause["op"] == "segmentMatch"
        for key in clause["values"]
    ]


@dataclass
class Planner:
    doc: s.ProjectDoc
    live: Live
    prune: bool
    changes: list[s.ResourceChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    proposals: dict[str, list[ChangeIn]] = field(default_factory=dict)
    approvals: dict[str, int] = field(default_factory=dict)  # when the settings are written
    webhook_private: str = "none"  # the private addresses a webhook may reach (the settings')
    notes: list[str] = field(default_factory=list)  # what to do by hand after applying

    def note(
        self,
        kind: s.Kind,
        key: str,
        action: s.Action,
        changes: list[s.FieldChange],
        env: str | None = None,
    ) -> None:
        self.changes.append(
            s.ResourceChange(kind=kind, key=key, action=action, changes=changes, environment=env)
        )

    def step(self, phase: Phase, where: str, run: Run, order: int = 0) -> None:
        self.steps.append(Step(phase, order, where, run))

    def never_pruned(self, kind: str, live: Iterable[str], given: Iterable[str]) -> None:
        """What is live of ``kind`` and not in the document stays, listed as left alone."""
        for key in sorted(set(live) - set(given)):
            self.unchanged.append(f"{kind} {key} (not in the document: {kind}s are never pruned)")

    def propose(self, env: str, item: ChangeIn) -> None:
        self.proposals.setdefault(env, []).append(item)

    def versions(self) -> dict[str, int]:
        doc = self.doc
        wanted = {f"environment:{e.key}" for e in doc.environments}
        wanted |= {f"segment:{x.key}" for x in doc.segments} | {f"flag:{f.key}" for f in doc.flags}
        wanted |= {f"setting:{f.key}/{env}" for f in doc.flags for env in f.environments}
        wanted |= {f"metric:{m.key}" for m in doc.metrics}
        wanted |= {f"layer:{x.key}" for x in doc.layers}
        wanted |= {f"holdout:{x.key}" for x in doc.holdouts}
        wanted |= {f"experiment:{x.key}" for x in doc.experiments}
        wanted |= {f"webhook:{w.url}" for w in doc.webhooks}
        if self.prune:
            wanted |= set(self.live.versions)
        return {key: self.live.versions.get(key, 0) for key in sorted(wanted)}

    def plan(self) -> s.Plan:
        return s.Plan(
            changes=self.changes,
            unchanged=self.unchanged,
            versions=self.versions(),
            has_changes=bool(self.changes),
            notes=self.notes,
        )


def _environments(p: Planner) -> None:
    live = {e.key: e for e in p.live.doc.environments}
    p.approvals = {e.key: e.required_approvals for e in p.live.doc.environments}
    for i, given in enumerate(p.doc.environments):
        before = live.get(given.key)
        after = compare.environment(given, before)
        where = f"environments[{i}]"
        if before is None:
            p.note("environment", given.key, "create", compare.diff({}, after))
            p.step(Phase.ENVIRONMENT, where, steps.create_environment(given.key, after))
            p.approvals[given.key] = 0  # protected once its settings are written
            if given.required_approvals:
                names = {"requiredApprovals"}
                p.step(Phase.PROTECT, where, steps.patch_environment(given.key, after, names))
            continue
        p.approvals[given.key] = given.required_approvals
        changes = compare.diff(compare.environment(before, before), after)
        if not changes:
            p.unchanged.append(f"environment {given.key}")
            continue
        p.note("environment", given.key, "update", changes)
        p.step(
            Phase.ENVIRONMENT,
            where,
            steps.patch_environment(given.key, after, compare.fields(changes)),
        )
    p.never_pruned("environment", live, (e.key for e in p.doc.environments))


def _protected_user(p: Planner, segment: str) -> str | None:
    users = sorted(e for e in p.live.segment_users.get(segment, ()) if p.approvals.get(e, 0) > 0)
    return users[0] if users else None


def _segments(p: Planner) -> None:
    live = {x.key: x for x in p.live.doc.segments}
    afters = {x.key: compare.segment(x, live.get(x.key)) for x in p.doc.segments}
    needs = {k: _segment_keys(a["rules"]) for k, a in afters.items()}
    order = steps.topological(list(afters), needs)
    for i, given in enumerate(p.doc.segments):
        before, after, where = live.get(given.key), afters[given.key], f"segments[{i}]"
        if before is None:
            p.note("segment", given.key, "create", compare.diff({}, after))
            p.step(Phase.SEGMENT, where, steps.create_segment(given.key, after), order[given.key])
            continue
        changes = compare.diff(compare.segment(before, before), after)
        if not changes:
            p.unchanged.append(f"segment {given.key}")
            continue
        names, env = compare.fields(changes), _protected_user(p, given.key)
        if env is not None:
            p.note("segment", given.key, "propose", changes, env)
            p.propose(env, ChangeIn(segment=given.key, patch=steps.segment_patch(after, names)))
            continue
        p.note("segment", given.key, "update", changes)
        run = steps.patch_segment(given.key, after, names)
        p.step(Phase.SEGMENT, where, run, len(afters) + i)
    if p.prune:
        for key in sorted(set(live) - set(afters)):
            p.note("segment", key, "delete", [])
            p.step(Phase.DELETE, f"segments ({key})", steps.delete_segment(key))


SERVED = {"variations", "bucketBy", "clientSide"}  # a flag's own fields every environment serves


def _guarding(p: Planner) -> str | None:
    """The environment that requires the most approvals, where a change to a flag itself is
    proposed (a flag is in every environment); None where none requires any."""
    guarded = [(n, key) for key, n in p.approvals.items() if n > 0]
    return max(guarded)[1] if guarded else None


def _flag(p: Planner, i: int, given: s.FlagDoc, before: s.FlagDoc | None) -> None:
    after, where = compare.flag(given, before), f"flags[{i}]"
    if before is None:
        p.note("flag", given.key, "create", compare.diff({}, after))
        p.step(Phase.FLAG, where, steps.create_flag(after))
        if given.archived:
            p.note("flag", given.key, "archive", [])
            p.step(Phase.ARCHIVE, where, steps.archive_flag(given.key))
        return
    old = compare.flag(before, before)
    changes = [c for c in compare.diff(old, after) if c.path != "archived"]
    names = compare.fields(changes)
    archived = given.archived if given.archived != before.archived else None
    guard = _guarding(p)
    if guard is not None and (names & SERVED or archived is not None):
        idxs = {v.idx or 0 for v in before.variations}
        body = steps.flag_patch_body(after, names, idxs) if names else None
        p.note("flag", given.key, "propose", changes, guard)
        p.propose(guard, ChangeIn(flag=given.key, flag_patch=body, archived=archived))
        return
    if changes:
        p.note("flag", given.key, "update", changes)
        idxs = {v.idx or 0 for v in before.variations}
        p.step(Phase.FLAG, where, steps.patch_flag(given.key, after, names, idxs), 1)
    elif archived is None:
        p.unchanged.append(f"flag {given.key}")
    if archived is False:
        p.note("flag", given.key, "restore", [])
        p.step(Phase.FLAG, where, steps.restore_flag(given.key))
    elif archived:
        p.note("flag", given.key, "archive", [])
        p.step(Phase.ARCHIVE, where, steps.archive_flag(given.key))


def _setting(
    p: Planner, i: int, given: s.FlagDoc, before: s.FlagDoc | None, env: str, order: int
) -> None:
    live = before.environments.get(env) if before is not None else None
    key = f"{given.key}/{env}"
    if live is not None and given.environments[env] == live:  # as live, field for field
        p.unchanged.append(f"setting {key}")
        return
    after = compare.setting(given.environments[env], live)
    old = compare.setting(live, live) if live is not None else {}
    changes = compare.diff(old, after)
    if not changes:
        p.unchanged.append(f"setting {key}")
        return
    names = compare.fields(changes) if live is not None else set(after)
    if p.approvals.get(env, 0) > 0:
        p.note("setting", given.key, "propose", changes, env)
        settings = steps.settings_body(after, names) if names - {"rules"} else None
        rules = steps.rules_body(after).rules if "rules" in names else None
        p.propose(env, ChangeIn(flag=given.key, settings=settings, rules=rules))
        return
    p.note("setting", given.key, "create" if live is None else "update", changes, env)
    run = steps.put_setting(given.key, env, after, names)
    p.step(Phase.SETTING, f"flags[{i}].environments.{env}", run, order)


def _flags(p: Planner) -> None:
    live = {f.key: f for f in p.live.doc.flags}
    needs = {
        f.key: sorted({q.key for e in f.environments.values() for q in e.prerequisites})
        for f in p.doc.flags
    }
    order = steps.topological([f.key for f in p.doc.flags], needs)
    for i, given in enumerate(p.doc.flags):
        before = live.get(given.key)
        _flag(p, i, given, before)
        if given.archived and before is not None and before.archived:
            continue  # an archived flag's settings stay as they are
        for env in sorted(given.environments):
            _setting(p, i, given, before, env, order[given.key])
    if p.prune:
        for key in sorted(set(live) - set(needs)):
            if live[key].archived:
                continue
            guard = _guarding(p)
            if guard is not None:
                p.note("flag", key, "propose", [], guard)
                p.propose(guard, ChangeIn(flag=key, archived=True))
                continue
            p.note("flag", key, "archive", [])
            p.step(Phase.ARCHIVE, f"flags ({key})", steps.archive_flag(key))


def _metrics(p: Planner) -> None:
    live = {m.key: m for m in p.live.doc.metrics}
    for i, given in enumerate(p.doc.metrics):
        before, after, where = live.get(given.key), compare.metric(given), f"metrics[{i}]"
        if before is None:
            p.note("metric", given.key, "create", compare.diff({}, after))
            p.step(Phase.METRIC, where, steps.create_metric(given.key, after))
            continue
        changes = compare.diff(compare.metric(before), after)
        if not changes:
            p.unchanged.append(f"metric {given.key}")
            continue
        p.note("metric", given.key, "update", changes)
        p.step(Phase.METRIC, where, steps.update_metric(given.key, after, compare.fields(changes)))
    if p.prune:
        for key in sorted(set(live) - {m.key for m in p.doc.metrics}):
            p.note("metric", key, "delete", [])
            p.step(Phase.DELETE, f"metrics ({key})", steps.delete_metric(key))


def plan(doc: s.ProjectDoc, live: Live, *, prune: bool, webhook_private: str = "none") -> Planner:
    planner = Planner(doc, live, prune, webhook_private=webhook_private)
    _environments(planner)
    _segments(planner)
    _flags(planner)
    _metrics(planner)
    layers.plan(planner)
    experiments.plan(planner)
    webhooks.plan(planner)
    keys.plan(planner)
    return planner
