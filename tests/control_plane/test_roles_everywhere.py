"""The rule of roles, over every write the API has (issue #34): generated from the control
plane's OpenAPI document, so an operation added later is held to it without a line here.

A viewer's token sends valid requests of every write operation's shape (schemathesis' positive
mode) and is never answered with a success nor a 5xx; an editor's token is refused every
operation of the admin's (keys, environments, webhooks, people). Afterwards the audit holds
nothing by either of them where they were refused: nothing was written. The permission is
checked in the domain services (``Scope.require``), before any lookup, so a refusal does not
depend on the generated path naming something that exists; where a request is refused earlier
(its body's shape, 4xx), the rule holds all the more.

Checked by taking the check away: without ``scope.require`` in ``flags.services.create_flag``
the viewer's POST /flags is answered 201 and this test fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from litestar.testing import TestClient
from schemathesis import GenerationMode

from control_plane.app import create_app
from control_plane.settings import Settings
from tests.conftest import Api
from tests.control_plane.people import person
from tests.control_plane.test_fuzz_unstorable import openapi_document

if TYPE_CHECKING:
    from schemathesis.specs.openapi.schemas import OpenApiCase

pytestmark = pytest.mark.slow

WRITES = ("POST", "PUT", "PATCH", "DELETE")
EVERYONE_MAY = {
    ("POST", "/api/v1/flags/{key}/environments/{env}/evaluate"),  # a preview: reads
    ("POST", "/api/v1/experiments/power"),  # a computation: reads
    ("POST", "/api/v1/tokens"),  # a person's own tokens, with their role or less
    ("DELETE", "/api/v1/tokens/{token_id}"),
    ("POST", "/api/v1/users/{user_id}/sign-out-everywhere"),  # oneself (others: admin)
}
ADMIN_ONLY = ("/api/v1/keys", "/api/v1/environments", "/api/v1/webhooks", "/api/v1/users")
SEEDED = "seeded"


class Team:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.viewer = person(api, "viewer@example.com", "viewer")
        self.editor = person(api, "editor@example.com", "editor")


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    path = tmp_path_factory.mktemp("roles") / "vane.db"
    app = create_app(Settings(database_url=f"sqlite:///{path}"))
    with TestClient(app, raise_server_exceptions=False) as client:
        keys = {k.kind.value: k.token for k in app.state.issued_keys}
        api = Api(client, keys, f"sqlite:///{path}")
        for where, body in (
            ("/flags", {"key": SEEDED}),
            ("/segments", {"key": SEEDED, "included": ["u1"]}),
            ("/metrics", {"key": SEEDED, "name": "Seeded", "event": "buy", "aggregation": "sum"}),
            ("/experiments", {"key": SEEDED, "name": "Seeded", "goal": "buy"}),
        ):
            assert api.post(where, body).status_code == 201
        yield Team(api)


schema = schemathesis.openapi.from_dict(openapi_document()).exclude(path="/api/v1/snapshot/stream")
schema.config.generation.update(modes=[GenerationMode.POSITIVE])
schema.config.phases.update(phases=["fuzzing"])

BOUNDED = settings(
    max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def _held(case: OpenApiCase) -> bool:
    """A write of the API (``/v1`` is the same operations again), not one everyone may make."""
    method = case.method.upper()
    return (
        method in WRITES
        and case.path.startswith("/api/v1/")
        and (method, case.path) not in EVERYONE_MAY
    )


SENSIBLE: dict[str, Any] = {
    "key": "generated",
    "flagKey": SEEDED,
    "environment": "production",
    "event": "buy",
    "goal": "buy",
    "url": "https://shop.example/",
    "email": "someone@example.com",
    "kind": "server",
}
"""Body fields a random value rarely gets past (a key's pattern, a reference to something that
exists), given a value that does: so the request meets the permission check, not only the
body's shape (which a viewer is refused too, but for another reason)."""


def _send(team: Team, case: OpenApiCase, token: str) -> Any:
    if isinstance(case.body, dict):
        case.body = {
            **case.body,
            **{name: value for name, value in SENSIBLE.items() if name in case.body},
        }
    sent = case.as_transport_kwargs(base_url="", headers={"Authorization": f"Bearer {token}"})
    sent.pop("base_url", None)
    url = sent.pop("url")
    return team.api.client.request(
        sent.pop("method"),
        url,
        **{k: v for k, v in sent.items() if k in ("headers", "params", "json", "content", "data")},
    )


@schema.parametrize()
@BOUNDED
def test_a_viewer_is_refused_every_write(case: OpenApiCase, team: Team) -> None:
    if not _held(case):
        return
    answer = _send(team, case, team.viewer)
    assert answer.status_code < 500, (case.method, case.path, answer.text[:300])
    assert not 200 <= answer.status_code < 300, (case.method, case.path, answer.text[:300])


@schema.parametrize()
@BOUNDED
def test_an_editor_is_refused_every_write_of_an_admin(case: OpenApiCase, team: Team) -> None:
    if not _held(case) or not case.path.startswith(ADMIN_ONLY):
        return
    answer = _send(team, case, team.editor)
    assert answer.status_code < 500, (case.method, case.path, answer.text[:300])
    assert not 200 <= answer.status_code < 300, (case.method, case.path, answer.text[:300])


def test_nothing_was_written_by_the_refused(team: Team) -> None:
    """Runs after the generated tests of this module (same worker: the module is one xdist
    group): the viewer wrote nothing at all, the editor nothing of an admin's."""
    people = {p["email"]: p["id"] for p in team.api.get("/users").json()["people"]}
    by_viewer = team.api.get("/audit", params={"actor": people["viewer@example.com"]}).json()
    assert sorted(e["action"] for e in by_viewer["entries"]) == ["token.create", "user.join"]
    by_editor = team.api.get("/audit", params={"actor": people["editor@example.com"]}).json()
    admin_things = ("key", "environment", "webhook", "user")
    assert not [
        e
        for e in by_editor["entries"]
        if e["resourceType"] in admin_things and e["action"] != "user.join"  # their own joining
    ]
