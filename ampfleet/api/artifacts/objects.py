"""A stored object's bytes as the API serves them: a span streamed (the first chunk read
before the answer starts, so a store that fails is an error, not a cut stream), or the
head of a small file read whole. Nothing here knows jobs or projects: callers checked who
may read what."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

from ampfleet.api.artifacts.ranges import Span
from ampfleet.api.errors import ServiceUnavailableError
from ampfleet.core.artifacts import ArtifactNotFoundError, get_store, object_key

log = logging.getLogger(__name__)


def open_span(sha256: str, name: str, span: Span) -> Iterator[bytes]:
    """The span's bytes of the object `sha256` (artifact `name`'s); the first chunk is read
    now, so a store that fails answers an error before the status line is sent, on every
    backend."""
    if span.length == 0:
        return iter(())
    try:
        chunks = get_store().open_range(object_key(sha256), span.start, span.end)
        first = next(chunks, b"")
    except ArtifactNotFoundError:
        log.error("artifact %s (%s): object missing from the store", name, sha256[:12])
        raise ServiceUnavailableError(
            f"the bytes of {name} are missing from the artifact store"
        ) from None
    except Exception as exc:  # a store that is down (S3 unreachable, disk error)
        log.warning("artifact store unavailable for %s: %s", name, type(exc).__name__)
        raise ServiceUnavailableError("the artifact store is unavailable; retry shortly") from None
    return itertools.chain([first], chunks)


def read_head(sha256: str, size: int, limit: int, name: str) -> bytes:
    """The first `limit` bytes of the stored object `sha256` (of `size` bytes) that the
    artifact `name` names (503 where it cannot be read)."""
    return b"".join(open_span(sha256, name, Span(0, min(size, limit), partial=True)))
