"""The end client's ``client_key`` behind proxies (docs/client.md, "The client key").

The daemon throttles by it per client network and bounds the CPU per client, so it must
be an address the client cannot choose. ``X-Forwarded-For`` lists ``client, proxy1,
proxy2``: each proxy *appends* the address it received the request from. Only the
entries your own proxies appended are true; the leftmost entry is the one a client
forges. So the key is read from the *right*: with ``trusted_hops`` proxies in front of
the gateway, the client is the entry ``trusted_hops - 1`` places from the right end.
This is the Rust client's ``client_key_from_forwarded``, rule for rule.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["client_key_from_forwarded"]


def _canonical(entry: str) -> str:
    """An address as the daemon will read it (an IPv4-mapped IPv6 address as IPv4), or
    the entry as written. Like Rust's ``IpAddr`` parser, a zone (``%eth0``) is no
    address."""
    if "%" in entry:
        return entry
    try:
        ip = ipaddress.ip_address(entry)
    except ValueError:
        return entry
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def client_key_from_forwarded(
    peer: str | ipaddress.IPv4Address | ipaddress.IPv6Address,
    forwarded: str | Iterable[str] | None,
    trusted_hops: int,
) -> str:
    """The ``client_key`` of a request that reached the gateway from ``peer`` with the
    ``X-Forwarded-For`` header value(s) ``forwarded`` (several headers, in the order
    received, are one list: RFC 9110 §5.3), behind ``trusted_hops`` proxies of your own
    (0: clients connect to the gateway directly, and the header is ignored).

    The answer is the address your outermost trusted proxy saw, as text. When the
    header holds fewer entries than ``trusted_hops``, it is the leftmost entry there is
    (one of your proxies still appended it), or ``peer`` itself. An entry that is no IP
    address is returned as written (trimmed): the daemon gives it a bucket of its own.

    >>> client_key_from_forwarded("10.0.0.2", "198.51.100.9, 203.0.113.7", 1)
    '203.0.113.7'
    >>> client_key_from_forwarded("10.0.0.2", "203.0.113.7", 0)
    '10.0.0.2'
    """
    if isinstance(trusted_hops, bool) or not isinstance(trusted_hops, int) or trusted_hops < 0:
        raise ValueError("trusted_hops must be a non-negative integer")
    peer_key = _canonical(str(peer).strip())
    if trusted_hops == 0:
        return peer_key
    if forwarded is None:
        values: list[str] = []
    elif isinstance(forwarded, str):
        values = [forwarded]
    else:
        values = list(forwarded)
    entries = [e.strip() for value in values for e in value.split(",")]
    entries = [e for e in entries if e]
    first_trusted = len(entries) - trusted_hops
    if first_trusted < 0:
        return _canonical(entries[0]) if entries else peer_key
    return _canonical(entries[first_trusted])
