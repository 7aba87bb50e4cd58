"""Settings read from the environment (``VANE_*``) when the app starts, never at import."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DATABASE_URL = "sqlite:///" + str(Path(".vane") / "vane.db")
MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    bootstrap: bool = True  # create project `default` and first keys on an empty database
    heartbeat_s: float = 10.0  # relay stream heartbeats
    reconcile_s: float = 5.0  # compare served snapshot versions with the database this often
    bayesian_prior_sd: float | None = 0.3  # normal prior on the log lift; None = flat
    replica_id: str = field(default_factory=lambda: "cp-" + secrets.token_hex(4))
    admin_origins: tuple[str, ...] = ()  # browser origins allowed to call the API (CORS)
    rate_limit_per_s: float = 0.0  # requests per second per API key; 0 = off
    rate_limit_burst: int = 0  # bucket size; 0 = one second's worth

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        return cls(
            database_url=env.get("VANE_DATABASE_URL") or DEFAULT_DATABASE_URL,
            redis_url=env.get("VANE_REDIS_URL") or None,
            max_body_bytes=int(env.get("VANE_MAX_BODY_BYTES") or MAX_BODY_BYTES),
            bootstrap=(env.get("VANE_BOOTSTRAP", "1") not in {"0", "false", "no"}),
            heartbeat_s=float(env.get("VANE_HEARTBEAT_S") or 10.0),
            reconcile_s=float(env.get("VANE_RECONCILE_S") or 5.0),
            bayesian_prior_sd=_prior(env.get("VANE_BAYESIAN_PRIOR_SD")),
            admin_origins=tuple(
                o.strip() for o in (env.get("VANE_ADMIN_ORIGINS") or "").split(",") if o.strip()
            ),
            rate_limit_per_s=float(env.get("VANE_RATE_LIMIT") or 0),
            rate_limit_burst=int(env.get("VANE_RATE_BURST") or 0),
        )


def _prior(value: str | None) -> float | None:
    if value is None or value == "":
        return 0.3
    if value.lower() in {"flat", "none"}:
        return None
    prior = float(value)
    if prior <= 0:
        raise ValueError("VANE_BAYESIAN_PRIOR_SD must be positive, or 'flat'")
    return prior
