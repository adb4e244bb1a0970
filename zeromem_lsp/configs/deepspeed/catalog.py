"""Static facts about DeepSpeed 0.19.8 configs: known keys, strict sections, removed features,
HF-filled "auto" paths, optimizer names; plus `field_doc` / `section_keys` for hover and completion.
"""

from __future__ import annotations

import enum
import typing
from typing import Any, Callable, NamedTuple, Optional, TYPE_CHECKING, Union, cast

from . import facts as facts

if TYPE_CHECKING:
    from pydantic import BaseModel


#: Strict sections: path -> model name in models. DeepSpeed refuses unknown keys inside these.
#: `STRICT_SECTIONS` (path -> model class) imports the models on first use.
STRICT_SECTION_NAMES: dict[tuple[str, ...], str] = {
    ("zero_optimization",): "ZeroConfig",
    ("zero_optimization", "offload_param"): "OffloadParamConfig",
    ("zero_optimization", "offload_optimizer"): "OffloadOptimizerConfig",
    ("zero_optimization", "leaf_module"): "LeafModuleConfig",
    ("zero_optimization", "zenflow"): "ZenFlowConfig",
    ("fp16",): "FP16Config",
    ("bf16",): "BF16Config",
    ("bfloat16",): "BF16Config",
    ("hybrid_engine",): "HybridEngineConfig",
    ("compile",): "CompileConfig",
    ("weight_quantization",): "WeightQuantizationConfig",
    ("tensorboard",): "TensorBoardConfig",
    ("wandb",): "WandbConfig",
    ("csv_monitor",): "CSVMonitorConfig",
    ("comet",): "CometConfig",
    ("comms_logger",): "CommsLoggerConfig",
    ("timers", "throughput"): "ThroughputTimerConfig",
    ("tensor_parallel",): "TensorParallelConfig",
    ("tensor_parallel", "tp"): "TPSubConfig",
    ("tensor_parallel", "tensor_parallel"): "TPSubConfig",
}


def _models():
    """The pydantic models (importing them builds them: only where a file needs them)."""
    from . import models

    return models


