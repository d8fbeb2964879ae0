"""Which client a request comes from, for the outage rate limit and the audit.

The peer address, unless the peer is one of ``FAILOPEN_TRUSTED_PROXIES``: then the right-most
``X-Forwarded-For`` entry that is not a trusted proxy. Each proxy appends the address it got the
request from, so walking from the right over our own proxies reaches the first address nobody we
trust wrote for themselves; everything to its left is whatever the client chose to send. Without
trusted proxies, or from a peer that is not one, the header changes nothing.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address

from failopen._internal.networks import Network, parse_networks

__all__ = ["MAX_HOPS", "client_address", "parse_trusted_proxies"]

#: Entries walked from the right at most: a longer chain of our own proxies is not a real one.
MAX_HOPS = 32


def parse_trusted_proxies(text: str | Sequence[str]) -> tuple[Network, ...]:
    """``FAILOPEN_TRUSTED_PROXIES`` as networks (comma-separated CIDRs; a bare address is one
    host); ValueError naming an entry that is not one."""
    return parse_networks(text)


def client_address(peer: str | None, forwarded_for: str | None,
                   trusted: Sequence[Network]) -> str:
    """The client's address (``""`` when the peer is unknown). Never raises."""
    try:
        if not trusted or not peer:
            return peer or ""
        hop = _address(peer)
        if hop is None or not _trusted(hop[0], trusted):
            return peer
        if not forwarded_for:
            return hop[1]
        for entry in reversed(forwarded_for.rsplit(",", MAX_HOPS)[-MAX_HOPS:]):
            entry = entry.strip()
            if not entry:
                continue  # "a,,b": an empty entry says nothing
            address = _address(entry)
            if address is None:
                # "unknown", a token, garbage: what lies to its left came through a hop nobody
                # vouches for, so the answer is the last hop we trust (one bucket for them all).
                return hop[1]
            if not _trusted(address[0], trusted):
                return address[1]
            hop = address
        return hop[1]  # every entry is a trusted proxy
    except Exception:  # a header no rule above foresaw: the peer, as without trusted proxies
        return peer or ""


# Proxies and busy clients come back again and again: parsing costs ~3 µs, a cache hit ~0.1.
@functools.lru_cache(maxsize=1024)
def _address(text: str) -> tuple[IPv4Address | IPv6Address, str] | None:
    """An address from a peer or an entry (``1.2.3.4``, ``::1``, ``1.2.3.4:5678`` or
    ``[::1]:5678``: some proxies add the port) and how ipaddress writes it; None for anything
    else."""
    if len(text) > 64:
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        if text.startswith("["):
            text = text[1:].partition("]")[0]
        elif text.count(":") == 1:
            text = text.partition(":")[0]
        else:
            return None
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return None
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:10.0.0.1 from a dual-stack socket is 10.0.0.1
    return address, str(address)


def _trusted(address: IPv4Address | IPv6Address, trusted: Sequence[Network]) -> bool:
    return any(address in network for network in trusted)
