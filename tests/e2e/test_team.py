"""A team on real processes (issue #34): a control plane and a relay on SQLite, people who join
through their invitation links in browsers of their own (httpx clients keeping cookies), their
personal tokens; a protected production; a rollout proposed, refused to its author, approved
and applied by an admin, and served by the relay; the on-call viewer's kill switch served off
at once. The audit names the people."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay

pytestmark = pytest.mark.e2e

PASSWORD = "a long enough password"
ROLLOUT = {"rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 50}]}
USERS = [f"user-{n}" for n in range(60)]


@dataclass
class Member:
    email: str
    browser: httpx.Client
    token: str
    id: str = ""


class Team:
    def __init__(self, cp: ControlPlane, relay: Relay) -> None:
        self.cp = cp
        self.relay = relay

    def api(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token or self.cp.keys['management']}"}
        return httpx.request(
            method, f"{self.cp.url}/api/v1{path}", json=body, headers=headers, timeout=10
        )

    def join(self, email: str, role: str, *, by: str | None = None) -> Member:
        """Invited (by the admin key, or ``by``'s token), joined in a browser of their own, and
        a personal token made on the People page."""
        invited = self.api("POST", "/users/invitations", {"email": email, "role": role}, token=by)
        assert invited.status_code == 201, invited.text
        link = invited.json()["url"]
        browser = httpx.Client(base_url=self.cp.url, timeout=10, follow_redirects=True)
        page = browser.get(urlsplit(link).path)
        login = re.search(r'name="_login" value="([^"]+)"', page.text)
        assert login is not None
        joined = browser.post(
            urlsplit(link).path, data={"_login": login.group(1), "password": PASSWORD}
        )
        assert joined.url.path == "/console/flags", joined.text[:500]
        member = Member(email, browser, self.new_token(browser, "laptop"))
        listed = self.api("GET", "/users").json()["people"]
        member.id = next(p["id"] for p in listed if p["email"] == email)
        return member

    @staticmethod
    def new_token(browser: httpx.Client, name: str) -> str:
        """A personal token made on the People page by whoever is signed in in ``browser``."""
        people = browser.get("/console/people")
        csrf = re.search(r'name="_csrf" value="([^"]+)"', people.text)
        assert csrf is not None
        made = browser.post("/console/people/tokens", data={"_csrf": csrf.group(1), "name": name})
        token = re.search(r'<code id="new-token">([^<]+)</code>', made.text)
        assert token is not None, made.text[:500]
        return token.group(1)

    def served(self, flag: str, user: str) -> Any:
        answer = httpx.post(
            f"{self.relay.url}/ofrep/v1/evaluate/flags/{flag}",
            json={"context": {"targetingKey": user}},
            headers={"Authorization": f"Bearer {self.cp.keys['server']}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["value"]

    def previewed(self, flag: str, user: str) -> Any:
        answer = self.api(
            "POST", f"/flags/{flag}/environments/production/evaluate", {"context": {"key": user}}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["value"]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    tmp: Path = tmp_path_factory.mktemp("team")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
    try:
        yield Team(cp, relay)
    finally:
        relay.process.stop()
        cp.process.stop()


def test_a_rollout_in_production_needs_a_second_pair_of_eyes_and_reaches_the_relay(
    team: Team,
) -> None:
    alice = team.join("alice@example.com", "admin")
    bob = team.join("bob@example.com", "editor", by=alice.token)
    vic = team.join("vic@example.com", "viewer", by=alice.token)
    protected = team.api(
        "PATCH", "/environments/production", {"requiredApprovals": 1}, token=alice.token
    )
    assert protected.status_code == 200, protected.text

    # the viewer is refused every write, naming the permission
    refused = team.api("POST", "/flags", {"key": "by-vic"}, token=vic.token)
    assert refused.status_code == 403
    assert refused.json()["error"]["details"] == [{"field": "permission", "message": "edit"}]

    assert team.api("POST", "/flags", {"key": "checkout"}, token=bob.token).status_code == 201
    # in production, a direct write is refused with the way to go
    direct = team.api(
        "PUT",
        "/flags/checkout/environments/production",
        {"enabled": True, "fallthrough": ROLLOUT},
        token=bob.token,
    )
    assert direct.status_code == 409
    assert "/change-requests" in direct.json()["error"]["message"]
    proposed = team.api(
        "POST",
        "/change-requests",
        {
            "environment": "production",
            "title": "Half of checkout",
            "changes": [
                {"flag": "checkout", "settings": {"enabled": True, "fallthrough": ROLLOUT}}
            ],
        },
        token=bob.token,
    )
    assert proposed.status_code == 201, proposed.text
    rid = proposed.json()["id"]
    # Bob cannot approve his own request: not with his token, nor a second token of his
    second = team.api("POST", "/tokens", {"name": "second"}, token=bob.token).json()["token"]
    for token in (bob.token, second):
        own = team.api("POST", f"/change-requests/{rid}/approve", {}, token=token)
        assert own.status_code == 403, own.text
    assert team.api("POST", f"/change-requests/{rid}/apply", token=bob.token).status_code == 409
    assert all(team.served("checkout", user) is False for user in USERS[:5])

    approved = team.api(
        "POST", f"/change-requests/{rid}/approve", {"comment": "ok"}, token=alice.token
    )
    assert approved.status_code == 200, approved.text
    applied = team.api("POST", f"/change-requests/{rid}/apply", token=alice.token)
    assert applied.status_code == 200, applied.text

    def rolled_out() -> bool:
        return all(
            team.served("checkout", user) == team.previewed("checkout", user) for user in USERS
        )

    eventually(rolled_out, timeout=20, what="the relay serves the approved rollout", every=0.2)
    assert {team.served("checkout", user) for user in USERS} == {True, False}  # both halves

    entries = team.api("GET", "/flags/checkout/audit").json()["entries"]
    [setting] = [e for e in entries if e["action"] == "flag.settings.update"]
    assert setting["after"]["changeRequest"]["author"] == "bob@example.com"
    assert setting["after"]["changeRequest"]["approvers"] == ["alice@example.com"]

    # the on-call viewer turns it off at once, and the relay serves off
    granted = team.api("PATCH", f"/users/{vic.id}", {"mayTurnOff": True}, token=alice.token)
    assert granted.status_code == 200, granted.text
    # a token holds what it was made with: hers from before the grant holds none, a new one does
    kill = "/flags/checkout/environments/production/toggle"
    stale = team.api("POST", kill, {"enabled": False}, token=vic.token)
    assert stale.status_code == 403, stale.text
    assert stale.json()["error"]["details"] == [{"field": "permission", "message": "turn-off"}]
    pager = team.new_token(vic.browser, "pager")
    off = team.api("POST", kill, {"enabled": False}, token=pager)
    assert off.status_code == 200, off.text
    eventually(
        lambda: all(team.served("checkout", user) is False for user in USERS),
        timeout=5,
        what="the relay serves the kill switch",
        every=0.05,
    )
    [emergency] = [
        e
        for e in team.api("GET", "/flags/checkout/audit").json()["entries"]
        if e["action"] == "flag.toggle"
    ]
    assert emergency["actor"] == "vic@example.com"
    assert emergency["after"]["emergency"] is True
    # turning it back on needs a request
    on = team.api(
        "POST",
        "/flags/checkout/environments/production/toggle",
        {"enabled": True},
        token=alice.token,
    )
    assert on.status_code == 409
    for member in (alice, bob, vic):
        member.browser.close()


def live_events(browser: httpx.Client, opened: threading.Event, seen: list[str]) -> None:
    """Read a console page's live stream as the page's EventSource would, event names only."""
    with browser.stream("GET", "/console/live", timeout=30) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith("event: "):
                seen.append(line.removeprefix("event: "))
                opened.set()


def test_a_deactivated_persons_open_page_is_sent_to_sign_in(team: Team) -> None:
    """An open console page's live stream ends when its person is deactivated: the next change
    in the project reaches them as ``signed-out`` (their page goes to the sign-in page), never as
    a change to look at, and the stream ends."""
    dora = team.join("dora@example.com", "editor")
    assert team.api("POST", "/flags", {"key": "watched"}).status_code == 201
    opened = threading.Event()
    seen: list[str] = []
    reader = threading.Thread(target=live_events, args=(dora.browser, opened, seen), daemon=True)
    reader.start()
    assert opened.wait(10), "the live stream did not open"
    assert seen == ["open"]
    off = team.api("PATCH", f"/users/{dora.id}", {"state": "deactivated"})
    assert off.status_code == 200, off.text
    toggled = team.api("POST", "/flags/watched/environments/staging/toggle", {"enabled": True})
    assert toggled.status_code == 200, toggled.text
    reader.join(timeout=20)
    assert not reader.is_alive(), f"the stream is still open after {seen}"
    assert seen == ["open", "signed-out"]
    again = dora.browser.get("/console/flags", follow_redirects=False)
    assert again.status_code == 303
    assert "/console/sign-in" in again.headers["location"]
    dora.browser.close()
