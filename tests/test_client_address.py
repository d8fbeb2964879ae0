"""Which client a request comes from (issue 20): the peer, and X-Forwarded-For only through the
proxies listed in FAILOPEN_TRUSTED_PROXIES; a forged header from anyone else changes nothing."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failopen.web.client_address import MAX_HOPS, client_address, parse_trusted_proxies

PROXIES = parse_trusted_proxies("10.0.0.0/8, 2001:db8:ffff::/48")


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert client_address("203.0.113.5", "198.51.100.1", ()) == "203.0.113.5"
    assert client_address("10.0.0.1", "198.51.100.1", ()) == "10.0.0.1"


def test_a_forged_header_from_an_untrusted_peer_changes_nothing() -> None:
    assert client_address("203.0.113.5", "198.51.100.1", PROXIES) == "203.0.113.5"
    assert client_address("203.0.113.5", "10.0.0.9, 198.51.100.1", PROXIES) == "203.0.113.5"


def test_through_a_trusted_proxy_the_right_most_untrusted_entry_counts() -> None:
    assert client_address("10.0.0.1", "198.51.100.1", PROXIES) == "198.51.100.1"
    # The client wrote the left one; our proxies wrote the rest.
    assert client_address("10.0.0.1", "6.6.6.6, 198.51.100.1, 10.0.0.2",
                          PROXIES) == "198.51.100.1"
    assert client_address("2001:db8:ffff::1", "2001:db8:1::7", PROXIES) == "2001:db8:1::7"


def test_a_trusted_peer_without_the_header_is_the_client() -> None:
    assert client_address("10.0.0.1", None, PROXIES) == "10.0.0.1"
    assert client_address("10.0.0.1", "", PROXIES) == "10.0.0.1"
    assert client_address("10.0.0.1", "10.0.0.3, 10.0.0.2", PROXIES) == "10.0.0.3"


def test_an_unreadable_entry_ends_the_walk_at_the_last_trusted_hop() -> None:
    """What lies left of "unknown" came through a hop nobody vouches for: never chosen."""
    assert client_address("10.0.0.1", "6.6.6.6, unknown, 10.0.0.2", PROXIES) == "10.0.0.2"
    assert client_address("10.0.0.1", "6.6.6.6, _hidden", PROXIES) == "10.0.0.1"


def test_empty_entries_ports_and_mapped_addresses() -> None:
    assert client_address("10.0.0.1", "198.51.100.1,, ,", PROXIES) == "198.51.100.1"
    assert client_address("10.0.0.1", "198.51.100.1:4711", PROXIES) == "198.51.100.1"
    assert client_address("10.0.0.1", "[2001:db8:1::7]:443", PROXIES) == "2001:db8:1::7"
    # A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d.
    assert client_address("::ffff:10.0.0.1", "198.51.100.1", PROXIES) == "198.51.100.1"
    assert client_address("::ffff:203.0.113.5", "198.51.100.1", PROXIES) == "::ffff:203.0.113.5"
    # Spelled another way, still the same address: one rate-limit bucket.
    assert client_address("10.0.0.1", "2001:DB8:1:0:0:0:0:7", PROXIES) == "2001:db8:1::7"


def test_an_unknown_peer_is_no_address() -> None:
    assert client_address(None, "198.51.100.1", PROXIES) == ""
    assert client_address("", "198.51.100.1", PROXIES) == ""
    assert client_address("unix:/run/app.sock", "198.51.100.1", PROXIES) == "unix:/run/app.sock"


def test_a_long_chain_is_walked_only_so_far() -> None:
    chain = ", ".join(["6.6.6.6"] + [f"10.0.{n // 256}.{n % 256}" for n in range(10_000)])
    found = client_address("10.0.0.1", chain, PROXIES)
    assert found != "6.6.6.6"
    assert ipaddress.ip_address(found) in PROXIES[0]
    short = ", ".join(["6.6.6.6"] + [f"10.1.0.{n}" for n in range(MAX_HOPS - 1)])
    assert client_address("10.0.0.1", short, PROXIES) == "6.6.6.6"


@given(st.text(max_size=40), st.none() | st.text(max_size=300))
def test_any_header_from_an_untrusted_peer_is_ignored_without_raising(
    peer: str, forwarded: str | None
) -> None:
    untrusted = f"203.0.113.{len(peer) % 250}"
    assert client_address(untrusted, forwarded, PROXIES) == untrusted
    client_address(peer, forwarded, PROXIES)
    client_address("10.0.0.1", forwarded, PROXIES)


@given(st.lists(st.ip_addresses().map(str), max_size=6), st.ip_addresses().map(str))
def test_the_answer_is_the_right_most_untrusted_entry_never_one_left_of_it(
    left: list[str], right: str
) -> None:
    found = client_address("10.0.0.1", ", ".join([*left, right]), PROXIES)
    address = ipaddress.ip_address(right)
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if not any(address in network for network in PROXIES):
        assert found == str(address)


def test_parse_trusted_proxies() -> None:
    assert parse_trusted_proxies("10.0.0.0/8, 192.168.1.7,,") == (
        ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("192.168.1.7/32"))
    assert parse_trusted_proxies(["::1"]) == (ipaddress.ip_network("::1/128"),)
    assert parse_trusted_proxies("") == ()
    with pytest.raises(ValueError, match="'10.0.0.1/8'"):
        parse_trusted_proxies("10.0.0.1/8")  # host bits: 10.0.0.0/8 or 10.0.0.1/32?
    with pytest.raises(ValueError, match="'proxy.internal'"):
        parse_trusted_proxies("10.0.0.0/8, proxy.internal")
