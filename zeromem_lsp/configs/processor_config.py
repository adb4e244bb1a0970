"""The image processor config a training run loads beside a vision-language model: its preprocessor_config.json.

A run builds its processor with `AutoProcessor.from_pretrained(<the model's name>)` (axolotl, TRL, LLaMA-Factory
alike), and Transformers 5.24 reads the image processor's settings from the repository's `preprocessor_config.json`
(image_processing_base.py, `get_image_processor_dict`): a published file sets what the class defaults do not —
Qwen2-VL-7B-Instruct's max_pixels 12,845,056 (16,384 tokens of 28² pixels, not the class's 1,280), Qwen3-VL's
size.longest_edge 16,777,216. So the file is looked for where the model's config.json was (configs/model_source.py),
the way the run finds it:

- a model folder (or the folder of a file named config.json): `<folder>/preprocessor_config.json`;
- a hub id: the Hugging Face cache's snapshot of the same revision (its `.no_exist` record honoured), else zeromem's
  cache of Hub files, else the Hub itself as the caller allows (`hub`: never, now, or in the background), under the
  same offline switches, token, timeout and revision as config.json (configs/hub.py; stored in zeromem's cache, a
  missing file remembered as missing);
- a config file named alone (not config.json): no processor config goes with it.

Only composites whose image tokens it bounds look (vision.PROCESSOR_BOUNDS). What it gives (the values and where they
were read, or why none were) travels in `image_tokens.Processor`; configs/vision.py reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Mapping

from zeromem_lsp.configs.image_tokens import PROCESSOR_NAME, Processor
from zeromem_lsp.configs.model_source import (CONFIG_NAME, HubAccess, hub_cache, hub_file, is_repo_id,
                                              read_small_text)


def wanted(config: dict | None) -> bool:
    """Whether the image tokens of the model this config.json describes depend on its processor config."""
    from zeromem_lsp.configs.vision import PROCESSOR_BOUNDS

    return isinstance(config, dict) and config.get("model_type") in PROCESSOR_BOUNDS


def find_processor_config(name: str, folder: Path, environ: Mapping[str, str] = os.environ,
                          revision: str | None = None, hub: HubAccess = "cache",
                          landed: Callable[[], None] | None = None) -> Processor:
    """The preprocessor_config.json the run loads for the model `name` (as find_model_config resolves it, relative
    to `folder`), read: its values and where, or why none was found."""
    target = folder / name
    if target.is_dir() or (target.is_file() and target.name == CONFIG_NAME):
        path = (target if target.is_dir() else target.parent) / PROCESSOR_NAME
        text, why = read_small_text(path)
        if text is None:
            return Processor(missing=f"{path}: {why}")
        return _parsed(text, f"beside the model's config.json: {path}")
    if target.is_file():
        return Processor(missing=f"{target} is a config file named alone: no {PROCESSOR_NAME} goes with it (name the "
                                 f"model's folder or hub id)")
    if not is_repo_id(name):
        return Processor(missing=f"{target}: not a model folder or hub id")
    found = hub_file(name, environ, revision, hub, landed, filename=PROCESSOR_NAME)
    if found.text is None or found.path is None:
        return Processor(missing="; ".join(found.tried) or "not found")
    return _parsed(found.text, _place(found.path, environ))


def _place(path: Path, environ: Mapping[str, str]) -> str:
    """Which place held the file, and the file."""
    from zeromem_lsp.configs.hub import cache_dir

    for root, place in ((hub_cache(environ), "in the Hugging Face cache"), (cache_dir(environ), "from the Hub")):
        try:
            if path.resolve().is_relative_to(root.resolve()):
                return f"{place}: {path}"
        except OSError:
            break
    return f"from {path}"


def _parsed(text: str, where: str) -> Processor:
    """The file's JSON object, or a read marked broken (Transformers' from_pretrained would fail on it)."""
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):
        return Processor(where=where, broken=True)
    if not isinstance(values, dict):
        return Processor(where=where, broken=True)
    return Processor(values, where)
