"""What a document is checked for before anything is compared or written, each problem named by
its path in the document (``flags[3].environments.production.rules[0].variation``): keys listed
twice, unknown environments and prerequisite flags, variation indexes out of range, a flag's
type changed, and prerequisite cycles. The services check the rest when the plan runs them."""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.domain.flags.schemas import RuleIn, ServeIn
from control_plane.domain.problems import Problems
from control_plane.domain.projectfile import compare, experiments, layers, webhooks
from control_plane.domain.projectfile import schemas as s
from shared.engine import prerequisite_cycle


def _twice(problems: Problems, name: str, keys: Iterable[str]) -> None:
    seen: set[str] = set()
    for i, key in enumerate(keys):
        if key in seen:
            problems.add(f"{name}[{i}].key", f"{key!r} is listed twice")
        seen.add(key)


def variation_idxs(flag: s.FlagDoc) -> set[int]:
    return {v.idx if v.idx is not None else n for n, v in enumerate(flag.variations)}


def _serve(problems: Problems, path: str, serve: ServeIn, idxs: set[int]) -> None:
    if serve.variation is not None and serve.variation not in idxs:
        problems.add(f"{path}.variation", f"no variation has idx {serve.variation}")
    for j, weight in enumerate(serve.rollout or []):
        if weight.idx not in idxs:
            problems.add(f"{path}.rollout[{j}].idx", f"no variation has idx {weight.idx}")


def _rule(problems: Problems, path: str, rule: RuleIn, idxs: set[int]) -> None:
    _serve(problems, path, ServeIn(variation=rule.variation, rollout=rule.rollout), idxs)
    if rule.serve is not None:
        _serve(problems, f"{path}.serve", rule.serve, idxs)


def _prerequisites(
    problems: Problems, path: str, given: s.FlagEnvironmentDoc, flags: dict[str, set[int]]
) -> None:
    for j, item in enumerate(given.prerequisites):
        where = f"{path}.prerequisites[{j}]"
        if item.key not in flags:
            problems.add(f"{where}.key", f"unknown flag {item.key!r}")
        elif item.variation not in flags[item.key]:
            problems.add(
                f"{where}.variation",
                f"flag {item.key!r} has no variation with idx {item.variation}",
            )


def _setting(
    problems: Problems,
    path: str,
    given: s.FlagEnvironmentDoc,
    idxs: set[int],
    flags: dict[str, set[int]],
) -> None:
    if given.off_variation not in idxs:
        problems.add(f"{path}.offVariation", f"no variation has idx {given.off_variation}")
    _serve(problems, f"{path}.fallthrough", given.fallthrough, idxs)
    for j, target in enumerate(given.targets):
        if target.variation not in idxs:
            problems.add(
                f"{path}.targets[{j}].variation", f"no variation has idx {target.variation}"
            )
    for j, rule in enumerate(given.rules):
        _rule(problems, f"{path}.rules[{j}]", rule, idxs)
    _prerequisites(problems, path, given, flags)


def _cycles(problems: Problems, doc: s.ProjectDoc, live: s.ProjectDoc, envs: set[str]) -> None:
    for env in sorted(envs):
        graph = {
            f.key: [p.key for p in f.environments[env].prerequisites]
            for f in live.flags
            if env in f.environments
        }
        graph.update(
            {
                f.key: [p.key for p in f.environments[env].prerequisites]
                for f in doc.flags
                if env in f.environments
            }
        )
        for i, flag in enumerate(doc.flags):
            cycle = prerequisite_cycle(flag.key, graph) if env in flag.environments else None
            if cycle:
                problems.add(
                    f"flags[{i}].environments.{env}.prerequisites",
                    "would make a cycle: " + " -> ".join(cycle),
                )


def _metrics(problems: Problems, doc: s.ProjectDoc, live: s.ProjectDoc) -> None:
    _twice(problems, "metrics", (m.key for m in doc.metrics))
    before = {m.key: compare.metric(m) for m in live.metrics}
    for i, given in enumerate(doc.metrics):
        if given.key not in before:
            continue
        after = compare.metric(given)
        for name in compare.FIXED_METRIC_FIELDS:
            if after.get(name) != before[given.key].get(name):
                problems.add(
                    f"metrics[{i}].{name}",
                    f"cannot change once the metric is made (it is {before[given.key].get(name)!r})",
                )


def check(doc: s.ProjectDoc, live: s.ProjectDoc, exposed: dict[str, int] | None = None) -> None:
    """422 naming every problem's path in ``doc``, or nothing. ``exposed``: the live
    experiments' units exposed (what can still change depends on it)."""
    problems = Problems()
    layers.check(problems, doc, live)
    experiments.check(problems, doc, live, exposed or {})
    webhooks.check(problems, doc, live)
    _twice(problems, "environments", (e.key for e in doc.environments))
    _twice(problems, "segments", (x.key for x in doc.segments))
    _twice(problems, "flags", (f.key for f in doc.flags))
    _metrics(problems, doc, live)
    envs = {e.key for e in live.environments} | {e.key for e in doc.environments}
    live_flags = {f.key: f for f in live.flags}
    flags = {f.key: variation_idxs(f) for f in live.flags}
    flags.update({f.key: variation_idxs(f) for f in doc.flags})
    for i, flag in enumerate(doc.flags):
        before = live_flags.get(flag.key)
        if before is not None and before.type != flag.type:
            problems.add(f"flags[{i}].type", f"a flag's type cannot change (it is {before.type})")
        for env, given in flag.environments.items():
            path = f"flags[{i}].environments.{env}"
            if env not in envs:
                problems.add(path, f"unknown environment {env!r}")
                continue
            _setting(problems, path, given, flags[flag.key], flags)
    if not problems.items:
        _cycles(problems, doc, live, envs)
    problems.raise_if_any()
