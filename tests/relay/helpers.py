"""A hand-built relay for HTTP tests: snapshot, access keys, store, app, and an ASGI driver.

The snapshot's rules and segments use distinctive strings (``member-zq7``, ``attr-plan-q3``,
``seg-vip-x9``, ``rule-id-k4``, ...) that appear nowhere else, so a test can prove that no relay
response ever carries rules.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from relay.http import ASGIApp, Message
from relay.prometheus import RelayMetrics
from relay.routes.compose import build_http_app
from relay.settings import RelaySettings
from relay.store import EnvironmentState, Store
from shared.keys import hash_token
from shared.wire.protocol import Access, AccessKey
from shared.wire.snapshot import (
    Clause,
    FlagSnapshot,
    Rule,
    SegmentRule,
    SegmentSnapshot,
    Serve,
    Snapshot,
    Target,
    Variation,
    WeightedVariation,
)

PUBLIC = "pk_live_test_public_0123456789abcdef"
PUBLIC_ID = "key_public_1"
LISTED = "pk_live_test_listed_0123456789abcdef"
LISTED_ID = "key_listed_2"
LISTED_ORIGIN = "https://shop.example.com"
SERVER = "ssk_live_test_server_0123456789abcdef"
SERVER_ID = "key_server_3"
OTHER_ENV_PUBLIC = "pk_live_test_staging_0123456789abcdef"

ENV = "production"
BASE = "http://relay.test"

# Strings that live only inside rules, clauses and segments; never in a response.
SECRETS = (
    "member-zq7",
    "excluded-member-w2",
    "seg-vip-x9",
    "attr-plan-q3",
    "rule-id-k4",
    "rule-id-m5",
    "rule-id-seg-p8",
    "segrule-id-t1",
    "acme-corp-e5",
    "@corp-domain-h6.example",
    "target-user-j1",
    "server-only-secret-value",
    "segmentMatch",
    "startsWith",
    "endsWith",
    "clauses",
    "ruleId",
    "rule_id",
    "ruleIndex",
    "bucketBy",
    "inRollout",
    "prerequisite",
)


def public_access(*extra: AccessKey) -> Access:
    return Access(
        keys=(
            AccessKey(id=PUBLIC_ID, kind="public", hash=hash_token(PUBLIC)),
            AccessKey(
                id=LISTED_ID, kind="public", hash=hash_token(LISTED), origins=(LISTED_ORIGIN,)
            ),
            AccessKey(id=SERVER_ID, kind="server", hash=hash_token(SERVER)),
            *extra,
        )
    )


def _flag(key: str, values: Iterable[Any], **kwargs: Any) -> FlagSnapshot:
    values = list(values)
    names = kwargs.pop("names", None) or [""] * len(values)
    kind = kwargs.pop("type", None) or (
        "boolean" if all(isinstance(v, bool) for v in values) else "string"
    )
    return FlagSnapshot(
        key=key,
        version=kwargs.pop("version", 3),
        type=kind,
        variations=tuple(
            Variation(i, v, n) for i, (v, n) in enumerate(zip(values, names, strict=True))
        ),
        enabled=kwargs.pop("enabled", True),
        off_variation=kwargs.pop("off_variation", 1 if len(values) > 1 else 0),
        fallthrough=kwargs.pop("fallthrough", Serve(variation=0)),
        **kwargs,
    )


def build_snapshot(version: int = 1, *, dark_mode_enabled: bool = True) -> Snapshot:
    flags = [
        # boolean with individual targets and a segment rule
        _flag(
            "dark-mode",
            [True, False],
            names=["on", "off"],
            enabled=dark_mode_enabled,
            fallthrough=Serve(variation=1),
            targets=(Target(variation=0, values=("target-user-j1",)),),
            rules=(
                Rule(
                    id="rule-id-seg-p8",
                    clauses=(Clause(op="segmentMatch", values=("seg-vip-x9",)),),
                    serve=Serve(variation=0),
                ),
            ),
        ),
        # multivariate string with attribute clauses and a percentage rollout
        _flag(
            "banner-text",
            ["Welcome!", "Hello there", "Hi"],
            names=["welcome", "hello", ""],
            rules=(
                Rule(
                    id="rule-id-k4",
                    clauses=(
                        Clause(op="startsWith", attribute="attr-plan-q3", values=("acme-corp-e5",)),
                        Clause(
                            op="endsWith", attribute="email", values=("@corp-domain-h6.example",)
                        ),
                    ),
                    serve=Serve(variation=1),
                ),
                Rule(
                    id="rule-id-m5",
                    clauses=(Clause(op="in", attribute="country", values=("CA",)),),
                    serve=Serve(
                        rollout=(WeightedVariation(1, 50_000), WeightedVariation(2, 50_000))
                    ),
                ),
            ),
            fallthrough=Serve(variation=0),
        ),
        # numeric flag, rollout fallthrough
        FlagSnapshot(
            key="max-items",
            version=2,
            type="number",
            variations=(Variation(0, 10), Variation(1, 25)),
            enabled=True,
            off_variation=0,
            fallthrough=Serve(rollout=(WeightedVariation(0, 30_000), WeightedVariation(1, 70_000))),
        ),
        # switched off
        _flag("new-checkout", [True, False], names=["on", "off"], enabled=False),
        # server-side only: never visible to public keys
        _flag(
            "internal-ops",
            ["server-only-secret-value", "plain"],
            client_side=False,
        ),
    ]
    segments = [
        SegmentSnapshot(
            key="seg-vip-x9",
            version=1,
            included=("member-zq7",),
            excluded=("excluded-member-w2",),
            rules=(
                SegmentRule(
                    id="segrule-id-t1",
                    clauses=(Clause(op="in", attribute="attr-plan-q3", values=("vip",)),),
                ),
            ),
        )
    ]
    return Snapshot(
        project="proj",
        environment=ENV,
        version=version,
        flags={f.key: f for f in sorted(flags, key=lambda f: f.key)},
        segments={s.key: s for s in segments},
        generated_at=1_770_000_000_000 + version,
    )


def settings(**overrides: Any) -> RelaySettings:
    values: dict[str, Any] = {
        "upstream": "http://127.0.0.1:9",
        "key": "rsk_live_test",
        "sse_secret": b"test-secret-0123456789",
        "relay_id": "relay-test",
    }
    values.update(overrides)
    return RelaySettings(**values)


@dataclass
class Relay:
    store: Store
    settings: RelaySettings
    metrics: RelayMetrics
    app: ASGIApp
    bodies: list[bytes] = field(default_factory=list)

    def client(self) -> httpx.AsyncClient:
        """An HTTP client over the app that records every response body."""

        async def record(response: httpx.Response) -> None:
            await response.aread()
            self.bodies.append(response.content)

        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url=BASE,
            event_hooks={"response": [record]},
        )

    def swap(self, snapshot: Snapshot, access: Access | None = None) -> EnvironmentState:
        state = EnvironmentState.build(snapshot, access or public_access())
        self.store.swap(state)
        return state


def make_relay(*, loaded: bool = True, keepalive_s: float = 15.0, **overrides: Any) -> Relay:
    store = Store()
    if loaded:
        store.swap(EnvironmentState.build(build_snapshot(), public_access()))
        store.connected = True
        store.upstream_alive()
    relay_settings = settings(**overrides)
    metrics = RelayMetrics(store)
    app = build_http_app(store, relay_settings, metrics, sse_keepalive_s=keepalive_s)
    return Relay(store, relay_settings, metrics, app)


def auth(token: str = PUBLIC, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


class StreamDriver:
    """Drives one long-lived ASGI request by hand, so a stream can be read as it is written.

    (httpx's ASGITransport buffers the whole body, which an event stream never finishes.)
    """

    def __init__(
        self, app: ASGIApp, path: str, query: str = "", headers: Iterable[tuple[str, str]] = ()
    ):
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [
                (b"host", b"relay.test"),
                *((k.lower().encode(), v.encode()) for k, v in headers),
            ],
            "server": ("relay.test", 80),
            "client": ("127.0.0.1", 5000),
        }
        self.app = app
        self.messages: asyncio.Queue[Message] = asyncio.Queue()
        self._disconnect = asyncio.Event()
        self._requested = False
        self.task: asyncio.Task[None] | None = None
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.finished = False

    async def _receive(self) -> Message:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._disconnect.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        await self.messages.put(message)

    async def _serve(self) -> None:
        await self.app(self.scope, self._receive, self._send)

    async def start(self) -> None:
        self.task = asyncio.create_task(self._serve())
        first = await asyncio.wait_for(self.messages.get(), 2)
        assert first["type"] == "http.response.start"
        self.status = first["status"]
        self.headers = {k.decode(): v.decode() for k, v in first["headers"]}

    async def read(self, wait_s: float = 2.0) -> bytes:
        """The next body chunk; b"" once the response is finished."""
        if self.finished:
            return b""
        message = await asyncio.wait_for(self.messages.get(), wait_s)
        assert message["type"] == "http.response.body"
        if not message.get("more_body", False):
            self.finished = True
        body: bytes = message.get("body", b"")
        return body

    async def disconnect(self) -> None:
        self._disconnect.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 2)

    async def body(self) -> bytes:
        """For a response that is not a stream: everything after the start."""
        chunks = []
        while not self.finished:
            chunks.append(await self.read())
        return b"".join(chunks)
