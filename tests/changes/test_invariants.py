"""Random sequences of proposals, edits, reviews, applies, direct writes and emergencies by a
few actors, against the model of the rules: nothing lands in a protected environment without
an approval by someone other than the author after the last edit; what is applied was based on
the live version; a direct write never lands; turning off always does."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.changes.conftest import Team

ACTORS = ("admin", "editor", "oncall")
ops = st.lists(
    st.one_of(
        st.tuples(st.just("propose"), st.sampled_from(ACTORS), st.integers(0, 1)),
        st.tuples(st.just("edit"), st.integers(0, 3), st.integers(0, 1)),
        st.tuples(st.just("approve"), st.sampled_from(ACTORS), st.integers(0, 3)),
        st.tuples(st.just("reject"), st.sampled_from(ACTORS), st.integers(0, 3)),
        st.tuples(st.just("apply"), st.sampled_from(ACTORS), st.integers(0, 3)),
        st.tuples(st.just("direct"), st.sampled_from(ACTORS), st.integers(0, 1)),
        st.tuples(st.just("off"), st.sampled_from(("admin", "oncall")), st.just(0)),
    ),
    min_size=1,
    max_size=14,
)
COUNTER = itertools.count()


@dataclass
class Model:
    id: str
    author: str
    base: int
    status: str = "open"
    approvers: set[str] = field(default_factory=set)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=ops)
def test_nothing_lands_without_approval_by_another(team: Team, sequence: list[Any]) -> None:
    api = team.api
    keys = {"admin": team.admin, "editor": team.editor, "oncall": team.oncall}
    flag = f"f{next(COUNTER)}"
    assert api.post("/flags", {"key": flag}).status_code == 201
    path = f"/flags/{flag}/environments/production"

    def live() -> dict[str, Any]:
        return api.get(path).json()  # type: ignore[no-any-return]

    def change(value: int) -> list[dict[str, Any]]:
        return [{"flag": flag, "settings": {"fallthrough": {"variation": value}, "enabled": True}}]

    requests: list[Model] = []
    for op, who, n in sequence:
        before = live()
        if op == "propose":
            made = api.post(
                "/change-requests",
                {"environment": "production", "title": "t", "changes": change(n)},
                key=keys[who],
            )
            assert made.status_code == 201, made.text
            requests.append(Model(made.json()["id"], who, before["version"]))
            continue
        if op in ("edit", "approve", "reject", "apply") and not requests:
            continue
        if op == "edit":
            model = requests[who % len(requests)]
            done = api.patch(
                f"/change-requests/{model.id}", {"changes": change(n)}, key=keys[model.author]
            )
            if model.status in ("open", "rejected"):
                assert done.status_code == 200, done.text
                model.status, model.approvers, model.base = "open", set(), before["version"]
            else:
                assert done.status_code == 409
        elif op in ("approve", "reject"):
            model = requests[n % len(requests)]
            body = {"comment": "because"}
            done = api.post(f"/change-requests/{model.id}/{op}", body, key=keys[who])
            if who == model.author:
                assert done.status_code == 403
            elif model.status != "open" or (op == "approve" and who in model.approvers):
                assert done.status_code == 409
            else:
                assert done.status_code == 200, done.text
                if op == "approve":
                    model.approvers.add(who)
                else:
                    model.status = "rejected"
        elif op == "apply":
            model = requests[n % len(requests)]
            done = api.post(f"/change-requests/{model.id}/apply", key=keys[who])
            lands = (
                model.status == "open"
                and bool(model.approvers - {model.author})
                and model.base == before["version"]
            )
            assert (done.status_code == 200) == lands, (model, before, done.text)
            if lands:
                model.status = "applied"
                assert live()["version"] > before["version"]
            else:
                assert live() == before
        elif op == "direct":
            done = api.put(path, {"fallthrough": {"variation": n}}, key=keys[who])
            assert done.status_code == 409
            assert live() == before
        elif op == "off":
            done = api.post(path + "/toggle", {"enabled": False}, key=keys[who])
            assert done.status_code == 200, done.text
            assert live()["enabled"] is False
