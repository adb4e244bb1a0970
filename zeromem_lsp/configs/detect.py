"""Which loader a document is meant for, judged by its content (and, for broken text, its name).

Anything that is not recognisably a training config gets no findings at all.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

DEEPSPEED_STRONG = frozenset(
    {
        "zero_optimization",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "zero_allow_untested_optimizer",
        "zeromem",
        "fp16",
        "bf16",
        "bfloat16",
    }
)
DEEPSPEED_WEAK = frozenset(
    {
        "gradient_accumulation_steps",
        "gradient_clipping",
        "optimizer",
        "scheduler",
        "steps_per_print",
        "wall_clock_breakdown",
        "activation_checkpointing",
        "flops_profiler",
        "data_types",
        "communication_data_type",
        "prescale_gradients",
    }
)
HF_ARGUMENT_KEYS = frozenset({"per_device_train_batch_size", "output_dir", "learning_rate", "num_train_epochs"})
DEEPSPEED_NAME = re.compile(r"(ds_config|deepspeed|zero[0-3_]|zero\.|zero_stage)", re.IGNORECASE)


ACCELERATE_MARKERS = frozenset({"distributed_type", "compute_environment"})
ACCELERATE_BLOCKS = frozenset({"fsdp_config", "deepspeed_config"})
ACCELERATE_TOP = frozenset({"num_processes", "num_machines", "machine_rank", "mixed_precision", "main_training_function"})
FSDP_CONFIG_KEYS = frozenset({
    "transformer_layer_cls_to_wrap", "backward_prefetch", "forward_prefetch", "min_num_params", "sharding_strategy",
    "reshard_after_forward", "cpu_ram_efficient_loading", "sync_module_states", "use_orig_params", "xla_fsdp_v2",
})


def _looks_fsdp(keys: set[str]) -> bool:
    return any(k.startswith("fsdp_") for k in keys) or FSDP_CONFIG_KEYS & keys != set()


#: The kinds of training config zeromem reads (each has a reader in readers.py).
Kind = Literal["deepspeed", "accelerate", "fsdp", "hf-arguments", "axolotl", "llamafactory", "trl"]
KINDS: tuple[Kind, ...] = get_args(Kind)


def detect_kind(root_keys: set[str] | None, name: str | None = None) -> Kind | None:
    """'deepspeed', 'fsdp' (a --fsdp_config dict), 'hf-arguments', 'accelerate' or None (not a training config).

    Recipe kinds (axolotl, llamafactory, trl) are YAML only: `yaml_kind`.

    `root_keys` is None when the document has no object at its root.
    """
    if root_keys is None:
        return "deepspeed" if name and DEEPSPEED_NAME.search(name) else None
    if root_keys & ACCELERATE_MARKERS or (root_keys & ACCELERATE_BLOCKS and root_keys & ACCELERATE_TOP):
        return "accelerate"
    if root_keys & HF_ARGUMENT_KEYS or "fsdp" in root_keys or "fsdp_config" in root_keys or (
        "deepspeed" in root_keys and not root_keys & DEEPSPEED_STRONG - {"zeromem"}
    ):
        return "hf-arguments"
    if _looks_fsdp(root_keys) and not root_keys & {"zero_optimization", "zeromem"} - {"zeromem"}:
        return "fsdp"
    if root_keys & DEEPSPEED_STRONG or len(root_keys & DEEPSPEED_WEAK) >= 2:
        return "deepspeed"
    if name and DEEPSPEED_NAME.search(name) and (not root_keys or root_keys & DEEPSPEED_WEAK):
        return "deepspeed"
    if root_keys and root_keys <= _deepspeed_top_level() and root_keys - GENERIC_KEYS:
        return "deepspeed"  # every key is one DeepSpeed reads (or removed), at least one DeepSpeed-specific
    return None


GENERIC_KEYS = frozenset({"optimizer", "scheduler", "checkpoint", "log_level", "pipeline", "timers", "compile"})


def _deepspeed_top_level() -> frozenset[str]:
    from zeromem_lsp.configs.deepspeed.validation import KNOWN_TOP_LEVEL_KEYS, REMOVED_TOP_LEVEL_KEYS

    return frozenset(KNOWN_TOP_LEVEL_KEYS) | frozenset(REMOVED_TOP_LEVEL_KEYS)


def yaml_kind(keys: set[str] | None) -> Kind | None:
    """A YAML document is an Accelerate config or a recipe (configs/recipes.py), judged by its keys;
    other YAML (CI files, GPT-NeoX configs ...) is not read."""
    from zeromem_lsp.configs.recipes import recipe_tool

    if keys is None:
        return None
    if detect_kind(keys, None) == "accelerate":
        return "accelerate"
    return recipe_tool(keys)
