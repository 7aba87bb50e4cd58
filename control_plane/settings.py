"""Settings read from the environment (``VANE_*``) when the app starts, never at import."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from control_plane.proxies import Network, parse_trusted_proxies
from control_plane.sso import SsoSettings, sso_settings_from_env
from shared.wire.body import MAX_BODY_BYTES

DEFAULT_DATABASE_URL = "sqlite:///" + str(Path(".vane") / "vane.db")


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
    schedule_poll_s: float = 1.0  # look for due scheduled changes this often
    webhook_poll_s: float = 0.5  # look for webhook events to fan out and deliveries due
    webhook_timeout_s: float = 10.0  # one delivery attempt, connect to last byte
    webhook_max_attempts: int = 8  # then the delivery is marked failed (redeliver restarts it)
    webhook_backoff_s: float = 5.0  # first retry within this; doubles per attempt (full jitter)
    webhook_backoff_cap_s: float = 3600.0  # no retry waits longer than this
    webhook_private: str = "none"  # private addresses webhooks may reach: none | loopback | all
    webhook_retention_days: float = 30.0  # delivered and failed deliveries are kept this long
    console_idle_minutes: float = 60.0  # a console session unused this long signs out
    public_url: str | None = (
        None  # the console's address in links (invitations); else the request's
    )
    sso: SsoSettings | None = None  # sign-in through an OpenID provider (VANE_OIDC_*)
    # reverse proxies whose X-Forwarded-For names the client (control_plane.proxies); none: the
    # socket's peer is the client
    trusted_proxies: tuple[Network, ...] = ()

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
            schedule_poll_s=float(env.get("VANE_SCHEDULE_POLL_S") or 1.0),
            webhook_poll_s=float(env.get("VANE_WEBHOOK_POLL_S") or 0.5),
            webhook_timeout_s=float(env.get("VANE_WEBHOOK_TIMEOUT_S") or 10.0),
            webhook_max_attempts=max(1, int(env.get("VANE_WEBHOOK_MAX_ATTEMPTS") or 8)),
            webhook_backoff_s=float(env.get("VANE_WEBHOOK_BACKOFF_S") or 5.0),
            webhook_backoff_cap_s=float(env.get("VANE_WEBHOOK_BACKOFF_CAP_S") or 3600.0),
            webhook_private=_private(env.get("VANE_WEBHOOK_PRIVATE")),
            webhook_retention_days=float(env.get("VANE_WEBHOOK_RETENTION_DAYS") or 30.0),
            console_idle_minutes=float(env.get("VANE_CONSOLE_IDLE_MINUTES") or 60.0),
            public_url=(env.get("VANE_PUBLIC_URL") or "").strip().rstrip("/") or None,
            sso=sso_settings_from_env(env),
            trusted_proxies=parse_trusted_proxies(env.get("VANE_TRUSTED_PROXIES") or ""),
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


PRIVATE_CHOICES = ("none", "loopback", "all")


def _private(value: str | None) -> str:
    choice = (value or "none").strip().lower()
    if choice not in PRIVATE_CHOICES:
        raise ValueError("VANE_WEBHOOK_PRIVATE must be one of none, loopback, all")
    return choice
