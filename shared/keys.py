"""API key facts both sides need: prefixes per kind and the hash a key is stored and checked by."""

from __future__ import annotations

import hashlib

PREFIXES = {"management": "vsk_", "server": "ssk_", "relay": "rsk_", "public": "pk_"}
SERVER_KEY_FROM_PAGE = "a server key is never accepted from a page (the request has an Origin)"
"""Why a server key on a request with an ``Origin`` header is refused (403), on every endpoint of
both processes: a server key belongs in a backend, and a browser always sends ``Origin`` with a
cross-origin request, a POST, or a fetch."""


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
