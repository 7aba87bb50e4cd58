"""People (issue #34): invited by an admin, joined through a single-use link, signed in with a
password (argon2id, throttled), acting with a role through the console and their tokens;
deactivated, they stop at their next request. Over HTTP, as a team would use it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from control_plane.db.types import utcnow
from control_plane.domain.people import services as people_services
from control_plane.domain.people import signin
from tests.conftest import Api
from tests.control_plane.people import (
    PASSWORD,
    csrf_of,
    invite,
    join,
    login_token,
    person,
    sign_in_form,
)


def test_an_invited_person_joins_once_and_the_audit_names_them(api: Api) -> None:
    link = invite(api, "Alice@Example.com", "editor")
    listed = api.get("/users").json()
    assert [i["email"] for i in listed["invitations"]] == ["alice@example.com"]
    join(api, link, name="Alice")
    # the link worked once
    again = api.client.get(link)
    assert again.status_code == 404
    assert "not valid" in again.text
    people = api.get("/users").json()
    assert people["invitations"] == []
    [alice] = [p for p in people["people"] if p["email"] == "alice@example.com"]
    assert (alice["role"], alice["state"], alice["signsInWith"]) == (
        "editor",
        "active",
        ["password"],
    )
    # a change made in the console is audited as the person
    page = api.client.get("/console/flags")
    assert page.status_code == 200
    assert "alice@example.com" in page.text
    made = api.client.post(
        "/console/flags/",
        data={"_csrf": csrf_of(page.text), "key": "by-alice"},
        follow_redirects=False,
    )
    assert made.status_code == 303, made.text[:500]
    [entry] = api.get("/audit", params={"resource": "by-alice"}).json()["entries"]
    assert entry["actor"] == "alice@example.com"


def test_roles_bound_what_a_token_may_do_and_name_the_permission_lacked(api: Api) -> None:
    viewer = person(api, "vera@example.com", "viewer")
    editor = person(api, "ed@example.com", "editor")
    assert api.get("/flags", key=viewer).status_code == 200
    refused = api.post("/flags", {"key": "nope"}, key=viewer)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["details"] == [{"field": "permission", "message": "edit"}]
    assert "'edit'" in error["message"]
    assert "viewer" in error["message"]
    assert api.get("/flags/nope").status_code == 404  # nothing was written
    assert api.post("/flags", {"key": "by-ed"}, key=editor).status_code == 201
    for path, body in (
        ("/keys", {"kind": "server", "environment": "production"}),
        ("/environments", {"key": "qa"}),
        ("/webhooks", {"url": "https://example.com/h", "events": ["*"]}),
        ("/users/invitations", {"email": "x@example.com", "role": "viewer"}),
    ):
        answer = api.post(path, body, key=editor)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error"]["details"] == [{"field": "permission", "message": "admin"}]
    # a token acts with its person's role or less, never more
    more = api.post("/tokens", {"name": "more", "role": "admin"}, key=editor)
    assert more.status_code == 422
    assert more.json()["error"]["details"][0]["field"] == "role"
    less = api.post("/tokens", {"name": "read only", "role": "viewer"}, key=editor)
    assert less.status_code == 201, less.text
    assert api.post("/flags", {"key": "by-less"}, key=less.json()["token"]).status_code == 403
    # a management key is a service account: it has no personal tokens
    assert api.post("/tokens", {"name": "x"}).status_code == 403


def test_a_deactivated_persons_open_page_and_token_stop_and_their_history_stays(api: Api) -> None:
    token = person(api, "dee@example.com", "editor")
    assert api.post("/flags", {"key": "by-dee"}, key=token).status_code == 201
    join_cookie = None
    # Dee signs in with her password in the client: an open console session
    answer = sign_in_form(api, "dee@example.com", PASSWORD)
    assert answer.status_code == 303  # type: ignore[attr-defined]
    join_cookie = api.client.cookies.get("vane_console")
    assert api.client.get("/console/flags", follow_redirects=False).status_code == 200
    dee = next(p for p in api.get("/users").json()["people"] if p["email"] == "dee@example.com")
    off = api.patch(f"/users/{dee['id']}", {"state": "deactivated"})
    assert off.status_code == 200, off.text
    assert off.json()["state"] == "deactivated"
    assert api.get("/flags", key=token).status_code == 401
    api.client.cookies.set("vane_console", join_cookie or "", path="/console")
    stopped = api.client.get("/console/flags", follow_redirects=False)
    assert stopped.status_code == 303
    assert stopped.headers["location"].startswith("/console/sign-in")
    again = sign_in_form(api, "dee@example.com", PASSWORD)
    assert again.status_code == 401  # type: ignore[attr-defined]
    [entry] = api.get("/audit", params={"resource": "by-dee"}).json()["entries"]
    assert entry["actor"] == "dee@example.com"  # her history stays
    back = api.patch(f"/users/{dee['id']}", {"state": "active"})
    assert back.status_code == 200
    assert api.get("/flags", key=token).status_code == 200


def test_failed_sign_ins_are_throttled_per_account_and_audited_without_the_password(
    api: Api,
) -> None:
    person(api, "bob@example.com", "viewer")
    guesses = [f"wrong guess {n}" for n in range(5)]
    for guess in guesses:
        answer = sign_in_form(api, "bob@example.com", guess)
        assert answer.status_code == 401  # type: ignore[attr-defined]
    throttled = sign_in_form(api, "bob@example.com", PASSWORD)  # even the right one waits
    assert throttled.status_code == 429  # type: ignore[attr-defined]
    assert int(throttled.headers["retry-after"]) > 0  # type: ignore[attr-defined]
    assert "try again in" in throttled.text  # type: ignore[attr-defined]
    failures = api.get("/audit", params={"action": "user.sign_in_failed"}).json()["entries"]
    assert len(failures) == 5
    assert all(e["resourceKey"] == "bob@example.com" for e in failures)
    assert not any(guess in str(failures) for guess in guesses)
    assert PASSWORD not in str(failures)


def test_failed_sign_ins_are_throttled_per_client_address(api: Api) -> None:
    for n in range(20):
        answer = sign_in_form(api, f"nobody{n}@example.com", "whatever it is")
        assert answer.status_code == 401  # type: ignore[attr-defined]
    person(api, "carol@example.com", "viewer")
    blocked = sign_in_form(api, "carol@example.com", PASSWORD)
    assert blocked.status_code == 429  # type: ignore[attr-defined]
    assert int(blocked.headers["retry-after"]) > 0  # type: ignore[attr-defined]
    assert "try again in" in blocked.text  # type: ignore[attr-defined]


def test_without_trusted_proxies_x_forwarded_for_is_ignored_by_the_throttle(api: Api) -> None:
    """VANE_TRUSTED_PROXIES unset: the socket's peer is the client, so a client cannot name
    itself another address to step out of its throttle (behind a trusted proxy the header
    counts: tests/e2e/test_behind_a_proxy.py)."""

    def attempt(email: str, forwarded_for: str) -> Any:
        page = api.client.get("/console/sign-in")
        return api.client.post(
            "/console/sign-in",
            data={"_login": login_token(page.text), "email": email, "password": "not it at all"},
            headers={"X-Forwarded-For": forwarded_for},
            follow_redirects=False,
        )

    for n in range(signin.PER_ADDRESS):
        assert attempt(f"nobody{n}@example.com", f"203.0.113.{n}").status_code == 401
    dodged = attempt("nobody@example.com", "198.51.100.7")
    assert dodged.status_code == 429, dodged.text[:300]


def test_sign_out_everywhere_ends_every_session_of_the_person(api: Api) -> None:
    token = person(api, "eve@example.com", "editor")
    cookies = []
    for _ in range(2):
        assert sign_in_form(api, "eve@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
        cookies.append(api.client.cookies.get("vane_console"))
    me = next(p for p in api.get("/users").json()["people"] if p["email"] == "eve@example.com")
    ended = api.post(f"/users/{me['id']}/sign-out-everywhere", key=token)
    assert ended.status_code == 200, ended.text
    assert ended.json()["sessionsEnded"] >= 2
    for cookie in cookies:
        api.client.cookies.set("vane_console", cookie or "", path="/console")
        assert api.client.get("/console/flags", follow_redirects=False).status_code == 303
    # the tokens are the person's own to revoke: they still work
    assert api.get("/flags", key=token).status_code == 200


def test_nobody_demotes_or_deactivates_themselves_and_an_admin_remains(api: Api) -> None:
    admin = person(api, "root@example.com", "admin")
    me = next(p for p in api.get("/users").json()["people"] if p["email"] == "root@example.com")
    for body in ({"state": "deactivated"}, {"role": "editor"}):
        answer = api.patch(f"/users/{me['id']}", body, key=admin)
        assert answer.status_code == 409, answer.text
    last = api.patch(f"/users/{me['id']}", {"role": "viewer"})  # by the service account
    assert last.status_code == 409
    assert "last active admin" in last.json()["error"]["message"]


def test_tokens_are_listed_without_secrets_and_revoked_at_once(api: Api) -> None:
    token = person(api, "tom@example.com", "editor")
    listed = api.get("/tokens", key=token).json()["tokens"]
    assert len(listed) == 1
    assert token not in str(listed)
    assert listed[0]["hint"].startswith("vsk_live_")
    revoked = api.delete(f"/tokens/{listed[0]['id']}", key=token)
    assert revoked.status_code == 200
    assert api.get("/flags", key=token).status_code == 401


@pytest.mark.parametrize("password", ["short", " " * 12])
def test_a_weak_password_is_refused_naming_the_field_and_the_link_stays(
    api: Api, password: str
) -> None:
    link = invite(api, "wes@example.com", "viewer")
    page = api.client.get(link)
    answer = api.client.post(
        link, data={"_login": login_token(page.text), "password": password}, follow_redirects=False
    )
    assert answer.status_code == 422
    assert 'id="err-password"' in answer.text
    assert api.client.get(link).status_code == 200  # not used up


def test_a_sign_in_link_from_another_site_is_refused(api: Api) -> None:
    link = invite(api, "sam@example.com", "viewer")
    answer = api.client.post(link, data={"password": PASSWORD}, follow_redirects=False)
    assert answer.status_code == 403
    assert "vane_console" not in answer.headers.get("set-cookie", "")
    assert api.client.get(link).status_code == 200


def test_an_expired_invitation_is_refused_and_makes_no_account(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invitation works for 7 days: the clock the links are checked against is moved."""
    link = invite(api, "late@example.com", "editor")
    invited = utcnow()
    clock = [invited + timedelta(days=7) - timedelta(minutes=1)]
    for module in (signin, people_services):
        monkeypatch.setattr(module, "utcnow", lambda: clock[0])
    page = api.client.get(link)  # opened just in time, and left open past the expiry
    assert page.status_code == 200
    assert "Welcome to Vane" in page.text
    clock[0] = invited + timedelta(days=7, minutes=1)
    reopened = api.client.get(link)
    assert reopened.status_code == 404
    assert "This link is not valid" in reopened.text
    assert "has expired" in reopened.text
    assert "Ask an admin for a new one" in reopened.text
    answer = api.client.post(
        link,
        data={"_login": login_token(page.text), "name": "Late", "password": PASSWORD},
        follow_redirects=False,
    )
    assert answer.status_code == 404
    assert "has expired" in answer.text
    assert "vane_console" not in answer.headers.get("set-cookie", "")
    listed = api.get("/users").json()
    assert "late@example.com" not in [p["email"] for p in listed["people"]]
    assert listed["invitations"] == []  # no longer pending
    assert sign_in_form(api, "late@example.com", PASSWORD).status_code == 401  # type: ignore[attr-defined]


