"""Pydantic I/O models of datasets."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from ampfleet.api.bundles.schemas import BundleFile


class DatasetOut(BaseModel):
    id: str = Field(description="`dts_...`.")
    project: str
    name: str
    version: int = Field(description="1, 2, ... per project and name; a spec names `name@3`.")
    sha256: str = Field(description="Of the uploaded bytes: the same bytes are one version.")
    size: int = Field(description="Bytes as uploaded.")
    format: Literal["zip", "tar.gz", "file"]
    filename: str | None = Field(description="A single-file dataset's file name.")
    file_count: int
    unpacked_size: int = Field(description="Bytes of its files once unpacked.")
    created_at: datetime


class DatasetDetail(DatasetOut):
    files: list[BundleFile]
    summary: dict[str, Any] | None = Field(
        description="What the upload read of it, for the checks at submit: a model folder's "
        "config (model_type, architectures), or a JSONL/CSV file's records (how many, each "
        "shape of fields with the line it first appears on). Null: nothing was read."
    )


class DatasetList(BaseModel):
    items: list[DatasetOut] = Field(description="Newest first.")
