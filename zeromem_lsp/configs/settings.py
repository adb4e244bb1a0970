"""The `zeromem` settings: what a config cannot say about itself (model size, ranks, GPU budget).

One type serves the `zeromem` block inside a config, `[tool.zeromem]` / `zeromem.toml`, editor
settings and CLI flags. Sizes are accepted as numbers or strings ("7B", "80GiB") and resolved
to exact ints.

`ZeromemSettings` here is a plain immutable value. Its validator of record is the pydantic model in
settings_model.py (the source of schemas/ and of every error message); this module answers without
importing pydantic only when it is certain the values are valid — the same checks, called from there.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from zeromem_lsp.configs.model_config import MAX_COUNT, MAX_SIZE
from zeromem_lsp.memory.precision import OPTIMIZERS, PRECISIONS

from zeromem_lsp.configs.settings_values import (  # re-exported: the names every caller uses
    BYTE_SETTINGS, ATTENTIONS, BYTE_SIZE_PATTERN, CHOICES, COUNT_PATTERN, DEFAULT_WARN_FRACTION, SETTING_NAMES,
    NAME_LIST_SETTINGS, REGEX_SETTINGS, ParametersFromConfig, SettingProblem, TargetRegex, check_bytes, check_count,
    check_layer_indices, check_memory, check_module_names, check_parameters, check_rank_pattern, check_reserve,
    check_targets, VERSION_PATTERN, DEGREE_SETTINGS, MAX_SHARDS,
)


class _ModelFields:
    """`ZeromemSettings.model_fields`: the pydantic model's fields (descriptions for hover), on demand."""

    def __get__(self, instance: object, owner: type) -> dict:
        from zeromem_lsp.configs.settings_model import ZeromemSettingsModel

        return ZeromemSettingsModel.model_fields


class ZeromemSettings:
    """Declarations for zeromem; DeepSpeed ignores this top-level block."""

    __slots__ = SETTING_NAMES
    model_fields = _ModelFields()

    if TYPE_CHECKING:  # the slots (SETTING_NAMES) as settings_model.ZeromemSettingsModel validates them
        parameters: int | ParametersFromConfig | None
        parameter_bytes: int | None
        gradient_bytes: int | None
        optimizer_bytes: int | None
        precision: str | None
        optimizer: str | None
        world_size: int | None
        gpu_memory: int | None
        warn_fraction: float | None
        sequence_length: int | None
        micro_batch: int | None
        gradient_accumulation_steps: int | None
        gradient_checkpointing: bool | None
        attention: str | None
        reserved: int | None
        engine: str | None
        fsdp_version: int | None
        param_dtype: str | None
        optimizer_impl: str | None
        lora_rank: int | None
        lora_targets: tuple[str, ...] | str | TargetRegex | None
        modules_to_save: tuple[str, ...] | None
        dora: bool | None
        quantization: str | None
        double_quant: bool | None
        kbit_prepare: bool | None
        lora_dropout: float | None
        exclude_modules: tuple[str, ...] | str | TargetRegex | None
        layers_to_transform: tuple[int, ...] | None
        layers_pattern: tuple[str, ...] | None
        lora_rank_pattern: tuple[tuple[str, int], ...] | None
        target_parameters: tuple[str, ...] | None
        lora_target_linear: bool | None
        accelerate_config: str | None
        loss_kernel: str | None
        trainer: str | None
        precompute_ref_log_probs: bool | None
        transformers_version: str | None
        tensor_parallel: int | None
        context_parallel: int | None
        ulysses: int | None
        expert_parallel: int | None
        activation_offload: str | None
        tiled_mlp: bool | int | None

    def __init__(self, **values: Any):
        checked = certainly_valid(values)
        if checked is None:  # pydantic decides, and raises its ValidationError as before
            from zeromem_lsp.configs.settings_model import construct

            checked = construct(values)
        for name in SETTING_NAMES:
            object.__setattr__(self, name, checked.get(name))

    @classmethod
    def from_checked(cls, values: dict) -> ZeromemSettings:
        """Settings from values already validated (no check)."""
        settings = object.__new__(cls)
        for name in SETTING_NAMES:
            object.__setattr__(settings, name, values.get(name))
        return settings

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError("ZeromemSettings is immutable; use model_copy(update=...)")

    def __copy__(self) -> ZeromemSettings:  # immutable: a copy is itself
        return self

    def __deepcopy__(self, memo: dict) -> ZeromemSettings:
        return self

    def __reduce__(self) -> tuple:
        return ZeromemSettings.from_checked, (dict(zip(SETTING_NAMES, self._values())),)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in SETTING_NAMES)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "ZeromemSettings(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in SETTING_NAMES) + ")"

    def model_copy(self, update: dict | None = None) -> ZeromemSettings:
        """A copy with `update` applied as given (not validated, like pydantic's model_copy)."""
        return ZeromemSettings.from_checked({**dict(zip(SETTING_NAMES, self._values())), **(update or {})})

    def merged_over(self, lower: ZeromemSettings) -> ZeromemSettings:
        """These settings, falling back to `lower` for anything unset."""
        merged = object.__new__(ZeromemSettings)
        for name in SETTING_NAMES:
            value = getattr(self, name)
            object.__setattr__(merged, name, value if value is not None else getattr(lower, name))
        return merged




