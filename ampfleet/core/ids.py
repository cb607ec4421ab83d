"""Time-ordered identifiers: sorting by id is sorting by creation time (cursor pagination)."""

from __future__ import annotations

import os
import time

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id(prefix: str) -> str:
    """A ULID-style id: 48-bit millisecond time + 80 random bits, base32, after `prefix_`."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        value, index = divmod(value, 32)
        chars.append(_CROCKFORD[index])
    return f"{prefix}_{''.join(reversed(chars))}"
