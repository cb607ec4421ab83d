"""What a project's name may be, written once: every schema, path and query parameter that
takes one uses `ProjectName`, and the `project` columns are as wide as it allows.

A name that does not fit would be refused by PostgreSQL (a 500) and stored as given by SQLite
(objects in a project that can never be named again): so it is a 422 before either sees it.
Names end up in URLs, file names and log lines too, hence the boring alphabet.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

PROJECT_NAME_MAX_LENGTH = 64
PROJECT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

ProjectName = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=PROJECT_NAME_MAX_LENGTH, pattern=PROJECT_NAME_PATTERN
    ),
]


def project_name_problem(name: str) -> str | None:
    """Why `name` is not a project's name, or None (for callers outside pydantic: the CLI)."""
    if not 1 <= len(name) <= PROJECT_NAME_MAX_LENGTH:
        return f"a project name has 1 to {PROJECT_NAME_MAX_LENGTH} characters"
    if re.fullmatch(PROJECT_NAME_PATTERN, name) is None:
        return "a project name is letters, digits, '.', '_' and '-', from a letter or digit"
    return None
