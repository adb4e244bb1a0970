"""Recipe files (axolotl, LLaMA-Factory, TRL / alignment-handbook YAML) as each tool reads them.

Which tool a recipe is for is judged by its keys (`recipe_tool`); the names vary. What is read, with
each tool's defaults and the code they come from, is in docs/recipes.md (facts from the sources at the
commits in tests/data/recipes/SOURCES.md). The known keys are generated from the tools' own field
definitions (configs/recipe_keys.py): LLaMA-Factory and TRL refuse unknown keys (HfArgumentParser
`allow_extra_keys=False`, TrlParser `fail_with_unknown_args`); axolotl's pydantic models drop them
silently, so only a likely misspelling is reported there.

Pure: a plain dict in, issues and a `RecipeSetup` (plain data, each value a `Given` with its key path) out.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from collections.abc import Callable
from typing import Any, Literal

from zeromem_lsp.configs import recipe_keys
from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs import settings_values as checks
from zeromem_lsp.configs.parallel_checks import axolotl_context_parallel
from zeromem_lsp.configs.parallel_keys import (axolotl_data_parallel, axolotl_parallel, llamafactory_parallel,
                                               trl_parallel)
from zeromem_lsp.configs.training import positive_int
from zeromem_lsp.configs.versions import release, running
from zeromem_lsp.configs.precision_names import optimizer_from_deepspeed_type
from zeromem_lsp.memory.precision import normalize_precision
from zeromem_lsp.provenance import Given, Path
from zeromem_lsp.configs.workload import read_flag

Tool = Literal["axolotl", "llamafactory", "trl"]
TOOL_NAMES = {"axolotl": "axolotl", "llamafactory": "LLaMA-Factory", "trl": "TRL"}

AXOLOTL_MARKERS = frozenset({"base_model", "sequence_len", "micro_batch_size", "lora_target_linear",
                             "adapter", "datasets", "pad_to_sequence_len"})
LLAMAFACTORY_MARKERS = frozenset({"finetuning_type", "cutoff_len", "lora_target", "quantization_bit", "template",
                                  "stage", "dataset_dir", "disable_gradient_checkpointing"})
TRL_MARKERS = frozenset({"use_peft", "max_seq_length", "max_length", "dataset_name", "dataset_mixture",
                         "torch_dtype", "dtype", "lora_r", "load_in_4bit", "per_device_train_batch_size",
                         "num_generations", "max_completion_length", "reward_funcs", "use_vllm"})  # + GRPO's own

#: Keys of older Transformers / TRL / handbook releases that the tools' pinned ranges still accept
#: (LLaMA-Factory pins transformers>=4.55,<=5.8; the handbook pins trl>=0.19.1, transformers>=4.53.3).
OLDER_KEYS = {
    "warmup_ratio": "Transformers 4.x TrainingArguments",
    "overwrite_output_dir": "Transformers 4.x TrainingArguments",
    "torch_dtype": "TRL ModelConfig before `dtype`",
    "max_seq_length": "TRL SFTConfig before `max_length`",
    "max_prompt_length": "TRL DPOConfig (older releases)",
    "dataset_mixer": "alignment-handbook DataArguments (older releases)",
    "dataset_splits": "alignment-handbook DataArguments (older releases)",
}


def recipe_tool(keys: set[str]) -> Tool | None:
    """The tool a YAML mapping's top-level keys are written for, or None (not a recipe)."""
    if "base_model" in keys and _axolotl_like(keys - {"base_model"}) or {"sequence_len", "micro_batch_size"} <= keys:
        return "axolotl"
    if "model_name_or_path" in keys and keys & LLAMAFACTORY_MARKERS:
        return "llamafactory"
    if "model_name_or_path" in keys and keys & TRL_MARKERS:
        return "trl"
    return None


def _axolotl_like(keys: set[str]) -> bool:
    """Another key axolotl reads, or a near miss of one (a misspelt recipe is still a recipe)."""
    known = recipe_keys.AXOLOTL_KEYS
    return bool(keys & known) or any(
        difflib.get_close_matches(key, known, n=1, cutoff=0.8) for key in keys if isinstance(key, str))


def known_keys(tool: Tool) -> frozenset[str]:
    if tool == "axolotl":
        return recipe_keys.AXOLOTL_KEYS
    if tool == "llamafactory":
        return recipe_keys.LLAMAFACTORY_KEYS | frozenset(OLDER_KEYS)
    return recipe_keys.TRL_KEYS | recipe_keys.HANDBOOK_KEYS | frozenset(OLDER_KEYS)


@dataclass(frozen=True)
class AdapterSpec:
    """The adapter a recipe asks for, as plain data (the adapter memory model takes it from here)."""

    method: str  # "lora" | "qlora" | "full" | another finetuning_type as written
    rank: Given | None = None
    alpha: Given | None = None
    dropout: Given | None = None
    targets: Given | None = None  # a list of module names, "all-linear" (PEFT's shorthand), or a regex string
    modules_to_save: Given | None = None
    quantization: Given | None = None  # "nf4" | "fp4" | "int8"
    double_quantization: Given | None = None
    dora: Given | None = None
    # PEFT's matching fields (configs/lora_targets.py), where the tool passes them to LoraConfig
    layers_to_transform: Given | None = None
    layers_pattern: Given | None = None
    rank_pattern: Given | None = None
    target_parameters: Given | None = None
    target_linear: Given | None = None  # the tool adds every linear layer's name (a list, not all-linear)
    kbit_prepare: Given | None = None  # a quantized base as PEFT's prepare_model_for_kbit_training leaves it (`_kbit`)
    autocast: Given | None = None  # PEFT's autocast_adapter_dtype as the tool passes it (false: the base's dtype)


