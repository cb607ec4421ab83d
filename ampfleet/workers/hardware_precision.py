"""What `precision: auto` means on a kind of hardware, without torch: the node agent asks it
for a script's libraries (script_environment.py), the ranks through training/precision.py."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path


@lru_cache
def cpu_supports_bf16() -> bool:
    """AVX512-BF16 or AMX: the CPU has native bf16 dot products, so autocast pays off."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def auto_precision(*, cuda: bool, native_bf16: bool) -> str:
    """`auto`: bf16 where the hardware has it, fp16 on older CUDA, fp32 otherwise."""
    if native_bf16:
        return "bf16"
    return "fp16" if cuda else "fp32"


def script_hardware(requested: str, *, accelerator: str, native_bf16: bool) -> dict[str, str]:
    """The job file's `hardware` for a script's rank (script_environment.py reads it): the
    node's kind of accelerator and the job's precision resolved for it."""
    precision = requested
    if requested == "auto":
        precision = auto_precision(cuda=accelerator == "cuda", native_bf16=native_bf16)
    return {"accelerator": accelerator, "precision": precision}
