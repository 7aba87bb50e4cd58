"""Who the client is behind reverse proxies (``VANE_TRUSTED_PROXIES``): the one rule, used where
the control plane counts or records a client's address (sign-in throttling, and the address the
audit records with a failed sign-in).

Without trusted proxies (the default) the client is the socket's peer and ``X-Forwarded-For``
is ignored: anyone can write that header, so trusting it would let a client name any address
and step out of its throttle. With them, a request whose peer is a trusted proxy comes from the
right-most address of ``X-Forwarded-For`` that is not itself a trusted proxy: each proxy appends
the address it saw, so what a client wrote stands to the left of what the first trusted proxy
saw, and is never reached.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_trusted_proxies(value: str) -> tuple[Network, ...]:
    """``VANE_TRUSTED_PROXIES``: comma-separated IP addresses or CIDR blocks ("" = none)."""
    networks: list[Network] = []
    for item in value.split(","):
        if not item.strip():
            continue
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"VANE_TRUSTED_PROXIES: {item.strip()!r} is not an IP address or a CIDR block "
                "(e.g. 10.0.0.0/8, 192.0.2.7, fd00::/8)"
            ) from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    """An address as a proxy writes it: bare, ``[v6]``, or with a port (``1.2.3.4:80``,
    ``[::1]:80``); IPv4-mapped IPv6 as IPv4. None if it is not one."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # IPv4 with a port (IPv6 has two colons or more)
        text = text.split(":", 1)[0]
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address in network for network in trusted)


def client_address(
    peer: str | None, forwarded_for: Iterable[str], trusted: Sequence[Network]
) -> str:
    """The client's address: ``peer`` (the socket's), unless it is a trusted proxy; then the
    right-most address of the ``X-Forwarded-For`` values (every header of the name, in order)
    that is not a trusted proxy. Where the chain ends, or holds something that is not an
    address, the last trusted hop is the client (nothing further left can be believed)."""
    if not peer:
        return "unknown"
    nearest = _address(peer)
    if nearest is None or not _trusted(nearest, trusted):
        return peer
    hops = [hop for value in forwarded_for for hop in value.split(",") if hop.strip()]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break
        nearest = address
        if not _trusted(address, trusted):
            break
    return str(nearest)