def certainly_valid(values: dict) -> dict | None:
    """The validated values when every one is certainly valid (what the pydantic model would hold),
    else None: the caller then asks the model, which also words the problems."""
    checked: dict = {}
    for name, value in values.items():
        if name not in SETTING_NAMES:
            return None
        try:
            result = _certain(name, value)
        except ValueError:
            return None
        if result is _DOUBT:
            return None
        checked[name] = result
    return checked


_DOUBT = object()


def _certain(name: str, value: object) -> object:
    if value is None:
        return None
    if name == "parameters":
        result = check_parameters(value)
        return result if type(result) is ParametersFromConfig or (type(result) is int and result > 0) else _DOUBT
    if name in BYTE_SETTINGS:
        result = (check_memory if name == "gpu_memory" else check_reserve if name == "reserved" else check_bytes)(value)
        return result if type(result) is int and result >= 0 else _DOUBT
    if name == "precision":
        return value if type(value) is str and value in PRECISIONS else _DOUBT
    if name == "optimizer":
        return value if type(value) is str and value in OPTIMIZERS else _DOUBT
    if name == "world_size":
        return value if type(value) is int and value >= 1 else _DOUBT
    if name == "sequence_length":
        return value if type(value) is int and 1 <= value <= MAX_SIZE else _DOUBT
    if name in ("micro_batch", "gradient_accumulation_steps"):
        return value if type(value) is int and 1 <= value <= MAX_COUNT else _DOUBT
    if name in ("gradient_checkpointing", "dora", "double_quant", "kbit_prepare", "lora_target_linear",
                "precompute_ref_log_probs"):
        return value if type(value) is bool else _DOUBT
    if name == "fsdp_version":
        return value if type(value) is int and value in (1, 2) else _DOUBT
    if name in DEGREE_SETTINGS:
        return value if type(value) is int and 1 <= value <= MAX_COUNT else _DOUBT
    if name == "tiled_mlp":
        return value if type(value) is bool or (type(value) is int and 1 <= value <= MAX_SHARDS) else _DOUBT
    if name == "lora_rank":
        return value if type(value) is int and 1 <= value <= MAX_SIZE else _DOUBT
    if name in REGEX_SETTINGS:
        return check_targets(value, shorthand=name == "lora_targets")
    if name in NAME_LIST_SETTINGS:
        return check_module_names(value, shorthand=False)
    if name == "layers_to_transform":
        return check_layer_indices(value)
    if name == "lora_rank_pattern":
        return check_rank_pattern(value)
    if name in CHOICES:
        return value if type(value) is str and value in CHOICES[name] else _DOUBT
    if name == "accelerate_config":
        return value if type(value) is str and value.strip() else _DOUBT
    if name == "transformers_version":
        return value if type(value) is str and re.fullmatch(VERSION_PATTERN, value) else _DOUBT
    if name == "lora_dropout":
        if type(value) is int and value == 0:
            value = 0.0
        return value if type(value) is float and 0 <= value < 1 else _DOUBT
    if name == "warn_fraction":
        if type(value) is int and abs(value) < 2**53:
            value = float(value)
        if type(value) is not float or not math.isfinite(value):
            return _DOUBT
        return value if 0 < value <= 1 else _DOUBT
    return _DOUBT


def validate_settings(values: dict) -> tuple[ZeromemSettings, list[SettingProblem]]:
    """Settings from raw values: every problem reported, the valid values kept (one bad value does not
    discard the rest). The caller words the problems for its own surface (block, TOML, editor, CLI)."""
    checked = certainly_valid(values) if isinstance(values, dict) else None
    if checked is not None:
        return ZeromemSettings.from_checked(checked), []
    from zeromem_lsp.configs.settings_model import validate

    checked, problems = validate(values)
    return ZeromemSettings.from_checked(checked), problems
