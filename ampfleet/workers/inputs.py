"""A job's inputs on a node: where each is, fetched before the ranks start.

A dataset (resolved at submit to its sha256) is fetched once per node into
`<data dir>/datasets/<sha256>/`: an archive unpacked there (checked as bundles are), a single
file kept under its name. Ranks get the folder of an archive and the path of a single file.
A `file:///...` input is a shared folder the operator allows: checked again here against
this node's AMPFLEET_DATA_ROOTS, after links are followed, and never copied. An earlier
job's model (`job:<id>`, resolved at submit to its files' objects) is fetched once per node
by the digest of that listing into `<data dir>/models/<digest>/`, each file checked against
its sha256, and given to the ranks as a folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ampfleet.core.archives import unpack_archive
from ampfleet.core.artifact_names import is_valid_name
from ampfleet.core.data_roots import under_roots
from ampfleet.core.settings import Settings
from ampfleet.workers.bundles import archive_limits, build_once, cache_dir, download, fetch_once


def local_path(settings: Settings, item: Mapping[str, Any]) -> Path:
    """Where the ranks read one resolved input on this node."""
    if "path" in item:
        return Path(item["path"])
    if "job" in item:
        return cache_dir(settings, "models", item["sha256"])
    folder = cache_dir(settings, "datasets", item["sha256"])
    return folder / item["filename"] if item.get("filename") else folder


def local_paths(settings: Settings, inputs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    return {name: str(local_path(settings, item)) for name, item in inputs.items()}


def ensure_inputs(settings: Settings, inputs: Mapping[str, Mapping[str, Any]]) -> None:
    """Fetch what this node lacks; raises with the input's name in the message."""
    for name, item in inputs.items():
        try:
            if "path" in item:
                _check_shared(settings, Path(item["path"]))
            elif "job" in item:
                _fetch_job_model(settings, item)
            else:
                _fetch_dataset(settings, item)
        except (OSError, LookupError, ValueError) as exc:
            raise RuntimeError(f"input {name!r}: {exc}") from exc


def _check_shared(settings: Settings, path: Path) -> None:
    real = path.resolve()
    if not under_roots(real, [root.resolve() for root in settings.data_roots]):
        raise ValueError(f"{path} is not under this node's AMPFLEET_DATA_ROOTS")
    if not real.exists():
        raise FileNotFoundError(f"{path} does not exist on this node")


def _fetch_dataset(settings: Settings, item: Mapping[str, Any]) -> None:
    filename = item.get("filename")

    def fill(downloaded: Path, tree: Path) -> None:
        if filename:
            tree.mkdir()
            downloaded.rename(tree / filename)
        else:
            unpack_archive(downloaded, tree, archive_limits(settings))

    what = f"dataset {item.get('name')}@{item.get('version')}"
    fetch_once(cache_dir(settings, "datasets", item["sha256"]), item["sha256"], what, fill)


def _fetch_job_model(settings: Settings, item: Mapping[str, Any]) -> None:
    what = f"model of job {item['job']}"

    def build(_scratch: Path, tree: Path) -> None:
        for listed in item["files"]:
            name = str(listed["path"])
            if not is_valid_name(name):  # as the API listed it; still, never a path outside
                raise ValueError(f"the {what} lists a file named {name[:200]!r}")
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            download(str(listed["sha256"]), target, f"{what}'s {name}")

    build_once(local_path(settings, item), build)
