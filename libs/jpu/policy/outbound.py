"""SPEC SEC4: where a request the platform makes for a user (a webhook) may go.

A user names a URL; the notifier POSTs to it from inside the site. Without this rule that POST
reaches the platform's own servers (NATS, the gateway on loopback), the cloud metadata service
(169.254.169.254) or anything on the site's private networks. So a webhook's host, once
resolved, must be a global unicast address — never loopback, link-local, private (RFC 1918,
fc00::/7, CGNAT 100.64/10), multicast, unspecified or reserved — unless the site's
`webhook_allow_networks` (CIDRs) names it. Only http and https.

Pure: the gateway checks at `PUT` (`url_problem`: the URL and any literal address, with no DNS;
then `addresses_problem` on what it resolved), the notifier again at send time on the addresses
it is about to connect to (a name may resolve elsewhere by then: DNS rebinding).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Final
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES: Final = ("http", "https")
# RFC 6761: always the local machine, whatever a resolver says
_LOCAL_NAMES: Final = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
# RFC 2606 / 6761 names no public resolver answers: not worth a DNS query at PUT (a test's
# `hooks.example` stays on the machine); the send-time check still resolves them
_NEVER_PUBLIC: Final = (".example", ".invalid", ".test")
_CGNAT: Final = ipaddress.ip_network("100.64.0.0/10")


def parse_networks(cidrs: Iterable[str]) -> list[IPNetwork]:
    """The site's allowlist; raises ValueError naming a CIDR that is not one."""
    out: list[IPNetwork] = []
    for cidr in cidrs:
        try:
            out.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as e:
            raise ValueError(f"{cidr!r} is not a CIDR network: {e}") from e
    return out


def literal_address(host: str) -> IPAddress | None:
    """`host` as the address a resolver would turn it into without DNS, or None for a name.
    Covers what getaddrinfo takes as IPv4 (inet_aton: `0`, `127.1`, `0x7f.1`, `2130706433`),
    not only dotted quads."""
    host = host.rstrip(".")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 zone id changes nothing
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefxABCDEFX." for c in host):
        value = _inet_aton(host)
        return None if value is None else ipaddress.IPv4Address(value)
    return None


def _inet_aton(host: str) -> int | None:
    """inet_aton(3) as the resolver applies it, in pure Python: 1–4 parts, each decimal, octal
    (leading 0) or hex (0x); the last part fills the bytes the others leave (`127.1`)."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        low = part.lower()
        try:
            if low.startswith("0x"):
                values.append(int(low[2:], 16))
            elif len(low) > 1 and low.startswith("0"):
                values.append(int(low, 8))
            else:
                values.append(int(low, 10))
        except ValueError:
            return None
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    out = 0
    for v in head:
        out = out << 8 | v
    return out << (8 * (4 - len(head))) | last


def address_problem(address: IPAddress, allow: Sequence[IPNetwork] = ()) -> str | None:
    """Why the platform must not connect to `address` for a user, or None."""
    mapped = getattr(address, "ipv4_mapped", None) or getattr(address, "sixtofour", None)
    if mapped is not None:  # ::ffff:127.0.0.1 is 127.0.0.1 on a dual-stack socket
        address = mapped
    if any(address in net for net in allow):
        return None
    kind = _kind(address)
    if kind is None:
        return None
    return f"{address} is a {kind} address (allowed only if webhook_allow_networks names it)"


def _kind(a: IPAddress) -> str | None:
    if a.is_unspecified:
        return "unspecified"
    if a.is_loopback:
        return "loopback"
    if a.is_link_local:
        return "link-local"
    if a.is_multicast:
        return "multicast"
    if a.is_private or (isinstance(a, ipaddress.IPv4Address) and a in _CGNAT):
        return "private"
    if not a.is_global:  # reserved, documentation, benchmarking, ...
        return "non-global"
    return None


def addresses_problem(addresses: Iterable[IPAddress], allow: Sequence[IPNetwork]) -> str | None:
    """Every address a name resolved to must pass: a client may try any of them."""
    found = False
    for a in addresses:
        found = True
        if why := address_problem(a, allow):
            return why
    return None if found else "the host resolved to no address"


def split(url: str) -> SplitResult | None:
    """The parts of an http(s) URL with a host and a valid port, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return None
    if parts.scheme not in SCHEMES or not parts.hostname:
        return None
    return parts


def url_problem(url: str, allow: Sequence[IPNetwork] = ()) -> str | None:
    """Why `url` is refused before any DNS: scheme, a local name, a literal address."""
    parts = split(url)
    if parts is None:
        return "must be an http:// or https:// URL with a host"
    host = (parts.hostname or "").rstrip(".").lower()
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        # names, not addresses: an allowlist of networks does not name them
        if any(ipaddress.ip_address("127.0.0.1") in net for net in allow):
            return None
        return f"{host} is the local machine"
    literal = literal_address(host)
    return None if literal is None else address_problem(literal, allow)


def needs_lookup(url: str) -> bool:
    """Whether the gateway should resolve `url`'s host at PUT: a name that could be public."""
    parts = split(url)
    host = ((parts.hostname if parts else "") or "").rstrip(".").lower()
    return bool(host) and literal_address(host) is None and not host.endswith(_NEVER_PUBLIC)
