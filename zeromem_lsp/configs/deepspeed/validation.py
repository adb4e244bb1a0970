"""Validate a DeepSpeed config dict the way DeepSpeed 0.19.8 does at launch.

``validate_deepspeed(config, world_size=None)`` is pure: it takes the dict an hjson/json
loader produced and returns a list of :class:`ConfigIssue`.  An issue of severity
``"error"`` means DeepSpeed refuses the config at launch (``DeepSpeedConfig`` or
``deepspeed.initialize``); ``"warning"`` means DeepSpeed starts but very likely not as
the author meant.

Issue kinds (fixed set; ``ISSUE_KINDS`` maps each to its severity, read from its rule in
``rules/kinds.py``):

=============================  ========  =====================================================
kind                           severity  meaning
=============================  ========  =====================================================
unknown_key                    error     key not accepted inside a strict section
alias_conflict                 error     a ``stage3_*`` alias and its bare name given together
invalid_value                  error     wrong type / out of range / not in the enum / not an
                                         object where DeepSpeed needs one
invalid_combination            error     a cross-field rule (e.g. compute_grad_norm=false at
                                         stage 3, gradient_allreduce_op sum with ZeRO-3)
fp16_and_bf16                  error     fp16.enabled and bf16.enabled both true
deprecated_with_replacement    error     a deprecated key and its successor given together
partial_offload_below_stage3   error     offload_optimizer.ratio < 1 without ZeRO stage 3
removed_feature                error     a block of a feature DeepSpeed removed
batch_missing                  error     neither train_batch_size nor the micro batch given
batch_non_positive             error     a batch key <= 0
batch_inconsistent             error     the batch triple cannot hold for the world size
unknown_optimizer              warning    optimizer.type is neither DeepSpeed's nor torch.optim's
                                         (engine-level)
incompatible_optimizer         warning    ZeRO with an optimizer it has not validated and no
                                         zero_allow_untested_optimizer (engine-level)
unsupported_optimizer_param    warning    optimizer.params.max_grad_norm (engine-level)
deprecated_key                 warning   deprecated key or legacy form, still accepted
offload_param_below_stage3     warning   offload_param below stage 3: silently ignored
auto_not_filled                warning   "auto" where neither HF nor Accelerate fills it
top_level_near_miss            warning   unknown top-level key close to a known one (typo)
suspicious_value               warning   accepted but almost certainly wrong (fractional batch)
=============================  ========  =====================================================

Kinds in ``ENGINE_LEVEL_KINDS`` are refused by ``deepspeed.initialize`` when it builds the
optimizer, not by ``DeepSpeedConfig`` itself (so ``DeepSpeedConfig`` alone accepts them).
"""

from __future__ import annotations

import difflib
import functools

from typing import TYPE_CHECKING, Any, Optional, Union

from .batch import batch_issues
from .toplevel import check_loose_sections, check_optimizer, check_top_level_values
from .catalog import (
    AUTO_IS_A_VALUE,
    DEPRECATED_KEYS,
    HF_AUTO_FILLED_PATHS,
    HF_AUTO_STAGE,
    KNOWN_TOP_LEVEL_KEYS,
    REMOVED_TOP_LEVEL_KEYS,
    REMOVED_ZERO_KEYS,
    STRICT_SECTION_NAMES,
    FieldDoc,
    field_doc,
    section_keys,
)
from .issue import ENGINE_LEVEL_KINDS, ISSUE_KINDS, dotted, is_auto, issue, mapping_error
from ..issue import ConfigIssue
from .facts import SECTIONS
from .precheck import accepted_keys, unknown_keys, vouch
from zeromem_lsp.provenance import Path

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic_core import ErrorDetails

