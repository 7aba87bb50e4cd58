"""Relay settings, from the command line and the environment (``VANE_RELAY_*``) at start-up."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from shared.wire.body import MAX_BODY_BYTES


@dataclass(frozen=True, slots=True)
class RelaySettings:
    upstream: str  # control plane base URL, e.g. http://127.0.0.1:8000 (the preferred one)
    key: str  # rsk_ relay key
    upstreams: tuple[str, ...] = ()  # every control-plane URL, preferred first; () = (upstream,)
    host: str = "127.0.0.1"
    port: int = 8100
    data_dir: Path = Path(".vane/relay")
    relay_id: str = ""
    heartbeat_s: float = 10.0
    stale_after_s: float = 30.0  # no word from upstream for this long: report stale
    sse_secret: bytes = b""  # signs SSE stream tokens; random per process unless set
    sse_token_ttl_s: int = 600
    rate_limit_per_s: float = 0.0  # per public key and relay process; 0 = off
    rate_limit_burst: int = 0
    spool_max_bytes: int = 256 << 20  # events waiting to be forwarded; beyond this, 503
    max_streams: int = 10_000  # open OFREP event streams; beyond this, 503 + Retry-After
    backoff_cap_s: float = 10.0  # reconnect/retry delays never exceed this (full jitter below)
    # the control plane's VANE_MAX_BODY_BYTES: forwarded batches stay below it (a 413 lowers it)
    upstream_max_body_bytes: int = MAX_BODY_BYTES
    forward_stall_s: float = 120.0  # pending events, no batch forwarded this long: not ready

    @property
    def upstream_urls(self) -> tuple[str, ...]:
        """Every control plane to try, preferred first."""
        return self.upstreams or (self.upstream,)

    @property
    def websocket_url(self) -> str:
        return websocket_url(self.upstream)

    @classmethod
    def from_env(cls, **overrides: object) -> RelaySettings:
        env = os.environ
        values: dict[str, object] = {
            "upstreams": split_upstreams(env.get("VANE_RELAY_UPSTREAM", "")),
            "key": env.get("VANE_RELAY_KEY", ""),
            "host": env.get("VANE_RELAY_HOST", "127.0.0.1"),
            "port": int(env.get("VANE_RELAY_PORT", "8100")),
            "data_dir": Path(env.get("VANE_RELAY_DATA_DIR", ".vane/relay")),
            "relay_id": env.get("VANE_RELAY_ID", ""),
            "heartbeat_s": float(env.get("VANE_RELAY_HEARTBEAT_S", "10")),
            "stale_after_s": float(env.get("VANE_RELAY_STALE_AFTER_S", "30")),
            "sse_secret": env.get("VANE_RELAY_SSE_SECRET", "").encode(),
            "rate_limit_per_s": float(env.get("VANE_RELAY_RATE_LIMIT", "0")),
            "rate_limit_burst": int(env.get("VANE_RELAY_RATE_BURST", "0")),
            "spool_max_bytes": int(env.get("VANE_RELAY_SPOOL_MAX_BYTES", str(256 << 20))),
            "max_streams": int(env.get("VANE_RELAY_MAX_STREAMS", "10000")),
            "backoff_cap_s": float(env.get("VANE_RELAY_BACKOFF_CAP_S", "10")),
            "upstream_max_body_bytes": int(
                env.get("VANE_RELAY_UPSTREAM_MAX_BODY_BYTES") or MAX_BODY_BYTES
            ),
            "forward_stall_s": float(env.get("VANE_RELAY_FORWARD_STALL_S") or "120"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        upstreams = values["upstreams"] or ("http://127.0.0.1:8000",)
        assert isinstance(upstreams, tuple)
        values["upstreams"] = upstreams
        values.setdefault("upstream", upstreams[0])
        if not values["sse_secret"]:
            values["sse_secret"] = secrets.token_bytes(32)
        if not values["relay_id"]:
            values["relay_id"] = f"relay-{secrets.token_hex(3)}"
        return cls(**values)  # type: ignore[arg-type]


def split_upstreams(text: str) -> tuple[str, ...]:
    """``VANE_RELAY_UPSTREAM``: one URL, or several separated by commas (preferred first)."""
    return tuple(url.strip().rstrip("/") for url in text.split(",") if url.strip())


def websocket_url(upstream: str) -> str:
    """The relay stream endpoint of a control plane's base URL."""
    base = upstream.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return base + "/api/v1/relay/stream"