@dataclass(frozen=True)
class RecipeSetup:
    tool: Tool
    model: Given | None = None  # the base model name as written
    micro_batch: Given | None = None
    accumulation: Given | None = None  # gradient_accumulation_steps as the tool takes it (`_accumulation`)
    sequence_length: Given | None = None
    checkpointing: Given | None = None
    dtype: Given | None = None  # the dtype the model is loaded in
    compute_dtype: Given | None = None  # bf16 / fp16 mixed-precision compute
    optimizer: Given | None = None
    deepspeed: Given | None = None  # a path (str) or an inline dict
    fsdp_config: Given | None = None  # an inline FSDP block (Accelerate-style keys)
    adapter: AdapterSpec | None = None
    flags: dict[str, bool] = field(default_factory=dict)  # bf16 / fp16 as the DeepSpeed "auto" fill needs them
    trainer: Given | None = None  # a preference trainer (the `trainer` setting's values), at the key that names it
    precompute_ref_log_probs: Given | None = None
    preference_loss: Given | None = None  # the DPO loss the tool runs when not TRL's fused head ("logits" or why not)
    sft_loss: Given | None = None  # "fused": TRL's SFTTrainer scores through its fused LM head (`trl_sft_loss`)
    reference_model: Given | None = None  # a reference model named apart from the policy ("copy" or why not modelled)
    reference_dtype: Given | None = None  # the reference copy's dtype when the policy's is not it (LLaMA-Factory upcast)
    generation: dict[str, Given] = field(default_factory=dict)  # GRPO's keys as written (`_grpo`)
    revision: Given | None = None  # the model's hub revision (branch, tag or commit hash) as written
    #: N-D parallel degrees and long-context mechanisms, by Parallelism field (configs/parallel_keys.py)
    parallel: dict[str, Given] = field(default_factory=dict)
    data_parallel: dict[str, Given] = field(default_factory=dict)  # axolotl's dp_shard_size / dp_replicate_size
    #: what the recipe says that the reading could not turn into a figure: (key path, value, why), named as not modelled
    unread: tuple[tuple[tuple[str, ...], object, str], ...] = ()


#: The key each tool reads the model's hub revision from (TRL ModelConfig / LLaMA-Factory ModelArguments
#: model_revision; axolotl revision_of_model, which it passes to from_pretrained as revision).
REVISION_KEYS = {"axolotl": ("revision_of_model", "model_revision"), "llamafactory": ("model_revision",),
                 "trl": ("model_revision",)}


def _revision(data: dict, tool: str) -> Given | None:
    found = _first(data, *REVISION_KEYS[tool])
    if found is None or not isinstance(found.value, str) or found.value in ("", "main"):
        return None
    return found


def _accumulation(data: dict, tool: str) -> Given:
    """A recipe's gradient_accumulation_steps (axolotl's, or TrainingArguments' under LLaMA-Factory and TRL: 1 by
    default in each)."""
    steps = positive_int(data.get("gradient_accumulation_steps"))
    if steps:
        return Given(steps, "gradient_accumulation_steps", ("gradient_accumulation_steps",))
    batch, micro = positive_int(data.get("batch_size")), positive_int(data.get("micro_batch_size")) or 1
    if tool == "axolotl" and batch and batch >= micro:  # axolotl's normalize_config (notes/recipes-notes.md)
        return Given(batch // micro, f"batch_size // micro_batch_size = {batch} // {micro}", ("batch_size",))
    default = "axolotl's" if tool == "axolotl" else "TrainingArguments'"
    return Given(1, f"gradient_accumulation_steps absent: {default} default")


def _issue(kind: str, path: Path, target: str, message: str, replacement: str | None = None) -> ConfigIssue:
    return ConfigIssue(kind, tuple(path), target, message, replacement, "recipe")


def _given(data: dict, key: str) -> Given | None:
    return Given(data[key], key, (key,)) if data.get(key) is not None else None


def _first(data: dict, *keys: str) -> Given | None:
    return next((found for key in keys if (found := _given(data, key)) is not None), None)


def _positive(data: dict, keys: tuple[str, ...], default: int, tool: str, out: list[ConfigIssue]) -> Given:
    for key in keys:
        if key in data and data[key] is not None:
            value = positive_int(data[key])
            if value is not None:
                return Given(value, key, (key,))
            out.append(_issue("invalid_value", (key,), "value",
                              f"{key} must be a positive integer, got {data[key]!r}"))
    return Given(default, f"{keys[0]} absent: {tool}'s default")


def every_reader_key() -> frozenset[str]:
    """Every key any recipe tool reads (all three tools, axolotl's bundled plugins, every TRL trainer's and the
    scripts' own, the older spellings): a key in here is never renamed by a safe fix."""
    return (recipe_keys.AXOLOTL_KEYS | recipe_keys.LLAMAFACTORY_KEYS | recipe_keys.TRL_KEYS | recipe_keys.HANDBOOK_KEYS
            | frozenset(OLDER_KEYS))


def _rename(key: str, guess: str | None, data: dict) -> str | None:
    """The rename a fix may make without changing what runs: the old key is known to no reader (a plugin's or another
    tool's key is not a misspelling), and the new one is not set already (the fix would shadow it)."""
    if guess is None or key in every_reader_key() or guess in data:
        return None
    return guess


def _unknown_keys(tool: Tool, data: dict) -> list[ConfigIssue]:
    """Keys the tool does not declare: an error where its parser certainly refuses the file (LLaMA-Factory's
    HfArgumentParser); a warning for TRL recipes, whose scripts extend TRL's classes with fields of their own (TrlParser
    accepts whatever the script declares); for axolotl, which drops unknown keys, only a likely misspelling."""
    known = known_keys(tool)
    out = []
    for key in data:
        if not isinstance(key, str) or key in known or (key == "zeromem" and tool == "axolotl"):
            continue
        if key == "zeromem":
            out.append(_issue("unknown_key", (key,), "key",
                              f"{TOOL_NAMES[tool]} refuses unknown keys, including zeromem: give the settings on the "
                              "command line or in pyproject.toml [tool.zeromem]"))
            continue
        guess = next(iter(difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)), None)
        hint = f"; did you mean {guess}?" if guess else ""
        rename = _rename(key, guess, data)
        if guess and rename is None:
            hint += (f" (not renamed: {guess} is already set)" if guess in data
                     else " (not renamed: another tool or plugin reads this key)")
        if tool == "axolotl":
            if guess:  # axolotl drops unknown keys; a bundled plugin's keys are known (recipe_keys)
                out.append(_issue("ignored_key", (key,), "key",
                                  f"axolotl ignores the unknown key {key!r} and runs with its default{hint}", rename))
            continue
        if tool == "trl":
            out.append(_issue("unknown_script_key", (key,), "key",
                              f"TRL's config classes do not declare {key!r}: the training script must (TrlParser "
                              f"accepts what the script's own dataclasses declare), else TrlParser stops at launch "
                              f"(TRL 0.19 and later; older releases drop the key silently){hint}",
                              rename))
            continue
        out.append(_issue("unknown_key", (key,), "key",
                          f"{TOOL_NAMES[tool]} refuses the recipe (HfArgumentParser: unknown key {key!r}){hint}",
                          rename))
    return out


