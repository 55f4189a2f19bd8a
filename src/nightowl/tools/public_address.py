"""Which addresses a fetch the agent steers may reach: globally routable ones only.

`ipaddress`'s `is_global` is the base, but on its own it lets through multicast, IPv6 site-local
and IPv6 forms that carry an IPv4 address inside (NAT64 `64:ff9b::/96`, 6to4 `2002::/16`),
which reach whatever that IPv4 address is. Those are unwrapped and the IPv4 address checked.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv6Address, IPv6Network

IPAddress = IPv4Address | IPv6Address
NAT64 = (IPv6Network("64:ff9b::/96"), IPv6Network("64:ff9b:1::/48"))


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 one leads to (mapped, 6to4, NAT64), if it carries one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in NAT64):
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """True when `address` is globally routable: not this host, private, shared (CGNAT),
    link-local (cloud metadata), multicast, reserved, documentation or the like."""
    if isinstance(address, IPv6Address):
        if address.teredo is not None:  # its ends can be anything; nobody serves pages there
            return False
        inner = embedded_ipv4(address)
        if inner is not None:
            return is_public(inner)
        if address.is_site_local:
            return False
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def parse_address(text: str) -> IPAddress | None:
    """`text` as an IP address (an IPv6 zone is dropped), or None when it is a name."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
