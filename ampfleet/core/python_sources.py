"""A bundle's Python files compiled, never run: errors found at upload, not on a node.

A syntax error in a bundle used to surface minutes later, as a job FAILED on a node after
its ranks started. The API compiles every `.py` file of an uploaded bundle instead (the
compiler only: nothing is imported or executed, so the API stays free of user code), and
refuses the first that does not compile, naming its file and line. From the same code
objects it keeps the names each module binds at module level (assignments, `def`, `class`,
imports, as the compiler's STORE_NAME instructions say), so a submit can tell that the
entrypoint's module defines its attribute without importing it.

The work is bounded: at most `max_total_bytes` of Python source per bundle (a bundle holding
more, typically vendored packages, is refused: those belong in `code.requirements`), each
file read to at most that, and at most MAX_NAMES_PER_BUNDLE names kept.

Standard library only: the API process imports it.
"""

from __future__ import annotations

import dis
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

from ampfleet.core.archives import ArchiveEntry, read_files

MAX_NAMES_PER_BUNDLE = 20_000
"""Past this many module-level names in one bundle, further modules' names are not kept (the
row lists them); their attributes go unchecked at submit, as in a bundle from before."""
UNKNOWABLE = ("__getattr__",)
"""A module that defines these answers any attribute: none can be said to be missing."""


class SourceRefusedError(ValueError):
    """A file of the bundle does not compile, or the bundle holds too much source; the
    message names the file and line."""


@dataclass(frozen=True)
class SourceLimits:
    max_total_bytes: int


def module_names(
    archive: Path, entries: Collection[ArchiveEntry], limits: SourceLimits
) -> dict[str, list[str] | None]:
    """Every `.py` file of a checked archive compiled; for each, the names its module binds
    at module level, or None where they cannot be known (a `from x import *`, a module
    `__getattr__`, past the names kept). SourceRefusedError for the first that fails."""
    sources = {e.path: e.size for e in entries if e.kind == "file" and e.path.endswith(".py")}
    stated = sum(sources.values())
    if stated > limits.max_total_bytes:
        raise _too_much_source(stated, limits)
    found: dict[str, list[str] | None] = {}
    kept, total = 0, 0
    for path, source in read_files(archive, sources, limits.max_total_bytes):
        total += len(source)
        if total > limits.max_total_bytes:  # a stated size may lie
            raise _too_much_source(total, limits)
        names = bound_names(compiled(path, source))
        if names is not None and kept + len(names) > MAX_NAMES_PER_BUNDLE:
            names = None
        kept += len(names or ())
        found[path] = names
    return found


def compiled(path: str, source: bytes) -> CodeType:
    """The module's code object, as the interpreter would compile it on import (the
    encoding from its BOM or coding cookie, else UTF-8); SourceRefusedError otherwise."""
    try:
        return compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError included
        where = f"{path}, line {exc.lineno}" if exc.lineno else path
        raise SourceRefusedError(f"{where} does not compile: {exc.msg}") from None
    except (ValueError, UnicodeDecodeError) as exc:  # NUL bytes, an unknown encoding
        raise SourceRefusedError(f"{path} does not compile: {exc}") from None
    except (RecursionError, MemoryError):
        raise SourceRefusedError(f"{path} is too deeply nested to compile") from None


def bound_names(code: CodeType) -> list[str] | None:
    """The names a module's top-level code binds, in any branch it may take; None when a
    star import or a module `__getattr__` makes any name possible."""
    names: set[str] = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_STAR":
            return None
        if instruction.opname == "STORE_NAME":
            names.add(str(instruction.argval))
    if names.intersection(UNKNOWABLE):
        return None
    return sorted(names)


def _too_much_source(size: int, limits: SourceLimits) -> SourceRefusedError:
    return SourceRefusedError(
        f"the bundle holds more than {limits.max_total_bytes} bytes of Python source ({size}; "
        "AMPFLEET_MAX_BUNDLE_SOURCE_BYTES); leave vendored packages out and name them in "
        "code.requirements",
    )