def _peft_targets(found: Given | None) -> Given | None:
    """target_modules as LoraConfig takes them: a string other than all-linear is a regular expression
    (PEFT re.fullmatch-es it against each module's full name), written as the settings' {"regex": ...}."""
    if found is None or not isinstance(found.value, str) or found.value.strip().lower() == "all-linear":
        return found
    return Given({"regex": found.value}, f"{found.note} (a string: PEFT's regular expression)", found.path)


#: the checks of the settings a recipe's PEFT matching key becomes (settings_values), by setting
_MATCHING_CHECKS: dict[str, Callable[[object], object]] = {"lora_targets": checks.check_targets, "layers_to_transform": checks.check_layer_indices,
                    "layers_pattern": lambda value: checks.check_module_names(value, shorthand=False),
                    "lora_rank_pattern": checks.check_rank_pattern,
                    "target_parameters": lambda value: checks.check_module_names(value, shorthand=False)}


def _matching(found: Given | None, setting: str, out: list[ConfigIssue]) -> Given | None:
    """A PEFT matching value as its setting checks it; a value it refuses (a regex re cannot compile, a rank
    below 1) is an invalid_value issue on the recipe's key, and left out."""
    if found is None:
        return None
    try:
        _MATCHING_CHECKS[setting](found.value)
    except ValueError as error:
        key = found.path[-1] if found.path else setting
        out.append(_issue("invalid_value", tuple(found.path or (setting,)), "value", f"{key}: {error}"))
        return None
    return found


def _rank(data: dict, key: str, out: list[ConfigIssue]) -> Given | None:
    found = _given(data, key)
    if found is None:
        return None
    value = positive_int(found.value)
    if value is None or value > 65536:
        out.append(_issue("invalid_value", (key,), "value",
                          f"{key} must be a positive integer rank (at most 65536), got {found.value!r}"))
        return None
    return Given(value, key, (key,))


def _optimizer(data: dict, key: str, default: str, tool: str) -> Given | None:
    written = _given(data, key)
    name = str(written.value) if written is not None else default
    mapped = optimizer_from_deepspeed_type(name)
    if mapped is None:
        return None
    if written is not None:
        return Given(mapped, f"{key}: {name}", (key,))
    return Given(mapped, f"{key} absent: {tool}'s default {default}")


#: axolotl `rl:` (src/axolotl/utils/schemas/enums.py RLType) -> the `trainer` setting. IPO is TRL's DPOTrainer with
#: loss_type ["ipo"] (core/trainers/dpo/__init__.py); SimPO runs TRL's CPOTrainer; GDPO runs the GRPO trainer.
AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "grpo": "grpo", "gdpo": "grpo"}
#: LLaMA-Factory `stage: dpo` with `pref_loss` (hparams/finetuning_args.py: orpo and simpo use no reference model).
LLAMAFACTORY_PREF_LOSS = {"sigmoid": "dpo", "hinge": "dpo", "ipo": "dpo", "kto_pair": "dpo", "orpo": "orpo",
                          "simpo": "simpo"}
AXOLOTL_LOSS = Given("logits", "axolotl pins trl==1.8.0: its DPOTrainer makes the full logits and a log-softmax per "
                     "row (trl/trainer/dpo_trainer.py 1.8.0)")
AXOLOTL_LIGER = Given("liger", "dpo_use_liger_kernel: TRL 1.8's DPOTrainer runs Liger's fused linear DPO loss "
                      "(LigerFusedLinearDPOLoss), which needs Triton; that loss is not modelled", ("dpo_use_liger_kernel",))
LLAMAFACTORY_LOSS = Given("llamafactory", "LLaMA-Factory's own DPO / KTO trainers: the logits cast to fp32 "
                          "(logits.to(torch.float32)) and a log-softmax per row (src/llamafactory/train/dpo/trainer.py, "
                          "kto/trainer.py; memory/llamafactory_loss.py)")


def _preference(data: dict, key: str, table: dict[str, str], tool: str) -> Given | None:
    """The trainer a recipe's key names, credited to the key (None: supervised fine-tuning or not a trainer the
    `trainer` setting knows)."""
    written = data.get(key)
    if not isinstance(written, str) or written.lower() not in table:
        return None
    return Given(table[written.lower()], f"{key}: {written} ({tool})", (key,))


def _precompute(data: dict) -> Given | None:
    found = _given(data, "precompute_ref_log_probs")
    flag = read_flag(found.value) if found is not None else None
    return Given(flag, found.note, found.path) if found is not None and flag is not None else None




def _grpo(data: dict, block: tuple[str, ...] = ()) -> dict[str, Given]:
    """GRPO's keys at `block` (axolotl's `trl:` mapping, or the top of a TRL recipe), each at its key path (TRL's
    defaults, steps_per_generation's from the accumulation, are resolved/peak_inputs.generation_inputs')."""
    inner: object = data
    for key in block:
        inner = inner.get(key) if isinstance(inner, dict) else None
    found: dict[str, Given] = {}
    for key in checks.GRPO_KEYS:
        if isinstance(inner, dict) and inner.get(key) is not None:
            value = read_flag(inner[key]) if key == "use_vllm" and read_flag(inner[key]) is not None else inner[key]
            found[key] = Given(value, ".".join((*block, key)), (*block, key))
    return found


def _axolotl_grpo(data: dict) -> dict[str, Given]:
    """axolotl's `trl:` block; `rl_beta` when `trl.beta` is not set (core/builders/rl.py)."""
    found = _grpo(data, ("trl",))
    if "beta" not in found and data.get("rl_beta") is not None:
        found["beta"] = Given(data["rl_beta"], "rl_beta (axolotl: trl.beta not set)", ("rl_beta",))
    return found


