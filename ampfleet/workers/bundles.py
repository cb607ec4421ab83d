"""A node's cache of what jobs bring: unpacked code bundles, datasets and earlier jobs' models.

Each object's bytes are fetched from the store and unpacked once per node, by content, into
`<data dir>/<kind>/<sha256>/`: checked again here (the node trusts no archive it did not
check itself), unpacked into a hidden folder and renamed into place, so a rank never sees
half a tree and two jobs of the same bytes share one. Only the node agent runs this: ranks
hold no store credentials, and read the tree it leaves.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from ampfleet.core.archives import ArchiveLimits, unpack_archive
from ampfleet.core.artifacts import ArtifactNotFoundError, get_store, object_key
from ampfleet.core.sandbox import open_to_sandboxes
from ampfleet.core.settings import Settings


def cache_dir(settings: Settings, kind: str, sha256: str) -> Path:
    return settings.data_dir.resolve() / kind / object_key(sha256).removeprefix("sha256/")


def bundle_dir(settings: Settings, sha256: str) -> Path:
    return cache_dir(settings, "bundles", sha256)


def archive_limits(settings: Settings) -> ArchiveLimits:
    return ArchiveLimits(
        max_files=settings.max_archive_files,
        max_unpacked_bytes=settings.max_archive_unpacked_bytes,
    )


def fetch_once(target: Path, sha256: str, what: str, fill: Callable[[Path, Path], None]) -> Path:
    """`target`, made if not there yet: `fill(downloaded_object, tree)` builds the tree that
    is then renamed into place."""

    def build(incoming: Path, tree: Path) -> None:
        downloaded = incoming / "object"
        download(sha256, downloaded, what)
        fill(downloaded, tree)

    return build_once(target, build)


def download(sha256: str, path: Path, what: str) -> None:
    """The object's bytes at `path` (their sha256 checked); LookupError once it is gone."""
    try:
        get_store().download_to(object_key(sha256), path)
    except ArtifactNotFoundError:
        raise LookupError(f"the {what}'s bytes ({sha256[:12]}) are no longer stored") from None


def build_once(target: Path, build: Callable[[Path, Path], None]) -> Path:
    """`target`, made if not there yet: `build(scratch, tree)` makes the tree `tree` (using
    the folder `scratch` as it likes), which is then renamed into place."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".incoming-") as incoming:
        tree = Path(incoming) / "tree"
        build(Path(incoming), tree)
        open_to_sandboxes(tree)  # ranks read it as unprivileged uids
        try:
            tree.rename(target)
        except OSError:
            if not target.is_dir():  # not another job's unpacking of the same bytes
                raise
    return target


def ensure_unpacked(settings: Settings, sha256: str) -> Path:
    """The bundle's unpacked tree on this node, fetched and unpacked if not there yet."""

    def unpack(archive: Path, tree: Path) -> None:
        unpack_archive(archive, tree, archive_limits(settings))

    return fetch_once(bundle_dir(settings, sha256), sha256, "bundle", unpack)
