"""A real OpenID provider for the sign-in tests: the certified ``oidc-provider`` package from npm,
set up by ``provider.mjs`` beside this file and started once per test session (per xdist worker).

The package is installed on first use under ``.vane/test-tools/oidc-provider`` (a few seconds);
without npm or Node the tests are skipped locally and fail under CI=true.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import httpx
import pytest

from control_plane.access import Role
from control_plane.sso import SsoSettings
from tests.conftest import REPO, unavailable
from tests.processes import Process

TOOLS = REPO / ".vane" / "test-tools" / "oidc-provider"
MODULES = TOOLS / "node_modules"
SCRIPT = Path(__file__).with_name("provider.mjs")
REDIRECT = "http://127.0.0.1:9/console/sso/callback"  # never served: the test reads the redirect

CLIENTS = {
    "vane": "vane-secret",
    "other-app": "other-secret",
}
ACCOUNTS: dict[str, dict[str, Any]] = {
    "alice": {
        "email": "Alice@Example.com",
        "email_verified": True,
        "name": "Alice Admin",
        "groups": ["vane-eng", "vane-admins", "unrelated"],
    },
    "erin": {
        "email": "erin@example.com",
        "email_verified": True,
        "name": "Erin Engineer",
        "groups": "vane-eng",
    },
    "nobody": {"email": "nobody@example.com", "email_verified": True, "name": "No Groups"},
    "bob": {"email": "bob@example.com", "email_verified": False, "name": "Bob Unverified"},
    "carol": {"email": "carol@example.org", "email_verified": True, "name": "Carol Elsewhere"},
}


def install_oidc_provider() -> None:
    """``npm install oidc-provider@9`` once; a lock keeps two xdist workers from racing."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    with (TOOLS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (MODULES / "oidc-provider" / "package.json").exists():
            return
        if shutil.which("npm") is None:
            unavailable("npm (to install oidc-provider)")
        result = subprocess.run(
            ["npm", "install", "--no-save", "--prefix", str(TOOLS), "oidc-provider@9"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0 or not (MODULES / "oidc-provider").exists():
            unavailable(f"oidc-provider from npm ({result.stderr[-500:]})")


@dataclass
class OpenIdProvider:
    issuer: str
    process: Process

    def settings(self, client_id: str = "vane", **overrides: Any) -> SsoSettings:
        values: dict[str, Any] = {
            "issuer": self.issuer,
            "client_id": client_id,
            "client_secret": CLIENTS[client_id],
            "redirect_url": REDIRECT,
            "role_claim": "groups",
            "role_map": {"vane-admins": Role.ADMIN, "vane-eng": Role.EDITOR},
            **overrides,
        }
        return SsoSettings(**values)

    def sign_in(
        self, authorization_url: str, account: str, *, decline: bool = False
    ) -> dict[str, str]:
        """What a person's browser does: open the URL, sign in as ``account`` (or decline) at
        the provider, and follow the redirects back; returns the query the control plane gets."""
        with httpx.Client(timeout=10) as browser:
            response = browser.get(authorization_url)
            response = self._follow(browser, response)
            assert response.status_code == 200, response.text
            assert "/interaction/" in str(response.url), response.url
            action = "abort" if decline else "login"
            answer = browser.post(f"{response.url}/{action}", data={"account": account})
            back = self._follow(browser, answer)
        return dict(parse_qsl(urlsplit(str(back.url)).query))

    def _follow(self, browser: httpx.Client, response: httpx.Response) -> httpx.Response:
        for _ in range(10):
            if not response.is_redirect:
                return response
            location = urljoin(str(response.url), response.headers["location"])
            if location.startswith(REDIRECT):
                return httpx.Response(200, request=httpx.Request("GET", location))
            response = browser.get(location)
        raise AssertionError("too many redirects")


@contextmanager
def running_provider(port: int = 0, *, redirects: Sequence[str] = ()) -> Iterator[OpenIdProvider]:
    """``provider.mjs`` with the clients and accounts above, until the block ends; ``redirects``
    are more redirect URLs the clients may use (a control plane's real callback)."""
    if shutil.which("node") is None:
        unavailable("Node.js (to run oidc-provider)")
    install_oidc_provider()
    config = {
        "clients": [
            {
                "client_id": client_id,
                "client_secret": secret,
                "redirect_uris": [REDIRECT, *redirects],
            }
            for client_id, secret in CLIENTS.items()
        ],
        "accounts": ACCOUNTS,
        "idTokenTtl": 300,
        "port": port,
    }
    process = Process(
        ["node", str(SCRIPT), json.dumps(config)],
        env={"VANE_OIDC_PROVIDER_MODULES": str(MODULES)},
    )
    try:
        issuer = process.wait_for_line(r"oidc-provider ready at (\S+)", timeout=60).group(1)
        yield OpenIdProvider(issuer=issuer, process=process)
    finally:
        process.stop()


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[OpenIdProvider]:
    """One provider for the session (one per xdist worker: each listens on its own port)."""
    with running_provider() as provider:
        yield provider