def _axolotl(data: dict, out: list[ConfigIssue], folders: tuple[str, ...] = ()) -> RecipeSetup:
    method = str(data.get("adapter") or "full")
    bf16, fp16 = data.get("bf16", "auto"), read_flag(data.get("fp16"))
    if read_flag(bf16) or bf16 == "auto":
        note = "bf16: auto (bf16 where the GPU supports it)" if bf16 == "auto" else "bf16"
        dtype = Given("bf16", note, ("bf16",) if "bf16" in data else None)
    elif fp16 or read_flag(data.get("load_in_8bit")):
        dtype = Given("fp16", "fp16" if fp16 else "load_in_8bit without bf16", ("fp16",) if fp16 else ("load_in_8bit",))
    else:
        dtype = Given("fp32", "neither bf16 nor fp16", None)
    targets = _matching(_peft_targets(_given(data, "lora_target_modules")), "lora_targets", out)
    linear = None
    if read_flag(data.get("lora_target_linear")):  # find_all_linear_names, unioned with lora_target_modules
        linear = Given(True, "lora_target_linear", ("lora_target_linear",))
        written = _given(data, "lora_target_modules")
        targets = written if written is None or not isinstance(written.value, str) else Given(
            [written.value], f"{written.note} (in a list beside lora_target_linear)", written.path)
    quantization = None
    if read_flag(data.get("load_in_4bit")) and method == "qlora":
        quantization = Given("nf4", "load_in_4bit with adapter: qlora (nf4)", ("load_in_4bit",))
    elif read_flag(data.get("load_in_8bit")) and method == "lora":
        quantization = Given("int8", "load_in_8bit", ("load_in_8bit",))
    adapter = AdapterSpec(
        method, _rank(data, "lora_r", out), _given(data, "lora_alpha"), _given(data, "lora_dropout"), targets,
        _given(data, "lora_modules_to_save"), quantization,
        Given(True, "axolotl's QLoRA default (bnb_4bit_use_double_quant)") if quantization
        and quantization.value == "nf4" else None, _given(data, "peft_use_dora"),
        _matching(_given(data, "peft_layers_to_transform"), "layers_to_transform", out),
        _matching(_given(data, "peft_layers_pattern"), "layers_pattern", out),
        _matching(_given(data, "lora_rank_pattern"), "lora_rank_pattern", out),
        _matching(_given(data, "lora_target_parameters"), "target_parameters", out), linear,
        _axolotl_kbit(data, method) if quantization else None,
        _given(data, "peft_autocast_adapter_dtype"))  # src/axolotl/loaders/adapter.py: get_peft_model's kwarg
    checkpointing = _given(data, "gradient_checkpointing")
    checkpointing = (Given(read_flag(checkpointing.value) is not False, checkpointing.note, checkpointing.path)
                     if checkpointing else Given(False, "gradient_checkpointing absent: axolotl's default"))
    return RecipeSetup(
        "axolotl", _given(data, "base_model"),
        _positive(data, ("micro_batch_size",), 1, "axolotl", out),
        _accumulation(data, "axolotl"),
        _positive(data, ("sequence_len",), 512, "axolotl", out), checkpointing, dtype,
        dtype if dtype.value != "fp32" else None,
        _optimizer(data, "optimizer", "adamw_torch_fused", "axolotl"), _given(data, "deepspeed"),
        _given(data, "fsdp_config"), adapter if method != "full" else None,
        {"bf16": dtype.value == "bf16", "fp16": dtype.value == "fp16"},
        _preference(data, "rl", AXOLOTL_RL, "axolotl"), _precompute(data),
        AXOLOTL_LIGER if read_flag(data.get("dpo_use_liger_kernel")) else AXOLOTL_LOSS, generation=_axolotl_grpo(data))


#: Where axolotl decides the dtypes of a quantized base (src/axolotl/loaders/model.py, ModelLoader).
AXOLOTL_LOADER = "src/axolotl/loaders/model.py ModelLoader"


def _axolotl_kbit(data: dict, method: str) -> Given | None:
    """Whether a quantized base trains as prepare_model_for_kbit_training leaves it (fp32 norms, embeddings,
    head): never in axolotl. Under FSDP with qlora `_prepare_model_for_quantization` skips it
    (`is_qlora_and_fsdp_enabled`: "Make sure everything is in the same dtype"); elsewhere it runs, and then
    `_configure_embedding_dtypes` casts every module named *norm*, the embeddings and the head back to torch_dtype
    (`should_convert`: always for adapter lora / qlora, "for flash-attn compatibility"). DeepSpeed recasts every
    float parameter itself, so nothing is read there."""
    if data.get("deepspeed"):
        return None
    if method == "qlora" and (data.get("fsdp") or data.get("fsdp_config")):
        return Given(False, f"axolotl under FSDP with adapter: qlora: no prepare_model_for_kbit_training "
                     f"({AXOLOTL_LOADER}._prepare_model_for_quantization, is_qlora_and_fsdp_enabled); the base "
                     "stays in torch_dtype", ("adapter",))
    return Given(False, f"axolotl with adapter: {method}: prepare_model_for_kbit_training's fp32 norms, embeddings "
                 f"and head cast back to torch_dtype ({AXOLOTL_LOADER}._configure_embedding_dtypes, should_convert); "
                 "the biases of quantized linears stay fp32 (not modelled)", ("adapter",))


def _split(found: Given | None) -> Given | None:
    """LLaMA-Factory's comma-separated module lists ("q_proj,v_proj"), as its `split_arg` reads them."""
    if found is None or not isinstance(found.value, str):
        return found
    return Given([part.strip() for part in found.value.split(",") if part.strip()], found.note, found.path)