__all__ = [
    "ConfigIssue",
    "FieldDoc",
    "ISSUE_KINDS",
    "ENGINE_LEVEL_KINDS",
    "KNOWN_TOP_LEVEL_KEYS",
    "HF_AUTO_FILLED_PATHS",
    "DEPRECATED_KEYS",
    "STRICT_SECTIONS",
    "STRICT_SECTION_NAMES",
    "validate_deepspeed",
    "field_doc",
    "section_keys",
]

OUR_TOP_LEVEL_KEY = "zeromem"


def __getattr__(name: str) -> Any:
    if name == "STRICT_SECTIONS":  # path -> model class; importing it builds the models
        from . import catalog

        return catalog.STRICT_SECTIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _models():
    """The pydantic models, imported only when a section needs them (the pre-check could not vouch)."""
    from . import models

    return models


def _strict_model(path: Path) -> Optional[type[BaseModel]]:
    name = STRICT_SECTION_NAMES.get(tuple(str(p) for p in path))
    return getattr(_models(), name) if name is not None else None


# ------------------------------------------------------------------- strict sections


def _drop_auto(raw: dict, model: str, path: Path, out: list[ConfigIssue]) -> dict:
    """Mirror DeepSpeed: a strict section drops every key whose value is "auto" (recursively)."""
    cleaned: dict = {}
    for key, value in raw.items():
        sub_path = path + (key,)
        if is_auto(value):
            # (under the legacy `bfloat16` block the launcher's own `bf16` block decides: its deprecated_key says so)
            if sub_path not in HF_AUTO_FILLED_PATHS and sub_path not in AUTO_IS_A_VALUE and path != ("bfloat16",):
                doc = field_doc(sub_path)
                default = f" and uses its default {doc.default!r}" if doc else ""
                out.append(issue(
                    "auto_not_filled", sub_path, "value",
                    f"'{dotted(sub_path)}' is \"auto\", which neither HF Transformers nor Accelerate fills here;"
                    f" DeepSpeed drops the key{default}.",
                ))
            continue
        if isinstance(value, dict) and key in SECTIONS[model]["keys"]:  # a field name or alias of the model
            sub_model = STRICT_SECTION_NAMES.get(tuple(map(str, sub_path)))
            if sub_model is not None:
                value = _drop_auto(value, sub_model, sub_path, out)
        cleaned[key] = value
    return cleaned


def _user_loc(model: type[BaseModel] | None, raw: Any, loc: tuple) -> Path:
    """Translate a pydantic loc (field names) back to the keys the user wrote."""
    out: list[Union[str, int]] = []
    for elem in loc:
        if isinstance(elem, str) and isinstance(raw, dict) and model is not None:
            info = model.model_fields.get(elem)
            if info is None:  # loc given by alias, or an unknown key
                name = next((n for n, i in model.model_fields.items() if i.alias == elem), None)
                info = model.model_fields.get(name) if name else None
                if elem not in raw and name in raw:
                    elem = name
            elif info.alias and info.alias in raw and elem not in raw:
                elem = info.alias
            sub = raw.get(elem)
            model = _sub_model(info) if info is not None else None
            raw = sub
        elif isinstance(elem, int) and isinstance(raw, list) and 0 <= elem < len(raw):
            raw = raw[elem]
        out.append(elem)
    return tuple(out)


def _sub_model(info: Any) -> Optional[type[BaseModel]]:
    from .catalog import _model_of

    return _model_of(info.annotation)


def _did_you_mean(key: str, candidates: list[str], path: Path) -> Optional[str]:
    match = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not match:
        return None
    replacement = DEPRECATED_KEYS.get(tuple(str(p) for p in path[:-1]) + (match[0],))
    return replacement or match[0]


