"""What an API key may do. On its own, with nothing but the standard library, because the
SDK names roles too and must not load the server's database layer to do so."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"  # every project, nodes, quotas, keys
    WRITE = "write"  # its project: submit, cancel, change priority, keys of its project
    READ = "read"  # its project: look only
