"""What a config says about one training step beyond the model: micro-batch, sequence length,
activation checkpointing, ZeRO bucket sizes and FSDP prefetch — read tolerantly from plain dicts.

Each value keeps where it was written (`Given.path`, a document path; None when it came from another
file or a library default), so hovers and findings can point at it. Validation is elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zeromem_lsp.configs.training import positive_int, read_flag  # read_flag: re-exported, where readers take it
from zeromem_lsp.provenance import Given, Path

#: zero_optimization keys that size ZeRO's buffers (zeromem_lsp.memory.buffers).
ZERO_BUFFER_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "stage3_prefetch_bucket_size",
                    "stage3_max_live_parameters", "contiguous_gradients", "stage3_max_reuse_distance",
                    "stage3_param_persistence_threshold")
#: DeepSpeed's older spellings of the ZeRO-3 sizes (DeepSpeedZeroConfig aliases).
ZERO_ALIASES = {"prefetch_bucket_size": "stage3_prefetch_bucket_size",
                "max_live_parameters": "stage3_max_live_parameters",
                "max_reuse_distance": "stage3_max_reuse_distance",
                "param_persistence_threshold": "stage3_param_persistence_threshold"}
#: TrainingArguments.per_device_train_batch_size when the JSON does not set it.
HF_DEFAULT_MICRO_BATCH = 8


@dataclass(frozen=True)
class Workload:
    micro_batch: Given | None = None
    sequence_length: Given | None = None
    checkpointing: Given | None = None
    zero: dict[str, Given] = field(default_factory=dict)  # ZERO_BUFFER_KEYS as written ("auto" kept)
    compute_dtype: Given | None = None  # mixed-precision compute dtype (bf16 / fp16) the config asks for
    checkpointing_path: Path | None = None  # where this document switches activation checkpointing on
    zero_root: Path | None = None  # where the DeepSpeed config sits in this document (None: elsewhere or none)
    loss: object = None  # configs/loss_kernels.LossRequest: a fused or chunked loss the keys ask for
    preference_loss: Given | None = None  # a recipe tool's DPO loss when not TRL's fused head (configs/recipes.py)
    sft_loss: Given | None = None  # "fused": TRL's SFTTrainer's fused LM head (configs/recipes.trl_sft_loss)
    transformers_version: Given | None = None  # the recipe project's exact pin (configs/recipes.package_pin)
    reference_model: Given | None = None  # a recipe's reference model named apart from the policy (configs/recipes.py)
    reference_dtype: Given | None = None  # the reference copy's dtype when not the policy's (LLaMA-Factory's upcast)
    accumulation: Given | None = None  # gradient_accumulation_steps as written (memory/accumulation.py)
    generation: dict[str, Given] = field(default_factory=dict)  # GRPO's keys as a recipe writes them (recipes.py)
    #: N-D parallel degrees and long-context mechanisms as written, by Parallelism field (configs/parallel_keys.py)
    parallel: dict[str, Given] = field(default_factory=dict)
    data_parallel: dict[str, Given] = field(default_factory=dict)  # axolotl's dp_shard_size / dp_replicate_size


def _at(root: Path | None, *keys: str) -> Path | None:
    return None if root is None else (*root, *keys)


def deepspeed_workload(config: object, root: Path | None, where: str = "") -> Workload:
    """A DeepSpeed config at `root` in this document (None: read from another file named `where`)."""
    config = config if isinstance(config, dict) else {}
    suffix = f" (in {where})" if where else ""
    micro = positive_int(config.get("train_micro_batch_size_per_gpu"))
    given = Given(micro, f"train_micro_batch_size_per_gpu{suffix}",
                  _at(root, "train_micro_batch_size_per_gpu")) if micro else None
    steps = positive_int(config.get("gradient_accumulation_steps"))
    accumulation = Given(steps, f"gradient_accumulation_steps{suffix}",
                         _at(root, "gradient_accumulation_steps")) if steps else None
    zero = config.get("zero_optimization")
    buffers = {}
    if isinstance(zero, dict):
        for written in (*ZERO_BUFFER_KEYS, *ZERO_ALIASES):
            key = ZERO_ALIASES.get(written, written)
            if zero.get(written) is not None and key not in buffers:
                buffers[key] = Given(zero[written], f"zero_optimization.{written}{suffix}",
                                     _at(root, "zero_optimization", written))
    types = config.get("data_types")
    if isinstance(types, dict) and isinstance(types.get("grad_accum_dtype"), str):  # BF16_Optimizer (step.py)
        buffers["grad_accum_dtype"] = Given(types["grad_accum_dtype"], f"data_types.grad_accum_dtype{suffix}",
                                            _at(root, "data_types", "grad_accum_dtype"))
    from zeromem_lsp.configs.parallel_keys import deepspeed_parallel

    return Workload(micro_batch=given, zero=buffers, zero_root=root if not where else None, accumulation=accumulation,
                    parallel=deepspeed_parallel(config, root if not where else None, where))


def _fsdp_workload(section: object, root: Path) -> Workload:
    """An FSDP section (HF fsdp_config or Accelerate's, `fsdp_`-prefixed keys) at `root`."""
    if not isinstance(section, dict):
        return Workload()
    keys = {key.removeprefix("fsdp_"): key for key in section if isinstance(key, str)}
    checkpointing = None
    if "activation_checkpointing" in keys:
        written = keys["activation_checkpointing"]
        value = read_flag(section[written])
        if value is not None:
            checkpointing = Given(value, f"{'.'.join(map(str, root))}.{written}", (*root, written))
    switch = keys.get("activation_checkpointing") or ("fsdp_activation_checkpointing" if root == ("fsdp_config",)
                                                      and any(key.startswith("fsdp_") for key in section)
                                                      else "activation_checkpointing")
    return Workload(checkpointing=checkpointing, checkpointing_path=(*root, switch))


def fsdp_file_workload(data: dict) -> Workload:
    """A standalone fsdp_config JSON."""
    if not isinstance(data, dict):
        return Workload()
    keys = {key.removeprefix("fsdp_"): key for key in data if isinstance(key, str)}
    found = _fsdp_workload(data, ())
    if found.checkpointing is not None:
        written = keys["activation_checkpointing"]
        found = replace(found, checkpointing=Given(found.checkpointing.value, written, (written,)))
    return found


def _compute_dtype(value: object, note: str, path: Path) -> Given | None:
    return Given(value, note, path) if value in ("bf16", "fp16") else None


def accelerate_workload(data: dict) -> Workload:
    from zeromem_lsp.configs.parallel_keys import accelerate_parallel

    found = replace(_fsdp_workload(data.get("fsdp_config"), ("fsdp_config",)),
                    parallel=accelerate_parallel(data.get("parallelism_config")))
    found = replace(found, compute_dtype=_compute_dtype(data.get("mixed_precision"), "mixed_precision",
                                                        ("mixed_precision",)))
    block = data.get("deepspeed_config")
    steps = positive_int(block.get("gradient_accumulation_steps")) if isinstance(block, dict) else None
    if steps:  # Accelerate's DeepSpeedPlugin passes it to the engine (a deepspeed_config_file owns it instead)
        found = replace(found, accumulation=Given(steps, "deepspeed_config.gradient_accumulation_steps",
                                                  ("deepspeed_config", "gradient_accumulation_steps")))
    if found.checkpointing_path is None and isinstance(data.get("fsdp_config"), dict):
        found = replace(found, checkpointing_path=("fsdp_config", "fsdp_activation_checkpointing"))
    return found


def hf_arguments_workload(data: dict, deepspeed: Workload) -> Workload:
    """TrainingArguments / TRL JSON: its own batch and sequence keys over the DeepSpeed config it names
    (HF fills an "auto" micro-batch from per_device_train_batch_size)."""
    micro = positive_int(data.get("per_device_train_batch_size"))
    if micro:
        batch = Given(micro, "per_device_train_batch_size", ("per_device_train_batch_size",))
    elif deepspeed.micro_batch is not None:
        batch = deepspeed.micro_batch
    else:
        batch = Given(HF_DEFAULT_MICRO_BATCH, "per_device_train_batch_size absent: TrainingArguments' default")
    sequence = None
    for key in ("max_seq_length", "max_length"):
        length = positive_int(data.get(key))
        if length:
            sequence = Given(length, key, (key,))
            break
    checkpointing = None
    flag = read_flag(data.get("gradient_checkpointing"))
    if flag is not None:
        checkpointing = Given(flag, "gradient_checkpointing", ("gradient_checkpointing",))
    fsdp = _fsdp_workload(data.get("fsdp_config"), ("fsdp_config",))
    if checkpointing is None or (not checkpointing.value and fsdp.checkpointing is not None):
        checkpointing = fsdp.checkpointing or checkpointing
    mixed = next((name for name in ("bf16", "fp16") if data.get(name) is True), None)
    steps = positive_int(data.get("gradient_accumulation_steps"))  # HF fills the DeepSpeed "auto" from it
    accumulation = (Given(steps, "gradient_accumulation_steps", ("gradient_accumulation_steps",)) if steps
                    else deepspeed.accumulation or Given(1, "gradient_accumulation_steps absent: TrainingArguments' "
                                                            "default"))
    from zeromem_lsp.configs.parallel_keys import trl_parallel

    return Workload(micro_batch=batch, accumulation=accumulation, sequence_length=sequence, checkpointing=checkpointing, zero=deepspeed.zero,
                    checkpointing_path=("gradient_checkpointing",), parallel={**deepspeed.parallel, **trl_parallel(data)},
                    zero_root=deepspeed.zero_root,
                    compute_dtype=_compute_dtype(mixed, f"{mixed}: true", (mixed,)) if mixed else None)
