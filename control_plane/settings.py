"""Settings read from the environment (``VANE_*``) when the app starts, never at import."""

from __future__ import annotations

import os
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
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if environ is None else environ)
        return cls(
            database_url=env.get("VANE_DATABASE_URL") or DEFAULT_DATABASE_URL,
            redis_url=env.get("VANE_REDIS_URL") or None,
            max_body_bytes=int(env.get("VANE_MAX_BODY_BYTES") or MAX_BODY_BYTES),
            bootstrap=(env.get("VANE_BOOTSTRAP", "1") not in {"0", "false", "no"}),
        )
