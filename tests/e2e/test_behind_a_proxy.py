"""A control plane behind a reverse proxy (``VANE_TRUSTED_PROXIES``), on a real socket: every
request comes from the proxy's address (here loopback), and the proxy names the client in
X-Forwarded-For. Failed sign-ins are throttled per client, not per proxy: twenty failures from
one person's address lock that address out, not everyone's; and the audit records the client's
address. (Without the setting the header is ignored: tests/control_plane/test_people.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from control_plane.domain.people.signin import PER_ADDRESS
from tests.e2e.test_relays import ControlPlane, start_control_plane

pytestmark = pytest.mark.e2e

PASSWORD = "a long enough password"


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[ControlPlane]:
    cp = start_control_plane(
        f"sqlite:///{tmp_path / 'vane.db'}",
        tmp_path,
        extra_env={"VANE_TRUSTED_PROXIES": "127.0.0.0/8, ::1"},
    )
    try:
        yield cp
    finally:
        cp.process.stop()


def login_token(html: str) -> str:
    found = re.search(r'name="_login" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def sign_in(cp: ControlPlane, email: str, password: str, forwarded_for: str) -> httpx.Response:
    """The sign-in form, from a browser the proxy names ``forwarded_for`` (as a proxy appends
    the address it saw to what the client sent)."""
    headers = {"X-Forwarded-For": forwarded_for}
    with httpx.Client(base_url=cp.url, timeout=10, headers=headers) as browser:
        page = browser.get("/console/sign-in")
        return browser.post(
            "/console/sign-in",
            data={"_login": login_token(page.text), "email": email, "password": password},
        )


def test_failed_sign_ins_are_throttled_per_forwarded_client_and_audited_with_it(
    proxied: ControlPlane,
) -> None:
    cp = proxied
    for n in range(PER_ADDRESS):
        failed = sign_in(cp, f"nobody{n}@example.com", "whatever it is", "203.0.113.5")
        assert failed.status_code == 401, failed.text[:300]
    # that client waits, even when it writes another address before the proxy's
    for forwarded in ("203.0.113.5", "198.51.100.99, 203.0.113.5"):
        throttled = sign_in(cp, "nobody@example.com", "whatever it is", forwarded)
        assert throttled.status_code == 429, (forwarded, throttled.text[:300])
        assert int(throttled.headers["retry-after"]) > 0
    # another client behind the same proxy does not
    invited = cp.api("POST", "/users/invitations", {"email": "ann@example.com", "role": "viewer"})
    assert invited.status_code == 201, invited.text
    link = urlsplit(invited.json()["url"]).path
    with httpx.Client(base_url=cp.url, timeout=10, follow_redirects=True) as browser:
        page = browser.get(link)
        joined = browser.post(link, data={"_login": login_token(page.text), "password": PASSWORD})
        assert joined.url.path == "/console/flags", joined.text[:300]
    wrong = sign_in(cp, "ann@example.com", "not her password", "198.51.100.7")
    assert wrong.status_code == 401, wrong.text[:300]
    right = sign_in(cp, "ann@example.com", PASSWORD, "198.51.100.7")
    assert right.status_code == 303, right.text[:300]  # signed in: off to the console
    assert right.headers["location"] == "/console/flags"
    # the audit records the client's address, not the proxy's
    entries = cp.api("GET", "/audit?action=user.sign_in_failed").json()["entries"]
    assert [e["after"]["address"] for e in entries] == ["198.51.100.7"]
