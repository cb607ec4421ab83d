"""The names a job's artifacts are listed, downloaded and stored under, written once for the
ranks that produce them, the API that serves them and the SDK that asks for them.

A name is only ever a key into the job's `artifacts` rows, never a path: still, the pattern
is strict (segments that start with a letter or digit, so no `.`, `..` or empty segment, no
backslash, no absolute path), so a name is safe wherever it might be shown or used.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 255
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$"
_NAME = re.compile(NAME_PATTERN)

MODEL = "model.safetensors"
MODEL_BF16 = "model-bf16.safetensors"
MANIFEST = "manifest.json"
OUTPUTS_PREFIX = "outputs/"
HF_PREFIX = "hf/"
"""A recipe's model in Hugging Face's formats (`hf/merged/`, `hf/adapter/`), beside the
platform's own model.safetensors."""
PROFILES_PREFIX = "profiles/"
SAMPLES_PREFIX = "samples/"
SAMPLE_KIND = "sample"
"""The artifact kind of what a model generated at an evaluation (`samples/step-<step>.txt`)."""
PROFILE_KIND = "profile"  # the artifact kind of a profile's traces and summary
PROFILE_SUMMARY = "summary.json"
# What a user means by "the model": the weights and the manifest that says how they came to be.
MODEL_BUNDLE = (MODEL, MANIFEST)


def is_valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


CHECKPOINT_META = "meta.json"
"""Written last into a checkpoint the platform made (its loop, or a script's session): in a
checkpoint archive's file list, it tells one from a plain script's own files."""


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step:09d}"


def platform_made(files: list[str]) -> bool:
    """Whether a checkpoint archive's files (`ckpt-<step>/<name>`) are the platform's own."""
    return any(name.rsplit("/", 1)[-1] == CHECKPOINT_META for name in files)


def samples_name(step: int) -> str:
    """The text a model generated at the evaluation of step `step`."""
    return f"{SAMPLES_PREFIX}step-{step:09d}.txt"


def output_name(relative_path: str) -> str:
    return OUTPUTS_PREFIX + relative_path


def profile_trace_name(profile_id: str, rank: int) -> str:
    """One rank's Chrome/Perfetto trace of a profile."""
    return f"{PROFILES_PREFIX}{profile_id}/rank-{rank}.trace.json"


def profile_summary_name(profile_id: str) -> str:
    return f"{PROFILES_PREFIX}{profile_id}/{PROFILE_SUMMARY}"
