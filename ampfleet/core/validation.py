"""Pydantic validation errors as the error envelope states them: one detail per offending
field (a dotted path, the message, the error type) and a message that sums up the first few.

The API (request bodies, recipe hyperparameters) and the SDK (a spec refused before any
request) both say it this way; each passes its own detail class, so this module needs
neither of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

DetailT_co = TypeVar("DetailT_co", covariant=True)
SUMMARISED = 5  # offences named in the message; `details` has all of them


class DetailFactory(Protocol[DetailT_co]):
    def __call__(self, *, field: str, message: str, type: str) -> DetailT_co: ...


def dotted(loc: Iterable[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def _dotted_loc(error: Mapping[str, Any]) -> str:
    return dotted(error.get("loc", ()))


def describe_invalid(
    subject: str,
    errors: Iterable[Mapping[str, Any]],
    detail: DetailFactory[DetailT_co],
    field: Callable[[Mapping[str, Any]], str] = _dotted_loc,
) -> tuple[str, list[DetailT_co]]:
    """`("invalid <subject>: a.b: msg; c: msg", details)` for pydantic's `errors()`;
    `field` names the offending input of one error (its dotted `loc` by default)."""
    offences = [(field(e), e["msg"], e["type"]) for e in errors]
    summary = "; ".join(f"{name}: {message}" for name, message, _ in offences[:SUMMARISED])
    details = [detail(field=name, message=message, type=kind) for name, message, kind in offences]
    return f"invalid {subject}: {summary}", details