def _map_error(err: ErrorDetails, model: type[BaseModel], raw: dict, base: Path) -> ConfigIssue:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in ISSUE_KINDS:  # our own PydanticCustomError: loc is the model, ctx names the key
        rel = _user_loc(model, raw, tuple(err["loc"]) + tuple(ctx.get("path", ())))
        path = base + rel
        return issue(kind, path, "key" if kind == "deprecated_with_replacement" else "value",
                     f"{err['msg']}: DeepSpeed refuses this at launch.",
                     replacement=ctx.get("new"))
    path = base + _user_loc(model, raw, tuple(err["loc"]))
    section = dotted(path[:-1]) or "the config"
    if kind == "extra_forbidden":
        key = str(path[-1])
        section_model = _strict_model(path[:-1])
        if section_model is not None:
            field = section_model.model_fields.get(key)
            if field is not None and field.alias and field.alias != key:
                return issue(
                    "alias_conflict", path, "key",
                    f"'{key}' and '{field.alias}' in {section} are the same setting; DeepSpeed refuses both"
                    f" together. Keep one.", replacement=field.alias,
                )
        return _unknown_key(path)
    value = err.get("input")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    elif msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, "):]
    where = dotted(path) or section
    return issue("invalid_value", path, "value" if path[len(base):] else "key",
                 f"DeepSpeed refuses {value!r} for '{where}': {msg}.")


def _unknown_key(path: Path) -> ConfigIssue:
    key, section = str(path[-1]), dotted(path[:-1]) or "the config"
    suggestion = _did_you_mean(key, _key_candidates(path[:-1]), path)
    hint = f" Did you mean '{suggestion}'?" if suggestion else ""
    return issue(
        "unknown_key", path, "key",
        f"Unknown key '{key}' in {section}: DeepSpeed refuses unknown keys in this section.{hint}",
        replacement=suggestion,
    )


def _key_candidates(section: Path) -> list[str]:
    """`section_keys(section)` without loading the models for a strict section: the same keys (a
    did-you-mean does not depend on their order)."""
    name = STRICT_SECTION_NAMES.get(tuple(str(p) for p in section))
    return accepted_keys(name) if name is not None else section_keys(section)


def _validate_section(raw: Any, path: Path, out: list[ConfigIssue]) -> Any:
    """The validated section (a model instance, or the pre-check's equivalent), else None."""
    name = STRICT_SECTION_NAMES[tuple(str(p) for p in path)]
    if not isinstance(raw, dict):
        out.append(mapping_error(path, raw))
        return None
    cleaned = _drop_auto(raw, name, path, out)
    vouched = vouch(name, cleaned)
    if vouched is not None:
        return vouched
    unknown = unknown_keys(name, cleaned)
    if unknown is not None:  # only misspelt keys: pydantic's issues, worded without loading the models
        out.extend(_unknown_key(path + (key,)) for key in unknown)
        return None
    model = getattr(_models(), name)
    from pydantic import ValidationError

    try:
        return model.model_validate(cleaned)
    except ValidationError as exc:
        out.extend(_map_error(e, model, cleaned, path) for e in exc.errors())
        return None


# --------------------------------------------------------------------- main entry


