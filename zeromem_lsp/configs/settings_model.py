"""The pydantic model of the `zeromem` settings: the source of the JSON Schema (schemas/) and the
validator of record. Its checks are the plain functions of settings.py; settings.py answers alone
when it is certain a value is valid, and comes here for everything else (and for every message).
"""

from __future__ import annotations


from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema

from zeromem_lsp.configs import settings_values as plain
from zeromem_lsp.configs.settings_values import BYTE_SIZE_PATTERN, COUNT_PATTERN, SETTING_NAMES, SettingProblem
from zeromem_lsp.configs.model_config import MAX_COUNT, MAX_SIZE

ByteSize = Annotated[
    int,
    BeforeValidator(plain.check_bytes),
    Field(ge=0),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": BYTE_SIZE_PATTERN}]}),
]
GpuMemory = Annotated[
    int,
    BeforeValidator(plain.check_memory),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": plain.MIN_MEMORY},
                              {"type": "string", "pattern": BYTE_SIZE_PATTERN}]}),
]
Reserve = Annotated[
    int,
    BeforeValidator(plain.check_reserve),
    WithJsonSchema({"anyOf": [{"type": "integer", "enum": [0]}, {"type": "integer", "minimum": plain.MIN_MEMORY},
                              {"type": "string", "pattern": BYTE_SIZE_PATTERN}]}),
]
ParameterCount = Annotated[
    int,
    BeforeValidator(plain.check_count),
    Field(gt=0),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": COUNT_PATTERN}]}),
]
_NAMES_SCHEMA = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
_REGEX_SCHEMA = {"type": "object", "properties": {"regex": {"type": "string", "minLength": 1}}, "required": ["regex"],
                 "additionalProperties": False, "description": "a Python regular expression matched against each "
                 "module's full name (re.fullmatch), as PEFT takes a string"}
LoraTargets = Annotated[
    object,
    BeforeValidator(plain.check_targets),
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1,
                               "description": f'"{plain.ALL_LINEAR}" or names separated by commas'}, _NAMES_SCHEMA,
                              _REGEX_SCHEMA]}),
]
ExcludedModules = Annotated[
    object,
    BeforeValidator(lambda value: plain.check_targets(value, shorthand=False)),
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1, "description": "names separated by commas"},
                              _NAMES_SCHEMA, _REGEX_SCHEMA]}),
]
LayerIndices = Annotated[
    tuple[int, ...],
    BeforeValidator(plain.check_layer_indices),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0},
                              {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}]}),
]
RankPattern = Annotated[
    tuple[tuple[str, int], ...],
    BeforeValidator(plain.check_rank_pattern),
    WithJsonSchema({"type": "object", "minProperties": 1,
                    "additionalProperties": {"type": "integer", "minimum": 1, "maximum": MAX_SIZE}}),
]
ModuleNames = Annotated[
    tuple[str, ...],
    BeforeValidator(lambda value: plain.check_module_names(value, shorthand=False)),
    WithJsonSchema({"anyOf": [{"type": "string", "minLength": 1, "description": "names separated by commas"},
                              _NAMES_SCHEMA]}),
]
TiledMlp = Annotated[
    object,
    BeforeValidator(plain.check_tiled_mlp),
    WithJsonSchema({"anyOf": [{"type": "boolean"}, {"type": "integer", "minimum": 1, "maximum": plain.MAX_SHARDS}]}),
]
# memory/precision.py's PRECISIONS and OPTIMIZERS, spelled as types (tests/unit/test_types.py checks they agree)
Precision = Literal["fp32", "fp16", "bf16"]
Optimizer = Literal["adam", "adamw", "sgd", "sgd_momentum", "lion", "adagrad", "lamb", "adam8bit", "adafactor",
                    "adam8bit_torchao"]


class ParametersFromConfigModel(BaseModel):
    """Count the parameters from a local Hugging Face `config.json` (path relative to the config file;
    in project settings, relative to the settings file)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="ParametersFromConfig")

    from_config: str = Field(..., min_length=1, description="A model's config.json, its directory, or a hub id in "
                             "the local Hugging Face cache.")
    revision: str | None = Field(None, min_length=1, description="A hub id's branch, tag or commit hash in the cache "
                                 "(default: main).")


def _parameters_setting(value: object) -> object:
    """The plain check, its {"from_config": ...} answer made this module's model."""
    if isinstance(value, ParametersFromConfigModel):
        return value
    checked = plain.check_parameters(value)
    if isinstance(checked, plain.ParametersFromConfig):
        return ParametersFromConfigModel(from_config=checked.from_config, revision=checked.revision)
    return checked


