"""A TrainingArguments-style JSON (what `HfArgumentParser.parse_json_file` reads) for its FSDP / DeepSpeed parts.

Read: `fsdp` (the option string, or true = full_shard), `fsdp_config` (an inline dict, or a path read
with `json.load`), `deepspeed` (an inline dict analysed as a DeepSpeed config, or a path), `fp16`/`bf16`.
Paths are read through the `loader` the caller passes (the CLI and server resolve them relative to
the analysed file); without one, or when the file is missing, the referenced part is not analysed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from zeromem_lsp.configs.deepspeed.validation import validate_deepspeed
from zeromem_lsp.configs.deepspeed.catalog import HF_AUTO_STAGE
from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs.fsdp import FsdpSetup, validate_fsdp_options, validate_transformers_fsdp
from zeromem_lsp.provenance import Path

Loader = Callable[[str], "str | None"]


@dataclass(frozen=True)
class HfArgumentsSetup:
    fsdp: FsdpSetup | None
    deepspeed: dict | None  # the DeepSpeed config (inline or loaded), for the memory plan
    deepspeed_path: Path | None  # where it is written in this document (None: loaded from another file)
    unread: tuple[str, ...]  # referenced files that could not be read
    block_path: Path | None  # where a zeromem block is (inside fsdp_config or deepspeed)
    block: object


def _prefixed(issue: ConfigIssue, base: Path) -> ConfigIssue:
    return issue._replace(path=(*base, *issue.path))


def unreadable_reason(loader: Loader, path: str) -> str:
    """Why `loader` returned nothing for `path`: its own `why_unreadable` when it has one."""
    explain = getattr(loader, "why_unreadable", None)
    return explain(path) if explain is not None else "file not found"


def _load_json(loader: Loader | None, path: str) -> tuple[object, str | None]:
    if loader is None:
        return None, f"{path} (no file access)"
    text = loader(path)
    if text is None:
        return None, f"{path} ({unreadable_reason(loader, path)})"
    try:
        return json.loads(text), None
    except ValueError as error:
        return None, f"{path} (json.load fails: {error})"


def validate_hf_arguments(data: dict, loader: Loader | None = None) -> tuple[list[ConfigIssue], list[ConfigIssue], HfArgumentsSetup]:
    """(FSDP issues, DeepSpeed issues with document paths, setup)."""
    fsdp_issues: list[ConfigIssue] = []
    deepspeed_issues: list[ConfigIssue] = []
    unread: list[str] = []
    block_path, block = None, None
    options = None
    if "fsdp" in data:
        issues, options = validate_fsdp_options(data["fsdp"], ("fsdp",))
        fsdp_issues += issues
    fsdp_setup = None
    config = data.get("fsdp_config")
    if isinstance(config, str) and not config.startswith("{"):
        config, problem = _load_json(loader, config)
        if problem:
            unread.append(f"fsdp_config {problem}")
        if isinstance(config, dict):
            issues, fsdp_setup = validate_transformers_fsdp(config, ("fsdp_config",), options, ("fsdp",))
            fsdp_issues += [i._replace(path=("fsdp_config",), target="value", replacement=None,
                                    message=f"in {data['fsdp_config']}: {i.message}") for i in issues]
    elif isinstance(config, dict):
        issues, fsdp_setup = validate_transformers_fsdp(config, ("fsdp_config",), options, ("fsdp",))
        fsdp_issues += issues
        if "zeromem" in config:
            block_path, block = ("fsdp_config", "zeromem"), config["zeromem"]
    if fsdp_setup is None and options:  # no fsdp_config: Transformers' default version (2) decides what --fsdp may say
        found, fsdp_setup = validate_transformers_fsdp({}, ("fsdp_config",), options, ("fsdp",))
        fsdp_issues += [issue for issue in found if issue.kind == "fsdp2_rejects"]
    deepspeed = data.get("deepspeed")
    deepspeed_config, deepspeed_path = None, None
    if isinstance(deepspeed, dict):
        deepspeed_config, deepspeed_path = deepspeed, ("deepspeed",)
        plain = {key: value for key, value in deepspeed.items() if key != "zeromem"}
        deepspeed_issues += [_prefixed(issue, ("deepspeed",)) for issue in validate_deepspeed(plain, stage_for_auto=HF_AUTO_STAGE)]
        if "zeromem" in deepspeed and block_path is None:
            block_path, block = ("deepspeed", "zeromem"), deepspeed["zeromem"]
    elif isinstance(deepspeed, str) and deepspeed:
        loaded, problem = _load_json(loader, deepspeed)
        if problem:
            unread.append(f"deepspeed {problem}")
        if isinstance(loaded, dict):
            deepspeed_config = loaded  # its paths are positions in that file, not in this document
    setup = HfArgumentsSetup(fsdp_setup if options else None,
                             deepspeed_config, deepspeed_path, tuple(unread), block_path, block)
    return fsdp_issues, deepspeed_issues, setup