def validate_deepspeed(config: Any, *, world_size: Optional[int] = None, stage_for_auto: int = 0) -> list[ConfigIssue]:
    """All issues DeepSpeed 0.19.8 would raise (errors) or silently mis-handle (warnings).

    ``world_size`` is the data-parallel world size; None means unknown, and then only the
    batch rules that hold for every world size are checked. ``stage_for_auto`` is what
    ``"stage": "auto"`` becomes: 0 for a plain DeepSpeed launch (DeepSpeed drops "auto"),
    ``HF_AUTO_STAGE`` where HF Trainer / Accelerate fill it in first.
    """
    out: list[ConfigIssue] = []
    if not isinstance(config, dict):
        return [mapping_error((), config)]

    # Removed features abort launch before anything else is read.
    for key, why in REMOVED_TOP_LEVEL_KEYS.items():
        if key in config:
            out.append(issue("removed_feature", (key,), "key",
                             f"'{key}': {why}. DeepSpeed refuses a config that still has this block."))
    zero_raw = config.get("zero_optimization")
    if isinstance(zero_raw, dict):
        for key, why in REMOVED_ZERO_KEYS.items():
            if key in zero_raw:
                out.append(issue("removed_feature", ("zero_optimization", key), "key",
                                 f"'zero_optimization.{key}': {why}. DeepSpeed refuses this key."))
        zero_raw = {k: v for k, v in zero_raw.items() if k not in REMOVED_ZERO_KEYS}

    zero = _check_zero(config, zero_raw, out, stage_for_auto)
    stage = int(zero.stage) if zero is not None else None
    _check_precision(config, stage, out)
    sections = {key: _validate_section(config[key], (key,), out)
                for key in ("hybrid_engine", "compile", "weight_quantization", "comms_logger") if key in config}
    for key in ("tensorboard", "wandb", "csv_monitor", "comet"):
        if key in config and not is_auto(config[key]):  # the monitor wrapper drops a top-level "auto"
            _validate_section(config[key], (key,), out)
    _check_timers(config, out)
    if "tensor_parallel" in config:
        _validate_section(config["tensor_parallel"], ("tensor_parallel",), out)
    check_loose_sections(config, out)
    check_top_level_values(config, stage, zero, sections.get("compile"), out)
    check_optimizer(config, stage, out)
    out.extend(batch_issues(config, world_size))
    _check_unfilled_auto(config, out)
    _check_unknown_top_level(config, out)
    if isinstance(zero_raw, dict) and is_auto(zero_raw.get("stage")):
        out = [_with_auto_stage_note(found, stage_for_auto) for found in out]
    return out


#: What "stage": "auto" becomes without a filler: DeepSpeed drops "auto" in its sections, so the default 0.
AUTO_STAGE_BARE = (
    '"stage": "auto" is not filled by a plain DeepSpeed launch: DeepSpeed drops it and runs ZeRO stage 0.'
    f" HF Trainer and Accelerate replace it with ACCELERATE_DEEPSPEED_ZERO_STAGE ({HF_AUTO_STAGE} unless"
    " `accelerate launch --zero_stage` sets it). Write the stage you mean."
)
#: Issue kinds whose verdict depends on the ZeRO stage, and the invalid_combination keys that do.
STAGE_DEPENDENT_KINDS = ("partial_offload_below_stage3", "offload_param_below_stage3", "incompatible_optimizer")
STAGE_DEPENDENT_KEYS = ("compute_grad_norm", "fp16_master_weights_and_grads", "bf16_master_weights_and_grads",
                        "bf16_optimizer_states", "gradient_allreduce_op")


def _with_auto_stage_note(found: ConfigIssue, stage_for_auto: int) -> ConfigIssue:
    """Say which stage "auto" stood for in an issue that depends on it."""
    if found.kind not in STAGE_DEPENDENT_KINDS and not (
            found.kind == "invalid_combination" and found.path[-1:] and found.path[-1] in STAGE_DEPENDENT_KEYS):
        return found
    if stage_for_auto:
        note = f'"stage": "auto" is {stage_for_auto} here, what HF Trainer / Accelerate fill in by default'
    else:
        note = '"stage": "auto" is stage 0 under a plain DeepSpeed launch'
    return found._replace(message=f"{found.message} ({note}.)")


