"""An Accelerate config (the YAML `accelerate config` writes) as `accelerate launch` reads it.

Facts (Accelerate's commands/config/config_args.py and commands/launch.py, see docs/fsdp-accelerate.md):
the file is read with `yaml.safe_load`; unknown top-level keys are refused ("had unknown keys");
`distributed_type` is required and must name a DistributedType exactly (case-sensitive), as must
`compute_environment`; `fp16` and `dynamo_backend` are old spellings converted on load. The
`fsdp_config` and `deepspeed_config` blocks are copied onto the launch arguments key by key without
any check of the names. With `deepspeed_config_file`, giving the settings that file owns in the YAML
as well is refused.

Pure: a plain dict in, issues and the memory-relevant facts out.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs.fsdp import FsdpSetup, validate_accelerate_fsdp
from zeromem_lsp.configs.training import TrainingSetup, as_integer, positive_int
from zeromem_lsp.memory.stages import by_number
from zeromem_lsp.provenance import Path


BASE_KEYS = ("compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug")
CLUSTER_KEYS = BASE_KEYS + (
    "num_processes", "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port",
    "rdzv_backend", "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config",
    "deepspeed_config", "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config",
    "downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands",
    "tpu_vm", "tpu_env", "dynamo_config",
)
SAGEMAKER_KEYS = BASE_KEYS + (
    "ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "num_machines", "gpu_ids",
    "base_job_name", "pytorch_version", "transformers_version", "py_version", "sagemaker_inputs_file",
    "sagemaker_metrics_file", "additional_args", "dynamo_config", "enable_cpu_affinity",
)
CONVERTED_ON_LOAD = ("fp16", "dynamo_backend")  # process_config rewrites these before the key check
DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
                     "MULTI_XPU", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON")
SAGEMAKER_DISTRIBUTED_TYPES = ("NO", "DATA_PARALLEL", "MODEL_PARALLEL")
COMPUTE_ENVIRONMENTS = ("LOCAL_MACHINE", "AMAZON_SAGEMAKER")
MIXED_PRECISIONS = ("no", "fp8", "fp16", "bf16")
#: deepspeed_config keys that `deepspeed_config_file` owns (DeepSpeedPlugin._deepspeed_config_checks).
OWNED_BY_DEEPSPEED_FILE = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
                           "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
                           "zero3_save_16bit_model")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
ZERO_STAGES = (0, 1, 2, 3)

def _issue(kind: str, path: Path, target: str, message: str, replacement: str | None = None) -> ConfigIssue:
    return ConfigIssue(kind, tuple(path), target, message, replacement, "accelerate")


@dataclass(frozen=True)
class AccelerateSetup:
    distributed_type: str | None
    world_size: int | None
    world_path: Path | None
    machines: int | None
    shard_group: int | None  # GPUs per node (num_processes / num_machines) when it divides
    parallel_divisor: int | None  # dp_shard × cp × tp from parallelism_config, when given
    mixed_precision: str | None
    mixed_precision_path: Path | None
    fsdp: FsdpSetup | None
    deepspeed: TrainingSetup | None  # inline deepspeed_config, as a DeepSpeed training setup
    deepspeed_file: str | None
    deepspeed_file_path: Path | None


def _parallel_divisor(config: object) -> int | None:
    if not isinstance(config, dict):
        return None
    sizes = {}
    for key, value in config.items():  # the launcher reads the prefixed keys only (`_parallelism_issues`)
        name = str(key).removeprefix(PREFIX) if str(key).startswith(PREFIX) else None
        if name in ("dp_shard_size", "cp_size", "tp_size"):
            size = positive_int(value)
            if size is not None:
                sizes[name] = size
    if "dp_shard_size" not in sizes:
        return None
    return sizes["dp_shard_size"] * sizes.get("cp_size", 1) * sizes.get("tp_size", 1)


#: ParallelismConfig's sizes and backends (accelerate/parallelism_config.py, Accelerate 1.16): each size defaults to 1,
#: each backend to its one allowed value.
PARALLEL_SIZES = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size")
PARALLEL_BACKENDS = {"cp_backend": "torch", "sp_backend": "deepspeed"}
PREFIX = "parallelism_config_"  # what `accelerate launch` reads of the block (commands/launch.py:894-975)


def _parallelism_issues(config: object, distributed: object, world: int | None,
                        fsdp_version: int | None) -> list[ConfigIssue]:
    """What ParallelismConfig refuses when Accelerate builds it (`__post_init__`) and prepares the run
    (`_validate_accelerator`), each at the key that causes it: a size below 1, an unknown backend, context and
    sequence parallelism together, context parallelism over pure replication, sizes whose product is not
    num_processes (DeepSpeed's sequence parallelism excepted), FSDP2 with nothing to shard over."""
    if not isinstance(config, dict):
        return []
    out: list[ConfigIssue] = [_issue("ignored_setting", ("parallelism_config", key), "key",
                                     f"`accelerate launch` ignores {key!r} in parallelism_config: it passes the "
                                     f"block's keys on verbatim and reads only {PREFIX}{key} (commands/launch.py "
                                     "1259-1271)", replacement=PREFIX + str(key))
                              for key in config if str(key) in (*PARALLEL_SIZES, *PARALLEL_BACKENDS)]
    keys = {str(key).removeprefix(PREFIX): key for key in config if str(key).startswith(PREFIX)}
    at = {name: ("parallelism_config", keys[name]) for name in keys}
    sizes: dict[str, int] = {}
    for name in PARALLEL_SIZES:
        if name not in keys or config[keys[name]] is None:
            sizes[name] = 1
            continue
        value = config[keys[name]]
        # `accelerate launch` compares it with 1 and passes it on as text for int(): a YAML integer, nothing else
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            out.append(_issue("accelerate_value", at[name], "value",
                              f"{name} must be an integer of at least 1, got {value!r}"))
            return out
        sizes[name] = value
    for name, allowed in PARALLEL_BACKENDS.items():
        value = config.get(keys[name]) if name in keys else None
        if value is not None and value != allowed:
            out.append(_issue("accelerate_value", at[name], "value", f"{name} must be {allowed!r}, got {value!r}"))
    if sizes["cp_size"] > 1 and sizes["sp_size"] > 1:
        out.append(_issue("accelerate_value", at["sp_size"], "value",
                          f"context parallelism (cp_size {sizes['cp_size']}) and sequence parallelism (sp_size "
                          f"{sizes['sp_size']}) exclude each other: set one of them to 1"))
    for name, what in (("cp_size", "context"), ("tp_size", "tensor")):  # parallelism_config.py:336-341
        if sizes[name] > 1 and sizes["dp_replicate_size"] > 1 and sizes["dp_shard_size"] == 1:
            out.append(_issue("accelerate_value", at[name], "value",
                              f"{what} parallelism needs sharded data parallelism beside it (dp_shard_size > 1), not "
                              f"replication alone (dp_replicate_size {sizes['dp_replicate_size']}, dp_shard_size 1)"))
            break
    if sizes["sp_size"] > 1 and distributed is not None and distributed != "DEEPSPEED":
        out.append(_issue("accelerate_value", at["sp_size"], "value",
                          f"sequence parallelism (sp_size {sizes['sp_size']}, sp_backend deepspeed) runs only under "
                          f"distributed_type: DEEPSPEED, not {distributed}: Accelerate sets Ulysses up in its DeepSpeed "
                          "preparation (accelerator.py 2351-2415) and builds no device mesh for it "
                          "(parallelism_config.py 218-221)"))
    total = 1
    for size in sizes.values():
        total *= size
    deepspeed_sp = sizes["sp_size"] > 1
    if total > 1 and world is not None and total != world and not deepspeed_sp:
        product = " × ".join(str(sizes[name]) for name in PARALLEL_SIZES)
        out.append(_issue("accelerate_value", ("parallelism_config",), "key",
                          f"dp_replicate × dp_shard × tp × cp × sp = {product} = {total}, but num_processes is "
                          f"{world}: Accelerate requires them equal"))
    if total > 1 and distributed == "FSDP" and fsdp_version == 2 and sizes["dp_shard_size"] == 1 \
            and sizes["cp_size"] == 1:
        out.append(_issue("accelerate_value", ("parallelism_config",), "key",
                          "FSDP2 has no dimension to shard over: dp_shard_size and cp_size are both 1 (leave ranks "
                          "for FSDP by raising dp_shard_size, or launch without the FSDP config)"))
    return out


def _deepspeed_setup(block: dict, precision: str | None) -> TrainingSetup:
    number = as_integer(block.get("zero_stage", 2))  # the plugin's default
    stage = by_number(number).key if number in ZERO_STAGES else None

    def device(name: str) -> str | None:
        value = str(block.get(name, "none")).lower()
        return value if value in ("cpu", "nvme") else None

    precision_name = {"no": "fp32", "fp16": "fp16", "bf16": "bf16"}.get(precision or "no")
    note = f"mixed_precision is {precision!r}" if precision else "no mixed_precision: fp32"
    return TrainingSetup(
        stage=stage, stage_path=("deepspeed_config", "zero_stage") if "zero_stage" in block else None,
        offload_optimizer=device("offload_optimizer_device"), offload_param=device("offload_param_device"),
        precision=precision_name, precision_path=("mixed_precision",) if precision else None,
        precision_note=note if precision_name else f"mixed_precision {precision!r} has no byte convention here",
        optimizer="adamw", optimizer_path=None, optimizer_note="Accelerate builds no optimizer: AdamW assumed",
        gradient_dtype=None, train_batch_size=None, micro_batch_size=None, gradient_accumulation_steps=None,
        spelling="accelerate",
    )


def validate_accelerate(data: dict) -> tuple[list[ConfigIssue], AccelerateSetup]:
    out: list[ConfigIssue] = []
    environment = data.get("compute_environment", "LOCAL_MACHINE")
    if "compute_environment" in data and environment not in COMPUTE_ENVIRONMENTS:
        out.append(_issue("accelerate_value", ("compute_environment",), "value",
                          f"compute_environment must be one of {', '.join(COMPUTE_ENVIRONMENTS)}, got {environment!r}"))
    sagemaker = environment == "AMAZON_SAGEMAKER"
    allowed = SAGEMAKER_KEYS if sagemaker else CLUSTER_KEYS
    for key in data:
        if key in allowed or key in CONVERTED_ON_LOAD:
            continue
        if key == "zeromem":
            out.append(_issue("unknown_key", (key,), "key",
                              "Accelerate refuses unknown top-level keys, including zeromem: move the block under "
                              "fsdp_config (or deepspeed_config), whose keys Accelerate does not check"))
            continue
        guess = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.8)
        hint = f"; did you mean {guess[0]}?" if guess else ""
        out.append(_issue("unknown_key", (key,), "key",
                          f"Accelerate refuses the config: unknown top-level key {key!r}{hint}",
                          replacement=guess[0] if guess else None))
    distributed = data.get("distributed_type")
    if "distributed_type" not in data:
        out.append(_issue("accelerate_value", (), "key", "Accelerate requires distributed_type (e.g. FSDP, DEEPSPEED, MULTI_GPU)"))
    else:
        valid = SAGEMAKER_DISTRIBUTED_TYPES if sagemaker else DISTRIBUTED_TYPES
        if distributed not in valid:
            upper = str(distributed).upper()
            hint = f" (names are case-sensitive: {upper})" if upper in valid else ""
            out.append(_issue("accelerate_value", ("distributed_type",), "value",
                              f"distributed_type must be one of {', '.join(valid)}, got {distributed!r}{hint}",
                              replacement=upper if upper in valid else None))
            distributed = upper if upper in valid else None
    precision = data.get("mixed_precision")
    if "mixed_precision" in data and precision is not None:
        if isinstance(precision, bool):
            out.append(_issue("accelerate_value", ("mixed_precision",), "value",
                              f"mixed_precision is the YAML boolean {precision!r} (unquoted no/yes/off/on); "
                              "write it quoted: 'no'", replacement="'no'" if precision is False else None))
            precision = None
        elif str(precision).lower() not in MIXED_PRECISIONS:
            out.append(_issue("accelerate_value", ("mixed_precision",), "value",
                              f"mixed_precision must be one of {', '.join(MIXED_PRECISIONS)}, got {precision!r}"))
            precision = None
        else:
            precision = str(precision).lower()
    world = positive_int(data.get("num_processes"))
    machines = positive_int(data.get("num_machines", 1))
    group = world // machines if world and machines and world % machines == 0 else None
    fsdp_setup = None
    fsdp_block = data.get("fsdp_config")
    if isinstance(fsdp_block, dict):
        if distributed == "FSDP":
            issues, fsdp_setup = validate_accelerate_fsdp(fsdp_block, ("fsdp_config",))
            out += issues
            fsdp_setup = fsdp_setup._replace(mixed_precision=precision)
        elif any(key != "zeromem" for key in fsdp_block):
            out.append(_issue("ignored_setting", ("fsdp_config",), "key",
                              f"fsdp_config is ignored: distributed_type is {distributed!r}, not FSDP"))
    elif distributed == "FSDP":
        fsdp_setup = FsdpSetup(1, "FULL_SHARD", None, "no fsdp_config: Accelerate's default FULL_SHARD",
                               False, None, precision)
    deepspeed_setup = None
    deepspeed_file = None
    block = data.get("deepspeed_config")
    if distributed == "DEEPSPEED":
        block = block if isinstance(block, dict) else {}
        deepspeed_file = block.get("deepspeed_config_file")
        if isinstance(deepspeed_file, str) and deepspeed_file not in ("", "none"):
            owned = [key for key in OWNED_BY_DEEPSPEED_FILE if key in block]
            for key in owned:
                out.append(_issue("deepspeed_file_conflict", ("deepspeed_config", key), "key",
                                  f"with deepspeed_config_file, Accelerate refuses {key} in its config: set it in "
                                  f"{deepspeed_file} instead"))
            if "mixed_precision" in data and data.get("mixed_precision") is not None:
                out.append(_issue("deepspeed_file_conflict", ("mixed_precision",), "key",
                                  f"with deepspeed_config_file, Accelerate refuses mixed_precision in its config: "
                                  f"enable fp16/bf16 in {deepspeed_file} instead"))
        else:
            deepspeed_file = None
            for name in ("offload_optimizer_device", "offload_param_device"):
                value = block.get(name)
                if value is not None and str(value).lower() not in OFFLOAD_DEVICES:
                    out.append(_issue("accelerate_value", ("deepspeed_config", name), "value",
                                      f"{name} must be one of {', '.join(OFFLOAD_DEVICES)}, got {value!r}"))
            stage = block.get("zero_stage")
            if stage is not None and as_integer(stage) not in ZERO_STAGES:
                out.append(_issue("accelerate_value", ("deepspeed_config", "zero_stage"), "value",
                                  f"zero_stage must be 0, 1, 2 or 3, got {stage!r}"))
            deepspeed_setup = _deepspeed_setup(block, precision)
    out += _parallelism_issues(data.get("parallelism_config"), distributed, world,
                               fsdp_setup.version if fsdp_setup is not None else None)
    setup = AccelerateSetup(
        distributed_type=distributed, world_size=world,
        world_path=("num_processes",) if world else None, machines=machines, shard_group=group,
        parallel_divisor=_parallel_divisor(data.get("parallelism_config")),
        mixed_precision=precision, mixed_precision_path=("mixed_precision",) if "mixed_precision" in data else None,
        fsdp=fsdp_setup, deepspeed=deepspeed_setup,
        deepspeed_file=deepspeed_file if isinstance(deepspeed_file, str) else None,
        deepspeed_file_path=("deepspeed_config", "deepspeed_config_file") if deepspeed_file else None,
    )
    return out, setup