ParametersSetting = Annotated[
    int | ParametersFromConfigModel,
    BeforeValidator(_parameters_setting),
    WithJsonSchema({"anyOf": [
        {"type": "integer", "minimum": plain.MIN_PARAMETERS}, {"type": "string", "pattern": COUNT_PATTERN},
        {"type": "object", "properties": {"from_config": {"type": "string", "minLength": 1,
         "description": "A Hugging Face model's config.json, its directory, or a hub id (org/name) in the "
                        "local Hugging Face cache; the parameters are counted exactly."}},
         "required": ["from_config"], "additionalProperties": False},
    ]}),
]


def _whole_version(value: object) -> object:
    """1 or 2 as an integer: true, 2.0 or "2" are not an FSDP version."""
    if value is not None and type(value) is not int:
        raise ValueError(f"expected 1 or 2 (an integer), got {value!r}")
    return value


FsdpVersion = Annotated[plain.FsdpVersionNumber, BeforeValidator(_whole_version)]


class ZeromemSettingsModel(BaseModel):
    """Declarations for zeromem; DeepSpeed ignores this top-level block."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, title="ZeromemSettings")

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
    gpu_memory: GpuMemory | None = Field(
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
    gradient_accumulation_steps: int | None = Field(
        None, ge=1, le=MAX_COUNT, strict=True,
        description="Micro-batches per optimizer step, for the peak (from the second on the accumulated gradients "
        "are held); default: the config's `gradient_accumulation_steps`, else 1.",
    )
    gradient_checkpointing: bool | None = Field(
        None, strict=True,
        description="Whether the training script enables gradient (activation) checkpointing; default: the "
        "config's `gradient_checkpointing` / `activation_checkpointing`, else false.",
    )
    attention: plain.Attention | None = Field(
        None, description="Attention implementation for the activation estimate: `sdpa` (default; what flash "
        "attention keeps too) or `eager` (keeps the s×s probabilities).",
    )
    reserved: Reserve | None = Field(
        None, description="A fixed per-GPU reserve added to the peak instead of the default, which is per stage: the "
        "cuBLAS workspaces + the CUDA context + NCCL's buffers (docs/gpu.md).", examples=["1GiB"],
    )
    engine: plain.Engine | None = Field(
        None, description="What runs the training step, for the peak: `torch` (one process or DDP), `deepspeed` "
        "or `fsdp`; default: what the config is (a ds_config: deepspeed; an FSDP config: fsdp). It names the "
        "step the peak models; ZeRO stages and model state still come from the config.",
    )
    fsdp_version: FsdpVersion | None = Field(
        None, description="FSDP1 (1: FullyShardedDataParallel) or FSDP2 (2: fully_shard) when the step "
        "is FSDP, for the peak and the adapter's state; default: the config's `fsdp_version` / `version`, else what "
        "its loader runs (Accelerate YAML and axolotl 1, a Transformers fsdp_config 2; docs/fsdp-accelerate.md).",
    )
    param_dtype: plain.ParamDtype | None = Field(
        None, description="The dtype the weights are stored in, for the peak; default per engine: deepspeed "
        "the 16-bit precision, fsdp fp32 (Accelerate upcasts the shards), torch the training precision.",
    )
    optimizer_impl: plain.OptimizerImpl | None = Field(
        None, description="torch AdamW's implementation, for the optimizer step's scratch: `foreach` (default: "
        "what runs on a GPU), `for-loop` or `fused`; a ds_config `optimizer` section runs DeepSpeed's FusedAdam "
        "(fused).",
    )
    lora_rank: int | None = Field(
        None, ge=1, le=MAX_SIZE, strict=True,
        description="LoRA rank r: trains r·(in + out) adapter parameters per targeted linear layer and freezes the "
        "base model (P, G, O then count frozen and trainable parameters apart; docs/adapters.md). Needs the model "
        "shape (`parameters.from_config`).",
    )
    lora_targets: LoraTargets | None = Field(
        None, description='The modules LoRA adapts, as PEFT\'s target_modules: names such as ["q_proj", "v_proj"] '
        '(or "q_proj,v_proj"), or "all-linear" (every linear layer but the output head; the default with '
        "`lora_rank`).", examples=["all-linear", ["q_proj", "v_proj"]],
    )
    modules_to_save: ModuleNames | None = Field(
        None, description="Modules trained in full beside the adapters (PEFT's modules_to_save), e.g. "
        '["lm_head"]: a trainable copy of each, the original stays frozen.',
    )
    dora: bool | None = Field(
        None, strict=True, description="DoRA (use_dora): adds one magnitude vector per adapted weight.",
    )
    quantization: plain.Quantization | None = Field(
        None, description="How the frozen base is stored (bitsandbytes, QLoRA): `none` (the model dtype, default), "
        "`int8`, `nf4` or `fp4`; the output head, embeddings and norms stay 16-bit.",
    )
    loss_kernel: plain.LossKernel | None = Field(
        None, description="The causal-LM loss the step runs: `hf` (Transformers' ForCausalLMLoss, default: fp32 "
        "log-softmax and gradients of tokens × vocabulary), `liger_flce` (Liger's fused linear cross-entropy), "
        "`cut_cross_entropy` (cut-cross-entropy) or `chunked_ce` (axolotl's chunked_cross_entropy); recipes set it "
        "from their keys (docs/adapters.md).",
    )
    double_quant: bool | None = Field(
        None, strict=True, description="bnb_4bit_use_double_quant: 4-bit quantization constants quantized again "
        "(about 3 B fewer per 64 weights: 0.37 bit per weight).",
    )
    kbit_prepare: bool | None = Field(
        None, strict=True, description="Whether PEFT's prepare_model_for_kbit_training runs on a quantized base: "
        "`true` (default) casts the weights left unquantized (embeddings, head, norms, biases) to fp32 and the "
        "forward runs in fp32 through them; `false` (axolotl, LLaMA-Factory and TRL's SFT / DPO trainers, "
        "docs/adapters.md) keeps them and the activations in the compute dtype.",
    )
    lora_dropout: float | None = Field(
        None, ge=0, lt=1, description="LoRA's dropout probability (PEFT's lora_dropout; default 0): above 0, each "
        "adapter keeps its own dropped-out input and a mask (1 B per element on a GPU) for backward.",
    )
    autocast_adapter_dtype: bool | None = Field(
        None, strict=True, description="PEFT's autocast_adapter_dtype: `true` (default; PEFT 0.12 on) keeps the LoRA "
        "adapters in fp32 over a bf16 / fp16 base; `false` (and every PEFT before 0.12: LoraLayer.update_layer moves "
        "them to the base weight's dtype) keeps them in the base's dtype: their bytes, gradients, optimizer state and "
        "activations (docs/adapters.md).",
    )
    exclude_modules: ExcludedModules | None = Field(
        None, description="Modules LoRA leaves out (PEFT's exclude_modules): names (a module whose full name is "
        'or ends with ".name"), or {"regex": "..."} matched against the full name.',
    )
    layers_to_transform: LayerIndices | None = Field(
        None, description="PEFT's layers_to_transform: adapt only the decoder layers with these indices (with "
        "lora_targets given as names; the index is the number after the first named segment, or after "
        "layers_pattern).", examples=[[0, 1, 2]],
    )
    layers_pattern: ModuleNames | None = Field(
        None, description="PEFT's layers_pattern: the name(s) before the layer index (\"layers\", \"h\"), for "
        "layers_to_transform.",
    )
    lora_rank_pattern: RankPattern | None = Field(
        None, description="PEFT's rank_pattern: {regex: rank}; the first key matching the end of a module's name "
        "(after a dot) sets its rank instead of lora_rank.", examples=[{"v_proj": 16}],
    )
    lora_target_linear: bool | None = Field(
        None, strict=True, description="Add the name of every linear layer but the output head to lora_targets, as "
        "axolotl's lora_target_linear and LLaMA-Factory's lora_target: all pass them: a list of names, so "
        "layers_to_transform applies, and transformers 5 MoE experts and routers (not nn.Linear) stay out.",
    )
    target_parameters: ModuleNames | None = Field(
        None, description="PEFT's target_parameters: parameters adapted directly (nn.Parameter, e.g. "
        '"mlp.experts.down_proj" of a transformers 5 MoE), matched by name suffix.',
    )
    accelerate_config: str | None = Field(
        None, min_length=1, pattern=r"\S", description="The Accelerate config a recipe is launched with "
        "(`accelerate launch --config_file PATH`), relative to the file that declares it: its world size "
        "(num_processes), distributed_type and mixed_precision fill the recipe's plan (docs/recipes.md).",
        examples=["recipes/accelerate_configs/zero3.yaml"],
    )
    trainer: plain.Trainer | None = Field(
        None, description="What trains, for the peak: `sft` (default: the model's own loss), `dpo` or `kto` (TRL's "
        "DPOTrainer / KTOTrainer: a frozen reference model beside the policy unless it is a PEFT model, DPO's chosen "
        "and rejected rows stacked, TRL's fused LM head), `orpo`, `simpo`, `cpo` (TRL's reference-free trainers: "
        "the logits of the stacked rows) or `grpo` (TRL's GRPOTrainer: its generation and the reference's log-probs "
        "before the loss; with use_vllm the peak is unknown). docs/adapters.md, \"Preference trainers\".",
    )
    precompute_ref_log_probs: bool | None = Field(
        None, strict=True, description="TRL's precompute_ref_log_probs: the reference log-probs are computed before "
        "training, so no reference model and no reference forward in the step.",
    )
    transformers_version: str | None = Field(
        None, pattern=plain.VERSION_PATTERN, description="The Transformers release the training runs (default: the "
        "one installed beside zeromem, else a recipe project's `transformers==` pin, else the newest followed, "
        "5.24): what its causal-LM loss and sdpa layers keep (fp32 logit copies before 4.49, k and v repeated to "
        "every query head before 4.54, o_proj's copy of the attention output in 4.48-4.55; docs/memory-model.md, "
        '"Versions").', examples=["4.51.3"],
    )
    tensor_parallel: int | None = Field(
        None, ge=1, le=MAX_COUNT, strict=True,
        description="Tensor-parallel degree t (Transformers' tp_plan, DeepSpeed AutoTP); default: the config's "
        "`tensor_parallel_size` (axolotl), `parallelism_config_tp_size` (Accelerate) or `tensor_parallel.autotp_size` "
        "(DeepSpeed), else 1.",
    )
    context_parallel: int | None = Field(
        None, ge=1, le=MAX_COUNT, strict=True,
        description="Ring-attention context-parallel degree c (torch CP, axolotl's ring-flash-attn); default: the "
        "config's `context_parallel_size` / `sequence_parallel_degree` (axolotl), `parallelism_config_cp_size` "
        "(Accelerate) or `cp_size` (LLaMA-Factory v1, other than Ulysses), else 1.",
    )
    ulysses: int | None = Field(
        None, ge=1, le=MAX_COUNT, strict=True,
        description="Ulysses sequence-parallel degree u (DeepSpeed ALST); default: the config's "
        "`parallelism_config_sp_size` (Accelerate, sp_backend deepspeed), `sequence_parallel_size` (DeepSpeed) or "
        "`cp_size` with `cp_mode: ulysses` (LLaMA-Factory v1), else 1.",
    )
    expert_parallel: int | None = Field(
        None, ge=1, le=MAX_COUNT, strict=True,
        description="Expert-parallel degree e (routed experts divided by e); default: the config's "
        "`expert_parallel_size` (axolotl), else 1.",
    )
    activation_offload: plain.ActivationOffload | None = Field(
        None, description="What leaves the GPU after a checkpointed forward: `none`, `cpu` (the checkpointed layer "
        "inputs: axolotl `activation_offloading: legacy` / `hidden_states`, LLaMA-Factory `use_unsloth_gc`) or "
        "`cpu_all` (every saved tensor: TRL's OffloadActivations, axolotl `activation_offloading: true` / `disk`); "
        "default: from the config, else none.",
    )
    tiled_mlp: TiledMlp | None = Field(
        None, description="TiledMLP: true (axolotl's default shard count, ceil(sequence / 32768)), false, or the "
        "shard count; default: the config's `tiled_mlp` / `tiled_mlp_num_shards` (axolotl), else off.",
    )


def _plain(model: ZeromemSettingsModel) -> dict:
    """The validated values as settings.py holds them (its own ParametersFromConfig)."""
    values = {name: getattr(model, name) for name in SETTING_NAMES}
    if isinstance(values["parameters"], ParametersFromConfigModel):
        values["parameters"] = plain.ParametersFromConfig(values["parameters"].from_config,
                                                          values["parameters"].revision)
    return values


def construct(values: dict) -> dict:
    """`ZeromemSettingsModel(**values)` through pydantic, as plain values: raises its ValidationError on a bad value."""
    return _plain(ZeromemSettingsModel(**values))


def validate(values: dict) -> tuple[dict, list[SettingProblem]]:
    """Settings from raw values: every problem reported, the valid values kept."""
    try:
        return _plain(ZeromemSettingsModel.model_validate(values)), []
    except ValidationError as error:
        problems = []
        for item in error.errors():
            name = str(item["loc"][0]) if item["loc"] else ""
            unknown = item["type"] == "extra_forbidden"
            message = "unknown setting" if unknown else item["msg"].removeprefix("Value error, ")
            problems.append(SettingProblem(name, message, unknown))
    bad = {problem.name for problem in problems}
    try:
        return _plain(ZeromemSettingsModel.model_validate({k: v for k, v in values.items() if k not in bad})), problems
    except ValidationError:  # pragma: no cover - only valid values are left
        return {}, problems