def _check_zero(config: dict, zero_raw: Any, out: list[ConfigIssue],
                stage_for_auto: int = 0) -> Any:
    if "zero_optimization" not in config:
        return vouch("ZeroConfig", {}) or _models().ZeroConfig()
    if isinstance(zero_raw, bool):
        out.append(issue("deprecated_key", ("zero_optimization",), "value",
                         f"\"zero_optimization\": {str(zero_raw).lower()} is a legacy form (means stage"
                         f" {1 if zero_raw else 0}); use an object such as {{\"stage\": 1}}."))
        data: dict = {"stage": 1 if zero_raw else 0}
        if zero_raw:
            data["allgather_bucket_size"] = config.get("allgather_size", 500_000_000)
        vouched = vouch("ZeroConfig", data)
        if vouched is not None:
            return vouched
        from pydantic import ValidationError

        try:
            return _models().ZeroConfig.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                out.append(issue("invalid_value", ("allgather_size",), "value",
                                 f"DeepSpeed refuses {err.get('input')!r} for 'allgather_size': {err['msg']}."))
            return None
    auto_stage = isinstance(zero_raw, dict) and is_auto(zero_raw.get("stage"))
    if auto_stage and stage_for_auto:  # the launcher writes the stage in before DeepSpeed reads the section
        zero_raw = {**zero_raw, "stage": stage_for_auto}
    zero = _validate_section(zero_raw, ("zero_optimization",), out)
    if auto_stage and not stage_for_auto:
        out.append(issue("auto_not_filled", ("zero_optimization", "stage"), "value", AUTO_STAGE_BARE))
    if zero is None:
        return None
    for old in ("cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
                "stage3_gather_fp16_weights_on_model_save"):
        if old in zero.model_fields_set and not any(i.kind == "deprecated_with_replacement" for i in out):
            new = DEPRECATED_KEYS[("zero_optimization", old)]
            instead = f"; use '{new}' instead" if new else "; set pin_memory inside offload_param/offload_optimizer"
            out.append(issue("deprecated_key", ("zero_optimization", old), "key",
                             f"'zero_optimization.{old}' is deprecated{instead}.", replacement=new))
    param_offloaded = (zero.offload_param is not None and zero.offload_param.device != "none") or bool(
        zero.cpu_offload_param)
    if param_offloaded and int(zero.stage) < 3:
        key = "offload_param" if zero.offload_param is not None else "cpu_offload_param"
        out.append(issue("offload_param_below_stage3", ("zero_optimization", key), "key",
                         f"'zero_optimization.{key}' only works with ZeRO stage 3; at stage {int(zero.stage)}"
                         f" DeepSpeed silently ignores it and parameters stay on the GPU."))
    return zero


def _check_precision(config: dict, stage: Optional[int], out: list[ConfigIssue]) -> None:
    fp16 = bf16 = None
    if "fp16" in config:
        fp16 = _validate_section(config["fp16"], ("fp16",), out)
    bf16_key = "bf16" if config.get("bf16") is not None else "bfloat16"
    if bf16_key == "bfloat16" and "bfloat16" in config:
        out.append(issue("deprecated_key", ("bfloat16",), "key",
                         "'bfloat16' is the legacy name of 'bf16'; rename it: HF Transformers and Accelerate add a "
                         "'bf16' block from their mixed precision, which DeepSpeed reads instead of this one.",
                         replacement="bf16"))
    elif "bfloat16" in config:
        out.append(issue("deprecated_key", ("bfloat16",), "key",
                         "'bfloat16' is ignored because 'bf16' is present; remove it.", replacement="bf16"))
    if bf16_key in config:
        bf16 = _validate_section(config[bf16_key], (bf16_key,), out)

    def enabled(section: str, model: Any) -> bool:
        raw = config.get(section)
        if isinstance(raw, dict) and is_auto(raw.get("enabled")):
            return False  # HF decides; it never enables both
        return bool(model is not None and model.enabled)

    if enabled("fp16", fp16) and enabled(bf16_key, bf16):
        out.append(issue("fp16_and_bf16", (bf16_key, "enabled"), "value",
                         f"fp16.enabled and {bf16_key}.enabled are both true: DeepSpeed refuses to enable both."))
    zero_on = stage is not None and stage >= 1
    checks = [
        (fp16, "fp16", "fp16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3"),
        (bf16, bf16_key, "bf16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3"),
        (bf16, bf16_key, "bf16_optimizer_states", "needs ZeRO stage 1, 2 or 3"),
    ]
    for model, section, flag, why in checks:
        if model is not None and getattr(model, flag) and stage is not None and not zero_on:
            out.append(issue("invalid_combination", (section, flag), "value",
                             f"'{section}.{flag}' {why} (stage is {stage}): DeepSpeed refuses this."))
    if bf16 is not None and bf16.bf16_optimizer_states and not bf16.bf16_master_weights_and_grads and (
            stage is None or zero_on):
        out.append(issue("invalid_combination", (bf16_key, "bf16_optimizer_states"), "value",
                         f"'{bf16_key}.bf16_optimizer_states' needs '{bf16_key}.bf16_master_weights_and_grads':"
                         " DeepSpeed refuses it alone."))


