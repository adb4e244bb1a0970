"""The `zeromem` settings: what a config cannot say about itself (model size, ranks, GPU budget).

One model serves the `zeromem` block inside a config, `[tool.zeromem]` / `zeromem.toml`, editor
settings and CLI flags. Sizes are accepted as numbers or strings ("7B", "80GiB") and resolved
to exact ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema

from zeromem_lsp.configs.model_config import MAX_COUNT, MAX_SIZE
from zeromem_lsp.precision import OPTIMIZERS, PRECISIONS
from zeromem_lsp.units import UnitError, parse_bytes, parse_parameter_count

SETTING_NAMES = (
    "parameters",
    "parameter_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "precision",
    "optimizer",
    "world_size",
    "gpu_memory",
    "warn_fraction",
    "sequence_length",
    "micro_batch",
    "gradient_checkpointing",
    "attention",
    "reserved",
)


def _size(parse):
    def convert(value: object) -> object:
        if value is None:
            return None
        if isinstance(value, bool):
            raise ValueError(f"expected a number or a string such as '80GiB', got {value!r}")
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"expected a whole number, got {value!r}")
            value = int(value)
        if not isinstance(value, (int, str)):
            raise ValueError(f"expected a number or a string, got {value!r}")
        try:
            return parse(value)
        except UnitError as error:
            raise ValueError(str(error)) from None

    return BeforeValidator(convert)


BYTE_SIZE_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*([kKMGTPE]i?[bB]?|[bB])?\s*$"
COUNT_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*[kKmMbBtT]?\s*$"
ByteSize = Annotated[
    int,
    _size(parse_bytes),
    Field(ge=0),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": BYTE_SIZE_PATTERN}]}),
]
ParameterCount = Annotated[
    int,
    _size(parse_parameter_count),
    Field(gt=0),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": COUNT_PATTERN}]}),
]
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
Optimizer = Literal[OPTIMIZERS]  # type: ignore[valid-type]


class ParametersFromConfig(BaseModel):
    """Count the parameters from a local Hugging Face `config.json` (path relative to the config file;
    in project settings, relative to the settings file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    from_config: str = Field(..., min_length=1, description="Path to a model's config.json.")


def _parameters_setting(value: object) -> object:
    """A count ("7B", 8030261248) or {"from_config": path}: one error message either way."""
    if isinstance(value, ParametersFromConfig):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"from_config"})
        path = value.get("from_config")
        if unknown or not isinstance(path, str) or not path.strip():
            raise ValueError('expected {"from_config": "path/to/config.json"}'
                             + (f"; unknown key {unknown[0]!r}" if unknown else ""))
        return ParametersFromConfig(from_config=path)
    count = _size(parse_parameter_count).func(value)
    if isinstance(count, int) and count <= 0:
        raise ValueError("Input should be greater than 0")
    return count


ParametersSetting = Annotated[
    int | ParametersFromConfig,
    BeforeValidator(_parameters_setting),
    WithJsonSchema({"anyOf": [
        {"type": "integer", "minimum": 1}, {"type": "string", "pattern": COUNT_PATTERN},
        {"type": "object", "properties": {"from_config": {"type": "string", "minLength": 1,
         "description": "Path to a Hugging Face model config.json; the parameters are counted exactly."}},
         "required": ["from_config"], "additionalProperties": False},
    ]}),
]


class ZeromemSettings(BaseModel):
    """Declarations for zeromem; DeepSpeed ignores this top-level block."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    parameters: ParametersSetting | None = Field(
        None,
        description='Model parameter count, e.g. "7B", "350M" or 8030261248, or {"from_config": "path/to/config.json"} '
        "to count it exactly from a Hugging Face model config.",
        examples=["7B", {"from_config": "model/config.json"}],
    )
    parameter_bytes: ByteSize | None = Field(
        None, description="P: total parameter bytes (instead of `parameters`), e.g. \"14GB\"."
    )
    gradient_bytes: ByteSize | None = Field(None, description="G: total gradient bytes (with `parameter_bytes`).")
    optimizer_bytes: ByteSize | None = Field(
        None, description="O: total optimizer-state bytes (with `parameter_bytes`)."
    )
    precision: Precision | None = Field(
        None, description="Training precision; default: from the fp16/bf16 sections (neither enabled = fp32)."
    )
    optimizer: Optimizer | None = Field(
        None, description="Optimizer for the state size; default: the config's `optimizer.type`, else AdamW."
    )
    world_size: int | None = Field(
        None, ge=1, strict=True, description="Number of ranks (GPUs); default: implied by the batch triple."
    )
    gpu_memory: ByteSize | None = Field(
        None, description='Per-GPU memory budget, e.g. "80GiB" or "24GB".', examples=["80GiB"]
    )
    warn_fraction: float | None = Field(
        None, gt=0, le=1, description="Warn when the chosen stage uses more than this fraction of gpu_memory (default 0.9)."
    )

    sequence_length: int | None = Field(
        None, ge=1, le=MAX_SIZE, strict=True,
        description="Tokens per training sequence, for the activation estimate; default: the config's "
        "`max_seq_length` / `max_length` (TrainingArguments / TRL).",
    )
    micro_batch: int | None = Field(
        None, ge=1, le=MAX_COUNT, strict=True,
        description="Sequences per GPU per step, for the activation estimate; default: the config's "
        "`train_micro_batch_size_per_gpu` / `per_device_train_batch_size`.",
    )
    gradient_checkpointing: bool | None = Field(
        None, strict=True,
        description="Whether the training script enables gradient (activation) checkpointing; default: the "
        "config's `gradient_checkpointing` / `activation_checkpointing`, else false.",
    )
    attention: Literal["sdpa", "eager"] | None = Field(
        None, description="Attention implementation for the activation estimate: `sdpa` (default; what flash "
        "attention keeps too) or `eager` (keeps the s×s probabilities).",
    )
    reserved: ByteSize | None = Field(
        None, description='Per-GPU bytes for the CUDA context, library workspaces and the allocator, added to the '
        'peak; default "1GiB" (docs/memory-model.md).', examples=["1GiB"],
    )

    def merged_over(self, lower: ZeromemSettings) -> ZeromemSettings:
        """These settings, falling back to `lower` for anything unset."""
        values = {name: getattr(self, name) for name in SETTING_NAMES}
        return lower.model_copy(update={k: v for k, v in values.items() if v is not None})




@dataclass(frozen=True)
class SettingProblem:
    """One invalid setting: its name, why, and whether the name itself is unknown."""

    name: str
    message: str
    unknown: bool = False


def validate_settings(values: dict) -> tuple[ZeromemSettings, list[SettingProblem]]:
    """Settings from raw values: every problem reported, the valid values kept (one bad value does not
    discard the rest). The caller words the problems for its own surface (block, TOML, editor, CLI)."""
    try:
        return ZeromemSettings.model_validate(values), []
    except ValidationError as error:
        problems = []
        for item in error.errors():
            name = str(item["loc"][0]) if item["loc"] else ""
            unknown = item["type"] == "extra_forbidden"
            message = "unknown setting" if unknown else item["msg"].removeprefix("Value error, ")
            problems.append(SettingProblem(name, message, unknown))
    bad = {problem.name for problem in problems}
    try:
        return ZeromemSettings.model_validate({k: v for k, v in values.items() if k not in bad}), problems
    except ValidationError:  # pragma: no cover - only valid values are left
        return ZeromemSettings(), problems
