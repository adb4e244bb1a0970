"""Where a model's config.json is: a file, a model directory, or a hub id in the local Hugging Face cache.

Tried in the order Transformers tries them (`PreTrainedConfig._get_config_dict`, configuration_utils.py): the
name as a file, as a directory holding `config.json`, then as a repo id resolved the way huggingface_hub's
`try_to_load_from_cache` does (file_download.py), offline:

    <HF_HUB_CACHE>/models--<org>--<name>/refs/main            -> the commit hash of revision "main"
    <HF_HUB_CACHE>/models--<org>--<name>/snapshots/<hash>/config.json
    <HF_HUB_CACHE>/models--<org>--<name>/.no_exist/<hash>/config.json   (the Hub said: no such file)

HF_HUB_CACHE defaults to HUGGINGFACE_HUB_CACHE, then `$HF_HOME/hub`, HF_HOME to `$XDG_CACHE_HOME/huggingface`,
then `~/.cache/huggingface` (huggingface_hub constants.py; https://huggingface.co/docs/huggingface_hub/guides/
manage-cache and package_reference/environment_variables). A repo id is what `validate_repo_id` accepts.
Nothing is downloaded and huggingface_hub is not needed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, NamedTuple

MAX_LOADED_BYTES = 16 * 2**20
CONFIG_NAME = "config.json"

# huggingface_hub utils/_validators.py REPO_ID_REGEX (ASCII): an optional namespace, then the name.
REPO_ID = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)


def read_small_text(path: Path) -> tuple[str | None, str]:
    """(text, "") for a regular file up to MAX_LOADED_BYTES, else (None, why not)."""
    try:
        if not path.exists():
            return None, "file not found"
        if not path.is_file():
            return None, "not a regular file" + (": a directory" if path.is_dir() else "")
        if path.stat().st_size > MAX_LOADED_BYTES:
            return None, f"larger than {MAX_LOADED_BYTES // 2**20} MiB"
        return path.read_text(encoding="utf-8", errors="replace"), ""
    except OSError as error:
        return None, f"cannot be read: {error.strerror or error}"


def is_repo_id(name: str) -> bool:
    """Whether huggingface_hub's `validate_repo_id` accepts `name`."""
    return (name.count("/") <= 1 and REPO_ID.fullmatch(name) is not None
            and "--" not in name and ".." not in name and not name.endswith(".git"))


def hub_cache(environ: Mapping[str, str] = os.environ) -> Path:
    """The hub cache directory as huggingface_hub's constants compute it from the environment."""
    default_home = os.path.join(os.path.expanduser("~"), ".cache")
    home = os.path.expandvars(os.path.expanduser(
        environ.get("HF_HOME", os.path.join(environ.get("XDG_CACHE_HOME", default_home), "huggingface"))))
    legacy = environ.get("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(os.path.expandvars(os.path.expanduser(environ.get("HF_HUB_CACHE", legacy))))


class ModelSource(NamedTuple):
    """The config.json found for a name (`text` None when none was), and every place looked."""

    name: str
    path: Path | None = None
    text: str | None = None
    tried: tuple[str, ...] = ()
    resolved: bool = False  # found as a directory's or the hub cache's config.json, not as the file named

    @property
    def shown(self) -> str:
        """The name as written, with the file it resolved to when it named a directory or a hub id."""
        return f"{self.name} ({self.path})" if self.resolved else self.name

    @property
    def why(self) -> str:
        return "looked for " + "; ".join(self.tried) if self.tried else "not found"


def _in_hub_cache(repo_id: str, cache: Path, revision: str | None = None) -> tuple[Path | None, str]:
    """(config.json in the cache, "") or (None, where it is missing and why), at `revision` (default main): a
    branch or tag through refs/<revision>, a 40-hex commit hash as a snapshot folder itself (huggingface_hub's
    try_to_load_from_cache)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    if not repo.is_dir():
        return None, f"{repo} (not in the Hugging Face cache)"
    wanted = revision or "main"
    commit = wanted  # not a ref: a commit hash, as huggingface_hub takes it
    ref = repo / "refs" / wanted
    try:
        if ref.is_file():
            commit = ref.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as error:
        return None, f"{ref} (cannot be read: {error.strerror or error})"
    if (repo / ".no_exist" / commit / CONFIG_NAME).is_file():
        return None, f"{repo} (the cache records that revision {commit} has no {CONFIG_NAME})"
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        refs = sorted(str(path.relative_to(repo / "refs")) for path in (repo / "refs").rglob("*")
                      if path.is_file()) if (repo / "refs").is_dir() else []
        known = f"refs in the cache: {', '.join(refs)}" if refs else "the cache has no refs"
        return None, f"{snapshot} (no snapshot of revision {wanted}; {known})"
    return snapshot / CONFIG_NAME, ""


def find_model_config(name: str, folder: Path, environ: Mapping[str, str] = os.environ,
                      revision: str | None = None) -> ModelSource:
    """The config.json `name` stands for, relative to `folder` (absolute paths as given), else the hub cache at
    `revision` (a branch, tag or commit hash; default main)."""
    tried = []
    target = folder / name
    directory = target.is_dir()
    if directory:
        target = target / CONFIG_NAME
    text, why = read_small_text(target)
    if text is not None:
        return ModelSource(name, target, text, resolved=directory)
    tried.append(f"{target} ({why})")
    if is_repo_id(name):
        cached, why = _in_hub_cache(name, hub_cache(environ), revision)
        if cached is not None:
            text, why = read_small_text(cached)
            if text is not None:
                return ModelSource(name, cached, text, resolved=True)
            why = f"{cached} ({why})"
        tried.append(why)
    return ModelSource(name, None, None, tuple(tried))
