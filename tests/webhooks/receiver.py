"""A real webhook receiver on loopback for tests: records every request, verifies signatures the
way the docs tell receivers to, and answers what the test tells it to (500 first, then 200)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def verify(secret: str, body: bytes, header: str, tolerance: int = 300) -> bool:
    """The check docs/webhooks.md gives receivers, written from the contract, not Vane's code."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    mac = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256)
    fresh = abs(time.time() - int(parts["t"])) <= tolerance
    return fresh and hmac.compare_digest(mac.hexdigest(), parts["v1"])


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.body)  # type: ignore[no-any-return]


@dataclass
class Receiver:
    secret: str
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    fail_next: int = 0  # answer this many requests with 500
    fail_all: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            status = 200
            if self.fail_all:
                status = 503
            elif self.fail_next > 0:
                self.fail_next -= 1
                status = 500
            self.requests.append(Received(headers, body, status))
            return status

    def verified(self) -> list[Received]:
        """Every request, each checked against its ``Vane-Signature`` (raises if one fails)."""
        with self.lock:
            got = list(self.requests)
        for r in got:
            header = r.headers.get("vane-signature", "")
            assert verify(self.secret, r.body, header), f"bad signature: {header}"
        return got

    def unique(self) -> dict[str, dict[str, Any]]:
        """Accepted payloads by ``id``: what a receiver that drops repeats keeps."""
        kept: dict[str, dict[str, Any]] = {}
        for r in self.verified():
            if r.status == 200:
                kept.setdefault(r.payload["id"], r.payload)
        return kept

    def types(self) -> list[str]:
        return sorted(p["type"] for p in self.unique().values())


@contextmanager
def receiving(secret: str, host: str = "127.0.0.1", port: int = 0) -> Iterator[Receiver]:
    receiver = Receiver(secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = receiver.answer(headers, body)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    receiver.url = f"http://{host}:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
