"""A backend as a user would write one: the Vane provider behind OpenFeature, a tiny HTTP API.

``python -m tests.e2e.backend_app <port>`` with ``VANE_URL`` (a relay) and ``VANE_SERVER_KEY``.
``GET /eval?flag=…&key=…&type=boolean|string|…&<attribute>=…`` answers the OpenFeature details;
``GET /direct?flag=…&key=…`` the direct API's value; ``GET /events`` every provider event seen.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.event import EventDetails, ProviderEvent
from openfeature.flag_evaluation import FlagEvaluationDetails

from shared.client import VaneProvider

provider = VaneProvider(os.environ["VANE_URL"], os.environ["VANE_SERVER_KEY"], init_timeout=30)
seen: list[dict[str, Any]] = []
lock = threading.Lock()


def remember(kind: str) -> Any:
    def handler(details: EventDetails) -> None:
        with lock:
            seen.append({"event": kind, "flagsChanged": details.flags_changed or []})

    return handler


for event in ProviderEvent:
    api.add_handler(event, remember(event.value))
api.set_provider_and_wait(provider)
client = api.get_client()

GETTERS: dict[str, tuple[Callable[..., FlagEvaluationDetails[Any]], Any]] = {
    "boolean": (client.get_boolean_details, False),
    "string": (client.get_string_details, ""),
    "integer": (client.get_integer_details, 0),
    "float": (client.get_float_details, 0.0),
    "object": (client.get_object_details, {}),
}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/events":
            with lock:
                self._answer(list(seen))
            return
        flag = query.pop("flag")
        key = query.pop("key")
        if url.path == "/direct":
            self._answer({"value": provider.evaluate(flag, {"targetingKey": key, **query}, None)})
            return
        getter, default = GETTERS[query.pop("type", "boolean")]
        details = getter(flag, default, EvaluationContext(targeting_key=key, attributes=query))
        self._answer(
            {
                "value": details.value,
                "variant": details.variant,
                "reason": details.reason,
                "errorCode": details.error_code.value if details.error_code else None,
            }
        )


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(f"backend on {server.server_port}", flush=True)
    server.serve_forever()
