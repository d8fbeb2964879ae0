"""Address networks from settings text: ``FAILOPEN_TRUSTED_PROXIES`` is a list of them."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from ipaddress import IPv4Network, IPv6Network

__all__ = ["Network", "parse_networks"]

Network = IPv4Network | IPv6Network


def parse_networks(value: str | Iterable[str]) -> tuple[Network, ...]:
    """Networks from comma-separated CIDRs (``10.0.0.0/8, 2001:db8::/32``; a bare address is one
    host), or from an iterable of them; ValueError naming the first one that is not a network.

    Strict: ``10.0.0.1/8`` (host bits set) is refused rather than read as ``10.0.0.0/8``, since
    one cannot tell which of the two was meant.
    """
    items = value.split(",") if isinstance(value, str) else value
    found: list[Network] = []
    for item in items:
        text = item.strip() if isinstance(item, str) else item
        if text == "":
            continue
        try:
            network = ipaddress.ip_network(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{text!r} is not an address or a network in CIDR notation "
                             f"({exc})") from None
        if network not in found:
            found.append(network)
    return tuple(found)
