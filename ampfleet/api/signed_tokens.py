"""Tokens the server signs and reads back without storing anything: text claims and an
HMAC-SHA256 of them under a key derived from the server secret for one purpose, so a token
made for one use (a job's event stream, a console session) never verifies as another."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from ampfleet.core.settings import get_settings


def sign(purpose: bytes, claims: str) -> str:
    """`claims` (ASCII) and their signature, both base64url: `<claims>.<signature>`."""
    return f"{_encode(claims.encode())}.{_encode(_signature(purpose, claims))}"


def verified_claims(purpose: bytes, token: str) -> str | None:
    """The claims of a token signed for `purpose`; None for anything else."""
    encoded_claims, _, encoded_signature = token.partition(".")
    try:
        claims = _decode(encoded_claims).decode("ascii")
        signature = _decode(encoded_signature)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return claims if hmac.compare_digest(signature, _signature(purpose, claims)) else None


def _signature(purpose: bytes, claims: str) -> bytes:
    key = hmac.new(get_settings().secret_key.encode(), purpose, hashlib.sha256).digest()
    return hmac.new(key, claims.encode(), hashlib.sha256).digest()


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
