"""Helpers for tests that need people: invited through the API, joined through the console's
welcome page (as a person would, in the client's cookie jar), their personal tokens."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from tests.conftest import Api

PASSWORD = "correct horse battery"


def invite(api: Api, email: str, role: str, *, key: str | None = None) -> str:
    """An invitation's link (its path), made with ``key`` (the admin key by default)."""
    answer = api.post("/users/invitations", {"email": email, "role": role}, key=key or api.key)
    assert answer.status_code == 201, answer.text
    return str(urlsplit(answer.json()["url"]).path)


def login_token(html: str) -> str:
    found = re.search(r'name="_login" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def join(api: Api, path: str, *, password: str = PASSWORD, name: str = "") -> str:
    """Open the link and set a password: the person is signed in in ``api.client`` (whose
    console cookie this replaces); the session cookie's value."""
    page = api.client.get(path)
    assert page.status_code == 200, page.text[:500]
    answer = api.client.post(
        path,
        data={"_login": login_token(page.text), "name": name, "password": password},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text[:800]
    cookie = api.client.cookies.get("vane_console")
    assert cookie
    return cookie


def person(api: Api, email: str, role: str) -> str:
    """A person with ``role`` who has joined; their personal token (full role)."""
    saved = [cookie for cookie in api.client.cookies.jar if cookie.name == "vane_console"]
    join(api, invite(api, email, role))
    token = console_token(api, f"{email} token")
    api.client.cookies.delete("vane_console")
    for cookie in saved:  # as it was (its domain too: a second cookie of the name would linger)
        api.client.cookies.jar.set_cookie(cookie)
    return token


def csrf_of(html: str) -> str:
    found = re.search(r'name="_csrf" value="([^"]+)"', html)
    assert found is not None, html[:500]
    return found.group(1)


def console_token(api: Api, name: str, role: str = "") -> str:
    """A personal token made on the People page by whoever is signed in in ``api.client``."""
    page = api.client.get("/console/people")
    answer = api.client.post(
        "/console/people/tokens",
        data={"_csrf": csrf_of(page.text), "name": name, "role": role},
        follow_redirects=False,
    )
    assert answer.status_code == 201, answer.text[:800]
    found = re.search(r'<code id="new-token">([^<]+)</code>', answer.text)
    assert found is not None
    return found.group(1)


def sign_in_form(api: Api, email: str, password: str) -> object:
    page = api.client.get("/console/sign-in")
    return api.client.post(
        "/console/sign-in",
        data={"_login": login_token(page.text), "email": email, "password": password},
        follow_redirects=False,
    )
