"""What a browser gets from a control plane on loopback: answers compressed when it asks for gzip
(the console's pages, its CSS and JS, the API), streams sent as they are made and never
compressed, and the API docs (``/schema/swagger``) with every asset served by the control plane
itself, so they work offline or behind a firewall."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from tests.e2e.test_relays import ControlPlane, start_control_plane

pytestmark = pytest.mark.e2e

GZIP = {"Accept-Encoding": "gzip"}
IDENTITY = {"Accept-Encoding": "identity"}


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    tmp = tmp_path_factory.mktemp("wire")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    try:
        for n in range(12):
            assert cp.api("POST", "/flags", {"key": f"flag-{n}"}).status_code == 201
        yield cp
    finally:
        cp.process.stop()


@pytest.fixture(scope="module")
def console(cp: ControlPlane) -> Iterator[httpx.Client]:
    """A browser signed in to the console (its session cookie in the client)."""
    with httpx.Client(base_url=cp.url, timeout=10) as client:
        form = client.get("/console/sign-in").text
        token = re.search(r'name="_login" value="([^"]+)"', form)
        assert token is not None
        signed = client.post(
            "/console/sign-in",
            data={"key": cp.keys["management"], "_login": token.group(1), "next": "/console/flags"},
        )
        assert signed.status_code in (200, 303), signed.text
        yield client


def raw(client: httpx.Client, path: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    """The answer and its body as sent on the wire (not decoded)."""
    with client.stream("GET", path, headers=headers) as answer:
        return answer, b"".join(answer.iter_raw())


def assert_gzipped(client: httpx.Client, path: str, headers: dict[str, str] | None = None) -> int:
    """``path`` comes gzipped to a client that asks for it, and decodes to what a client that does
    not ask gets; returns its size on the wire."""
    plain, plain_body = raw(client, path, {**(headers or {}), **IDENTITY})
    packed, packed_body = raw(client, path, {**(headers or {}), **GZIP})
    assert plain.status_code == packed.status_code == 200, (path, plain.status_code)
    assert "content-encoding" not in plain.headers, path
    assert packed.headers.get("content-encoding") == "gzip", (path, dict(packed.headers))
    assert "accept-encoding" in packed.headers.get("vary", "").lower(), path
    assert gzip.decompress(packed_body) == plain_body, path
    assert len(packed_body) < len(plain_body), path
    return len(packed_body)


def test_the_console_page_its_css_and_js_come_gzipped(console: httpx.Client) -> None:
    page = console.get("/console/flags").text
    assert "flag-11" in page
    assert_gzipped(console, "/console/flags")
    assets = re.findall(r'(?:href|src)="(/console/static/[^"]+)"', page)
    assert {Path(urlsplit(a).path).suffix for a in assets} >= {".css", ".js"}, assets
    for asset in assets:
        assert_gzipped(console, asset)


def test_an_api_list_comes_gzipped(cp: ControlPlane) -> None:
    with httpx.Client(base_url=cp.url, timeout=10) as client:
        management = {"Authorization": f"Bearer {cp.keys['management']}"}
        assert_gzipped(client, "/api/v1/flags", management)
        assert_gzipped(client, "/v1/flags", management)


def first_bytes(client: httpx.Client, path: str, headers: dict[str, str]) -> tuple[str, bytes]:
    """The content encoding of a stream, and its first bytes as they came."""
    with client.stream("GET", path, headers={**headers, **GZIP}) as answer:
        assert answer.status_code == 200, path
        assert answer.headers["content-type"].startswith("text/event-stream"), path
        chunk = next(answer.iter_raw())
        return answer.headers.get("content-encoding", ""), chunk


def test_streams_are_sent_as_made_and_never_compressed(
    cp: ControlPlane, console: httpx.Client
) -> None:
    encoding, chunk = first_bytes(console, "/console/live", {})
    assert encoding == ""
    assert b"event: open" in chunk
    bound = cp.api("POST", "/keys", {"kind": "server", "environment": "production"})
    assert bound.status_code == 201, bound.text
    with httpx.Client(base_url=cp.url, timeout=10) as client:
        server = {"Authorization": f"Bearer {bound.json()['key']}"}
        encoding, chunk = first_bytes(client, "/api/v1/snapshot/stream", server)
    assert encoding == ""
    assert b"event: snapshot" in chunk


class Assets(HTMLParser):
    """Every URL a page makes its browser load: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {"script": "src", "link": "href", "img": "src"}
        for name, value in attrs:
            if tag in names and name == names[tag] and value:
                self.urls.append(value)


@pytest.mark.parametrize("path", ["/schema/swagger", "/schema"])
def test_the_api_docs_load_nothing_from_another_origin(cp: ControlPlane, path: str) -> None:
    page = httpx.get(f"{cp.url}{path}", timeout=10)
    assert page.status_code == 200
    parser = Assets()
    parser.feed(page.text)
    kinds = {".js": "javascript", ".css": "css", ".png": "image/png"}
    assert {Path(urlsplit(url).path).suffix for url in parser.urls} == set(kinds), parser.urls
    for url in parser.urls:
        absolute = urljoin(page.url.__str__(), url)
        assert urlsplit(absolute).netloc == urlsplit(cp.url).netloc, url  # same origin
        asset = httpx.get(absolute, timeout=10)
        assert asset.status_code == 200, url
        assert kinds[Path(urlsplit(url).path).suffix] in asset.headers["content-type"], url
    assert "SwaggerUIBundle" in page.text
