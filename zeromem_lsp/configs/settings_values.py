"""The plain parts of the `zeromem` settings, shared by settings.py (the immutable value and its
pydantic-free check) and settings_model.py (the pydantic model of record): names, patterns and the
value checks both call. Imports neither of them, so the two do not import each other.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal, NamedTuple, get_args

from zeromem_lsp.units import UnitError, format_bytes, format_count, parse_bytes, parse_parameter_count

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
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "attention",
    "reserved",
    "engine",
    "fsdp_version",
    "param_dtype",
    "optimizer_impl",
    "lora_rank",
    "lora_targets",
    "modules_to_save",
    "dora",
    "quantization",
    "double_quant",
    "kbit_prepare",
    "lora_dropout",
    "exclude_modules",
    "layers_to_transform",
    "layers_pattern",
    "lora_rank_pattern",
    "target_parameters",
    "lora_target_linear",
    "accelerate_config",
    "loss_kernel",
    "trainer",
    "precompute_ref_log_probs",
    "transformers_version",
    "tensor_parallel",
    "context_parallel",
    "ulysses",
    "expert_parallel",
    "activation_offload",
    "tiled_mlp",
)
#: The settings that are parallel degrees (a whole number, 1 = off): configs/parallelism.Parallelism's fields.
DEGREE_SETTINGS = ("tensor_parallel", "context_parallel", "ulysses", "expert_parallel")
BYTE_SIZE_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*([kKMGTPE]i?[bB]?|[bB])?\s*$"
COUNT_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*[kKmMbBtT]?\s*$"
DEFAULT_WARN_FRACTION = 0.9
# Each choice is a Literal type (settings_model.py's fields) and the tuple of its values.
Attention = Literal["sdpa", "eager"]
ATTENTIONS: tuple[Attention, ...] = get_args(Attention)
#: What runs the step (the peak's phases differ): plain torch / DDP, DeepSpeed ZeRO, FSDP.
Engine = Literal["torch", "deepspeed", "fsdp"]
ENGINES: tuple[Engine, ...] = get_args(Engine)
#: FSDP1 (FullyShardedDataParallel) or FSDP2 (fully_shard), when the engine is fsdp.
FsdpVersionNumber = Literal[1, 2]
FSDP_VERSIONS: tuple[FsdpVersionNumber, ...] = get_args(FsdpVersionNumber)
#: The dtype the weights are stored in.
ParamDtype = Literal["bf16", "fp16", "fp32"]
PARAM_DTYPES: tuple[ParamDtype, ...] = get_args(ParamDtype)
#: torch.optim's AdamW implementations (foreach: the GPU default; fused: also DeepSpeed's FusedAdam).
OptimizerImpl = Literal["foreach", "for-loop", "fused"]
OPTIMIZER_IMPLS: tuple[OptimizerImpl, ...] = get_args(OptimizerImpl)
#: The causal-LM loss the step runs: Transformers' ForCausalLMLoss, Liger's fused linear cross-entropy,
#: cut-cross-entropy, axolotl's chunked cross-entropy (memory/loss_and_reference.py).
LossKernel = Literal["hf", "liger_flce", "cut_cross_entropy", "chunked_ce"]
LOSS_KERNELS: tuple[LossKernel, ...] = get_args(LossKernel)
#: How the frozen base is stored (bitsandbytes): none (the model dtype), int8, nf4, fp4 (memory/adapters.py).
Quantization = Literal["none", "int8", "nf4", "fp4"]
QUANTIZATIONS: tuple[Quantization, ...] = get_args(Quantization)
#: What trains (the step's loss and a frozen reference model): sft, or a preference trainer (memory/preference.py).
Trainer = Literal["sft", "dpo", "kto", "orpo", "simpo", "cpo", "grpo"]
TRAINERS: tuple[Trainer, ...] = get_args(Trainer)
#: What leaves the GPU after a checkpointed forward: nothing, the checkpointed layer inputs, every saved tensor
#: (configs/parallelism.ACTIVATION_OFFLOADS, which the typed value checks against).
ActivationOffload = Literal["none", "cpu", "cpu_all"]
ACTIVATION_OFFLOAD_CHOICES: tuple[ActivationOffload, ...] = get_args(ActivationOffload)
#: GRPOConfig's keys the GRPO step reads (memory/grpo.py), written in a recipe or given as estimate's options
GRPO_KEYS = ("max_completion_length", "steps_per_generation", "beta", "use_vllm")
#: TRL GRPOConfig's max_completion_length default (trl/trainer/grpo_config.py, TRL 1.16).
MAX_COMPLETION_LENGTH = 512
#: PEFT's shorthand for every linear layer but the output head (peft.utils.constants).
ALL_LINEAR = "all-linear"
#: Every setting with a fixed set of values -> those values (checked alike by both validators).
CHOICES = {"attention": ATTENTIONS, "engine": ENGINES, "param_dtype": PARAM_DTYPES, "optimizer_impl": OPTIMIZER_IMPLS,
           "quantization": QUANTIZATIONS, "loss_kernel": LOSS_KERNELS, "trainer": TRAINERS,
           "activation_offload": ACTIVATION_OFFLOAD_CHOICES}
#: The settings that are module names: a list, or one string of comma-separated names.
NAME_LIST_SETTINGS = ("lora_targets", "modules_to_save", "exclude_modules", "layers_pattern", "target_parameters")
#: Of those, the ones PEFT also takes as one regular expression ({"regex": "..."}).
REGEX_SETTINGS = ("lora_targets", "exclude_modules")
#: The settings that are byte sizes ("80GiB"): checked as bytes, shown as bytes (hover, completion).
BYTE_SETTINGS = ("parameter_bytes", "gradient_bytes", "optimizer_bytes", "gpu_memory", "reserved")
#: A GPU budget or reserve under 1 MiB, or a model under 1,000 parameters, is a size written without its
#: unit ("gpu_memory": 80 is 80 bytes): an error with a hint. P, G, O bytes have no floor (exact inputs
#: of the formula, small in its worked examples).
MIN_MEMORY = 2**20
#: A release as `transformers_version` takes it ("4.46.3", "4.51"): configs/transformers_paths.py picks what it keeps.
VERSION_PATTERN = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"


def check_tiled_mlp(value: object) -> bool | int:
    """`tiled_mlp`: true / false, or TiledMLP's shard count (a whole number of at least 1); ValueError otherwise."""
    if isinstance(value, bool) or (type(value) is int and 1 <= value <= MAX_SHARDS):
        return value
    raise ValueError(f"expected true, false or a shard count of at least 1, got {value!r}")


