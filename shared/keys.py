"""API key facts both sides need: prefixes per kind and the hash a key is stored and checked by."""

from __future__ import annotations

import hashlib

PREFIXES = {"management": "vsk_", "server": "ssk_", "relay": "rsk_", "public": "pk_"}


def hash_token(token: str) -> str:
    """SHA-256 hex of the whole token; keys carry 238 random bits, so no salt or stretching."""
    return hashlib.sha256(token.encode()).hexdigest()


def kind_of(token: str) -> str | None:
    prefix, sep, _ = token.partition("_")
    if not sep:
        return None
    for kind, known in PREFIXES.items():
        if known == prefix + "_":
            return kind
    return None
