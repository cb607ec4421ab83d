"""A job's `code.requirements` are names and versions only: `name`, `name[extra]`,
`name>=1,<2`; nothing pip would fetch from elsewhere or build.

pip reads far more than that on one line: direct references (`name @ https://...`,
`file:`, `git+...`), local paths and archives, its own options (`-e`, `-r`, `--index-url`),
environment markers. Any of them takes the install off the operator's index, and an sdist or
a source tree runs its setup code on the node. So a requirement must parse as a PEP 508
requirement (with `packaging`, the parser pip itself vendors) that has no URL and no marker,
and whose name is not a file name pip would open instead. The API checks it at submit (a 422
naming the requirement) and the node again before pip runs (workers/requirements.py).

No server package: the client validates a spec with it too.
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement

MAX_REQUIREMENT_LENGTH = 200
# pip takes a "name" ending so as a path to an archive in its working folder.
_ARCHIVE_ENDINGS = (
    ".whl",
    ".zip",
    ".tar",
    ".tar.gz",
    ".tgz",
    ".tar.bz2",
    ".tbz",
    ".tar.xz",
    ".txz",
    ".tlz",
    ".tar.lz",
    ".tar.lzma",
)
_INDEX_ONLY = "requirements name packages of the configured index only"
_SHAPE = "a package name, optional [extras] and an optional version specifier"


def requirement_problem(text: str) -> str | None:
    """Why `text` is not a requirement a job may ask for, naming it; None when it is one."""
    shown = repr(text[:MAX_REQUIREMENT_LENGTH])
    if not text or len(text) > MAX_REQUIREMENT_LENGTH:
        return f"requirement {shown} must have 1 to {MAX_REQUIREMENT_LENGTH} characters"
    if not (text.isascii() and text.isprintable()):
        return f"requirement {shown} may hold printable ASCII characters only"
    if text.lstrip().startswith("-"):
        return f"requirement {shown} is a pip option; pip's options are the operator's"
    try:
        parsed = Requirement(text)
    except InvalidRequirement as exc:
        if "/" in text or "\\" in text or text.lower().startswith("file:"):
            return f"requirement {shown} is a URL or a path; {_INDEX_ONLY}"
        reason = str(exc).splitlines()[0]
        return f"requirement {shown} is not {_SHAPE} ({reason})"
    return _parsed_problem(shown, parsed)


def _parsed_problem(shown: str, parsed: Requirement) -> str | None:
    if parsed.url is not None:
        return f"requirement {shown} is a direct reference (name @ URL or path); {_INDEX_ONLY}"
    if parsed.marker is not None:
        return f"requirement {shown} has an environment marker (';'); give {_SHAPE} only"
    if parsed.name.lower().endswith(_ARCHIVE_ENDINGS):
        return f"requirement {shown} names an archive file, not a package"
    return None


def checked_requirement(text: str) -> str:
    """`text` itself when it is a requirement a job may ask for; ValueError saying why not
    (a pydantic validator)."""
    problem = requirement_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text
