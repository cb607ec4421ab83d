"""A rank's memory limit, and the failure a rank reports when it reaches it.

The launcher sets RLIMIT_DATA, which torchrun and every rank inherit: each process may map
at most its slot's share of private writable memory, so an oversized job fails its own
allocation instead of pushing the host into swap or the OOM killer. RLIMIT_AS would count
address space that torch and its thread pools reserve without using, and fail healthy
ranks; a cgroup is not writable to an unprivileged worker.
"""

from __future__ import annotations

import resource

MB = 1 << 20
"""Not core.memory's: importing it would load the ORM models into every rank."""

MEMORY_LIMIT_FLAG = "--memory-limit-mb"

# How the allocators word a failed allocation: torch's CPU allocator, and errno 12.
ALLOCATION_FAILURES = ("can't allocate memory", "cannot allocate memory", "out of memory")


def apply_memory_limit(limit_mb: int) -> None:
    limit = limit_mb * MB
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def memory_limit_mb() -> int | None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else soft // MB


def out_of_memory(exc: BaseException) -> str | None:
    """A user's account of an allocation failure, or None if `exc` is something else."""
    text = str(exc)
    if not isinstance(exc, MemoryError) and not any(
        words in text.lower() for words in ALLOCATION_FAILURES
    ):
        return None
    limit = memory_limit_mb()
    where = (
        f"its limit of {limit:,} MB (its slot's share of the node's memory)"
        if limit is not None
        else "the memory the node has"
    )
    detail = text.strip().splitlines()[-1][:300] if text.strip() else type(exc).__name__
    return (
        f"the rank ran out of memory: it needed more than {where} ({detail}); choose a "
        "smaller model or batch, or nodes with more memory per slot"
    )