def _check_timers(config: dict, out: list[ConfigIssue]) -> None:
    """DeepSpeed reads `timers["throughput"]` when `"throughput" in timers` (utils/config.py,
    get_timers_config): a string or list holding it fails there, and one without it is ignored."""
    timers = config.get("timers")
    if isinstance(timers, dict) and "throughput" in timers:
        _validate_section(timers["throughput"], ("timers", "throughput"), out)
    elif isinstance(timers, (str, list)) and "throughput" in timers:
        indices = "string" if isinstance(timers, str) else "list"
        out.append(issue("invalid_value", ("timers",), "value",
                         f"'timers' must be an object, got {timers!r}: DeepSpeed fails on it at launch "
                         f"(it looks up timers['throughput']: {indices} indices must be integers)."))
    elif isinstance(timers, (str, list)):
        out.append(issue("suspicious_value", ("timers",), "value",
                         f"'timers' should be an object such as {{\"throughput\": {{\"enabled\": true}}}}, got "
                         f"{timers!r}: DeepSpeed ignores it and keeps the default throughput timer."))
    elif "timers" in config and not isinstance(timers, (dict, tuple)):
        out.append(mapping_error(("timers",), timers))


def _check_unfilled_auto(config: dict, out: list[ConfigIssue]) -> None:
    """Warn about "auto" outside strict sections (those are handled in _drop_auto)."""

    def walk(value: Any, path: Path) -> None:
        if not isinstance(value, (str, dict)):
            return  # numbers, booleans, lists: neither "auto" nor a section to look into
        if tuple(map(str, path)) in STRICT_SECTION_NAMES or path[:2] == ("timers", "throughput"):
            return
        if is_auto(value):
            if path not in HF_AUTO_FILLED_PATHS and path not in AUTO_IS_A_VALUE and path[:1] not in (
                    ("tensorboard",), ("wandb",), ("csv_monitor",), ("comet",)):
                out.append(issue("auto_not_filled", path, "value",
                                 f"'{dotted(path)}' is \"auto\", but neither HF Transformers nor Accelerate fills"
                                 " it here and DeepSpeed takes the string literally."))
        elif isinstance(value, dict):
            for key, sub in value.items():
                walk(sub, path + (key,))

    for key, value in config.items():
        if key in KNOWN_TOP_LEVEL_KEYS and key not in REMOVED_TOP_LEVEL_KEYS:
            walk(value, (key,))


@functools.lru_cache(maxsize=1024)
def _near_top_level(key: str) -> list[str]:
    """The known top-level key an unknown one is a typo of (cached: the same keys come every keystroke)."""
    return difflib.get_close_matches(key, sorted(KNOWN_TOP_LEVEL_KEYS), n=1, cutoff=0.85)


def _check_unknown_top_level(config: dict, out: list[ConfigIssue]) -> None:
    for key in config:
        if not isinstance(key, str) or key in KNOWN_TOP_LEVEL_KEYS or key == OUR_TOP_LEVEL_KEY:
            continue
        if key in REMOVED_TOP_LEVEL_KEYS:
            continue
        match = _near_top_level(key)
        if match:
            out.append(issue("top_level_near_miss", (key,), "key",
                             f"Unknown top-level key '{key}' is ignored by DeepSpeed. Did you mean '{match[0]}'?",
                             replacement=match[0]))