def __getattr__(name: str) -> Any:
    if name == "STRICT_SECTIONS":
        models = _models()
        return {path: getattr(models, model) for path, model in STRICT_SECTION_NAMES.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Every top-level key DeepSpeed 0.19.8 reads (``zeromem`` is ours and always fine).
KNOWN_TOP_LEVEL_KEYS: frozenset[str] = frozenset(facts.KNOWN_TOP_LEVEL_KEYS)

#: Top-level keys of features DeepSpeed removed: any of them aborts launch.
REMOVED_TOP_LEVEL_KEYS: dict[str, str] = {
    "nebula": "Nebula checkpointing was removed from DeepSpeed",
    "compression_training": "the DeepSpeed compression library was removed",
    "amp": "the NVIDIA Apex AMP integration was removed; use fp16, bf16 or torch_autocast",
    "quantize_training": "Mixture-of-Quantization (quantize_training) was removed",
    "sparse_gradients": "sparse compression of dense embedding gradients was removed",
    "eigenvalue": "eigenvalue-based Mixture-of-Quantization was removed",
    "sparse_attention": "DeepSpeed Sparse Attention was removed",
    "elasticity": "elastic training was removed; set the batch sizes directly",
    "graph_harvesting": "graph harvesting was removed",
    "curriculum_learning": "top-level curriculum_learning was removed; use "
    "data_efficiency.data_sampling.curriculum_learning",
    "progressive_layer_drop": "Progressive Layer Dropping was removed",
}
REMOVED_ZERO_KEYS: dict[str, str] = {
    "mics_shard_size": "MiCS sharding was removed",
    "mics_hierarchical_params_gather": "MiCS sharding was removed",
    "zeropp_loco_param": "LoCo-ZeRO++ was removed; drop the key to keep plain quantized gradients",
}

#: Deprecated keys DeepSpeed still accepts (with a warning) -> their successor (None: no direct one).
DEPRECATED_KEYS: dict[tuple[str, ...], Optional[str]] = {
    ("zero_optimization", "cpu_offload"): "offload_optimizer",
    ("zero_optimization", "cpu_offload_param"): "offload_param",
    ("zero_optimization", "cpu_offload_use_pin_memory"): None,
    ("zero_optimization", "stage3_gather_fp16_weights_on_model_save"): "stage3_gather_16bit_weights_on_model_save",
    ("bfloat16",): "bf16",
}

#: Where HF Transformers (integrations/deepspeed.py) or Accelerate (DeepSpeedPlugin, from its own
#: config: zero stage, offload devices, 16-bit save) replace "auto" before DeepSpeed sees the config.
HF_AUTO_FILLED_PATHS: frozenset[tuple[str, ...]] = frozenset(
    {
        ("train_micro_batch_size_per_gpu",),
        ("gradient_accumulation_steps",),
        ("train_batch_size",),
        ("gradient_clipping",),
        ("optimizer", "params", "lr"),
        ("optimizer", "params", "betas"),
        ("optimizer", "params", "eps"),
        ("optimizer", "params", "weight_decay"),
        ("scheduler", "params", "warmup_min_lr"),
        ("scheduler", "params", "warmup_max_lr"),
        ("scheduler", "params", "total_num_steps"),
        ("scheduler", "params", "warmup_num_steps"),
        ("fp16", "enabled"),
        ("amp", "enabled"),
        ("amp", "opt_level"),
        ("bf16", "enabled"),
        ("zero_optimization", "reduce_bucket_size"),
        ("zero_optimization", "stage3_prefetch_bucket_size"),
        ("zero_optimization", "stage3_param_persistence_threshold"),
        ("zero_optimization", "stage"),
        ("zero_optimization", "offload_optimizer", "device"),
        ("zero_optimization", "offload_param", "device"),
        ("zero_optimization", "stage3_gather_16bit_weights_on_model_save"),
    }
)

#: What `"stage": "auto"` becomes under HF: Transformers' TrainingArguments hands its DeepSpeed config to
#: Accelerate's DeepSpeedPlugin, which fills it with int(ACCELERATE_DEEPSPEED_ZERO_STAGE) or 2 when that is
#: unset (`accelerate launch --zero_stage N` sets it). Transformers itself never fills the stage.
HF_AUTO_STAGE = 2

#: Places where "auto" is a genuine DeepSpeed value (not a placeholder).
AUTO_IS_A_VALUE: frozenset[tuple[str, ...]] = frozenset(
    {
        ("pipeline", "stages"),
        ("data_types", "keep_in_fp32_modules"),
        ("zero_optimization", "zenflow", "select_strategy"),
        ("zero_optimization", "zenflow", "select_interval"),
        ("zero_optimization", "zenflow", "update_interval"),
    }
)

#: Optimizer names DeepSpeed builds itself (matched case-insensitively).
DEEPSPEED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion", "muon")
#: torch.optim optimizer classes (torch 2.x), matched case-sensitively.
TORCH_OPTIMIZERS = (
    "ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon",
    "NAdam", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam",
)
#: Optimizers ZeRO accepts without ``zero_allow_untested_optimizer``.
ZERO_TESTED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lion", "muon", "Adam", "AdamW", "Adagrad")
#: 1-bit optimizers that older DeepSpeed releases shipped.
REMOVED_OPTIMIZERS = ("onebitadam", "onebitlamb", "zerooneadam")

#: Spellings DeepSpeed's dtype enum accepts (torch_autocast.dtype, data_types.grad_accum_dtype).
DTYPE_NAMES = (
    "torch.float16", "fp16", "float16", "half", "torch.float32", "fp32", "float32", "float",
    "torch.int8", "int8", "torch.bfloat16", "bf16", "bfloat16",
)


# ---------------------------------------------------------------- hover / completion


class FieldDoc(NamedTuple):
    """What an editor shows for one config key."""

    path: tuple[str, ...]
    type: str
    default: Any
    description: str
    enum_values: tuple[Any, ...] = ()
    is_deprecated: bool = False
    replacement: Optional[str] = None
    aliases: tuple[str, ...] = ()
    strict: bool = False  # the key lives in a section where DeepSpeed refuses unknown keys


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Union-with-None and return the inner type."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is Union and len(args) == 1:
        return args[0]
    return annotation


def _model_of(annotation: Any) -> Optional[type[BaseModel]]:
    from pydantic import BaseModel

    inner = _unwrap(annotation)
    candidates = typing.get_args(inner) if typing.get_origin(inner) is Union else (inner,)
    for cand in candidates:
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def _type_name(annotation: Any) -> str:
    from pydantic import BaseModel

    inner = _unwrap(annotation)
    if isinstance(inner, type):
        if issubclass(inner, enum.Enum):
            return "enum"
        if issubclass(inner, BaseModel):
            return "object"
        return {"bool": "boolean", "int": "integer", "float": "number", "str": "string"}.get(
            inner.__name__, inner.__name__
        )
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        return "enum"
    if origin in (list, typing.List):
        return "array"
    if origin in (dict, typing.Dict):
        return "object"
    if origin is Union:
        return " | ".join(_type_name(a) for a in typing.get_args(inner))
    return str(inner)


def _enum_values(annotation: Any) -> tuple[Any, ...]:
    inner = _unwrap(annotation)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return tuple(e.value for e in inner)
    if typing.get_origin(inner) is typing.Literal:
        return typing.get_args(inner)
    return ()


def _find_field(model: type[BaseModel], key: str) -> Optional[str]:
    if key in model.model_fields:
        return key
    for name, info in model.model_fields.items():
        if info.alias == key:
            return name
    return None


def field_doc(path: Any) -> Optional[FieldDoc]:
    """Documentation of the key at ``path`` (a tuple/list of keys, aliases accepted), or None."""
    keys = tuple(str(k) for k in path)
    if not keys:
        return None
    m = _models()
    if keys[:2] == ("timers", "throughput"):
        if len(keys) == 2:
            return FieldDoc(keys, "object", None, m.ThroughputTimerConfig.__doc__ or "")
        return _doc_walk(m.ThroughputTimerConfig, keys, 2, strict=True)
    return _doc_walk(m.DeepSpeedTopLevel, keys, 0, strict=False)


def _doc_walk(model: type[BaseModel], keys: tuple[str, ...], depth: int, strict: bool) -> Optional[FieldDoc]:
    key = keys[depth]
    name = _find_field(model, key)
    if name is None:
        return None
    info = model.model_fields[name]
    if depth < len(keys) - 1:
        sub = _model_of(info.annotation)
        if sub is None:
            return None
        return _doc_walk(sub, keys, depth + 1, issubclass(sub, _models().StrictSection))
    from pydantic_core import PydanticUndefined

    default = info.default
    if default is PydanticUndefined:
        # the models' factories take no argument (none reads the validated data)
        default = cast("Callable[[], object]", info.default_factory)() if info.default_factory else None
    if isinstance(default, enum.Enum):
        default = default.value
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return FieldDoc(
        path=keys,
        type=_type_name(info.annotation),
        default=default,
        description=info.description or "",
        enum_values=_enum_values(info.annotation),
        is_deprecated=bool(extra.get(_models().DEPRECATED)),
        replacement=cast(Optional[str], extra.get("replacement")),  # models._dep writes a str or None
        aliases=tuple(a for a in (name, info.alias) if a and a != key),
        strict=strict,
    )


def section_keys(path: Any) -> list[str]:
    """Keys accepted at a strict section ``path`` (both names of aliased fields), for completion.

    ``()`` gives the known top-level keys; an unknown or non-strict path gives ``[]``.
    Deprecated keys come last.
    """
    keys = tuple(str(k) for k in path)
    if not keys:
        return sorted(KNOWN_TOP_LEVEL_KEYS)
    if keys not in STRICT_SECTION_NAMES:
        return []
    model = getattr(_models(), STRICT_SECTION_NAMES[keys])
    live: list[str] = []
    old: list[str] = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        bucket = old if extra.get(_models().DEPRECATED) else live
        if name == "steps_per_epoch":  # set by DeepSpeed at run time, never by users
            continue
        bucket.append(name)
        if info.alias and info.alias != name:
            bucket.append(info.alias)
    return sorted(live) + sorted(old)
