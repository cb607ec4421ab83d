"""The cluster backend: any S3-compatible server (AWS S3, SeaweedFS, MinIO, Ceph RGW).

Why boto3 (and not fsspec/s3fs): `upload_fileobj` streams a file or a stream of any size as a
multipart upload with bounded memory, and S3 makes a multipart upload visible only when it is
completed, so an interrupted put leaves nothing readable; `get_object(Range=...)` serves resumed
downloads; it verifies checksums on the wire; and it is the client every S3-compatible server is
tested against. fsspec adds a filesystem abstraction (and an async event loop) we do not need.

Layout under `s3://bucket/prefix/`: `sha256/<hex>` for complete objects, `incoming/<uuid>` for
a stream being staged (its digest is known only at its end; a copy then puts it under its key).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from ampfleet.core.artifacts.keys import (
    CHUNK_SIZE,
    ArtifactNotFoundError,
    HashingReader,
    digest_of_key,
    file_sha256,
    object_key,
)
from ampfleet.core.artifacts.transfer import write_verified

if TYPE_CHECKING:
    from ampfleet.core.artifacts import StoredObject
    from ampfleet.core.settings import Settings

# Parts of 8 MiB, 4 in flight: a stream upload holds at most ~32 MiB, whatever its size.
TRANSFER = TransferConfig(
    multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=4
)
_MISSING = {"404", "NoSuchKey", "NotFound"}


class S3Store:
    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Store:
        bucket, _, prefix = settings.artifact_url.removeprefix("s3://").partition("/")
        secret = settings.s3_secret_access_key.get_secret_value()
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.s3_endpoint_url or None,
            # Empty credentials mean boto3's own chain (instance roles, AWS_* variables).
            aws_access_key_id=settings.s3_access_key_id or None,
            aws_secret_access_key=secret or None,
            region_name=settings.s3_region,
            config=Config(
                # Self-hosted servers answer on one host name, not bucket subdomains.
                s3={"addressing_style": "path" if settings.s3_endpoint_url else "auto"},
                retries={"max_attempts": 5, "mode": "standard"},
            ),
        )
        return cls(client, bucket, prefix)

    def _name(self, key: str) -> str:
        digest_of_key(key)
        return f"{self.prefix}{key}"

    def put_file(self, path: Path) -> StoredObject:
        from ampfleet.core.artifacts import StoredObject

        with path.open("rb") as source:
            sha256, size = file_sha256(source)
            key = object_key(sha256)
            if self.size(key) != size:
                source.seek(0)
                self._upload(source, self._name(key), sha256)
        return StoredObject(key=key, size=size, sha256=sha256)

    def put_stream(self, stream: BinaryIO) -> StoredObject:
        from ampfleet.core.artifacts import StoredObject

        reader = HashingReader(stream)
        staging = f"{self.prefix}incoming/{uuid.uuid4().hex}"
        self._upload(reader, staging, None)
        try:
            key = object_key(reader.sha256)
            if self.size(key) != reader.size:
                self.client.copy(
                    {"Bucket": self.bucket, "Key": staging},
                    self.bucket,
                    self._name(key),
                    ExtraArgs=_put_args(reader.sha256) | {"MetadataDirective": "REPLACE"},
                    Config=TRANSFER,
                )
        finally:
            self.client.delete_object(Bucket=self.bucket, Key=staging)
        return StoredObject(key=key, size=reader.size, sha256=reader.sha256)

    def _upload(self, source: Any, name: str, sha256: str | None) -> None:
        # On any error s3transfer aborts the multipart upload: no part stays behind.
        self.client.upload_fileobj(
            source, self.bucket, name, ExtraArgs=_put_args(sha256), Config=TRANSFER
        )

    def open_range(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        if end is not None and end <= start:
            if self.size(key) is None:
                raise ArtifactNotFoundError(key)
            return iter(())
        byte_range = f"bytes={start}-" + ("" if end is None else str(end - 1))
        try:
            answer = self.client.get_object(
                Bucket=self.bucket, Key=self._name(key), Range=byte_range
            )
        except ClientError as error:
            if _missing(error):
                raise ArtifactNotFoundError(key) from None
            raise
        return _chunks(answer["Body"])

    def size(self, key: str) -> int | None:
        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=self._name(key))
        except ClientError as error:
            if _missing(error):
                return None
            raise
        return int(answer["ContentLength"])

    def download_to(self, key: str, path: Path) -> None:
        write_verified(self.open_range(key), path, digest_of_key(key))

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._name(key))

    def keys(self) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}sha256/"
        )
        for page in pages:
            for entry in page.get("Contents", []):
                yield str(entry["Key"]).removeprefix(self.prefix)


def _put_args(sha256: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {"ContentType": "application/octet-stream"}
    if sha256 is not None:
        args["Metadata"] = {"sha256": sha256}
    return args


def _chunks(body: Any) -> Iterator[bytes]:
    with contextlib.closing(body):
        yield from body.iter_chunks(CHUNK_SIZE)


def _missing(error: ClientError) -> bool:
    return str(error.response.get("Error", {}).get("Code")) in _MISSING
