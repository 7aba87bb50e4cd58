"""Who is calling: the key a request carries, whether its origin is allowed, and the answer for a
key the relay does not know."""

from __future__ import annotations

from relay.http import ErrorBody, Response
from relay.store import Store
from shared.wire.protocol import AccessKey


def origin_allowed(key: AccessKey, origin: bytes) -> bool:
    """An empty allow-list, or one holding ``*``, admits every origin."""
    origins = key.origins
    if not origins or "*" in origins:
        return True
    return origin.decode("latin-1") in origins


def bearer_token(headers: dict[bytes, bytes]) -> str | None:
    auth = headers.get(b"authorization")
    if auth is not None:
        scheme, _, value = auth.partition(b" ")
        if scheme.lower() == b"bearer" and value.strip():
            return value.strip().decode("latin-1")
    api_key = headers.get(b"x-api-key")
    if api_key is not None and api_key.strip():
        return api_key.strip().decode("latin-1")
    return None


def unknown_key(
    store: Store, error_body: ErrorBody, headers: list[tuple[bytes, bytes]]
) -> Response:
    """401 for a key the snapshots do not list; 503 while the relay has no snapshot at all (it
    cannot know any key yet: a first start before the control plane answered)."""
    if not store.states:
        message = "the relay has not yet received its flags and keys from the control plane"
        return Response(503, error_body(503, message), [*headers, (b"retry-after", b"1")])
    return Response(401, error_body(401, "unknown or revoked key"), headers)
