"""HTTP's partial and conditional GET for one stored object: `Range` (a single range; RFC
9110 section 14), `If-Range` and `If-None-Match`, against an ETag that is the object's
sha256. A download that broke resumes where it stopped, and resumes only the same bytes.

Several ranges in one header are answered with the whole object (allowed by the RFC, and no
client of ours asks for them); a header that does not parse is ignored, as the RFC says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ampfleet.api.errors import AmpfleetError

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
MAX_HEADER_DIGITS = 19  # past an int64 no object is that big: treat as unparseable


class RangeNotSatisfiableError(AmpfleetError):
    status_code = 416
    code = "range_not_satisfiable"

    def __init__(self, size: int) -> None:
        super().__init__(f"the requested range is outside the object of {size} bytes")
        self.headers = {"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"}


@dataclass(frozen=True)
class Span:
    start: int
    end: int  # exclusive
    partial: bool

    @property
    def length(self) -> int:
        return self.end - self.start

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end - 1}/{size}"


def quoted_etag(sha256: str) -> str:
    return f'"{sha256}"'


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """If-None-Match (weak comparison, as the RFC asks for this header)."""
    if if_none_match is None:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


def span_of(range_header: str | None, if_range: str | None, etag: str, size: int) -> Span:
    """The bytes to send. If-Range with another validator (an ETag of other bytes, or a
    date, which we never send) means the client's partial copy is stale: all of it."""
    whole = Span(0, size, partial=False)
    if range_header is None or (if_range is not None and if_range.strip() != etag):
        return whole
    match = _RANGE.fullmatch(range_header.strip())
    if match is None or max(len(match[1]), len(match[2])) > MAX_HEADER_DIGITS:
        return whole
    first, last = match[1], match[2]
    if first == "":
        if last == "":
            return whole
        suffix = int(last)  # the last `suffix` bytes
        if suffix == 0:
            raise RangeNotSatisfiableError(size)
        return Span(max(size - suffix, 0), size, partial=True)
    start = int(first)
    if start >= size:
        raise RangeNotSatisfiableError(size)
    end = size if last == "" else min(int(last) + 1, size)
    if end <= start:
        return whole  # last < first: not a valid range, so ignored
    return Span(start, end, partial=True)
