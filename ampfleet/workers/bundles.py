"""A node's cache of unpacked code bundles.

Each bundle's bytes are fetched from the store and unpacked once per node, by content, into
`<data dir>/bundles/<sha256>/`: checked again here (the node trusts no archive it did not
check itself), unpacked into a hidden folder and renamed into place, so a rank never sees
half a tree and two jobs of the same bytes share one. Only the node agent runs this: ranks
hold no store credentials, and import the tree it leaves.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ampfleet.core.archives import ArchiveLimits, unpack_archive
from ampfleet.core.artifacts import ArtifactNotFoundError, get_store, object_key
from ampfleet.core.settings import Settings


def bundle_dir(settings: Settings, sha256: str) -> Path:
    return settings.data_dir.resolve() / "bundles" / object_key(sha256).removeprefix("sha256/")


def ensure_unpacked(settings: Settings, sha256: str) -> Path:
    """The bundle's unpacked tree on this node, fetched and unpacked if not there yet."""
    target = bundle_dir(settings, sha256)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    limits = ArchiveLimits(
        max_files=settings.max_archive_files,
        max_unpacked_bytes=settings.max_archive_unpacked_bytes,
    )
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".incoming-") as incoming:
        archive = Path(incoming) / "archive"
        try:
            get_store().download_to(object_key(sha256), archive)
        except ArtifactNotFoundError:
            raise LookupError(f"the bundle's bytes ({sha256[:12]}) are no longer stored") from None
        tree = Path(incoming) / "tree"
        unpack_archive(archive, tree, limits)
        try:
            tree.rename(target)
        except OSError:
            if not target.is_dir():  # not another job's unpacking of the same bytes
                raise
    return target
