"""Stripe-style signatures: ``Vane-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`` of
``"<t>.<raw body>"`` keyed with the webhook's secret. A receiver recomputes the HMAC over the
bytes it received and compares in constant time; ``t`` lets it refuse old replays (the check,
in five lines, is in docs/webhooks.md)."""

from __future__ import annotations

import hashlib
import hmac

HEADER = "Vane-Signature"


def signature(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"