def test_vane_users_create_prints_a_one_time_link_that_signs_the_person_in(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from control_plane.entry.cli import main

    monkeypatch.setenv("VANE_DATABASE_URL", api.database_url)
    code = main(["users", "create", "--email", "Ops@Example.com", "--role", "editor"])
    assert code == 0
    out = capsys.readouterr().out
    assert "created editor ops@example.com" in out
    link = next(line.strip() for line in out.splitlines() if "/console/welcome/" in line)
    join(api, link.removeprefix("http://127.0.0.1:8000"), name="Ops")
    [ops] = [p for p in api.get("/users").json()["people"] if p["email"] == "ops@example.com"]
    assert (ops["role"], ops["name"]) == ("editor", "Ops")
    again = main(["users", "create", "--email", "ops@example.com", "--role", "viewer"])
    assert again == 1
    assert "already a person" in capsys.readouterr().err


def test_the_console_offers_a_person_only_what_their_role_may_do(api: Api) -> None:
    """The pages hide what a role may not do (the services refuse it anyway: see
    test_roles_everywhere): a viewer meets no form that writes, an editor none of an admin's."""
    assert api.post("/segments", {"key": "vips", "included": ["u1"]}).status_code == 201
    hook = api.post("/webhooks", {"url": "https://example.com/h", "events": ["*"]})
    assert hook.status_code == 201
    pages = [
        "/console/flags",
        "/console/segments",
        "/console/metrics",
        "/console/experiments",
        "/console/environments",
        "/console/keys",
        "/console/webhooks",
        f"/console/webhooks/{hook.json()['id']}",  # without its deliveries: an admin's
        "/console/people",  # a viewer keeps their own tokens and sessions there
    ]
    person(api, "vi@example.com", "viewer")
    assert sign_in_form(api, "vi@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
    for path in pages:
        html = api.client.get(path).text
        posts = re.findall(r'<form method="post" action="([^"]+)"', html)
        own = [p for p in posts if p.startswith("/console/people/tokens")]  # their own tokens
        own += [p for p in posts if p.endswith("/sign-out-everywhere")]  # and sessions
        assert [p for p in posts if p not in own] == ["/console/sign-out"], (path, posts)
    assert "deliveries are an admin's" in api.client.get(pages[-2]).text
    segment = api.client.get("/console/segments/vips").text
    assert '<fieldset class="bare" disabled>' in segment
    person(api, "ed2@example.com", "editor")
    assert sign_in_form(api, "ed2@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
    for path in ("/console/environments", "/console/keys", "/console/webhooks"):
        html = api.client.get(path).text
        posts = re.findall(r'<form method="post" action="([^"]+)"', html)
        assert posts == ["/console/sign-out"], (path, posts)
    assert 'action="/console/segments/"' in api.client.get("/console/segments").text


TOKEN_BOX = re.compile(r'<input[^>]*id="t-may-turn-off"[^>]*>')


def token_rows(html: str) -> dict[str, tuple[str, str]]:
    """The People page's list of tokens: each name's role and "may turn off", as shown."""
    table = html.split("Your personal tokens</caption>", 1)[1].split("</table>", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for row in table.split("<tr>")[2:]:  # past the head
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td>(.*?)</td>", row)]
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_a_person_with_the_grant_makes_tokens_with_and_without_it_in_the_console(
    api: Api,
) -> None:
    person(api, "otto@example.com", "editor")
    otto = next(p for p in api.get("/users").json()["people"] if p["email"] == "otto@example.com")
    assert api.patch(f"/users/{otto['id']}", {"mayTurnOff": True}).status_code == 200
    assert sign_in_form(api, "otto@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
    page = api.client.get("/console/people").text
    box = TOKEN_BOX.search(page)
    assert box is not None, "no 'may turn off' box on the new token form"
    # ticked as the form starts (the person's own role): the API's default for that token
    assert "checked" in box.group(0)
    made = api.client.post(  # a browser sends the ticked box, then the hidden "off" after it
        "/console/people/tokens",
        data={"_csrf": csrf_of(page), "name": "pager", "role": "", "mayTurnOff": ["on", "off"]},
        follow_redirects=False,
    )
    assert made.status_code == 201, made.text[:800]
    found = re.search(r'<code id="new-token">([^<]+)</code>', made.text)
    assert found is not None
    pager = found.group(1)
    unticked = api.client.post(  # the box unticked: only the hidden "off"
        "/console/people/tokens",
        data={"_csrf": csrf_of(page), "name": "dashboard", "role": "", "mayTurnOff": "off"},
        follow_redirects=False,
    )
    assert unticked.status_code == 201, unticked.text[:800]
    # a form sent without the field gets what the API gives a body without it
    for name, role in (("script", ""), ("script viewer", "viewer")):
        bare = api.client.post(
            "/console/people/tokens",
            data={"_csrf": csrf_of(page), "name": name, "role": role},
            follow_redirects=False,
        )
        assert bare.status_code == 201, bare.text[:800]
    # refused (a name too long), the form comes back as it was sent: the box unticked
    again = api.client.post(
        "/console/people/tokens",
        data={"_csrf": csrf_of(page), "name": "x" * 201, "mayTurnOff": "off"},
        follow_redirects=False,
    )
    assert again.status_code == 422, again.text[:800]
    box = TOKEN_BOX.search(again.text)
    assert box is not None
    assert "checked" not in box.group(0)
    shown = token_rows(api.client.get("/console/people").text)
    assert shown["pager"] == ("editor", "yes")
    assert shown["dashboard"] == ("editor", "no")
    assert shown["script"] == ("editor", "yes")
    assert shown["script viewer"] == ("viewer", "no")
    listed = api.get("/tokens", key=pager).json()["tokens"]
    assert {(t["name"], t["role"], t["mayTurnOff"]) for t in listed} >= {
        ("pager", "editor", True),
        ("dashboard", "editor", False),
        ("script", "editor", True),
        ("script viewer", "viewer", False),
    }
    # a person without the grant is not offered the box; asked anyway, it is refused beside it
    ed = person(api, "ed@example.com", "editor")
    assert sign_in_form(api, "ed@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
    page = api.client.get("/console/people").text
    assert TOKEN_BOX.search(page) is None
    beyond = api.client.post(
        "/console/people/tokens",
        data={"_csrf": csrf_of(page), "name": "sneaky", "mayTurnOff": "on"},
        follow_redirects=False,
    )
    assert beyond.status_code == 422, beyond.text[:800]
    assert 'id="err-mayTurnOff"' in beyond.text
    assert "sneaky" not in {t["name"] for t in api.get("/tokens", key=ed).json()["tokens"]}
