"""The browser tracker: ``GET /sdk/v1/vane.js`` and the selectors it hides before the body paints.

- ``GET /sdk/v1/vane.js`` (no key): the script (``relay/static/vane.js``), read once at start,
  with a strong ``ETag`` (304 on ``If-None-Match``), ``Cache-Control`` and a gzip copy for
  ``Accept-Encoding: gzip``. The script takes the relay's base URL from its own ``src`` and the
  public key from ``data-key``.
- ``GET /sdk/v1/selectors?key=pk_…&url=…[&unit=…]`` (public key in the query, so the request is
  a CORS "simple" request without a preflight): ``{"selectors": [...]}``, the CSS selectors of the
  element and cta experiments running on ``url``, and with ``unit`` also ``"experiments"``: those
  experiments with the unit's variant and what to render, as ``POST /sdk/v1/experiments`` lists
  them with ``expose: false`` (nothing is recorded: the tracker exposes what it shows). The
  script loads this synchronously while the ``<head>`` is parsed, so it hides exactly those
  elements and swaps each one as the parser inserts it, before the body paints (see
  ``docs/browser.md``, "Anti-flicker"). The answer is cached by the browser (``max-age``; with
  ``unit``, ``private``: per URL and so per unit) and revalidated by ETag.
- ``GET /sdk/v1/vane.d.ts``: the script's TypeScript declarations, served like the script.
"""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from typing import Any

import msgspec

from relay.http import Request, Response, Router, vane_error, vane_error_body
from relay.routes.admission import Admission, Gate
from relay.routes.experiments import on_page, render, unit_problem, variant_index
from shared.wire.kinds import USER

SCRIPT_PATH = "/sdk/v1/vane.js"
TYPES_PATH = "/sdk/v1/vane.d.ts"
SELECTORS_PATH = "/sdk/v1/selectors"
SCRIPT_CACHE = b"public, max-age=300"
SELECTORS_CACHE = b"public, max-age=30"
UNIT_CACHE = b"private, max-age=30"  # one visitor's variants: their browser's cache, no other
MAX_URL = 2048


def script_source(name: str = "vane.js") -> bytes:
    return resources.files("relay").joinpath(f"static/{name}").read_bytes()


class Script:
    """The script's bytes, their gzip and the ETag of each, computed once."""

    def __init__(self, source: bytes, content_type: bytes = b"text/javascript") -> None:
        self.content_type = content_type + b"; charset=utf-8"
        self.plain = source
        self.gzipped = gzip.compress(source, compresslevel=9, mtime=0)
        digest = hashlib.sha256(source).hexdigest()[:20]
        self.etag = f'"{digest}"'.encode()
        self.etag_gzip = f'"{digest}-gz"'.encode()

    async def serve(self, request: Request) -> Response:
        accept = request.headers.get(b"accept-encoding", b"").lower()
        gzipped = b"gzip" in accept
        etag = self.etag_gzip if gzipped else self.etag
        headers = [
            (b"content-type", self.content_type),
            (b"cache-control", SCRIPT_CACHE),
            (b"etag", etag),
            (b"vary", b"Accept-Encoding"),
            (b"access-control-allow-origin", b"*"),
            (b"x-content-type-options", b"nosniff"),
        ]
        if _etag_matches(request.headers.get(b"if-none-match"), etag):
            return Response(304, b"", headers)
        if gzipped:
            headers.append((b"content-encoding", b"gzip"))
            return Response(200, self.gzipped, headers)
        return Response(200, self.plain, headers)


def _etag_matches(header: bytes | None, etag: bytes) -> bool:
    if not header:
        return False
    tags = {t.strip().removeprefix(b"W/") for t in header.split(b",")}
    return etag in tags or b"*" in tags


class Selectors:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def serve(self, request: Request) -> Response:
        admitted = await self.gate.admit(request, vane_error_body)
        if not isinstance(admitted, Admission):
            return admitted
        url = request.query("url")
        if url is not None and len(url) > MAX_URL:
            message = f"at most {MAX_URL} characters"
            body = vane_error(422, f"url: {message}", details=(("url", message),))
            return Response(422, body, admitted.headers)
        unit = request.query("unit")
        problem = None if unit is None else unit_problem(unit)
        if problem is not None:
            body = vane_error(422, f"unit: {problem}", details=(("unit", problem),))
            return Response(422, body, admitted.headers)
        etag = admitted.state.etag.encode()
        cache = SELECTORS_CACHE if unit is None else UNIT_CACHE
        headers = [*admitted.headers, (b"cache-control", cache), (b"etag", etag)]
        if _etag_matches(request.headers.get(b"if-none-match"), etag):
            return Response(304, b"", headers)
        page = on_page(admitted.state.snapshot.experiments.values(), url)
        answer: dict[str, Any] = {"selectors": sorted({e.selector for e in page if e.selector})}
        if unit is not None:
            # experiments on other kinds than the user are listed by POST /sdk/v1/experiments,
            # which takes their keys (``units``)
            shown = ((e, variant_index(e, unit)) for e in page if e.unit_kind == USER)
            answer["experiments"] = [render(e, index) for e, index in shown if index is not None]
        return Response(200, msgspec.json.encode(answer), headers)


def register(router: Router, gate: Gate, script: Script | None = None) -> None:
    router.add("GET", SCRIPT_PATH, (script or Script(script_source())).serve)
    types = Script(script_source("vane.d.ts"), b"application/typescript")
    router.add("GET", TYPES_PATH, types.serve)
    router.add("GET", SELECTORS_PATH, Selectors(gate).serve, cors=True)
