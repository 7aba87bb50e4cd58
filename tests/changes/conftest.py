"""A project with a flag and a protected production, and management keys as service accounts
with roles: the authors and reviewers of change requests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from control_plane.domain.keys.schemas import KeyCreate
from control_plane.domain.keys.services import create_key
from control_plane.entry.oneshot import in_project
from tests.conftest import Api
from tests.webhooks.conftest import hooks_app


@dataclass
class Team:
    api: Api
    admin: str  # a second admin key (the first is api.key): a reviewer
    editor: str  # an editor that may not turn off
    oncall: str  # an editor granted 'may turn off'
    viewer: str

    def as_(self, key: str) -> Api:
        other = Api(client=self.api.client, keys=self.api.keys, database_url=self.api.database_url)
        other.key = key
        return other


def new_key(api: Api, role: str, name: str, *, may_turn_off: bool = False) -> str:
    """A management key made as ``vane keys create`` makes one: a service account of its own
    (one made through the API is its maker's, and could not review its maker's requests)."""
    body = KeyCreate(kind="management", role=role, may_turn_off=may_turn_off, name=name)  # type: ignore[arg-type]
    made = asyncio.run(
        in_project("default", lambda scope: create_key(scope, body), url=api.database_url)
    )
    return made.key


def protect(api: Api, env: str = "production", approvals: int = 1) -> None:
    done = api.patch(f"/environments/{env}", {"requiredApprovals": approvals})
    assert done.status_code == 200, done.text


def team_of(api: Api) -> Team:
    assert api.post("/flags", {"key": "checkout"}).status_code == 201
    return Team(
        api=api,
        admin=new_key(api, "admin", "reviewer-admin"),
        editor=new_key(api, "editor", "ci-editor"),
        oncall=new_key(api, "editor", "oncall-bot", may_turn_off=True),
        viewer=new_key(api, "viewer", "dashboard"),
    )


@pytest.fixture
def team(api: Api) -> Team:
    made = team_of(api)
    protect(api)
    return made


@pytest.fixture
def fast_team(database_url: str) -> Iterator[Team]:
    """As ``team``, on an app whose runners look every 0.1 s."""
    with hooks_app(database_url) as api:
        made = team_of(api)
        protect(api)
        yield made


ROLLOUT = {"rollout": [{"idx": 0, "weight": 25}, {"idx": 1, "weight": 75}]}


def propose(api: Api, key: str, **body: Any) -> dict[str, Any]:
    payload = {
        "environment": "production",
        "title": "Roll checkout out to a quarter",
        "changes": [{"flag": "checkout", "settings": {"fallthrough": ROLLOUT}}],
        **body,
    }
    made = api.post("/change-requests", payload, key=key)
    assert made.status_code == 201, made.text
    return made.json()  # type: ignore[no-any-return]


def apply_approved(team: Team, rid: str) -> dict[str, Any]:
    """An admin approves the request, its editor author applies it."""
    api = team.api
    approved = api.post(f"/change-requests/{rid}/approve", {}, key=team.admin)
    assert approved.status_code == 200, approved.text
    applied = api.post(f"/change-requests/{rid}/apply", key=team.editor)
    assert applied.status_code == 200, applied.text
    return applied.json()  # type: ignore[no-any-return]
