"""The browser tracker: its size, how soon a page's experiments are applied, its main-thread time.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_tracker        # LOADS=40 (page loads per series)

One control plane (SQLite) and one relay on loopback, a page on another origin with one element
and one cta experiment, driven by Debian's headless Chromium (``/usr/bin/chromium``). Two series
of page loads: first views (a fresh browser profile each time: script and selectors fetched) and
repeat views (one profile: both from the browser's cache). Per load, the page notes:

* DOMContentLoaded → applied: from the ``DOMContentLoaded`` event to the tracker's
  ``vane:applied`` performance mark (both experiments applied and their elements shown); 0 when
  that happened before it;
* DOMContentLoaded → ready: the same to ``vane.ready()`` settled, which also waits for the flags;
* blocking time at start: from the end of the script's download to the end of its synchronous
  run (parse, compile, the synchronous selectors-and-variants request, hiding): what it holds the
  parser for;
* script time: Chromium's ``ScriptDuration`` for the whole page (the tracker is its only script
  besides two one-line markers), through the DevTools protocol.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.benchmarks.common import Cleanup, Row, Spread, log, print_table, wait_quiet
from tests.e2e.test_relays import eventually, start_control_plane, start_relay

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TARGET_P95_MS = 50.0
PEERS_KB = "GrowthBook auto.min.js 18.0 KB, LaunchDarkly ldclient.min.js 18.2 KB"


def serve(html: str) -> tuple[ThreadingHTTPServer, str]:
    body = html.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # a page closed before its last bytes: not a failure

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/bench"


def page_html(relay: str, key: str) -> str:
    return f"""<!doctype html><html><head><meta charset=utf-8>
<script>window.__t0 = performance.now();
document.addEventListener("DOMContentLoaded", () => {{ window.__dcl = performance.now(); }});</script>
<script src="{relay}/sdk/v1/vane.js" data-key="{key}"></script>
<script>window.__t1 = performance.now();
vane.ready().then(() => {{ window.__applied = performance.now(); }});</script>
</head><body><div id="hero"><h1>Original headline</h1></div>
<a class="buy" href="/buy">Buy</a>{"<p>filler</p>" * 200}</body></html>"""


MEASURE = """async () => {
  await vane.ready();
  while (window.__dcl === undefined) await new Promise(r => setTimeout(r, 5));
  const entry = performance.getEntriesByType("resource").find(e => e.name.includes("/vane.js"));
  const loaded = entry ? Math.max(entry.responseEnd, window.__t0) : window.__t0;
  const [mark] = performance.getEntriesByName("vane:applied");
  return {applied: Math.max(0, mark.startTime - window.__dcl),
          ready: Math.max(0, window.__applied - window.__dcl), blocking: window.__t1 - loaded,
          text: document.querySelector("#hero h1").textContent};
}"""


def load(context: Any, url: str) -> dict[str, float]:
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(url)
    figures: dict[str, float] = page.evaluate(MEASURE)
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    figures["script"] = metrics.get("ScriptDuration", 0.0) * 1000
    page.close()
    return figures


def main() -> None:
    from playwright.sync_api import sync_playwright

    loads = int(os.environ.get("LOADS", "40"))
    with tempfile.TemporaryDirectory(prefix="vane-bench-tracker-") as tmp, Cleanup() as cleanup:
        tmp_path = Path(tmp)
        log("starting the control plane and a relay")
        cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
        cleanup.add(cp.process)
        relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
        cleanup.add(relay.process)
        for body in (
            {
                "name": "bench-hero",
                "type": "element",
                "url": "/bench",
                "selector": "#hero h1",
                "variants": [{"key": "control", "content": ""}, {"key": "new", "content": "New"}],
            },
            {
                "name": "bench-buy",
                "type": "cta",
                "url": "/bench",
                "selector": "a.buy",
                "variants": [
                    {"key": "control", "content": ""},
                    {"key": "new", "content": "Try", "bg": "#111", "color": "#fff"},
                ],
            },
        ):
            assert cp.api("POST", "/experiments", body).status_code == 201
        cp.api("POST", "/flags", {"key": "bench-flag"})
        public = cp.keys["public"]

        def relay_has_both() -> bool:
            answer = httpx.post(
                f"{relay.url}/sdk/v1/experiments",
                json={"unit": "probe", "url": "/bench", "expose": False},
                headers={"Authorization": f"Bearer {public}"},
            )
            return answer.status_code == 200 and len(answer.json()["experiments"]) == 2

        eventually(relay_has_both, timeout=30, what="experiments on the relay")
        served = httpx.get(f"{relay.url}/sdk/v1/vane.js", headers={"Accept-Encoding": "gzip"})
        raw = httpx.get(f"{relay.url}/sdk/v1/vane.js", headers={"Accept-Encoding": "identity"})
        gz_bytes = int(served.headers.get("content-length", len(gzip.compress(raw.content))))
        server, url = serve(page_html(relay.url, public))
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                try:
                    load(browser.new_context(), url)  # warm-up
                    wait_quiet()
                    log(f"{loads} first views")
                    first = []
                    for _ in range(loads):
                        context = browser.new_context()
                        first.append(load(context, url))
                        context.close()
                    log(f"{loads} repeat views")
                    context = browser.new_context()
                    repeat = [load(context, url) for _ in range(loads)]
                    context.close()
                finally:
                    browser.close()
        finally:
            server.shutdown()
            server.server_close()

    def spread(values: list[dict[str, float]], name: str) -> Spread:
        return Spread.of([v[name] for v in values])

    def p95(values: list[dict[str, float]], name: str) -> str:
        ordered = sorted(v[name] for v in values)
        return f"p95 {ordered[max(0, -(-95 * len(ordered) // 100) - 1)]:.1f} ms"

    print_table(
        "Browser tracker (vane.js)",
        [
            Row(
                "size",
                f"{len(raw.content):,} B, {gz_bytes:,} B gzipped",
                PEERS_KB,
                "≤ 6 KB gzipped",
            ),
            Row(
                "DOMContentLoaded → applied, first view",
                spread(first, "applied").text(),
                p95(first, "applied"),
                f"target p95 < {TARGET_P95_MS:.0f} ms",
            ),
            Row(
                "DOMContentLoaded → applied, repeat view",
                spread(repeat, "applied").text(),
                p95(repeat, "applied"),
                f"target p95 < {TARGET_P95_MS:.0f} ms",
            ),
            Row(
                "DOMContentLoaded → ready() (flags too), first view",
                spread(first, "ready").text(),
                p95(first, "ready"),
                "",
            ),
            Row(
                "DOMContentLoaded → ready() (flags too), repeat view",
                spread(repeat, "ready").text(),
                p95(repeat, "ready"),
                "",
            ),
            Row("blocking time at start, first view", spread(first, "blocking").text(), "", ""),
            Row("blocking time at start, repeat view", spread(repeat, "blocking").text(), "", ""),
            Row(
                "page script time (CDP ScriptDuration), first view",
                spread(first, "script").text(),
                "",
                "",
            ),
            Row(
                "page script time (CDP ScriptDuration), repeat view",
                spread(repeat, "script").text(),
                "",
                "",
            ),
        ],
        notes=[
            f"{loads} loads per series; relay and control plane on loopback (SQLite); "
            "one element and one cta experiment and one flag; headless Chromium "
            "(Debian's package).",
            "Applied = the tracker's vane:applied mark (both experiments applied, their "
            "elements shown); ready = vane.ready() settled (flags loaded too); 0 when before "
            "DOMContentLoaded.",
            "Units are random visitors, so about half the loads show each variant.",
        ],
    )


if __name__ == "__main__":
    main()