def _llamafactory(data: dict, out: list[ConfigIssue], folders: tuple[str, ...] = ()) -> RecipeSetup:
    method = str(data.get("finetuning_type") or "lora")
    bits = positive_int(data.get("quantization_bit"))
    quantization = None
    if bits == 4:
        kind = str(data.get("quantization_type") or "nf4")
        quantization = Given(kind, "quantization_bit: 4", ("quantization_bit",))
    elif bits == 8:
        quantization = Given("int8", "quantization_bit: 8", ("quantization_bit",))
    double = _given(data, "double_quantization") or (
        Given(True, "double_quantization absent: LLaMA-Factory's default") if quantization else None)
    named = _split(_given(data, "lora_target")) or Given("all", "lora_target absent: LLaMA-Factory's default (all)")
    linear: Given | None = None
    targets: Given | None = named
    if named.value == ["all"] or named.value == "all":  # find_all_linear_modules: the linear layers' names
        linear, targets = Given(True, named.note, named.path), None
    rank = _rank(data, "lora_rank", out) or Given(8, "lora_rank absent: LLaMA-Factory's default")
    kbit = None
    if quantization is not None and not data.get("deepspeed"):  # DeepSpeed recasts every float parameter itself
        kbit = Given(False, "LLaMA-Factory never calls prepare_model_for_kbit_training: the base loads in the compute "
                     "dtype (model/model_utils/checkpointing.py prepare_model_for_training upcasts only norm "
                     "weights, with upcast_layernorm" + (": true, not modelled)" if read_flag(
                         data.get("upcast_layernorm")) else ", off)"), ("quantization_bit",))
    adapter = AdapterSpec(method, rank, _given(data, "lora_alpha"), _given(data, "lora_dropout"), targets,
                          _split(_given(data, "additional_target")), quantization, double, _given(data, "use_dora"),
                          target_linear=linear, kbit_prepare=kbit)
    off = read_flag(data.get("disable_gradient_checkpointing"))
    checkpointing = (Given(not off, "disable_gradient_checkpointing", ("disable_gradient_checkpointing",))
                     if off is not None else Given(True, "checkpointing on: LLaMA-Factory's default"))
    compute = _mixed(data, "fp32", "neither bf16 nor fp16: fp32 assumed (LLaMA-Factory infers it otherwise)")
    dtype = compute
    pure = read_flag(data.get("pure_bf16")) is True
    if pure:  # hparams/parser.py: pure_bf16 makes compute_dtype bf16; model/adapter.py keeps trainables in it
        dtype = compute = Given("bf16", "pure_bf16: weights, gradients and optimizer states in bf16 (no fp32 copy)",
                                ("pure_bf16",))
    elif method in ("full", "freeze") and compute.value != "fp32" and read_flag(data.get("use_badam")) is not True:
        # model/adapter.py init_adapter: without pure_bf16 / BAdam the trainable parameters are cast to float32
        # (the model is loaded in its checkpoint's dtype, model/loader.py torch_dtype="auto", taken as the compute
        # dtype); under ZeRO-3 DeepSpeed's own partitions hold them instead (the DeepSpeed plan, not this dtype)
        dtype = Given("fp32", f"{compute.note} with finetuning_type {method}: LLaMA-Factory upcasts the trainable "
                      "parameters to float32 after loading (model/adapter.py init_adapter; pure_bf16 keeps bf16)",
                      compute.path)
    return RecipeSetup(
        "llamafactory", _given(data, "model_name_or_path"),
        _positive(data, ("per_device_train_batch_size",), 8, "Transformers", out),
        _accumulation(data, "llamafactory"),
        _positive(data, ("cutoff_len",), 2048, "LLaMA-Factory", out), checkpointing, dtype,
        compute if compute.value != "fp32" else None, _optimizer(data, "optim", "adamw_torch", "Transformers"),
        _given(data, "deepspeed"), None, adapter if method not in ("full", "freeze") else None,
        {"bf16": read_flag(data.get("bf16")) is True or pure, "fp16": read_flag(data.get("fp16")) is True},
        _llamafactory_trainer(data), None, LLAMAFACTORY_LOSS, reference_model=_llamafactory_reference(data),
        reference_dtype=None if dtype.value == compute.value else Given(
            compute.value, f"{compute.note}: the reference is loaded without the upcast (train/trainer_utils.py "
            "create_ref_model: load_model(is_trainable=False))", compute.path))


def _llamafactory_reference(data: dict) -> Given | None:
    """`ref_model`: `create_ref_model` (train/trainer_utils.py) loads it even for LoRA, so the reference is not the
    PEFT base. The base model again ("copy", in the policy's dtype) is modelled; another model, adapters on it or a
    quantized reference are not (their size is not read)."""
    name = data.get("ref_model")
    if name is None:
        return None
    if name == data.get("model_name_or_path") and not data.get("ref_model_adapters") and \
            not data.get("ref_model_quantization_bit"):
        return Given("copy", f"ref_model: {name} (the base model again: a reference copy beside the policy)",
                     ("ref_model",))
    return Given("other", f"ref_model: {name} (with its adapters / quantization) is a reference model apart from the "
                 "policy's base; its size is not read, so the peak is not modelled", ("ref_model",))


def _llamafactory_trainer(data: dict) -> Given | None:
    """`stage: dpo` (its `pref_loss`, default sigmoid) or `stage: kto`."""
    stage = data.get("stage")
    if stage == "kto":
        return Given("kto", "stage: kto (LLaMA-Factory)", ("stage",))
    if stage != "dpo":
        return None
    loss = _preference(data, "pref_loss", LLAMAFACTORY_PREF_LOSS, "LLaMA-Factory")
    return loss or Given("dpo", "stage: dpo, pref_loss absent: sigmoid (LLaMA-Factory)", ("stage",))


def _mixed(data: dict, default: str, note: str) -> Given:
    for key in ("bf16", "fp16"):
        if read_flag(data.get(key)):
            return Given(key, key, (key,))
    return Given(default, note, None)


def _trl_targets(found: Given | None) -> Given | None:
    """ModelConfig.__post_init__ (trl/trainer/model_config.py): a one-entry list becomes that string."""
    if found is None or not isinstance(found.value, list) or len(found.value) != 1:
        return found
    return Given(found.value[0], f"{found.note} (one entry: TRL passes it as a string)", found.path)


def _trl(data: dict, out: list[ConfigIssue], folders: tuple[str, ...] = ()) -> RecipeSetup:
    written = _first(data, "dtype", "torch_dtype")
    loaded = normalize_precision(str(written.value)) if written is not None else "fp32"
    dtype = (Given(loaded, f"{written.note}: {written.value}", written.path) if written is not None and loaded
             else Given("fp32", "dtype absent: TRL ModelConfig's default float32") if written is None else None)
    peft = read_flag(data.get("use_peft")) is True
    four, eight = read_flag(data.get("load_in_4bit")) is True, read_flag(data.get("load_in_8bit")) is True
    quantization = (Given(str(data.get("bnb_4bit_quant_type") or "nf4"), "load_in_4bit", ("load_in_4bit",)) if four
                    else Given("int8", "load_in_8bit", ("load_in_8bit",)) if eight else None)
    nested = _given(data, "use_bnb_nested_quant") or (
        Given(False, "use_bnb_nested_quant absent: TRL's default") if four else None)
    adapter = AdapterSpec(
        "lora", _rank(data, "lora_r", out) or Given(16, "lora_r absent: TRL's default"),
        _given(data, "lora_alpha") or Given(32, "lora_alpha absent: TRL's default"),
        _given(data, "lora_dropout") or Given(0.05, "lora_dropout absent: TRL ModelConfig's default 0.05"),
        _matching(_peft_targets(_trl_targets(_given(data, "lora_target_modules"))), "lora_targets", out),
        _given(data, "lora_modules_to_save"), quantization, nested, _given(data, "use_dora"),
        target_parameters=_matching(_given(data, "lora_target_parameters"), "target_parameters", out))
    checkpointing = _given(data, "gradient_checkpointing")
    checkpointing = (Given(read_flag(checkpointing.value) is not False, checkpointing.note, checkpointing.path)
                     if checkpointing else Given(True, "gradient_checkpointing absent: TRL's default"))
    fp16 = read_flag(data.get("fp16")) is True
    bf16 = read_flag(data.get("bf16")) if "bf16" in data else not fp16  # TRL: bf16 None -> True unless fp16
    trainer, unread = _trl_trainer(data, folders)
    sequence = _positive(data, ("max_length", "max_seq_length"), 1024, "TRL", out)
    prompt = positive_int(data.get("max_prompt_length"))
    if trainer is not None and trainer.value == "grpo" and prompt and not sequence.path:
        # GRPO's step runs prompt + completion tokens (memory/grpo.py); older GRPOConfigs bound the prompt
        completion = positive_int(data.get("max_completion_length")) or checks.MAX_COMPLETION_LENGTH
        sequence = Given(prompt + completion, f"max_prompt_length + max_completion_length = {prompt:,} + "
                         f"{completion:,}" + ("" if "max_completion_length" in data else " (TRL's default)"),
                         ("max_prompt_length",))
    compute = (Given("bf16", "bf16" if "bf16" in data else "bf16 absent: TRL turns it on", ("bf16",) if "bf16" in data
                     else None) if bf16 else Given("fp16", "fp16", ("fp16",)) if fp16 else None)
    if quantization is not None and not data.get("deepspeed"):
        adapter = replace(adapter, kbit_prepare=_trl_kbit(trainer, quantization))
    return RecipeSetup(
        "trl", _given(data, "model_name_or_path"),
        _positive(data, ("per_device_train_batch_size",), 8, "Transformers", out),
        _accumulation(data, "trl"),
        sequence, checkpointing, dtype, compute,
        _optimizer(data, "optim", "adamw_torch", "Transformers"), _given(data, "deepspeed"), None,
        adapter if peft else None, {"bf16": bool(bf16), "fp16": fp16}, trainer, _precompute(data),
        generation=_grpo(data), unread=unread, sft_loss=trl_sft_loss(data) if trainer is None else None)


