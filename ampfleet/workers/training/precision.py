"""Choosing the compute precision, falling back when it misbehaves, and the matching
autocast/GradScaler setup."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ampfleet.workers.hardware_precision import auto_precision, cpu_supports_bf16

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def supports_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    return cpu_supports_bf16()


def resolve_precision(requested: str, device: torch.device) -> str:
    """`auto`: bf16 where the hardware has it, fp16 on older CUDA, fp32 otherwise."""
    if requested != "auto":
        return requested
    return auto_precision(cuda=device.type == "cuda", native_bf16=supports_bf16(device))


def resolve_allreduce_dtype(requested: str, precision: str, backend: str) -> str:
    """`auto` follows the compute precision; on gloo it takes bf16 for either half type:
    our gloo hooks cost the same for both, and bf16 keeps fp32's range, so loss-scaled
    fp16 gradients cannot overflow the wire."""
    if requested != "auto":
        return requested
    if precision == "fp32":
        return "fp32"
    return "bf16" if backend == "gloo" else precision


FALLBACK_CHAIN = ("fp16", "bf16", "fp32")
"""The order an `auto` job falls back in when its numbers stop being finite."""


def next_precision(current: str, device: torch.device) -> str | None:
    """The next precision along the chain, skipping bf16 where the hardware lacks it."""
    later = FALLBACK_CHAIN[FALLBACK_CHAIN.index(current) + 1 :]
    return next((p for p in later if p != "bf16" or supports_bf16(device)), None)


def later_in_chain(candidate: str, current: str) -> bool:
    """Whether `candidate` comes after `current` in the fallback chain."""
    return FALLBACK_CHAIN.index(candidate) > FALLBACK_CHAIN.index(current)


@contextlib.contextmanager
def autocast(precision: str, device: torch.device) -> Iterator[None]:
    if precision == "fp32":
        yield
        return
    with torch.autocast(device_type=device.type, dtype=DTYPES[precision]):
        yield


def make_grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """Dynamic loss scaling is needed for fp16 only; disabled scalers are pass-throughs."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
