"""Outbound requests to user-given URLs must not reach the platform's own network (SSRF):
loopback, private, link-local and other special addresses are refused unless the operator
allows them."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


def refuse_reason(url: str, *, allow_private: bool) -> str | None:
    """None when `url` may be called; else why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "only http and https URLs are allowed"
    if not parts.hostname:
        return "the URL has no host"
    if parts.username or parts.password:
        return "credentials in the URL are not allowed"
    return None if allow_private else _private_address(parts.hostname, parts.port or 443)


def _private_address(host: str, port: int) -> str | None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return f"cannot resolve {host}"
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if (
            address.is_private
            or address.is_loopback
            or address.is_link_local
            or address.is_reserved
            or address.is_multicast
            or address.is_unspecified
        ):
            return (
                f"{host} resolves to {address}, a loopback or private address; "
                "set AMPFLEET_WEBHOOK_ALLOW_PRIVATE=true to allow such targets"
            )
    return None