#: TRL's trainers that run PEFT's prepare_model_for_kbit_training on a quantized model (TRL 1.16:
#: trl/experimental/orpo/orpo_trainer.py and trl/experimental/cpo/cpo_trainer.py `__init__`; SimPO is CPO's loss).
TRL_KBIT_PREPARED = ("orpo", "cpo", "simpo")


def _trl_kbit(trainer: Given | None, quantization: Given) -> Given:
    """Whether TRL's trainer prepares the quantized base: SFTTrainer, DPOTrainer, KTO, GRPO, reward and RLOO
    (TRL 1.16, trl/trainer/*_trainer.py `__init__`) call get_peft_model directly, so the base stays in the dtype
    it is loaded in; ORPO and CPO call PEFT's prepare_model_for_kbit_training."""
    name = str(trainer.value) if trainer is not None else "sft"
    if name in TRL_KBIT_PREPARED:
        module = "orpo" if name == "orpo" else "cpo"
        return Given(True, f"TRL's {module.upper()}Trainer with {quantization.note}: PEFT's "
                     f"prepare_model_for_kbit_training (trl/experimental/{module}/{module}_trainer.py __init__)",
                     quantization.path)
    return Given(False, f"TRL's {name.upper()}Trainer with {quantization.note}: get_peft_model without "
                 f"prepare_model_for_kbit_training (TRL 1.16 trl/trainer/{name}_trainer.py __init__); the base stays "
                 "in the dtype it is loaded in", quantization.path)


#: The TRL release whose SFTTrainer first scores through its fused LM head (trl/trainer/sft_trainer.py `__init__`:
#: `add_fused_lm_head(..., outputs=("log_probs", "entropy", "is_top1"))`; `loss_type="chunked_nll"` is an alias of
#: "nll" there)
TRL_FUSED_SFT = (1, 15)
#: TRL's `chunked_nll` SFT loss by release (trl/trainer/sft_trainer.py `_patch_chunked_ce_lm_head`, sft_config.py
#: `__post_init__`): asked for from 1.4, SFTConfig's default from 1.7 ("nll" with `use_liger_kernel`), its matmul in
#: the compute dtype from 1.13 (`sft_loss` "chunked_nll"), in fp32 before ("chunked_nll_fp32": memory/chunked_nll.py)
TRL_CHUNKED_SFT, TRL_CHUNKED_DEFAULT, TRL_CHUNKED_COMPUTE_DTYPE = (1, 4), (1, 7), (1, 13)
#: the TRL releases that run each chunked SFT loss, as the step's explanation names them (present.head_line)
TRL_SFT_RELEASES = {
    kind: f"TRL {first[0]}.{first[1]}-{until[0]}.{until[1] - 1}"
    for kind, first, until in (("chunked_nll_fp32", TRL_CHUNKED_SFT, TRL_CHUNKED_COMPUTE_DTYPE),
                               ("chunked_nll", TRL_CHUNKED_COMPUTE_DTYPE, TRL_FUSED_SFT))}


def trl_sft_loss(data: dict[str, Any], pin: tuple[str, str] | None = None) -> Given | None:
    """TRL's SFTTrainer loss as the step model takes it: "fused" (TRL 1.15 and later: per-token log-probs through the
    fused LM head in tiles, no b·s·V logits), "chunked_nll" / "chunked_nll_fp32" (TRL 1.4-1.14 when the recipe's
    `loss_type` resolves to chunked_nll: the head in checkpointed chunks of 256 tokens), unless label smoothing asks
    for the full logits (`label_smoother`); "model" for an older TRL or another loss_type (the model's own loss, as
    Transformers' Trainer computes it). The TRL is the installed one, else the project's pin (`pin`: its version and
    the file pinning it, `trl_pin`), else the newest followed."""
    version, installed = running("trl")
    where = "installed" if installed else "the newest followed"
    if not installed and pin is not None:
        version, where = pin[0], f"pinned in {pin[1]}"
    smoothing = data.get("label_smoothing_factor")
    smoothed = isinstance(smoothing, (int, float)) and not isinstance(smoothing, bool) and smoothing > 0
    found = release(version)
    liger = data.get("use_liger_kernel") is True
    default = "chunked_nll" if found >= TRL_CHUNKED_DEFAULT and not liger else "nll"
    loss_type = data.get("loss_type") if isinstance(data.get("loss_type"), str) else default
    if TRL_CHUNKED_SFT <= found < TRL_FUSED_SFT and loss_type == "chunked_nll" and not liger and not smoothed:
        kind = "chunked_nll" if found >= TRL_CHUNKED_COMPUTE_DTYPE else "chunked_nll_fp32"
        matmul = "the compute dtype" if kind == "chunked_nll" else "fp32 (the chunk and the head weight upcast)"
        return Given(kind, f"TRL {version} ({where}) SFTTrainer, loss_type chunked_nll"
                     f"{' (its default)' if 'loss_type' not in data else ''}: the LM head in checkpointed chunks of "
                     f"256 tokens, its matmul in {matmul}")
    if found < TRL_FUSED_SFT:
        return Given("model", f"TRL {version} ({where}) SFTTrainer, loss_type {loss_type}: the model's own loss (its "
                     "fused LM head came in TRL 1.15)") if pin is not None and not installed else None
    if smoothed:
        return None
    return Given("fused", f"TRL {version} ({where}) SFTTrainer: its fused LM head (per-token log-probs in tiles, no "
                 "logits of every token)")


