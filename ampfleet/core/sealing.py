"""Secrets the platform must read back (webhook signing secrets) are stored sealed: AES-256-GCM
under a key derived (HKDF-SHA256) from AMPFLEET_SECRET_KEY, bound to the row they belong to.

A copy of the database, a backup or a log of SQL parameters then holds no usable secret
without the server's key. The row's id is the associated data, so a sealed value moved to
another row does not open. Changing AMPFLEET_SECRET_KEY makes existing sealed values
unreadable (webhooks must then be created again); nothing falls back to plaintext.
"""

from __future__ import annotations

import base64
import os
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "v1."
"""Marks a sealed value (a plaintext webhook secret is `whsec_` + base64, or hex if older)."""
_NONCE_BYTES = 12
_PURPOSE = b"ampfleet webhook secrets at rest v1"


class UnsealError(ValueError):
    """The value is not sealed, or not with this key for this row."""


@lru_cache(maxsize=4)
def _cipher(secret_key: str) -> AESGCM:
    key = HKDF(algorithm=SHA256(), length=32, salt=None, info=_PURPOSE).derive(secret_key.encode())
    return AESGCM(key)


def seal(plain: str, *, row_id: str, secret_key: str) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    sealed = _cipher(secret_key).encrypt(nonce, plain.encode(), row_id.encode())
    return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")


def unseal(stored: str, *, row_id: str, secret_key: str) -> str:
    if not is_sealed(stored):
        raise UnsealError("the value is not sealed")
    body = stored.removeprefix(PREFIX)
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        plain = _cipher(secret_key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], row_id.encode())
    except (ValueError, InvalidTag):
        raise UnsealError(
            "cannot open the sealed value: AMPFLEET_SECRET_KEY differs from the one it was "
            "sealed with, or the value was altered"
        ) from None
    return plain.decode()


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)
