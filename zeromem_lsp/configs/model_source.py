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
huggingface_hub is not needed. Then zeromem's own cache of configs fetched before (configs/hub.py), and, when the
caller asks (`hub="fetch"`: `zeromem check` / `estimate`; `hub="background"`: the language server), the Hub itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Literal, Mapping, NamedTuple

MAX_LOADED_BYTES = 16 * 2**20
CONFIG_NAME = "config.json"

# huggingface_hub utils/_validators.py REPO_ID_REGEX (ASCII): an optional namespace, then the name.
#: What a lookup may do beyond the caches: nothing, fetch now, or fetch in a thread and call back when it lands.
HubAccess = Literal["cache", "fetch", "background"]
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


def _in_hub_cache(repo_id: str, cache: Path, revision: str | None = None,
                  filename: str = CONFIG_NAME) -> tuple[Path | None, str]:
    """(config.json (or `filename`) in the cache, "") or (None, where it is missing and why), at `revision` (default
    main): a branch or tag through refs/<revision>, a 40-hex commit hash as a snapshot folder itself
    (huggingface_hub's try_to_load_from_cache)."""
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
    if (repo / ".no_exist" / commit / filename).is_file():
        return None, f"{repo} (the cache records that revision {commit} has no {filename})"
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        refs = sorted(str(path.relative_to(repo / "refs")) for path in (repo / "refs").rglob("*")
                      if path.is_file()) if (repo / "refs").is_dir() else []
        known = f"refs in the cache: {', '.join(refs)}" if refs else "the cache has no refs"
        return None, f"{snapshot} (no snapshot of revision {wanted}; {known})"
    return snapshot / filename, ""


def find_model_config(name: str, folder: Path, environ: Mapping[str, str] = os.environ,
                      revision: str | None = None, hub: HubAccess = "cache",
                      landed: Callable[[], None] | None = None) -> ModelSource:
    """The config.json `name` stands for, relative to `folder` (absolute paths as given), else the hub cache at
    `revision` (a branch, tag or commit hash; default main), else zeromem's cache of fetched configs, else (`hub`)
    the Hub: now ("fetch"), or in a thread that calls `landed()` when done ("background")."""
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
        return hub_file(name, environ, revision, hub, landed, tuple(tried))
    return ModelSource(name, None, None, tuple(tried))


def hub_file(name: str, environ: Mapping[str, str] = os.environ, revision: str | None = None,
             hub: HubAccess = "cache", landed: Callable[[], None] | None = None, tried: tuple[str, ...] = (),
             filename: str = CONFIG_NAME) -> ModelSource:
    """A hub repo's config.json (or `filename`) at `revision`: the Hugging Face cache, else zeromem's cache of
    fetched files, else (`hub`) the Hub, as `find_model_config` looks."""
    cached, why = _in_hub_cache(name, hub_cache(environ), revision, filename)
    if cached is not None:
        text, why = read_small_text(cached)
        if text is not None:
            return ModelSource(name, cached, text, resolved=True)
        why = f"{cached} ({why})"
    tried = (*tried, why)
    from zeromem_lsp.configs import hub as hub_fetch  # stdlib only; urllib is imported when a request is made

    found = hub_fetch.stored(name, revision, environ, filename)
    if found is None and hub != "cache" and not hub_fetch.offline_reason(environ):
        found = _from_hub(hub_fetch, name, revision, environ, hub, landed, filename)
    if found is not None and found.text is not None:
        return ModelSource(name, found.path or Path(found.url), found.text, resolved=True)
    if found is not None:
        tried = (*tried, f"{found.url} ({found.problem})")
    return ModelSource(name, None, None, tried)


def _from_hub(hub_fetch, name: str, revision: str | None, environ: Mapping[str, str], hub: HubAccess,
              landed: Callable[[], None] | None, filename: str = CONFIG_NAME):
    """The Hub's answer now, or (background) a failure already known, or a note that the fetch is under way."""
    if hub == "fetch":
        return hub_fetch.fetch(name, revision, environ, filename=filename)
    known = hub_fetch.failure(name, revision, environ, filename)
    url = hub_fetch.url_of(name, revision, environ, filename)
    if known is not None:
        return hub_fetch.Fetched(url, problem=known)
    if hub_fetch.fetch_in_background(name, revision, environ, landed or (lambda: None), filename):
        return hub_fetch.Fetched(url, problem="being fetched from the Hub: the estimate follows when it lands")
    return hub_fetch.stored(name, revision, environ, filename) or hub_fetch.Fetched(
        url, problem=hub_fetch.failure(name, revision, environ, filename) or "not fetched")
