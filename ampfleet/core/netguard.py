"""Outbound requests to user-given URLs must not reach the platform's own network (SSRF).

Only globally routable addresses are allowed, unless the operator allows private targets.
`ipaddress`'s `is_global` is the base rule; on top of it, addresses that carry an IPv4 address
inside an IPv6 one (IPv4-compatible `::a.b.c.d`, IPv4-mapped, IPv4-translated, 6to4, Teredo,
NAT64) are judged by the address they carry, since a dual-stack host or a gateway delivers
them to it (`ipaddress` calls `::127.0.0.1` global),
and IPv6 site-local and multicast are refused although this Python calls some of them global.

A name is resolved once, each address it resolves to is checked, and the request is then sent
to the checked address (`Target`), with the name only in the Host header and TLS server name:
a second lookup at connect time could answer differently (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
"""(host name, port) -> the addresses it resolves to, as text; raises OSError when it cannot."""

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# The last 32 bits are the IPv4 address: IPv4-compatible (RFC 4291, deprecated but still
# routed to IPv4 by some stacks) and IPv4-translated (RFC 2765, SIIT).
_LOW_32_BITS_IPV4 = (
    (ipaddress.ip_network("::/96"), "the IPv4-compatible address"),
    (ipaddress.ip_network("::ffff:0:0:0/96"), "the IPv4-translated address"),
)
_ALLOW_HINT = "set AMPFLEET_WEBHOOK_ALLOW_PRIVATE=true to allow such targets"


class RefusedTargetError(ValueError):
    """The URL may not be called; the message says why, for the user who gave it."""


@dataclass(frozen=True)
class Target:
    """Where a checked URL is sent: its address pinned, its name kept for HTTP and TLS."""

    url: str
    """The URL with the checked address in place of the host name."""
    host_header: str
    server_name: str | None
    """The TLS server name (SNI, certificate check); None when the URL names an address."""


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def refuse_reason(
    url: str, *, allow_private: bool, resolve: Resolver = system_resolver
) -> str | None:
    """None when `url` may be called; else why not. With private targets allowed the name
    is not looked up (it may resolve only where the request is sent from)."""
    try:
        parts = _parse(url)
        if not allow_private:
            _checked_addresses(parts, resolve)
    except RefusedTargetError as exc:
        return str(exc)
    return None


def pin(url: str, *, allow_private: bool, resolve: Resolver = system_resolver) -> Target:
    """The target to send `url` to, its addresses checked just now; RefusedTargetError if
    it may not be called."""
    parts = _parse(url)
    address = _checked_addresses(parts, resolve, allow_private=allow_private)[0]
    host = f"[{address}]" if address.version == 6 else str(address)
    pinned = parts._replace(netloc=f"{host}:{_port(parts)}").geturl()
    hostname = parts.hostname or ""
    literal = _literal(hostname)
    # HTTP headers and TLS carry a name as ASCII: an internationalised one as IDNA.
    name = None if literal is not None else hostname.encode("idna").decode()
    shown = name or (f"[{hostname}]" if ":" in hostname else hostname)
    host_header = shown if parts.port is None else f"{shown}:{parts.port}"
    return Target(pinned, host_header, name)


def _parse(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        hostname, _ = parts.hostname, parts.port  # both raise on a malformed authority
    except ValueError as exc:
        raise RefusedTargetError(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise RefusedTargetError("only http and https URLs are allowed")
    if not hostname:
        raise RefusedTargetError("the URL has no host")
    if parts.username or parts.password:
        raise RefusedTargetError("credentials in the URL are not allowed")
    if _literal(hostname) is None:
        try:
            hostname.encode("idna")  # labels of 1-63 characters, no empty label
        except UnicodeError:
            raise RefusedTargetError(f"{hostname!r} is not a valid host name") from None
    return parts


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _checked_addresses(
    parts: SplitResult, resolve: Resolver, *, allow_private: bool = False
) -> list[Address]:
    host = parts.hostname or ""
    literal = _literal(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            answers = resolve(host, _port(parts))
        except (OSError, UnicodeError):
            raise RefusedTargetError(f"cannot resolve {host}") from None
        found = [address for answer in answers if (address := _literal(answer)) is not None]
        if not found:
            raise RefusedTargetError(f"cannot resolve {host}")
    if not allow_private:
        for address in found:
            if (why := private_reason(address)) is not None:
                named = "" if literal is not None else f"{host} resolves to "
                raise RefusedTargetError(
                    f"{named}{address}, a loopback or private address ({why}); {_ALLOW_HINT}"
                )
    return found


def private_reason(address: Address) -> str | None:
    """Why `address` is not one a user's URL may reach, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        for embedded, kind in _embedded_ipv4(address):
            if private_reason(embedded) is not None:
                return f"it carries {kind} {embedded}"
        if address.is_site_local:
            return "site-local"
    if address.is_multicast:
        return "multicast"
    if not address.is_global:
        return "not globally routable"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[ipaddress.IPv4Address, str]]:
    carried = []
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    carried += [(low, kind) for network, kind in _LOW_32_BITS_IPV4 if address in network]
    if address.ipv4_mapped is not None:
        carried.append((address.ipv4_mapped, "the IPv4-mapped address"))
    if address.sixtofour is not None:
        carried.append((address.sixtofour, "the 6to4 address"))
    if address.teredo is not None:
        server, client = address.teredo
        carried += [(server, "the Teredo server"), (client, "the Teredo client")]
    if any(address in network for network in _NAT64):
        carried.append((low, "the NAT64 address"))
    return carried