#: More shards than tokens in any sequence zeromem takes (model_config.MAX_SIZE) is a typo.
MAX_SHARDS = 10**9


def check_version(value: object) -> str:
    """A release number ("4.51.3"); ValueError otherwise."""
    if not isinstance(value, str) or re.fullmatch(VERSION_PATTERN, value.strip()) is None:
        raise ValueError(f"expected a release number such as 4.51.3, got {value!r}")
    return value.strip()


MAX_RANK = 10**9  # configs/model_config.MAX_SIZE: a LoRA rank above it is absurd
MAX_LAYER_INDEX = 10**6  # configs/model_config.MAX_COUNT
MIN_PARAMETERS = 1000
_UNIT_LETTERS = re.compile(r"\s*[A-Za-z]*\s*$")


def _size(parse, value: object) -> object:
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
        return _parsed(parse, value) if type(value) is str else parse(value)
    except UnitError as error:
        raise ValueError(str(error)) from None


@lru_cache(maxsize=512)
def _parsed(parse, text: str) -> int:
    """A size written as text, parsed once: every config of a project repeats "80GiB" and "7B"."""
    return parse(text)


def check_bytes(value: object) -> object:
    """A byte size ("80GiB", 85899345920) -> exact int; ValueError with the reason otherwise."""
    return _size(parse_bytes, value)


def _as_written(value: object) -> str:
    """The number as written, without its unit letters: the base of a "did you mean" hint."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _UNIT_LETTERS.sub("", value.strip()) if isinstance(value, str) else str(value)


def _unitless(value: object) -> bool:
    return not isinstance(value, str) or _as_written(value) == value.strip()


def check_memory(value: object, zero_allowed: bool = False, hint_unit: str = "GiB") -> object:
    """A GPU budget (or, with `zero_allowed`, a reserve): a byte size of at least 1 MiB."""
    size = check_bytes(value)
    if type(size) is int and size < MIN_MEMORY and not (zero_allowed and size == 0):
        if size == 0:
            raise ValueError(f"a budget of 0 B: give the memory of one GPU, e.g. 80{hint_unit}")
        shown = value.strip() if isinstance(value, str) else _as_written(value)
        why = ": a size without a unit is bytes" if _unitless(value) else ""
        raise ValueError(f"{shown} is {format_count(size)} B, under 1 MiB{why}; "
                         f"did you mean {_as_written(value)}{hint_unit}?")
    return size


def check_reserve(value: object) -> object:
    """`reserved`: 0 (no reserve) or at least 1 MiB."""
    return check_memory(value, zero_allowed=True, hint_unit="MiB")


def decimal_budget_note(value: object) -> str | None:
    """For a GPU budget written in decimal gigabytes ("80GB"): a GPU sold as "80 GB" has 80 GiB."""
    if not isinstance(value, str):
        return None
    letters = _UNIT_LETTERS.search(value.strip())
    assert letters is not None  # it matches at the end of any text
    if letters.group().strip().lower() not in ("g", "gb"):
        return None
    try:
        size = parse_bytes(value)
    except UnitError:
        return None
    number = _as_written(value)
    return (f"{value.strip()} is {format_count(size)} B ({format_bytes(size)}); a GPU sold as \"{number} GB\" has "
            f"{number} GiB: write {binary_budget(value)} for it")


def binary_budget(value: str) -> str:
    """The budget an "80 GB" GPU has, spelt in GiB: "80GB" -> "80GiB"."""
    return f"{_as_written(value)}GiB"


def check_count(value: object) -> object:
    """A parameter count ("7B", 7e9) -> exact int; ValueError with the reason otherwise."""
    return _size(parse_parameter_count, value)


def check_module_names(value: object, shorthand: bool = True) -> tuple[str, ...] | str:
    """Module names as PEFT takes them: a list, or a comma-separated string; "all-linear" (when `shorthand`)
    stays the shorthand. ValueError with the reason otherwise."""
    if isinstance(value, str):
        if shorthand and value.strip().lower() == ALL_LINEAR:
            return ALL_LINEAR
        value = value.split(",")
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected module names (a list, or names separated by commas), got {value!r}")
    names = tuple(name.strip() for name in value if isinstance(name, str))
    if len(names) != len(value) or not names or not all(names):
        raise ValueError(f"expected non-empty module names, got {value!r}")
    return names


class TargetRegex(NamedTuple):
    """A regular expression PEFT matches against each module's full name (re.fullmatch), as a string
    `target_modules` / `exclude_modules` is taken: written {"regex": "..."} in the settings."""

    regex: str


def checked_pattern(pattern: object) -> str:
    """`pattern` when Python's re compiles it; ValueError naming the position otherwise."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"expected a regular expression (a non-empty string), got {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as error:
        where = f" at position {error.pos}" if error.pos is not None else ""
        raise ValueError(f"{pattern!r} is not a valid Python regular expression: {error.msg}{where}") from None
    return pattern


