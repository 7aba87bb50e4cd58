"""Where webhooks may send: http(s) only, and private addresses only as ``VANE_WEBHOOK_PRIVATE``
allows (``none``, the default: public addresses only; ``loopback``: also 127.0.0.0/8 and ::1, for
development and tests; ``all``: anything, for a control plane inside a trusted network).

Checked twice: when a webhook is saved (a literal address or ``localhost``), and before every
attempt on the addresses the host name resolves to then (a name may point anywhere later). The
attempt then connects to the very address that was checked (``Destination.address``), never to
what a second resolution answers: a name that rebinds to a private address between the check
and the connection (DNS rebinding) cannot reach it. The request keeps the name in ``Host`` and,
for https, in TLS (SNI and the certificate's name).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def allowed_address(address: IPAddress, policy: str) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if policy == "all":
        return True
    if address.is_loopback:
        return policy == "loopback"
    return address.is_global and not address.is_multicast


def url_problem(url: str, policy: str) -> str | None:
    """Why ``url`` cannot be a webhook's address, judged without resolving names; None if fine."""
    if len(url) > 2048:
        return "at most 2048 characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in {"http", "https"}:
        return "must be an http:// or https:// URL"
    host = parts.hostname
    if not host:
        return "has no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (sign with the secret instead)"
    if port == 0:
        return "port 0 is not a destination"
    if host == "localhost" or host.endswith(".localhost"):
        return None if policy != "none" else _refused("localhost")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: checked on the addresses it resolves to, at each attempt
    return None if allowed_address(address, policy) else _refused(str(address))


def _refused(what: str) -> str:
    return f"{what} is a private address; VANE_WEBHOOK_PRIVATE does not allow it"


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one attempt goes: the problem that stops it, or the address to connect to."""

    problem: str | None
    address: str | None = None  # checked; None: connect by name (VANE_WEBHOOK_PRIVATE=all)

    def request(self, url: str) -> tuple[str, dict[str, str], dict[str, Any]]:
        """``(url to connect to, headers, httpx extensions)`` for ``url`` pinned to ``address``."""
        if self.address is None:
            return url, {}, {}
        parts = urlsplit(url)
        host = parts.hostname or ""
        literal = f"[{self.address}]" if ":" in self.address else self.address
        netloc = literal + (f":{parts.port}" if parts.port is not None else "")
        pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        headers = {"Host": parts.netloc.rsplit("@", 1)[-1]}
        extensions: dict[str, Any] = {}
        if parts.scheme == "https" and host != self.address:
            extensions["sni_hostname"] = host  # SNI and certificate checks on the name
        return pinned, headers, extensions


async def destination(url: str, policy: str, timeout_s: float) -> Destination:
    """``url_problem``, and the host resolved once: every address allowed by ``policy``, the
    first one the attempt connects to."""
    problem = url_problem(url, policy)
    if problem is not None or policy == "all":
        return Destination(problem)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM),
            timeout_s,
        )
    except (OSError, TimeoutError, ValueError) as exc:  # ValueError: a name IDNA refuses
        return Destination(f"cannot resolve {host}: {exc or 'timed out'}")
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        if not allowed_address(address, policy):
            return Destination(f"{host} resolves to {_refused(str(address))}")
    if not addresses:
        return Destination(f"cannot resolve {host}: no address")
    return Destination(None, str(addresses[0]))
