"""A real control plane and relay, a site on another origin, and headless Chromium.

The browser is Debian's ``chromium`` driven through Playwright's ``executable_path`` (never a
downloaded browser). Pages are served by a tiny HTTP server on its own port, so every call the
tracker makes to the relay is cross-origin, as on a real site.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class Pages:
    """The site: path → (html, extra headers), served from 127.0.0.1 on a port of its own."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[str, dict[str, str]]] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                html, headers = pages.get(path, ("<!doctype html><title>404</title>", {}))
                body = html.encode()
                self.send_response(200 if path in pages else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, path: str, html: str, headers: dict[str, str] | None = None) -> str:
        self.pages[path] = (html, headers or {})
        return self.url + path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Site:
    """Control plane, relay and the pages, with the calls the tests make to check results."""

    def __init__(self, cp: ControlPlane, relay: Relay, pages: Pages) -> None:
        self.cp = cp
        self.relay = relay
        self.pages = pages
        self.public = cp.keys["public"]

    def api(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return self.cp.api(method, path, body)

    def experiment(self, body: dict[str, Any]) -> dict[str, Any]:
        created = self.api("POST", "/experiments", body)
        assert created.status_code == 201, created.text
        self.relay_current()
        return created.json()  # type: ignore[no-any-return]

    def relay_current(self) -> None:
        wanted = {
            e["key"]: e["snapshotVersion"]
            for e in self.api("GET", "/environments").json()["environments"]
        }

        def current() -> bool:
            held = self.relay.readyz()["environments"]
            return all(held.get(env, {}).get("version", -1) >= v for env, v in wanted.items())

        eventually(current, what="the relay caught up")

    def stored(self, unit: str, event: str | None = None) -> list[dict[str, Any]]:
        query = f"/events?unit={unit}&limit=1000" + (f"&event={event}" if event else "")
        answer = self.api("GET", query)
        assert answer.status_code == 200, answer.text
        return answer.json()["events"]  # type: ignore[no-any-return]

    def wait_stored(
        self, unit: str, event: str, count: int = 1, timeout: float = 15
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []

        def arrived() -> bool:
            found[:] = self.stored(unit, event)
            return len(found) >= count

        eventually(arrived, timeout=timeout, what=f"{count} {event} of {unit} stored")
        return found

    def page(
        self,
        path: str,
        body: str,
        *,
        head: str = "",
        headers: dict[str, str] | None = None,
        **data: str,
    ) -> str:
        """A page with the tracker tag in its head; ``data`` become ``data-*`` attributes."""
        attrs = "".join(f' data-{k.replace("_", "-")}="{v}"' for k, v in data.items())
        tag = f'<script src="{self.relay.url}/sdk/v1/vane.js" data-key="{self.public}"{attrs}></script>'
        html = (
            f"<!doctype html><html><head><meta charset=utf-8><title>{path}</title>{tag}{head}"
            f"</head><body>{body}</body></html>"
        )
        return self.pages.add(path, html, headers)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp: Path = tmp_path_factory.mktemp("browser")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
    pages = Pages()
    try:
        yield Site(cp, relay, pages)
    finally:
        pages.close()
        relay.process.stop()
        cp.process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):  # .ci/run installs it: missing there is a failure
            pytest.fail(f"{CHROMIUM} is not installed")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def visitors(browser: Any) -> Iterator[Callable[[], Any]]:
    """New browser profiles, a visitor each, all closed when the test ends. A visitor's browser
    lives on after they close a tab; closing the profile at once would cancel the beacon and the
    keepalive requests the closed page handed to it (what a test did, never a visitor)."""
    made: list[Any] = []

    def new() -> Any:
        ctx = browser.new_context()
        ctx.set_default_timeout(15_000)
        made.append(ctx)
        return ctx

    try:
        yield new
    finally:
        for ctx in made:
            ctx.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser profile (no cookies, no storage) per test."""
    ctx = browser.new_context()
    ctx.set_default_timeout(15_000)
    try:
        yield ctx
    finally:
        ctx.close()
