"""FSDP settings as HF Transformers and Accelerate read them: validation issues and the memory-relevant setup.

Two readers, two rule sets (facts in docs/fsdp-accelerate.md, checked against the sources):

- ``"transformers"``: a ``--fsdp_config`` dict (JSON file, or inline in TrainingArguments). A leading
  ``fsdp_`` is stripped from every key; the sharding strategy and offload come from the ``--fsdp``
  option string, not from this dict.
- ``"accelerate"``: the ``fsdp_config`` block of an Accelerate config. ``accelerate launch`` copies
  each key onto its arguments (adding a missing ``fsdp_`` prefix) and exports them as ``FSDP_*``
  environment variables, which ``FullyShardedDataParallelPlugin`` parses.

Pure: plain dicts in, ``ConfigIssue`` records and an ``FsdpSetup`` out.
"""

from __future__ import annotations

import difflib
from typing import NamedTuple

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.provenance import Path


#: torch.distributed.fsdp.ShardingStrategy, in Accelerate's order (FSDP_SHARDING_STRATEGY): value = index + 1.
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
STATE_DICT_TYPES = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")
#: Transformers' FSDPOption values for the `--fsdp` option string.
FSDP_OPTIONS = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2", "offload", "auto_wrap")
TRUE_WORDS = ("y", "yes", "t", "true", "on", "1")
FALSE_WORDS = ("n", "no", "f", "false", "off", "0")

#: Keys (without the fsdp_ prefix) that `accelerate launch` exports for FSDP.
ACCELERATE_KEYS = (
    "version", "offload_params", "min_num_params", "sharding_strategy", "reshard_after_forward", "auto_wrap_policy",
    "transformer_layer_cls_to_wrap", "backward_prefetch", "state_dict_type", "forward_prefetch", "use_orig_params",
    "cpu_ram_efficient_loading", "sync_module_states", "activation_checkpointing", "ignored_modules",
)
#: Old spellings Accelerate no longer reads -> their successor.
ACCELERATE_DEPRECATED = {"backward_prefetch_policy": "backward_prefetch"}
#: Keys people write into --fsdp_config that Transformers does not read: `--fsdp` or the file's cpu_offload and
#: reshard_after_forward say it (transformers 5.24 training_args.py `_process_fsdp_args`).
TRANSFORMERS_IGNORED = {
    "sharding_strategy": "the sharding strategy comes from the `--fsdp` option string (e.g. --fsdp \"shard_grad_op "
                         "auto_wrap\") or this file's reshard_after_forward",
    "offload_params": "offload comes from the `--fsdp` option string (e.g. --fsdp \"full_shard offload\") or this "
                      "file's cpu_offload: true",
}

def _issue(kind: str, path: Path, target: str, message: str, replacement: str | None = None) -> ConfigIssue:
    return ConfigIssue(kind, tuple(path), target, message, replacement, "fsdp")


class FsdpSetup(NamedTuple):
    """What the memory plan needs from an FSDP config; None = unknown/unusable."""

    version: int
    strategy: str | None  # one of SHARDING_STRATEGIES, or None when unusable
    strategy_path: Path | None
    strategy_note: str
    offload: bool
    offload_path: Path | None
    mixed_precision: str | None  # Accelerate's: no | fp16 | bf16 | fp8 (compute only under FSDP)
    version_note: str = ""  # where `version` comes from: the key written, or the loader's default and its source
    version_path: Path | None = None  # the key that sets it (None: the loader's default)


def strip_prefix(key: str) -> str:
    return key[5:] if key.startswith("fsdp_") else key


def parse_bool(value: object) -> bool | None:
    """`str_to_bool(str(value).lower())` as both loaders do; None when it would raise."""
    text = str(value).lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    return None


def truthy_flag(value: object) -> bool:
    """Python truthiness, as in Accelerate's launcher check (`if args.x and not args.y`)."""
    return bool(value)


def canonical_strategy(value: object) -> str | None:
    """A sharding strategy as Accelerate's plugin parses it (name in any case, or 1-5); None if refused."""
    if isinstance(value, bool):
        return None
    text = str(value).strip().upper()
    if text in SHARDING_STRATEGIES:
        return text
    if text == "_HYBRID_SHARD_ZERO2":
        return "HYBRID_SHARD_ZERO2"
    if text.isdigit() and 1 <= int(text) <= len(SHARDING_STRATEGIES):
        return SHARDING_STRATEGIES[int(text) - 1]
    return None


