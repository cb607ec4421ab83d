"""Time-ordered identifiers: sorting by id is sorting by creation time (cursor pagination)."""

from __future__ import annotations

import os
import time

PROFILE_ID_PREFIX = "prf"
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id(prefix: str) -> str:
    """A ULID-style id: 48-bit millisecond time + 80 random bits, base32, after `prefix_`."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        value, index = divmod(value, 32)
        chars.append(_CROCKFORD[index])
    return f"{prefix}_{''.join(reversed(chars))}"


def id_pattern(prefix: str) -> str:
    """The shape of an id with `prefix` (new ones have 26 characters after it): no path
    separators, no dots, so an id from a rank's record is safe to name a folder with."""
    return rf"^{prefix}_[0-9a-z]{{1,26}}$"
