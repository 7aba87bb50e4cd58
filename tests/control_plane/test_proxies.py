"""Who the client is behind reverse proxies (``VANE_TRUSTED_PROXIES``): the peer, unless it is a
trusted proxy; then the right-most forwarded address that is not one. Whatever a client writes
into X-Forwarded-For, it is never taken for another client."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control_plane.proxies import client_address, parse_trusted_proxies
from control_plane.settings import Settings

PROXIES = parse_trusted_proxies("10.0.0.0/8, 192.0.2.7, fd00::/8")


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None
    return address.is_global and not mapped


public_v4 = st.ip_addresses(v=4).filter(_public).map(str)
public_v6 = st.ip_addresses(v=6).filter(_public).map(str)
public = public_v4 | public_v6  # never a trusted proxy of PROXIES
trusted_v4 = st.integers(0, 2**24 - 1).map(lambda n: str(ipaddress.IPv4Address((10 << 24) + n)))
trusted = trusted_v4 | st.just("192.0.2.7") | st.just("fd00::1")
# what a client may write in the header: addresses, proxies' addresses, garbage
written = st.lists(public | trusted | st.text(max_size=20).filter(lambda t: "," not in t))


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted_proxies", "client"),
    [
        ("203.0.113.9", ["198.51.100.1"], (), "203.0.113.9"),  # none trusted: the header ignored
        ("203.0.113.9", ["198.51.100.1"], PROXIES, "203.0.113.9"),  # a peer not trusted
        ("10.0.0.1", [], PROXIES, "10.0.0.1"),  # a trusted proxy that forwards nothing
        ("10.0.0.1", ["198.51.100.1"], PROXIES, "198.51.100.1"),
        (
            "10.0.0.1",
            ["6.6.6.6, 198.51.100.1"],
            PROXIES,
            "198.51.100.1",
        ),  # the left is the client's
        ("10.0.0.1", ["6.6.6.6, 198.51.100.1, 10.1.2.3"], PROXIES, "198.51.100.1"),  # two proxies
        ("10.0.0.1", ["6.6.6.6", "198.51.100.1, 192.0.2.7"], PROXIES, "198.51.100.1"),  # 2 headers
        ("10.0.0.1", ["10.0.0.2, 10.0.0.3"], PROXIES, "10.0.0.2"),  # only proxies: the furthest
        ("10.0.0.1", ["198.51.100.1, nonsense"], PROXIES, "10.0.0.1"),  # garbage stops the walk
        ("10.0.0.1", ["198.51.100.1:4711"], PROXIES, "198.51.100.1"),  # with a port
        ("10.0.0.1", ["[2001:db8::1]:4711"], PROXIES, "2001:db8::1"),
        ("10.0.0.1", ["::FFFF:198.51.100.1"], PROXIES, "198.51.100.1"),  # one spelling each
        ("::ffff:10.0.0.1", ["198.51.100.1"], PROXIES, "198.51.100.1"),  # a dual-stack peer
        ("fd00::5", ["2001:DB8:0::1"], PROXIES, "2001:db8::1"),
        ("testclient", ["198.51.100.1"], PROXIES, "testclient"),  # not an address: the peer
        (None, ["198.51.100.1"], PROXIES, "unknown"),
    ],
)
def test_the_client_address(
    peer: str | None, forwarded: list[str], trusted_proxies: tuple[object, ...], client: str
) -> None:
    assert client_address(peer, forwarded, trusted_proxies) == client  # type: ignore[arg-type]


@given(peer=public | trusted, forwarded=written)
def test_without_trusted_proxies_the_peer_is_the_client_whatever_the_header(
    peer: str, forwarded: list[str]
) -> None:
    assert client_address(peer, [", ".join(forwarded)], ()) == peer


@given(peer=public, forwarded=written)
def test_a_peer_that_is_not_a_trusted_proxy_is_the_client(peer: str, forwarded: list[str]) -> None:
    assert client_address(peer, [", ".join(forwarded)], PROXIES) == peer


@given(spoofed=written, client=public, chain=st.lists(trusted, min_size=1, max_size=4))
def test_behind_trusted_proxies_a_client_is_what_the_first_proxy_saw_whatever_it_wrote(
    spoofed: list[str], client: str, chain: list[str]
) -> None:
    """The client wrote ``spoofed``; the first proxy appended the client's address, each next
    proxy the one before it; the last is the peer."""
    *appended, peer = chain
    header = ", ".join([*spoofed, client, *appended])
    assert client_address(peer, [header], PROXIES) == str(ipaddress.ip_address(client))


def test_the_setting_reads_addresses_and_blocks_and_names_itself_when_wrong() -> None:
    assert Settings.from_env({}).trusted_proxies == ()
    read = Settings.from_env({"VANE_TRUSTED_PROXIES": " 10.0.0.0/8 ,192.0.2.7,, fd00::/8 "})
    assert [str(n) for n in read.trusted_proxies] == ["10.0.0.0/8", "192.0.2.7/32", "fd00::/8"]
    with pytest.raises(ValueError, match=r"VANE_TRUSTED_PROXIES: 'proxy\.internal'"):
        Settings.from_env({"VANE_TRUSTED_PROXIES": "10.0.0.1, proxy.internal"})