def _prefetch_ok(value: object) -> bool:
    text = str(value).strip().upper()
    return text in BACKWARD_PREFETCH or (text.isdigit() and int(text) in (1, 2))


def _state_dict(value: object) -> str | None:
    text = str(value).strip().upper()
    if text in STATE_DICT_TYPES:
        return text
    if text.isdigit() and 1 <= int(text) <= 3:
        return STATE_DICT_TYPES[int(text) - 1]
    return None


def _version(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    text = str(value).strip()
    return int(text) if text in ("1", "2") else None


def _choices(values) -> str:
    return ", ".join(values)


class _Section:
    """One fsdp_config dict: keys normalised (prefix stripped), each remembering its written path."""

    def __init__(self, data: dict, base: Path):
        self.values: dict[str, object] = {}
        self.paths: dict[str, Path] = {}
        self.written: dict[str, str] = {}
        for key, value in data.items():
            if not isinstance(key, str) or key == "zeromem":
                continue
            name = strip_prefix(key)
            self.values[name] = value
            self.paths[name] = (*base, key)
            self.written[name] = key

    def has(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default: object = None) -> object:
        return self.values.get(name, default)


def _common_values(section: _Section, out: list[ConfigIssue], booleans: tuple[str, ...]) -> None:
    for name in booleans:
        if section.has(name) and section.get(name) is not None and parse_bool(section.get(name)) is None:
            out.append(_issue("invalid_value", section.paths[name], "value",
                              f"{section.written[name]} must be true or false, got {section.get(name)!r}"))


def _v2_checks(section: _Section, out: list[ConfigIssue], source: str) -> None:
    if section.has("reshard_after_forward") and parse_bool(section.get("reshard_after_forward")) is None:
        out.append(_issue("fsdp2_rejects", section.paths["reshard_after_forward"], "value",
                          f"FSDP2 needs reshard_after_forward to be true or false, got "
                          f"{section.get('reshard_after_forward')!r} (a sharding-strategy name is FSDP1's spelling)"))
    if section.has("state_dict_type") and _state_dict(section.get("state_dict_type")) == "LOCAL_STATE_DICT":
        out.append(_issue("fsdp2_rejects", section.paths["state_dict_type"], "value",
                          "FSDP2 does not support LOCAL_STATE_DICT; use SHARDED_STATE_DICT or FULL_STATE_DICT"))


#: What each loader runs when no version is written, and where that default is set.
ACCELERATE_DEFAULT_VERSION = (1, "default: FSDP1 (accelerate launch's --fsdp_version default \"1\", accelerate 1.16 "
                                 "commands/launch.py; FullyShardedDataParallelPlugin reads FSDP_VERSION, default 1)")
AXOLOTL_DEFAULT_VERSION = (1, "default: FSDP1 (axolotl pins an unversioned fsdp_config to fsdp_version 1, "
                              "utils/schemas/validation.py check_fsdp_version_in_fsdp_config)")
TRANSFORMERS_DEFAULT_VERSION = (2, "default: FSDP2 (TrainingArguments' fsdp_config version default 2, transformers "
                                   "5.24 training_args.py _process_fsdp_args)")


def _checked_version(section: "_Section", name: str, out: list[ConfigIssue],
                     default: tuple[int, str] = ACCELERATE_DEFAULT_VERSION) -> tuple[int, str, Path | None]:
    """(version, where it comes from, its key) as written in the section, else the loader's `default`; an
    invalid one is reported (and the default used)."""
    if not section.has("version"):
        return (*default, None)
    parsed = _version(section.get("version"))
    if parsed is None:
        out.append(_issue("invalid_value", section.paths["version"], "value",
                          f"{name} must be 1 or 2, got {section.get('version')!r}"))
        return (*default, None)
    return parsed, f"{section.written['version']} {section.get('version')!r}", section.paths["version"]


def validate_accelerate_fsdp(data: dict, base: Path, default_version: tuple[int, str] = ACCELERATE_DEFAULT_VERSION,
                             ) -> tuple[list[ConfigIssue], FsdpSetup]:
    """The `fsdp_config` block of an Accelerate config, as `accelerate launch` + the FSDP plugin read it
    (`default_version`: what runs when the block names no version)."""
    section = _Section(data, base)
    out: list[ConfigIssue] = []
    version, version_note, version_path = _checked_version(section, "fsdp_version", out, default_version)
    for name, written in section.written.items():
        if name in ACCELERATE_DEPRECATED:
            successor = ACCELERATE_DEPRECATED[name]
            out.append(_issue("deprecated_key", section.paths[name], "key",
                              f"{written} is an old spelling Accelerate no longer reads (ignored); use fsdp_{successor}",
                              replacement=f"fsdp_{successor}" if written.startswith("fsdp_") else successor))
        elif name not in ACCELERATE_KEYS:
            guess = difflib.get_close_matches(name, ACCELERATE_KEYS, n=1, cutoff=0.8)
            hint = f"; did you mean fsdp_{guess[0]}?" if guess else ""
            out.append(_issue("ignored_setting", section.paths[name], "key",
                              f"Accelerate does not read fsdp_config.{written}: it is silently ignored{hint}",
                              replacement=(f"fsdp_{guess[0]}" if written.startswith("fsdp_") else guess[0]) if guess else None))
    # Values the plugin parses (errors at Accelerator construction).
    strategy: str | None = "FULL_SHARD"
    strategy_path: Path | None = None
    strategy_note = "FSDP1 default: FULL_SHARD"
    if section.has("sharding_strategy"):
        parsed_strategy = canonical_strategy(section.get("sharding_strategy"))
        if parsed_strategy is None:
            out.append(_issue("invalid_value", section.paths["sharding_strategy"], "value",
                              f"invalid sharding strategy {section.get('sharding_strategy')!r}; "
                              f"choose one of {_choices(SHARDING_STRATEGIES)} (or 1-5)"))
            strategy = None
        elif version == 1:
            strategy, strategy_path = parsed_strategy, section.paths["sharding_strategy"]
            strategy_note = f"fsdp_sharding_strategy is {section.get('sharding_strategy')!r}"
    if section.has("backward_prefetch") and section.get("backward_prefetch") is not None:
        if not _prefetch_ok(section.get("backward_prefetch")):
            out.append(_issue("invalid_value", section.paths["backward_prefetch"], "value",
                              f"invalid backward prefetch {section.get('backward_prefetch')!r}; "
                              f"choose one of {_choices(BACKWARD_PREFETCH)}"))
    if section.has("auto_wrap_policy") and section.get("auto_wrap_policy") is not None:
        policy = str(section.get("auto_wrap_policy")).upper()
        if policy not in AUTO_WRAP_POLICIES:
            out.append(_issue("invalid_value", section.paths["auto_wrap_policy"], "value",
                              f"invalid auto wrap policy {section.get('auto_wrap_policy')!r}; "
                              f"choose one of {_choices(AUTO_WRAP_POLICIES)}"))
        elif policy == "SIZE_BASED_WRAP" and section.has("min_num_params"):
            value = section.get("min_num_params")
            if isinstance(value, bool) or not str(value).strip().lstrip("-").isdigit():
                out.append(_issue("invalid_value", section.paths["min_num_params"], "value",
                                  f"fsdp_min_num_params must be an integer, got {value!r}"))
    if section.has("state_dict_type") and section.get("state_dict_type") is not None:
        if _state_dict(section.get("state_dict_type")) is None:
            out.append(_issue("invalid_value", section.paths["state_dict_type"], "value",
                              f"invalid state dict type {section.get('state_dict_type')!r}; "
                              f"choose one of {_choices(STATE_DICT_TYPES)}"))
    booleans: tuple[str, ...] = ("offload_params", "cpu_ram_efficient_loading", "activation_checkpointing")
    if version == 1:
        booleans += ("forward_prefetch", "use_orig_params", "sync_module_states")
    _common_values(section, out, booleans)
    # The launcher's own check, for both FSDP versions (values are Python-truthy there).
    if section.has("cpu_ram_efficient_loading") and section.has("sync_module_states"):
        if truthy_flag(section.get("cpu_ram_efficient_loading")) and not truthy_flag(section.get("sync_module_states")):
            out.append(_issue("ram_efficient_without_sync", section.paths["sync_module_states"], "value",
                              "accelerate launch refuses fsdp_cpu_ram_efficient_loading without "
                              "fsdp_sync_module_states: set fsdp_sync_module_states to true"))
    if version == 2:
        _v2_checks(section, out, "accelerate")
        reshard = parse_bool(section.get("reshard_after_forward", True))
        strategy = "FULL_SHARD" if reshard is not False else "SHARD_GRAD_OP"
        strategy_path = section.paths.get("reshard_after_forward")
        strategy_note = (f"FSDP2 reshard_after_forward is {section.get('reshard_after_forward')!r}"
                         if section.has("reshard_after_forward") else "FSDP2 default: reshard_after_forward true")
        if parse_bool(section.get("reshard_after_forward", True)) is None:
            strategy = None
        for name, why in (("sharding_strategy", "use fsdp_reshard_after_forward (true ≈ FULL_SHARD, false ≈ SHARD_GRAD_OP)"),
                          ("backward_prefetch", "FSDP2 schedules prefetching itself"),
                          ("forward_prefetch", "FSDP2 does not implement it"),
                          ("use_orig_params", "FSDP2 always uses the original parameters"),
                          ("sync_module_states", "FSDP2 does not need it")):
            value = section.get(name)
            if not section.has(name) or value is None:
                continue
            if name == "backward_prefetch" and str(value).upper() == "NO_PREFETCH":
                continue
            if name in ("forward_prefetch",) and parse_bool(value) is False:
                continue
            out.append(_issue("ignored_setting", section.paths[name], "key",
                              f"{section.written[name]} is ignored with fsdp_version 2: {why}"))
    elif section.has("reshard_after_forward") and strategy is not None:
        resharding = canonical_strategy(section.get("reshard_after_forward"))
        if resharding is not None and resharding != strategy:
            out.append(_issue("ignored_setting", section.paths["reshard_after_forward"], "key",
                              f"fsdp_reshard_after_forward is ignored with fsdp_version 1: the sharding strategy is "
                              f"{strategy} (fsdp_sharding_strategy{'' if section.has('sharding_strategy') else ', default'})"))
    offload = parse_bool(section.get("offload_params", False)) is True
    return out, FsdpSetup(version, strategy, strategy_path, strategy_note, offload,
                          section.paths.get("offload_params"), None, version_note, version_path)


def parse_fsdp_options(value: object) -> tuple[list[str], list[str]]:
    """Transformers' `--fsdp`: (known options, unknown words). `true` means full_shard."""
    if value is True:
        return ["full_shard"], []
    if value in (False, None, ""):
        return [], []
    if isinstance(value, list):
        words = [str(item) for item in value]
    else:
        words = str(value).split()
    known = [word for word in words if word in FSDP_OPTIONS]
    return known, [word for word in words if word not in FSDP_OPTIONS]


def validate_fsdp_options(value: object, path: Path) -> tuple[list[ConfigIssue], list[str]]:
    out: list[ConfigIssue] = []
    options, unknown = parse_fsdp_options(value)
    for word in unknown:
        out.append(_issue("invalid_value", path, "value",
                          f"unknown --fsdp option {word!r}; choose from {_choices(FSDP_OPTIONS)}"))
    if unknown:
        return out, options
    if options == ["offload"]:
        out.append(_issue("offload_alone", path, "value",
                          '--fsdp offload cannot work on its own: add it to full_shard or shard_grad_op '
                          '(e.g. "full_shard offload")'))
    elif "full_shard" in options and "shard_grad_op" in options:
        out.append(_issue("full_shard_with_shard_grad_op", path, "value",
                          "--fsdp full_shard is not compatible with shard_grad_op: choose one"))
    return out, options


def validate_transformers_fsdp(
    data: dict, base: Path, options: list[str] | None = None, options_path: Path | None = None
) -> tuple[list[ConfigIssue], FsdpSetup]:
    """A `--fsdp_config` dict as TrainingArguments reads it. `options`: the `--fsdp` words when known."""
    section = _Section(data, base)
    out: list[ConfigIssue] = []
    version, version_note, version_path = _checked_version(section, "fsdp_config version", out,
                                                           TRANSFORMERS_DEFAULT_VERSION)
    for name, why in TRANSFORMERS_IGNORED.items():
        if section.has(name):
            out.append(_issue("ignored_setting", section.paths[name], "key",
                              f"Transformers does not read {section.written[name]} from --fsdp_config: {why}"))
    min_params = section.get("min_num_params", 0)
    min_count = min_params if isinstance(min_params, (int, float)) and not isinstance(min_params, bool) else None
    min_params_ok = min_count is not None
    if section.has("min_num_params") and not min_params_ok:
        out.append(_issue("invalid_value", section.paths["min_num_params"], "value",
                          f"min_num_params must be a number, got {min_params!r}"))
    if min_count is not None and min_count > 0 and section.get("transformer_layer_cls_to_wrap") is not None:
        out.append(_issue("min_params_with_layer_cls", section.paths["min_num_params"], "key",
                          "min_num_params and transformer_layer_cls_to_wrap are mutually exclusive: keep one"))
    xla = parse_bool(section.get("xla", False)) is True  # the XLA path builds no Accelerate plugin
    if section.has("backward_prefetch") and version == 1 and not xla:
        value = section.get("backward_prefetch")
        if not isinstance(value, str) or not _prefetch_ok(value):
            out.append(_issue("invalid_value", section.paths["backward_prefetch"], "value",
                              f"invalid backward_prefetch {value!r}; choose one of {_choices(BACKWARD_PREFETCH)}"))
    booleans: tuple[str, ...] = () if xla else ("sync_module_states", "cpu_ram_efficient_loading")
    if version == 1 and not xla:
        booleans += ("forward_prefetch", "use_orig_params")
    _common_values(section, out, booleans)
    if version == 1 and not xla and section.has("reshard_after_forward"):
        if canonical_strategy(section.get("reshard_after_forward")) is None:
            out.append(_issue("invalid_value", section.paths["reshard_after_forward"], "value",
                              f"with FSDP1, reshard_after_forward must be a sharding-strategy name, got "
                              f"{section.get('reshard_after_forward')!r}"))
    if version == 2 and not xla:
        _v2_checks(section, out, "transformers")
    sync = str(section.get("sync_module_states", "true")).lower()
    ram = str(section.get("cpu_ram_efficient_loading", "false")).lower()
    if sync == "false" and ram == "true" and not xla:
        out.append(_issue("ram_efficient_without_sync", section.paths["sync_module_states"], "value",
                          "Transformers refuses cpu_ram_efficient_loading without sync_module_states: "
                          "set sync_module_states to true"))
    # Memory: the strategy and offload come from --fsdp.
    strategy, note, path = None, "", options_path
    offload = False
    if options is None:
        strategy, note, path = "FULL_SHARD", 'assumed --fsdp "full_shard" (the --fsdp options are not in this file)', None
    else:
        for option in options:
            if option.upper() in SHARDING_STRATEGIES:
                strategy, note = option.upper(), f"--fsdp option {option!r}"
        offload = "offload" in options
        if strategy is None and options:
            strategy, note = "FULL_SHARD", "no sharding option in --fsdp: Accelerate's default FULL_SHARD"
    offload_path: Path | None
    if section.has("cpu_offload") and parse_bool(section.get("cpu_offload")) is True:  # transformers 5.24
        offload, offload_path = True, section.paths["cpu_offload"]
    else:
        offload_path = options_path if offload else None
    if version == 2:  # _process_fsdp_args: a bool, written, else from --fsdp (_apply_legacy_fsdp_to_config), else True
        legacy = [option for option in (options or []) if option.upper() in SHARDING_STRATEGIES]
        if section.has("reshard_after_forward"):
            reshard = parse_bool(section.get("reshard_after_forward"))
            note = f"FSDP2 reshard_after_forward is {section.get('reshard_after_forward')!r}"
            path = section.paths["reshard_after_forward"]
        elif legacy and legacy[0] in ("full_shard", "shard_grad_op"):
            reshard, note = legacy[0] == "full_shard", f"--fsdp option {legacy[0]!r} under FSDP2"
        else:
            reshard, note, path = True, "FSDP2 default: reshard_after_forward true (transformers 5.24)", None
        refused = [option for option in legacy if option not in ("full_shard", "shard_grad_op")]
        if refused and not xla:
            out.append(_issue("fsdp2_rejects", options_path or (), "value",
                              f"--fsdp {refused[0]} is only available with FSDP1 (Transformers raises with fsdp_config "
                              "version 2, the default): set fsdp_config version 1, or use full_shard / shard_grad_op"))
        strategy = None if reshard is None else "FULL_SHARD" if reshard else "SHARD_GRAD_OP"
    return out, FsdpSetup(version, strategy, path, note, offload, offload_path, None, version_note, version_path)
