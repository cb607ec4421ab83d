"""Page cursors: opaque to clients, base64url without padding of what a listing needs to
resume after the last row it answered (a job id, the queue's order key).

A cursor is checked as strictly as it is made: anything this API could not have returned is
a 422 naming `cursor`, never a 500 nor a page from somewhere else.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TypeVar

from ampfleet.api.errors import UnprocessableError

T = TypeVar("T")


def encode_cursor(payload: bytes) -> str:
    return base64.urlsafe_b64encode(payload).decode().rstrip("=")


def decode_cursor(cursor: str, parse: Callable[[bytes], T | None]) -> T:
    """What `parse` makes of the cursor's bytes; a 422 when they are not base64url, or when
    `parse` answers None or raises ValueError (a bad encoding, bad JSON)."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = parse(base64.b64decode(padded, altchars=b"-_", validate=True))
    except ValueError:  # binascii.Error, UnicodeDecodeError and JSONDecodeError among them
        value = None
    if value is None:
        raise UnprocessableError.for_field("cursor", "not a cursor this API returned")
    return value
