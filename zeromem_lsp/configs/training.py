"""The memory-relevant facts of a DeepSpeed config, read tolerantly from its plain dict.

Validation is elsewhere: here a wrong or missing value simply becomes "unknown" (None), so a
half-valid config still yields whatever figures can be computed.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.memory.stages import by_number
from zeromem_lsp.configs.precision_names import optimizer_from_deepspeed_type
from zeromem_lsp.memory.precision import normalize_precision
from zeromem_lsp.provenance import Path

OFFLOAD_DEVICES = ("cpu", "nvme")


class TrainingSetup(NamedTuple):
    stage: str | None  # the stage key of memory/stages.py ("zero2"); None: the value is present but unusable
    stage_path: Path | None  # where the stage is written (None: DeepSpeed's default 0)
    offload_optimizer: str | None  # "cpu" | "nvme" | None
    offload_param: str | None
    precision: str | None  # "fp32" | "fp16" | "bf16" | None when "auto" / unknown
    precision_path: Path | None
    precision_note: str
    optimizer: str | None  # canonical optimizer name, None when unknown
    optimizer_path: Path | None
    optimizer_note: str
    gradient_dtype: str | None
    train_batch_size: int | None
    micro_batch_size: int | None
    gradient_accumulation_steps: int | None
    #: How its keys are spelt where they are written: "ds_config" (a DeepSpeed JSON) or "accelerate" (an
    #: Accelerate YAML's deepspeed_config: zero_stage, offload_optimizer_device), for hints that name a key.
    spelling: str = "ds_config"
    written_in: str | None = None  # the file holding them when it is not the document analysed


def _get(data: object, *path: str) -> object:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def as_integer(value: object) -> int | None:
    """An integer setting as a loader reads it: ints, and integral floats (2.0 is 2); None otherwise (bools too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def read_flag(value: object) -> bool | None:
    """A YAML / JSON switch: a bool, or the text true / false in any case; None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def positive_int(value: object) -> int | None:
    """`as_integer(value)` when it is > 0, else None."""
    value = as_integer(value)
    return value if value is not None and value > 0 else None


def _stage(data: dict, stage_for_auto: int | None) -> tuple[int | None, Path | None]:
    zero = data.get("zero_optimization")
    if zero is None:
        return 0, None
    if zero is True:  # legacy form: stage 1
        return 1, ("zero_optimization",)
    if zero is False:
        return 0, ("zero_optimization",)
    if not isinstance(zero, dict):
        return None, ("zero_optimization",)
    if "stage" not in zero:
        return 0, ("zero_optimization",)
    if zero["stage"] == "auto" and stage_for_auto is not None:
        return stage_for_auto, ("zero_optimization", "stage")
    stage = as_integer(zero["stage"])
    return (stage if stage in (0, 1, 2, 3) else None), ("zero_optimization", "stage")


def _device(section: object) -> str | None:
    device = _get(section, "device")
    return device if device in OFFLOAD_DEVICES else None


def _offload(data: dict) -> tuple[str | None, str | None]:
    zero = data.get("zero_optimization")
    if not isinstance(zero, dict):
        return None, None
    optimizer = _device(zero.get("offload_optimizer"))
    if optimizer is None and zero.get("cpu_offload") is True:  # deprecated spelling
        optimizer = "cpu"
    param = _device(zero.get("offload_param"))
    if param is None and zero.get("cpu_offload_param") is True:
        param = "cpu"
    return optimizer, param


def _precision(data: dict) -> tuple[str | None, Path | None, str]:
    fp16 = _get(data, "fp16", "enabled")
    bf16_key = "bf16" if "bf16" in data else "bfloat16"
    bf16 = _get(data, bf16_key, "enabled")
    if fp16 is True:
        return "fp16", ("fp16", "enabled"), "fp16.enabled is true"
    if bf16 is True:
        return "bf16", (bf16_key, "enabled"), f"{bf16_key}.enabled is true"
    for name, value in (("fp16", fp16), (bf16_key, bf16)):
        if value == "auto":
            return None, (name, "enabled"), f'{name}.enabled is "auto" (filled by HF at launch)'
    return "fp32", None, "neither fp16 nor bf16 is enabled"


def _optimizer(data: dict) -> tuple[str | None, Path | None, str]:
    kind = _get(data, "optimizer", "type")
    if kind is None:
        return "adamw", None, "no optimizer section: AdamW (HF Trainer's default)"
    if not isinstance(kind, str):
        return None, ("optimizer", "type"), f"optimizer.type {kind!r} is not a name"
    name = optimizer_from_deepspeed_type(kind)
    if name is None:
        return None, ("optimizer", "type"), f"optimizer.type {kind!r} has no known state size"
    if name == "sgd" and _get(data, "optimizer", "params", "momentum"):
        name = "sgd_momentum"
    return name, ("optimizer", "type"), f"optimizer.type is {kind!r}"


def read_training_setup(data: object, stage_for_auto: int | None = None) -> TrainingSetup:
    """`stage_for_auto`: what a launcher writes over "stage": "auto" (None: nobody, the stage is unknown)."""
    data = data if isinstance(data, dict) else {}
    number, stage_path = _stage(data, stage_for_auto)
    stage = by_number(number).key if number is not None else None
    offload_optimizer, offload_param = _offload(data)
    precision, precision_path, precision_note = _precision(data)
    optimizer, optimizer_path, optimizer_note = _optimizer(data)
    gradient_dtype = normalize_precision(str(_get(data, "data_types", "grad_accum_dtype") or "")) or None
    return TrainingSetup(
        stage=stage,
        stage_path=stage_path,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        precision=precision,
        precision_path=precision_path,
        precision_note=precision_note,
        optimizer=optimizer,
        optimizer_path=optimizer_path,
        optimizer_note=optimizer_note,
        gradient_dtype=gradient_dtype,
        train_batch_size=positive_int(data.get("train_batch_size")),
        micro_batch_size=positive_int(data.get("train_micro_batch_size_per_gpu")),
        gradient_accumulation_steps=positive_int(data.get("gradient_accumulation_steps")),
    )


def implied_world_size(setup: TrainingSetup) -> int | None:
    """train / (micro × gas) when all three are known and it divides exactly."""
    train, micro, gas = setup.train_batch_size, setup.micro_batch_size, setup.gradient_accumulation_steps
    if train is None or micro is None or gas is None:
        return None
    world, rest = divmod(train, micro * gas)
    return world if rest == 0 and world > 0 else None