#: the note `trl_sft_loss` writes when an installed or pinned TRL chose the loss (not the newest followed)
TRL_PINNED = re.compile(r"TRL (\S+) \((?:pinned in |installed\))")


def trl_followed(loss: Given | None) -> str | None:
    """The installed or pinned TRL release whose SFT loss the peak follows, read back from `trl_sft_loss`'s note."""
    found = TRL_PINNED.match(loss.note) if loss is not None else None
    return found.group(1) if found is not None else None


#: `trl==X` (extras allowed) as setup.py, pyproject.toml and requirements files pin it
TRL_PIN = re.compile(r"(?<![\w.-])trl(?:\[[^\]]*\])?\s*==\s*([0-9]+(?:\.[0-9]+)*)")
PIN_FILES = ("setup.py", "pyproject.toml", "requirements.txt")


def trl_pin(find: Callable[[str], tuple[str | None, str, str]]) -> tuple[str, str] | None:
    """(version, file) of an exact TRL pin in the recipe's project (`find`: the loader's `launch_file`, which looks in
    the recipe's folder and each parent up to the project root): open-r1's setup.py pins `trl[vllm]==0.18.0`."""
    return package_pin("trl", find)


def package_pin(package: str, find: Callable[[str], tuple[str | None, str, str]]) -> tuple[str, str] | None:
    """(version, file) of an exact pin of `package` in the recipe's project (`trl_pin`; open-r1's setup.py also pins
    `transformers==4.52.3`)."""
    pattern = TRL_PIN if package == "trl" else re.compile(TRL_PIN.pattern.replace("trl", re.escape(package), 1))
    for name in PIN_FILES:
        text, path, _ = find(name)
        found = pattern.search(text) if text is not None else None
        if found is not None:
            return found.group(1), path
    return None


#: Keys only one TRL config class has (TRL 1.16: trl/trainer/{grpo,kto,dpo}_config.py, trl/experimental/{cpo,orpo}/;
#: DPO's also from the older releases the handbook pins), read in this order: GRPOConfig has `beta` too.
KTO_KEYS = ("desirable_weight", "undesirable_weight")
GRPO_ONLY_KEYS = ("num_generations", "steps_per_generation", "generation_batch_size", "epsilon_high", "scale_rewards",
                  "reward_weights", "ds3_gather_for_generation")
CPO_ONLY_KEYS = ("cpo_alpha", "simpo_gamma")
#: CPOConfig's loss_type values no other config takes (trl/experimental/cpo/cpo_config.py: sigmoid, hinge, ipo, simpo,
#: alphapo; DPOConfig's list has neither of these two)
CPO_ONLY_LOSSES = ("simpo", "alphapo")
#: (not sync_ref_model / ref_model_mixup_alpha / ref_model_sync_steps: GRPOConfig has them too)
DPO_ONLY_KEYS = ("precompute_ref_log_probs", "precompute_ref_batch_size", "ref_model_init_kwargs",
                 "rpo_alpha", "ld_alpha", "use_weighting", "f_divergence_type", "f_alpha_divergence_coef",
                 "discopop_tau", "loss_weights", "ref_adapter_name", "model_adapter_name", "reference_free")
#: Keys the preference configs share (DPO, ORPO, CPO): they say a preference trainer runs, not which.
PREFERENCE_SHARED_KEYS = ("beta", "max_prompt_length")


#: A recipe folder named after its trainer (alignment-handbook recipes/<model>/dpo/, orpo/; open-r1 .../grpo/): the
#: script the README runs for the recipes of that folder.
FOLDER_TRAINERS = {"dpo": "dpo", "orpo": "orpo", "cpo": "cpo", "simpo": "simpo", "kto": "kto", "grpo": "grpo"}


def _trl_trainer(data: dict, folders: tuple[str, ...] = ()) -> tuple[Given | None, tuple]:
    """A TRL / alignment-handbook recipe is run by its script (run_dpo.py, orpo.py, ...): the trainer is read from the
    config class whose own keys it sets. (trainer, unread): a recipe that sets only keys DPO, ORPO and CPO share
    (`beta`, `max_prompt_length`) names no trainer for certain: it is named as not modelled, not priced as DPO."""
    cpo_loss = isinstance(data.get("loss_type"), str) and data["loss_type"].lower() in CPO_ONLY_LOSSES
    if cpo_loss or any(key in data for key in CPO_ONLY_KEYS):
        cpo_key = next((key for key in CPO_ONLY_KEYS if key in data), "loss_type")
        simpo = str(data.get("loss_type", "")).lower() == "simpo"
        name = "simpo" if simpo else "cpo"
        return Given(name, f"{cpo_key}: a CPOConfig key (TRL CPOTrainer{', loss_type simpo' if simpo else ''})",
                     (cpo_key,)), ()
    for trainer, keys in (("grpo", GRPO_ONLY_KEYS), ("kto", KTO_KEYS), ("dpo", DPO_ONLY_KEYS)):
        key = next((key for key in keys if key in data), None)
        if key is not None:
            return Given(trainer, f"{key}: a {trainer.upper()}Config key (TRL {trainer.upper()}Trainer)", (key,)), ()
    key = next((key for key in PREFERENCE_SHARED_KEYS if key in data), None)
    if key is None:
        return None, ()
    folder = next((name for name in reversed(folders) if name.lower() in FOLDER_TRAINERS), None)
    if folder is not None:  # the shared keys say a preference trainer runs; the recipe's folder says which
        trainer = FOLDER_TRAINERS[folder.lower()]
        return Given(trainer, f"{key} (a preference key) in a recipe folder named {folder}/: TRL "
                     f"{trainer.upper()}Trainer", (key,)), ()
    return None, (((key,), data[key], f"a key DPO, ORPO and CPO configs share: the recipe's script decides which "
                   "trainer runs (a reference model and two rows per pair for DPO, none for ORPO / CPO); the peak "
                   "follows supervised fine-tuning — give --trainer dpo|orpo|cpo|simpo for that trainer's step"),)


