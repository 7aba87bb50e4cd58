"""The console's flags list at 10,000 flags in 3 environments, and the weight of the page.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_console      # FLAGS=10000 SAMPLES=60

The database is ``bench_scale``'s (10,000 flags written through the flag services, cached between
runs), with a third environment copied from production through the API. A control plane starts
as a real process; a client signs in as a person does (the sign-in form, then the session
cookie) and times ``GET /console/flags`` (the first page of 50 rows, 3 switches each) and a
search (``?q=``) over loopback: the time to the last byte, which on loopback is the server's time
plus well under a millisecond. The weight is what a browser downloads for the page (the HTML of
the first 50 rows, the stylesheet and the script; no other request is made: the CSP allows
none), as the control plane sends it on the wire to a browser that accepts gzip, beside the same
bytes uncompressed.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

import httpx

from tests.benchmarks.bench_scale import prepared_database
from tests.benchmarks.common import Row, log, percentile, print_table, wait_ready
from tests.processes import VANE, Process, free_port

FLAGS = int(os.environ.get("FLAGS", "10000"))
SAMPLES = int(os.environ.get("SAMPLES", "60"))
TARGETS = {"first": 50.0, "search": 100.0, "weight_kb": 20.0}  # weight: issue #35


def timed(client: httpx.Client, url: str) -> float:
    started = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.status_code
    return elapsed


def on_the_wire(client: httpx.Client, path: str) -> tuple[int, int]:
    """(bytes on the wire to a browser that accepts gzip, bytes uncompressed) of ``path``."""
    with client.stream("GET", path, headers={"Accept-Encoding": "gzip, deflate, br"}) as answer:
        assert answer.status_code == 200, answer.status_code
        wire = sum(len(chunk) for chunk in answer.iter_raw())
    with client.stream("GET", path, headers={"Accept-Encoding": "identity"}) as answer:
        plain = sum(len(chunk) for chunk in answer.iter_raw())
    return wire, plain


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="vane-console-") as tmp:
        database = Path(tmp) / "vane.db"
        keys, _generate_s, cached = prepared_database(database, FLAGS)
        log(f"{FLAGS:,} flags ready ({'cached' if cached else 'generated'})")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = Process(
            [*VANE, "control-plane", "--port", str(port)],
            env={"VANE_DATABASE_URL": f"sqlite:///{database}"},
            cwd=Path(tmp),
        )
        try:
            wait_ready(url)
            api = {"Authorization": f"Bearer {keys['management']}"}
            created = httpx.post(
                f"{url}/api/v1/environments",
                json={"key": "qa", "copyFrom": "production"},
                headers=api,
                timeout=300,
            )
            assert created.status_code == 201, created.text
            with httpx.Client(base_url=url, timeout=30) as client:
                form = client.get("/console/sign-in").text
                token = re.search(r'name="_login" value="([^"]+)"', form)
                assert token is not None
                signed = client.post(
                    "/console/sign-in",
                    data={"key": keys["management"], "_login": token.group(1)},
                )
                assert signed.status_code in (200, 303), signed.status_code
                page = client.get("/console/flags")
                assert page.text.count('role="switch"') == 150, "50 rows x 3 environments"
                for _ in range(5):  # warm-up
                    timed(client, "/console/flags")
                first = [timed(client, "/console/flags") for _ in range(SAMPLES)]
                search = [
                    timed(client, f"/console/flags?q=flag-0{i % 1000:03d}") for i in range(SAMPLES)
                ]
                sizes = {
                    name: on_the_wire(client, path)
                    for name, path in (
                        ("html", "/console/flags"),
                        ("css", "/console/static/console.css"),
                        ("js", "/console/static/console.js"),
                    )
                }
        finally:
            process.stop()
    weights = {name: wire / 1024 for name, (wire, _) in sizes.items()}
    total = sum(weights.values())
    plain = sum(size for _, size in sizes.values()) / 1024
    rows = [
        Row("flags list, first page: p50", f"{percentile(first, 50):.1f} ms"),
        Row(
            "flags list, first page: p95",
            f"{percentile(first, 95):.1f} ms",
            "",
            f"< {TARGETS['first']:.0f} ms",
        ),
        Row("search (?q=): p50", f"{percentile(search, 50):.1f} ms"),
        Row(
            "search (?q=): p95",
            f"{percentile(search, 95):.1f} ms",
            "",
            f"< {TARGETS['search']:.0f} ms",
        ),
        Row(
            "page weight on the wire, gzip (HTML + CSS + script)",
            f"{total:.1f} KB",
            f"HTML {weights['html']:.1f}, CSS {weights['css']:.1f}, JS {weights['js']:.1f} KB;"
            f" {plain:.1f} KB uncompressed",
            f"<= {TARGETS['weight_kb']:.0f} KB",
        ),
    ]
    print_table(
        f"Console: flags list at {FLAGS:,} flags x 3 environments ({SAMPLES} requests each)",
        rows,
        [
            "time to the last byte over loopback, one client, SQLite; no peer publishes a figure for "
            "its console's list, so the rows stand beside the issue's targets"
        ],
    )


if __name__ == "__main__":
    main()
