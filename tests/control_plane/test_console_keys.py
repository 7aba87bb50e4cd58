"""The Keys page (issue #34): a management key is a service account with a role and perhaps the
"may turn off" grant, given when it is made and changed on its row, through the keys' services as
``POST`` and ``PATCH /api/v1/keys`` call them (the same refusals, the same audit)."""

from __future__ import annotations

import re
from typing import Any

from tests.conftest import Api
from tests.control_plane.test_console_change_requests import Console, text_of
from tests.control_plane.test_console_http import signed_in


def listed(api: Api, name: str) -> dict[str, Any]:
    return next(k for k in api.get("/keys").json()["keys"] if k["name"] == name)


def test_a_management_key_is_made_with_a_role_and_the_grant(api: Api) -> None:
    _, csrf = signed_in(api)
    page = api.client.get("/console/keys").text
    assert 'name="role"' in page
    assert 'name="mayTurnOff"' in page
    made = api.client.post(
        "/console/keys/",
        data={
            "_csrf": csrf,
            "kind": "management",
            "name": "dashboard",
            "role": "viewer",
            "mayTurnOff": "on",
        },
    )
    assert made.status_code == 201, made.text[:800]
    token = re.search(r'<code id="new-key">([^<]+)</code>', made.text)
    assert token is not None
    key = listed(api, "dashboard")
    assert (key["kind"], key["role"], key["mayTurnOff"]) == ("management", "viewer", True)
    refused = api.post("/flags", {"key": "by-dashboard"}, key=token.group(1))
    assert refused.status_code == 403
    assert refused.json()["error"]["details"] == [{"field": "permission", "message": "edit"}]
    [entry] = api.get("/audit", params={"action": "key.create"}).json()["entries"][:1]
    assert entry["after"]["role"] == "viewer"
    # the list shows each management key's role and grant
    row = re.search(
        rf"<tr><th scope=\"row\"><code>{re.escape(key['hint'])}.*?</tr>", made.text, re.S
    )
    assert row is not None
    assert 'value="viewer" selected' in row.group(0)
    assert 'name="mayTurnOff" checked' in row.group(0)


def test_a_role_or_the_grant_on_another_kind_of_key_is_the_api_s_refusal(api: Api) -> None:
    _, csrf = signed_in(api)
    before = api.get("/keys").json()
    # a server key with "may turn off" ticked (a browser without the page's script sends it)
    refused = api.client.post(
        "/console/keys/",
        data={"_csrf": csrf, "kind": "server", "name": "backend", "mayTurnOff": "on"},
    )
    assert refused.status_code == 422, refused.text[:800]
    assert 'id="err-mayTurnOff"' in refused.text
    assert "only a management key (a service account) is granted 'may turn off'" in text_of(
        refused.text
    )
    # a role typed for a server key is the management keys' field: not sent on, the key made
    made = api.client.post(
        "/console/keys/",
        data={"_csrf": csrf, "kind": "server", "name": "backend", "role": "viewer"},
    )
    assert made.status_code == 201, made.text[:800]
    assert listed(api, "backend")["role"] is None
    unknown = api.client.post(
        "/console/keys/",
        data={"_csrf": csrf, "kind": "management", "name": "boss", "role": "owner"},
    )
    assert unknown.status_code == 422
    assert 'id="err-role"' in unknown.text
    assert [k["name"] for k in api.get("/keys").json()["keys"]] == [
        *(k["name"] for k in before["keys"]),
        "backend",
    ]


def test_an_admin_changes_a_key_s_role_and_grant_on_its_row(api: Api) -> None:
    ci = api.post("/keys", {"kind": "management", "role": "editor", "name": "ci"}).json()
    assert api.post("/flags", {"key": "by-ci"}, key=ci["key"]).status_code == 201
    console = Console(api)
    console.join("ada@example.com", "admin")
    keys_page = console.as_("ada@example.com").get("/console/keys").text
    assert f'action="/console/keys/{ci["id"]}"' in keys_page
    changed = console.post(
        "/console/keys", f"/console/keys/{ci['id']}", role="viewer", mayTurnOff="on"
    )
    assert changed.status_code == 303, changed.text[:800]
    assert changed.headers["location"] == "/console/keys"
    key = listed(api, "ci")
    assert (key["role"], key["mayTurnOff"]) == ("viewer", True)
    refused = api.patch("/flags/by-ci", {"name": "Renamed"}, key=ci["key"])
    assert refused.status_code == 403
    assert refused.json()["error"]["details"] == [{"field": "permission", "message": "edit"}]
    [entry] = api.get("/audit", params={"action": "key.update"}).json()["entries"]
    assert entry["actor"] == "ada@example.com"  # the person, as the API's audit names them
    assert (entry["before"]["role"], entry["after"]["role"]) == ("editor", "viewer")
    assert entry["after"]["mayTurnOff"] is True

    unknown = console.post("/console/keys", f"/console/keys/{ci['id']}", role="owner")
    assert unknown.status_code == 422
    assert "role: one of viewer, editor, admin" in text_of(unknown.text)
    gone = console.post("/console/keys", "/console/keys/key_nope", role="viewer")
    assert gone.status_code == 404
    assert listed(api, "ci")["role"] == "viewer"


def test_the_key_signed_in_with_is_not_offered_its_own_demotion(api: Api) -> None:
    signed_in(api)
    me = next(k for k in api.get("/keys").json()["keys"] if k["kind"] == "management")
    page = api.client.get("/console/keys").text
    assert f'action="/console/keys/{me["id"]}"' not in page
    assert "(signed in with it)" in page