def check_targets(value: object, shorthand: bool = True) -> tuple[str, ...] | str | TargetRegex:
    """Module names (check_module_names), or {"regex": "..."}: one regular expression."""
    if isinstance(value, TargetRegex):
        return value
    if isinstance(value, dict):
        if set(value) != {"regex"}:
            raise ValueError('expected module names, or {"regex": "<a Python regular expression>"}')
        return TargetRegex(checked_pattern(value["regex"]))
    return check_module_names(value, shorthand)


def check_layer_indices(value: object) -> tuple[int, ...]:
    """PEFT's layers_to_transform: one layer index or a list of them (integers ≥ 0)."""
    if type(value) is int:
        value = (value,)
    if not isinstance(value, (list, tuple)) or not value or not all(
            type(index) is int and 0 <= index <= MAX_LAYER_INDEX for index in value):
        raise ValueError(f"expected layer indices: an integer ≥ 0 or a list of them, got {value!r}")
    return tuple(value)


def check_rank_pattern(value: object) -> tuple[tuple[str, int], ...]:
    """PEFT's rank_pattern: {regex: rank}, in order (the first key matching a module's name wins)."""
    if isinstance(value, tuple) and all(isinstance(item, tuple) and len(item) == 2 for item in value):
        value = dict(value)
    if not isinstance(value, dict) or not value:
        raise ValueError(f'expected {{"<regular expression>": rank, ...}}, got {value!r}')
    for key, rank in value.items():
        checked_pattern(key)
        if type(rank) is not int or not 1 <= rank <= MAX_RANK:
            raise ValueError(f"rank_pattern {key!r}: expected a rank from 1 to {MAX_RANK:,}, got {rank!r}")
    return tuple(value.items())


class ParametersFromConfig(NamedTuple):
    """Count the parameters from a local Hugging Face `config.json` (path relative to the config file;
    in project settings, relative to the settings file)."""

    from_config: str
    revision: str | None = None  # a hub id's branch, tag or commit hash (default: main)


def check_parameters(value: object) -> object:
    """A count ("7B", 8030261248) or {"from_config": path}: one error message either way."""
    if isinstance(value, ParametersFromConfig):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"from_config", "revision"})
        path, revision = value.get("from_config"), value.get("revision")
        if unknown or not isinstance(path, str) or not path.strip() or not (
                revision is None or isinstance(revision, str) and revision.strip()):
            raise ValueError('expected {"from_config": "path/to/config.json"} (and a hub id\'s "revision")'
                             + (f"; unknown key {unknown[0]!r}" if unknown else ""))
        return ParametersFromConfig(path, revision)
    count = check_count(value)
    if isinstance(count, int) and count <= 0:
        raise ValueError("Input should be greater than 0")
    if isinstance(count, int) and count < MIN_PARAMETERS:
        shown = value.strip() if isinstance(value, str) else _as_written(value)
        why = ": a count without a suffix is whole parameters" if _unitless(value) else ""
        raise ValueError(f"{shown} is {count} parameters, under 1,000{why}; did you mean {_as_written(value)}B?")
    return count


class SettingProblem(NamedTuple):
    """One invalid setting: its name, why, and whether the name itself is unknown."""

    name: str
    message: str
    unknown: bool = False