#: Keys whose type every tool checks before anything else (a model name, a path or a mapping, a method name).
TYPED_KEYS = (
    ("base_model", str, "a model name or path"), ("model_name_or_path", str, "a model name or path"),
    ("deepspeed", (str, dict), "a path to a DeepSpeed config or an inline mapping"),
    ("fsdp_config", dict, "a mapping"), ("adapter", str, "an adapter name (lora, qlora)"),
    ("finetuning_type", str, "a fine-tuning type (lora, freeze, full, oft)"),
)

READ = {"axolotl": _axolotl, "llamafactory": _llamafactory, "trl": _trl}
PARALLEL = {"axolotl": axolotl_parallel, "llamafactory": llamafactory_parallel, "trl": trl_parallel}


#: What a paged optimizer does that the figures do not follow (bitsandbytes paged optimizers: their states are
#: allocated in CUDA unified memory, which the driver pages out to host memory when the GPU runs short).
PAGED = ("a paged optimizer: bitsandbytes keeps its states in CUDA unified memory, paged out to host memory under "
         "pressure; the figures count them on the GPU")


#: What each simple declared type accepts, and its name in a message.
TYPE_NAMES = {"bool": "true or false", "int": "a whole number", "float": "a number"}


def _lax(value: object, kind: str) -> bool:
    """Whether pydantic's lax mode (axolotl's models) turns `value` into `kind`."""
    if isinstance(value, str):
        text = value.strip().lower()
        if kind == "bool":
            return text in ("true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n")
        try:
            number = float(text)
        except ValueError:
            return False
        return kind == "float" or number.is_integer()
    return kind == "int" and isinstance(value, float) and value.is_integer()


def _typed(value: object, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (kind == "float" and isinstance(value, float))


def _wrong_types(tool: Tool, data: dict) -> list[ConfigIssue]:
    """Values of another type than the one the tool's annotation admits (bool / int / float; the key inventory's
    TYPES, read from the sources): a warning naming the type. axolotl's pydantic converts what lax mode allows; the
    dataclasses behind HfArgumentParser and TrlParser take a YAML value as it is."""
    from zeromem_lsp.configs.key_inventory import TYPES

    declared = TYPES.get(tool, {})
    out = []
    for key, value in data.items():
        kind = declared.get(key) if isinstance(key, str) else None
        if kind is None or value is None or _typed(value, kind) or (tool == "axolotl" and _lax(value, kind)):
            continue
        out.append(_issue("wrong_type", (key,), "value", f"{TOOL_NAMES[tool]} declares {key} as {TYPE_NAMES[kind]}; "
                          f"got {value!r}"))
    return out


#: axolotl's kernels plugin; with it, an unset `experts_implementation` and no scattermoe / sonicmoe kernel asked
#: for, axolotl pins the experts to eager (integrations/kernels/args.py `check_experts_implementation`, axolotl@067b021c)
KERNELS_PLUGIN = "axolotl.integrations.kernels.KernelsPlugin"
EAGER_EXPERTS = ("with experts_implementation unset it makes an MoE model's experts run eager (axolotl's kernels "
                 "plugin pins it), which keeps per routed visit its row and an index pair beyond grouped_mm, the path "
                 "measured (+7% of a mixtral layer); set experts_implementation: grouped_mm to run the measured path")


def kernels_pin_eager(data: dict) -> bool:
    """axolotl will run an MoE model's experts eager: its kernels plugin is loaded, `experts_implementation` unset and
    neither `use_scattermoe` nor `use_sonicmoe` asked for (the plugin's validator then sets "eager")."""
    plugins = data.get("plugins")
    return (isinstance(plugins, list) and KERNELS_PLUGIN in plugins and data.get("experts_implementation") is None
            and not data.get("use_scattermoe") and not data.get("use_sonicmoe"))


def read_recipe(tool: Tool, data: dict, folders: tuple[str, ...] = ()) -> tuple[list[ConfigIssue], RecipeSetup]:
    """The recipe's issues (unknown keys, impossible values) and what it says about the run. `folders`: the names
    of the folders the recipe sits in, innermost last (a TRL recipe's folder may name its trainer)."""
    out = _unknown_keys(tool, data) + _wrong_types(tool, data)
    for key, kinds, what in TYPED_KEYS:
        if data.get(key) is not None and not isinstance(data[key], kinds):
            out.append(_issue("invalid_value", (key,), "value", f"{key} must be {what}, got {data[key]!r}"))
    data = {key: value for key, value in data.items()
            if not any(key == typed and not isinstance(value, kinds) for typed, kinds, _ in TYPED_KEYS)}
    setup = replace(READ[tool](data, out, folders), revision=_revision(data, tool), parallel=PARALLEL[tool](data),
                    data_parallel=axolotl_data_parallel(data) if tool == "axolotl" else {})
    if tool == "axolotl":
        out += axolotl_context_parallel(data)
    refused = {issue.path for issue in out if issue.kind == "invalid_value"}  # said once: the refusal says it
    out = [issue for issue in out if not (issue.kind == "wrong_type" and issue.path in refused)]
    if tool == "axolotl" and kernels_pin_eager(data):
        setup = replace(setup, unread=(*setup.unread, (("plugins",), KERNELS_PLUGIN, EAGER_EXPERTS)))
    key = "optimizer" if tool == "axolotl" else "optim"
    if isinstance(data.get(key), str) and "paged" in data[key].lower():
        setup = replace(setup, unread=(*setup.unread, ((key,), data[key], PAGED)))
    if setup.model is None and not any(issue.path in (("base_model",), ("model_name_or_path",)) for issue in out):
        key = "base_model" if tool == "axolotl" else "model_name_or_path"
        out.append(_issue("invalid_value", (), "key", f"{TOOL_NAMES[tool]} needs {key}: the model to train"))
    return out, setup


def fill_auto(config: dict, recipe: RecipeSetup) -> dict:
    """A DeepSpeed config with the "auto" values Transformers fills from the training arguments
    (transformers integrations/deepspeed.py: HfTrainerDeepSpeedConfig.trainer_config_process); the
    world-size-dependent train_batch_size and the model-dependent buckets stay "auto"."""
    filled = dict(config)

    def fill(section: dict, key: str, value: object) -> None:
        if section.get(key) == "auto":
            section[key] = value

    if recipe.micro_batch is not None:
        fill(filled, "train_micro_batch_size_per_gpu", recipe.micro_batch.value)
    fill(filled, "gradient_accumulation_steps", recipe.accumulation.value if recipe.accumulation else 1)
    for name in ("bf16", "fp16"):
        if isinstance(filled.get(name), dict):
            filled[name] = dict(filled[name])
            fill(filled[name], "enabled", recipe.flags.get(name, False))
    return filled
