"""Pydantic I/O models of code bundles."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class BundleFile(BaseModel):
    path: str = Field(description="Relative, '/'-separated, as it will be unpacked.")
    size: int = Field(description="Bytes once unpacked; 0 for folders and links.")
    kind: Literal["file", "dir", "symlink"]


class BundleOut(BaseModel):
    id: str = Field(description="`bnd_...`; name it in a job's `code.bundle`.")
    project: str
    sha256: str = Field(description="Of the archive's bytes: the same bytes are one bundle.")
    size: int = Field(description="Bytes of the archive.")
    format: Literal["zip", "tar.gz"]
    file_count: int
    unpacked_size: int = Field(description="Bytes of its files once unpacked.")
    created_at: datetime


class BundleDetail(BundleOut):
    files: list[BundleFile]


class BundleList(BaseModel):
    items: list[BundleOut] = Field(description="Newest first.")
