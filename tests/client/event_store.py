"""An in-memory ``POST /api/v1/events`` on loopback, with faults on demand.

It implements the contract the clients code against (auth, 1 MiB body limit, 1 to 1000 events,
validation with ``events[i].field`` details, de-duplication by ``eventId`` answered as
``{"accepted", "duplicates"}``) in a threaded stdlib HTTP server, and can be told to fail the
next requests: a status (503, 429 with ``Retry-After``, 422 …), store-then-fail (the answer is
lost but the events are in), drop the connection, or hold requests until released.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SERVER_KEY = "ssk_live_test"
PUBLIC_KEY = "pk_live_test"


@dataclass
class Fault:
    status: int = 503
    retry_after: str | None = None
    body: dict[str, Any] | None = None
    store_first: bool = False  # store the events, then fail: the answer is "lost"
    drop_connection: bool = False


@dataclass
class Request:
    at: float
    status: int
    event_ids: list[str]


@dataclass
class EventStore:
    max_body: int = 1 << 20
    refused_names: set[str] = field(default_factory=set)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    faults: deque[Fault] = field(default_factory=deque)
    url: str = ""

    def __post_init__(self) -> None:
        self.changed = threading.Condition()
        self.released = threading.Event()
        self.released.set()
        self.holding = 0

    # -- controls ---------------------------------------------------------------------------

    def fail(self, count: int, fault: Fault | None = None) -> None:
        with self.changed:
            self.faults.extend([fault or Fault()] * count)

    def hold(self) -> None:
        """Keep requests waiting (unanswered) until :meth:`release`."""
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> bool:
        with self.changed:
            return bool(self.changed.wait_for(lambda: predicate(self), timeout))

    def wait_for_events(self, count: int, timeout: float = 10.0) -> bool:
        return self.wait_for(lambda store: len(store.events) >= count, timeout)

    @property
    def answered(self) -> list[Request]:
        with self.changed:
            return list(self.requests)

    # -- the endpoint -----------------------------------------------------------------------

    def handle(
        self, headers: Any, body: bytes
    ) -> tuple[int, dict[str, str], dict[str, Any] | None]:
        """Returns (status, extra headers, JSON body or None to drop the connection)."""
        auth = headers.get("Authorization", "")
        if auth == f"Bearer {PUBLIC_KEY}":
            return 403, {}, _error("forbidden", "a server key is required")
        if auth != f"Bearer {SERVER_KEY}":
            return 401, {}, _error("unauthorized", "unknown key")
        if len(body) > self.max_body:
            return 413, {}, _error("too_large", f"body over {self.max_body} bytes")
        try:
            events = json.loads(body)["events"]
        except (ValueError, KeyError, TypeError):
            return 400, {}, _error("bad_request", "malformed JSON")
        problems = self._validate(events)
        if problems:
            return 422, {}, _error("validation_error", "invalid events", problems)
        with self.changed:
            fault = self.faults.popleft() if self.faults else None
        if fault is not None and not fault.store_first:
            return _fault_answer(fault)
        accepted = duplicates = 0
        with self.changed:
            for event in events:
                key = event.get("eventId") or f"anonymous-{len(self.events)}"
                if key in self.events:
                    duplicates += 1
                else:
                    self.events[key] = event
                    accepted += 1
            self.changed.notify_all()
        if fault is not None:
            return _fault_answer(fault)
        return 200, {}, {"accepted": accepted, "duplicates": duplicates}

    def _validate(self, events: Any) -> list[dict[str, str]]:
        if not isinstance(events, list) or not 1 <= len(events) <= 1000:
            return [{"field": "events", "message": "1 to 1000 events"}]
        problems = []
        for i, event in enumerate(events):
            if not isinstance(event.get("unit"), str) or not event["unit"]:
                problems.append({"field": f"events[{i}].unit", "message": "required"})
            if not isinstance(event.get("event"), str) or not event["event"]:
                problems.append({"field": f"events[{i}].event", "message": "required"})
            elif event["event"] in self.refused_names:
                problems.append({"field": f"events[{i}].event", "message": "refused name"})
            value = event.get("value")
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                problems.append({"field": f"events[{i}].value", "message": "minor units"})
            props = event.get("props")
            if props is not None and len(json.dumps(props)) > 16 << 10:
                problems.append({"field": f"events[{i}].props", "message": "over 16 KiB"})
        return problems

    def record(self, status: int, body: bytes) -> None:
        try:
            ids = [e.get("eventId", "") for e in json.loads(body)["events"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            ids = []
        with self.changed:
            self.requests.append(Request(time.monotonic(), status, ids))
            self.changed.notify_all()


def _error(code: str, message: str, details: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or []}}


def _fault_answer(fault: Fault) -> tuple[int, dict[str, str], dict[str, Any] | None]:
    if fault.drop_connection:
        return 0, {}, None
    headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
    return fault.status, headers, fault.body or _error("unavailable", f"fault {fault.status}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: _Server

    def do_POST(self) -> None:
        store = self.server.store
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/api/v1/events":
            self._answer(404, {}, _error("not_found", self.path))
            return
        with store.changed:
            store.holding += 1
            store.changed.notify_all()
        store.released.wait()
        with store.changed:
            store.holding -= 1
        status, headers, payload = store.handle(self.headers, body)
        store.record(status, body)
        if payload is None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._answer(status, headers, payload)

    def _answer(self, status: int, headers: dict[str, str], payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    store: EventStore


class RunningStore:
    """Serves an :class:`EventStore` on 127.0.0.1 from a background thread."""

    def __init__(self, store: EventStore | None = None) -> None:
        self.store = store or EventStore()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.store = self.store
        host, port = self._server.server_address[:2]
        self.store.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> EventStore:
        self._thread.start()
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
