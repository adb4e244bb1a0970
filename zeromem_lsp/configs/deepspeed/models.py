"""Pydantic models mirroring the sections DeepSpeed 0.19.8 validates strictly.

Each model reproduces the field names, aliases, types, bounds, enums and defaults that
DeepSpeed's own config classes enforce, so that ``Model.model_validate(section)`` accepts
and rejects the same inputs DeepSpeed does.  Descriptions are our own wording.

Two DeepSpeed behaviours are *not* reproduced inside the models, because they happen
before pydantic sees the data; :mod:`zeromem_lsp.configs.deepspeed.validation` applies them first:

* every strict section drops a key whose value is the string ``"auto"``;
* the deprecated-key rewrite (``cpu_offload`` -> ``offload_optimizer`` ...).

The cross-field rules DeepSpeed checks in validators are reproduced with
:class:`pydantic_core.PydanticCustomError`, whose ``type`` is the issue kind we report.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Union, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .enums import OffloadDevice, QuantType, ZeroStage  # noqa: F401  (re-exported)
from .section_checks import fp16_dynamic_scaling, fp16_integer_only, fp16_loss_scale, zero_cross_field

DEPRECATED = "deprecated"


def _add_unprefixed_names(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Expose the bare name of every ``stage3_*`` aliased field in the JSON Schema too."""
    props = schema.get("properties", {})
    for name, info in model.model_fields.items():
        if info.alias and info.alias != name and info.alias in props and name not in props:
            extra = dict(props[info.alias])
            extra["description"] = (extra.get("description", "") + f" Same setting as `{info.alias}`.").strip()
            props[name] = extra


class StrictSection(BaseModel):
    """Base for strict DeepSpeed sections: unknown keys are refused, names and aliases both accepted."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        use_enum_values=True,
        validate_default=False,
        protected_namespaces=(),
        json_schema_extra=_add_unprefixed_names,
    )


# ------------------------------------------------------------------ zero_optimization


class OffloadParamConfig(StrictSection):
    """`zero_optimization.offload_param`: move ZeRO-3 parameters off the GPU."""

    device: OffloadDevice = Field(
        OffloadDevice.none, description="Memory that holds offloaded parameters: none, cpu or nvme."
    )
    nvme_path: Optional[Path] = Field(None, description="Directory on an NVMe drive used when device is nvme.")
    buffer_count: int = Field(5, ge=0, description="How many staging buffers the NVMe parameter swapper keeps.")
    buffer_size: int = Field(100_000_000, ge=0, description="Elements per NVMe parameter staging buffer.")
    max_in_cpu: int = Field(
        1_000_000_000, ge=0, description="Parameter elements kept in host memory when offloading to NVMe."
    )
    pin_memory: bool = Field(True, description="Use page-locked host memory for faster, asynchronous copies.")


class OffloadOptimizerConfig(StrictSection):
    """`zero_optimization.offload_optimizer`: keep optimizer state (and the step) on CPU or NVMe."""

    device: OffloadDevice = Field(
        OffloadDevice.none, description="Memory that holds optimizer state: none, cpu or nvme."
    )
    nvme_path: Optional[Path] = Field(None, description="Directory on an NVMe drive used when device is nvme.")
    buffer_count: int = Field(4, ge=0, description="Staging buffers for NVMe optimizer-state swapping.")
    pin_memory: bool = Field(True, description="Use page-locked host memory for faster, asynchronous copies.")
    pipeline_read: bool = Field(False, description="Overlap reading the next NVMe tile with the current step.")
    pipeline_write: bool = Field(False, description="Overlap writing the previous NVMe tile with the current step.")
    fast_init: bool = Field(False, description="Speed up optimizer initialisation when offloading to NVMe.")
    ratio: float = Field(
        1.0, ge=0.0, le=1.0, description="Fraction of optimizer state offloaded; below 1 requires ZeRO stage 3."
    )
    super_offload: bool = Field(False, description="High-throughput CPU offload for Superchip systems (stage 3).")
    cpuadam_cores_perc: float = Field(
        0.8, ge=0.0, le=1.0, description="Share of CPU cores the CPU Adam step may use (with super_offload)."
    )


class LeafModuleConfig(StrictSection):
    """`zero_optimization.leaf_module`: modules ZeRO-3 treats as one unit (no hooks inside)."""

    classes: List[str] = Field(
        default_factory=lambda: [
            "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
            "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock",
            "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock",
        ],
        description="Fully qualified class names of leaf modules (a single string is accepted).",
    )
    names: List[str] = Field(default_factory=list, description="Module names treated as leaves.")
    name_suffixes: List[str] = Field(default_factory=list, description="Module name suffixes treated as leaves.")

    @model_validator(mode="before")
    @classmethod
    def _single_string_is_a_list(cls, values: Any) -> Any:
        if values is None:
            return {}
        if isinstance(values, dict):
            out = dict(values)
            for key in ("classes", "names", "name_suffixes"):
                if isinstance(out.get(key), str):
                    out[key] = [out[key]]
            return out
        raise ValueError("leaf_module must be an object")


class ZenFlowConfig(StrictSection):
    """`zero_optimization.zenflow`: ZenFlow selective-update offloading."""

    topk_ratio: float = Field(0.1, gt=0.0, lt=1.0, description="Share of important gradient columns kept on GPU.")
    select_strategy: str = Field("auto", description='How important columns are reselected: "auto", "step" or "epoch".')
    select_interval: Union[str, int] = Field("auto", description='Reselection interval: "auto" or an integer.')
    update_interval: Union[str, int] = Field(
        "auto", description='Interval for applying the remaining gradients: "auto" or an integer >= 1.'
    )
    overlap_step: bool = Field(False, description="Overlap the CPU optimizer step with forward/backward.")
    offload: bool = Field(False, description="Offload the selective optimizer state to CPU.")
    auto_ratio: float = Field(0.99, ge=0.0, le=1.0, description='Threshold used by the "auto" strategy.')
    full_warm_up_rounds: int = Field(0, description="Initial rounds in which every gradient is applied.")
    pt_reserved_cores_perc: float = Field(
        0.5, ge=0.0, le=1.0, description="Share of CPU cores left to PyTorch threads."
    )
    steps_per_epoch: Optional[int] = Field(None, description="Set by DeepSpeed at run time; leave unset.")

    @model_validator(mode="after")
    def _check(self) -> "ZenFlowConfig":
        if self.select_strategy not in ("auto", "step", "epoch"):
            raise ValueError('select_strategy must be "auto", "step" or "epoch"')
        for name in ("select_interval", "update_interval"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "auto":
                raise ValueError(f'{name} given as a string must be "auto"')
        if isinstance(self.update_interval, int) and self.update_interval < 1:
            raise ValueError("update_interval must be at least 1")
        if not isinstance(self.pt_reserved_cores_perc, float):
            raise ValueError("pt_reserved_cores_perc must be a float")
        return self


def _dep(replacement: Optional[str]) -> dict[str, Any]:
    return {DEPRECATED: True, "replacement": replacement}


def deprecated_pairs(model: type[BaseModel]) -> list[tuple[str, str]]:
    """(deprecated field, its replacement) for every deprecated field that has one."""
    pairs: list[tuple[str, str]] = []
    for old, info in model.model_fields.items():
        extra = info.json_schema_extra
        replacement = extra.get("replacement") if isinstance(extra, dict) and extra.get(DEPRECATED) else None
        if isinstance(replacement, str) and replacement:  # `_dep` writes a str or None
            pairs.append((old, replacement))
    return pairs


class ZeroConfig(StrictSection):
    """`zero_optimization`: ZeRO partitioning of optimizer state, gradients and parameters."""

    stage: ZeroStage = Field(
        ZeroStage.disabled, description="ZeRO stage: 0 off, 1 optimizer state, 2 + gradients, 3 + parameters."
    )
    contiguous_gradients: bool = Field(True, description="Copy gradients into one contiguous buffer as they arrive.")
    reduce_scatter: bool = Field(True, description="Average gradients with reduce-scatter instead of all-reduce.")
    reduce_bucket_size: int = Field(
        500_000_000, gt=0, description="Elements reduced per bucket; must be greater than 0."
    )
    use_multi_rank_bucket_allreduce: bool = Field(
        True, description="Merge the reduce buckets of all ranks into a single all-reduce."
    )
    allgather_partitions: bool = Field(
        True, description="Gather updated partitions with all-gather rather than broadcasts."
    )
    allgather_bucket_size: int = Field(500_000_000, ge=0, description="Elements all-gathered per bucket.")
    overlap_comm: Optional[bool] = Field(
        None, description="Overlap gradient reduction with the backward pass (default: true only for stage 3)."
    )
    compute_grad_norm: bool = Field(
        True, description="Compute the global gradient norm at each step; false is allowed only with stage 1 or 2."
    )
    load_from_fp32_weights: bool = Field(
        True, description="Rebuild fp32 master weights from the checkpoint's fp32 copy rather than 16-bit weights."
    )
    elastic_checkpoint: bool = Field(False, description="Legacy elastic checkpoints (unsupported with stage 3).")
    offload_param: Optional[OffloadParamConfig] = Field(
        None, description="Parameter offload to CPU/NVMe; only used with stage 3."
    )
    offload_optimizer: Optional[OffloadOptimizerConfig] = Field(
        None, description="Optimizer-state offload to CPU/NVMe; used with stages 1-3."
    )
    zenflow: Optional[ZenFlowConfig] = Field(None, description="ZenFlow selective-update settings.")
    sub_group_size: int = Field(
        1_000_000_000, ge=0, description="Parameter elements processed per optimizer tile (offload / Infinity)."
    )
    cpu_offload_param: Optional[bool] = Field(
        None, description="Deprecated: use offload_param with device cpu.", json_schema_extra=_dep("offload_param")
    )
    cpu_offload_use_pin_memory: Optional[bool] = Field(
        None,
        description="Deprecated: set pin_memory inside offload_param / offload_optimizer.",
        json_schema_extra=_dep(None),
    )
    cpu_offload: Optional[bool] = Field(
        None,
        description="Deprecated: use offload_optimizer with device cpu.",
        json_schema_extra=_dep("offload_optimizer"),
    )
    prefetch_bucket_size: int = Field(
        50_000_000, ge=0, alias="stage3_prefetch_bucket_size",
        description="Stage 3: parameter elements fetched ahead of use.",
    )
    param_persistence_threshold: int = Field(
        100_000, ge=0, alias="stage3_param_persistence_threshold",
        description="Stage 3: parameters smaller than this many elements stay unpartitioned.",
    )
    model_persistence_threshold: int = Field(
        sys.maxsize, ge=0, alias="stage3_model_persistence_threshold",
        description="Stage 3: cap on the total elements of unpartitioned (persistent) parameters.",
    )
    max_live_parameters: int = Field(
        1_000_000_000, ge=0, alias="stage3_max_live_parameters",
        description="Stage 3: parameter elements kept gathered on a GPU before release.",
    )
    max_reuse_distance: int = Field(
        1_000_000_000, ge=0, alias="stage3_max_reuse_distance",
        description="Stage 3: keep a parameter gathered if it is reused within this many elements.",
    )
    gather_16bit_weights_on_model_save: bool = Field(
        False, alias="stage3_gather_16bit_weights_on_model_save",
        description="Stage 3: gather the full 16-bit weights when saving the model.",
    )
    module_granularity_threshold: int = Field(
        0, alias="stage3_module_granularity_threshold",
        description="Stage 3: modules finer than this granularity are fetched as one unit (0 = off).",
    )
    use_all_reduce_for_fetch_params: bool = Field(
        False, alias="stage3_use_all_reduce_for_fetch_params",
        description="Stage 3: fetch module parameters with all-reduce instead of all-gather.",
    )
    allgather_sequential: bool = Field(
        False, alias="stage3_allgather_sequential",
        description="Stage 3: all-gather parameters one by one instead of in buckets.",
    )
    stage3_gather_fp16_weights_on_model_save: bool = Field(
        False,
        description="Deprecated: use gather_16bit_weights_on_model_save.",
        json_schema_extra=_dep("gather_16bit_weights_on_model_save"),
    )
    ignore_unused_parameters: bool = Field(True, description="Stage 2: tolerate parameters that get no gradient.")
    legacy_stage1: bool = Field(False, description="Use the old stage 1 implementation.")
    round_robin_gradients: bool = Field(
        False, description="Stages 1-2 with CPU offload: spread gradient copies across ranks."
    )
    parameter_alignment: bool = Field(
        False, description="Stages 1-2: pad flat buffers so each parameter starts 16-byte aligned."
    )
    zero_hpz_partition_size: int = Field(1, ge=0, description="ZeRO++ hpZ: ranks in the secondary partition group.")
    zero_quantized_weights: bool = Field(False, description="ZeRO++ qwZ: quantize weights for all-gather.")
    zero_quantized_nontrainable_weights: bool = Field(
        False, description="Store frozen (non-trainable) weights quantized, e.g. for LoRA."
    )
    zero_quantized_gradients: bool = Field(False, description="ZeRO++ qgZ: quantize gradients for reduction.")
    memory_efficient_linear: bool = Field(True, description="Stage 3: use the memory-efficient linear layer.")
    pipeline_loading_checkpoint: bool = Field(False, description="Stage 3: load checkpoints in pipeline mode.")
    override_module_apply: bool = Field(True, description="Stage 3: patch nn.Module.apply to gather parameters.")
    log_trace_cache_warnings: bool = Field(False, description="Stage 3: log trace-cache invalidation warnings.")
    enable_sanity_checks: bool = Field(False, description="Run extra internal consistency checks (debugging).")
    save_muon_momentum_buffer_in_memory: bool = Field(
        False, description="Stage 3 + NVMe with Muon: keep the momentum buffer in memory."
    )
    leaf_module: LeafModuleConfig = Field(
        default_factory=LeafModuleConfig, description="Modules ZeRO-3 treats as leaves."
    )

    @model_validator(mode="after")
    def _cross_field(self) -> "ZeroConfig":
        problem = zero_cross_field(int(self.stage), self.compute_grad_norm, self.offload_optimizer,
                                   self.model_fields_set, deprecated_pairs(type(self)))
        if problem is not None:
            raise PydanticCustomError(*problem)
        return self


# --------------------------------------------------------------------- precision


class FP16Config(StrictSection):
    """`fp16`: mixed precision with float16 and loss scaling."""

    enabled: bool = Field(False, description="Train in float16 mixed precision.")
    auto_cast: bool = Field(False, description="Cast the model inputs to float16 automatically.")
    loss_scale: float = Field(0.0, description="Static loss scale; 0 selects dynamic loss scaling.")
    initial_scale_power: int = Field(16, description="Dynamic scaling starts at 2**initial_scale_power.")
    loss_scale_window: int = Field(1000, description="Steps without overflow before the dynamic scale grows.")
    hysteresis: int = Field(2, description="Overflows tolerated before the dynamic scale shrinks.")
    consecutive_hysteresis: bool = Field(False, description="Refill hysteresis after every step without overflow.")
    min_loss_scale: int = Field(1, description="Lower bound of the dynamic loss scale.")
    fp16_master_weights_and_grads: bool = Field(
        False, description="Keep master weights and gradients in fp16 (ZeRO stages 1-3 only)."
    )

    @field_validator("loss_scale", mode="before")
    @classmethod
    def _loss_scale(cls, value: Any) -> float:
        return fp16_loss_scale(value)

    @field_validator("loss_scale_window", "min_loss_scale", mode="before")
    @classmethod
    def _integer_only(cls, value: Any, info: Any) -> Any:
        return fp16_integer_only(info.field_name, value)

    @model_validator(mode="after")
    def _dynamic_scaling(self) -> "FP16Config":
        problem = fp16_dynamic_scaling(self.enabled, self.loss_scale, self.loss_scale_window, self.min_loss_scale)
        if problem is not None:
            raise PydanticCustomError(*problem)
        return self


class BF16Config(StrictSection):
    """`bf16` (legacy name `bfloat16`): mixed precision with bfloat16."""

    enabled: bool = Field(False, description="Train in bfloat16 mixed precision.")
    immediate_grad_update: bool = Field(False, description="Apply gradient updates immediately.")
    check_grad_overflow: bool = Field(True, description="Skip the optimizer step when gradients overflow.")
    bf16_master_weights_and_grads: bool = Field(
        False, description="Keep ZeRO master weights and gradients in bf16 (ZeRO stages 1-3 only)."
    )
    bf16_optimizer_states: bool = Field(
        False, description="Keep optimizer state in bf16; needs bf16_master_weights_and_grads and ZeRO 1-3."
    )


# ------------------------------------------------------------------ other strict sections


class HybridEngineConfig(StrictSection):
    """`hybrid_engine`: switch between training and generation (RLHF)."""

    enabled: bool = Field(False, description="Enable the hybrid training/inference engine.")
    max_out_tokens: int = Field(512, gt=0, description="Maximum tokens generated in inference mode.")
    inference_tp_size: int = Field(1, description="Tensor-parallel degree used for generation.")
    release_inference_cache: bool = Field(False, description="Free the inference KV cache after generation.")
    pin_parameters: bool = Field(True, description="Pin gathered parameters in memory during generation.")
    tp_gather_partition_size: int = Field(8, description="Partition size when gathering tensor-parallel weights.")
    enable_cuda_graph: bool = Field(False, description="Capture generation in CUDA graphs.")


CompilePass = Literal["z1", "z3", "autosp", "autotp"]


class CompileConfig(StrictSection):
    """`compile`: DeepCompile graph optimisations."""

    deepcompile: bool = Field(False, description="Turn on DeepCompile.")
    autoep_non_moe: bool = Field(False, description="Compile the non-MoE parents of AutoEP layers.")
    free_activation: bool = Field(False, description="Free large activations eagerly.")
    free_activation_threshold: int = Field(10 * 1024 * 1024, description="Bytes above which activations are freed.")
    offload_activation: bool = Field(False, description="Offload saved activations to pinned host memory.")
    offload_activation_pin_memory: bool = Field(True, description="Pin host buffers used for activation offload.")
    offload_opt_states: bool = Field(False, description="Offload optimizer states to host between steps.")
    double_buffer: bool = Field(True, description="Use double buffering.")
    symmetric_memory: bool = Field(False, description="Use symmetric memory.")
    debug_log: bool = Field(False, description="Dump compiled graphs for debugging.")
    offload_parameters: bool = Field(False, description="Offload parameters.")
    sync_before_reduce: bool = Field(False, description="Synchronise before each reduce.")
    sync_after_reduce: bool = Field(False, description="Synchronise after each reduce.")
    sync_before_allgather: bool = Field(False, description="Synchronise before each all-gather.")
    sync_after_allgather: bool = Field(False, description="Synchronise after each all-gather.")
    keep_int_input_tensors: bool = Field(True, description="Keep real values of integer input tensors.")
    keep_all_input_tensors: bool = Field(False, description="Keep real values of all input tensors.")
    passes: Optional[List[CompilePass]] = Field(None, description="Optimisation passes to compose.")


class WeightQuantizationConfig(StrictSection):
    """`weight_quantization`: quantize weights at load or after init."""

    enabled: bool = Field(True, description="Enable weight quantization.")
    num_bits: int = Field(8, description="Bits per quantized weight.")
    q_type: QuantType = Field(QuantType.symmetric, description="Quantization scheme: symmetric or asymmetric.")
    q_groups: int = Field(1, description="Number of quantization groups.")
    quantized_initialization: Dict[str, Any] = Field(
        default_factory=dict, description="Options for quantizing while the model is built."
    )
    post_init_quant: Dict[str, Any] = Field(
        default_factory=dict, description="Options for quantizing after the model is built."
    )


class TensorBoardConfig(StrictSection):
    """`tensorboard`: log metrics to TensorBoard."""

    enabled: bool = Field(False, description="Write TensorBoard logs.")
    output_path: str = Field("", description="Directory for the logs (default: under the launch directory).")
    job_name: str = Field("DeepSpeedJobName", description="Sub-directory name for this job.")


class WandbConfig(StrictSection):
    """`wandb`: log metrics to Weights & Biases."""

    enabled: bool = Field(False, description="Log to Weights & Biases.")
    group: Optional[str] = Field(None, description="Run group.")
    team: Optional[str] = Field(None, description="Team (entity).")
    project: str = Field("deepspeed", description="Project name.")


class CSVMonitorConfig(StrictSection):
    """`csv_monitor`: log metrics to CSV files."""

    enabled: bool = Field(False, description="Write CSV logs.")
    output_path: str = Field("", description="Directory for the CSV files.")
    job_name: str = Field("DeepSpeedJobName", description="Sub-directory name for this job.")


class CometConfig(StrictSection):
    """`comet`: log metrics to Comet."""

    enabled: bool = Field(False, description="Log to Comet.")
    samples_log_interval: int = Field(100, description="Samples between metric uploads.")
    project: Optional[str] = Field(None, description="Comet project.")
    workspace: Optional[str] = Field(None, description="Comet workspace.")
    api_key: Optional[str] = Field(None, description="Comet API key (prefer the environment variable).")
    experiment_name: Optional[str] = Field(None, description="Experiment name.")
    experiment_key: Optional[str] = Field(None, description="Key of an existing experiment.")
    online: Optional[bool] = Field(None, description="Upload to the Comet server (true) or log offline.")
    mode: Optional[str] = Field(None, description='Start mode: "get", "create" or "get_or_create".')


class CommsLoggerConfig(StrictSection):
    """`comms_logger`: log collective communication calls."""

    enabled: bool = Field(False, description="Log communication operations.")
    prof_all: bool = Field(True, description="Profile every communication operation.")
    prof_ops: List[Any] = Field(default_factory=list, description="Only profile these operations.")
    verbose: bool = Field(False, description="Print every logged operation.")
    debug: bool = Field(False, description="Include the calling function in the log.")


class ThroughputTimerConfig(StrictSection):
    """`timers.throughput`: throughput timer."""

    enabled: bool = Field(True, description="Measure throughput.")
    synchronized: bool = Field(True, description="Synchronise the device before reading the timer.")


class TPSubConfig(StrictSection):
    """`tensor_parallel.tp`: tensor-parallel group settings."""

    tp_size: int = Field(1, description="Number of devices the model is split across.")
    tp_grain_size: int = Field(1, description="Granularity of the MLP / lm_head split.")
    mpu: Any = Field(None, description="Model-parallel unit object (set from code, not JSON).")
    tp_group: Any = Field(None, description="Process group for tensor parallelism (set from code).")


class TensorParallelConfig(StrictSection):
    """`tensor_parallel`: AutoTP training settings (DeepSpeed refuses unknown keys here)."""

    dtype: Any = Field(
        None, description="Model dtype; DeepSpeed expects a torch.dtype object, so a JSON value is refused."
    )
    autotp_size: int = Field(0, description="AutoTP degree (0 disables AutoTP).")
    tp_overlap_comm: bool = Field(False, description="Overlap tensor-parallel all-reduce with computation.")
    vocab_parallel_lm_head: Optional[bool] = Field(None, description="Shard the vocabulary of the LM head.")
    vocab_parallel_ce_backend: Literal["torch", "liger"] = Field(
        "torch", description="Cross-entropy backend for the vocabulary-parallel head."
    )
    tensor_parallel: TPSubConfig = Field(  # no Optional: DeepSpeed refuses null here (the default is not validated)
        cast(TPSubConfig, None), alias="tp", description="Tensor-parallel group settings."
    )
    injection_policy_tuple: Optional[tuple] = Field(None, description="Injection policy (set from code).")
    partition_config: Optional[Dict[str, Any]] = Field(None, description="Custom AutoTP layer partitioning rules.")
    preset_model: Optional[str] = Field(None, description="Built-in AutoTP preset, e.g. llama or qwen2.")
    keep_module_on_host: bool = Field(False, description="Keep loaded checkpoint tensors on the host.")
    replace_with_kernel_inject: bool = Field(
        False, alias="kernel_inject", description="Inject DeepSpeed inference kernels."
    )

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype_is_a_torch_object(cls, value: Any) -> Any:
        raise ValueError("DeepSpeed expects a torch.dtype object here, which a JSON config cannot express")


# ---------------------------------------------------------------- top level (non-strict)


class OptimizerConfig(BaseModel):
    """`optimizer`: the optimizer DeepSpeed builds."""

    model_config = ConfigDict(extra="allow")
    type: Optional[str] = Field(
        None, description="Optimizer name: a DeepSpeed one (case-insensitive) or a torch.optim class name."
    )
    params: Optional[Dict[str, Any]] = Field(None, description="Keyword arguments passed to the optimizer.")
    legacy_fusion: bool = Field(False, description="Use the legacy fused optimizer path.")


class SchedulerConfig(BaseModel):
    """`scheduler`: the learning-rate scheduler DeepSpeed builds."""

    model_config = ConfigDict(extra="allow")
    type: Optional[str] = Field(None, description="Scheduler name, e.g. WarmupLR, WarmupDecayLR, OneCycle.")
    params: Optional[Dict[str, Any]] = Field(None, description="Keyword arguments passed to the scheduler.")


class DataTypesConfig(BaseModel):
    """`data_types`: dtypes used for gradient accumulation and storage."""

    model_config = ConfigDict(extra="allow")
    grad_accum_dtype: Optional[Literal["fp32", "fp16", "bf16"]] = Field(
        None, description="Dtype in which gradients are accumulated."
    )
    param_dtype: Optional[str] = Field(None, description="Dtype of the model parameters (bf16, fp16 or fp32).")
    buffer_dtype: Optional[str] = Field(None, description="Dtype of module buffers (None keeps their dtype).")
    keep_in_fp32_modules: Union[Literal["auto"], List[str]] = Field(
        "auto", description='Name patterns of modules whose buffers stay fp32, or "auto".'
    )


Number = Union[int, float]


class DeepSpeedTopLevel(BaseModel):
    """A DeepSpeed config file. Unknown top-level keys are ignored by DeepSpeed."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())

    train_batch_size: Optional[Union[int, Literal["auto"]]] = Field(
        None, description="Global batch: micro batch x gradient accumulation x data-parallel world size."
    )
    train_micro_batch_size_per_gpu: Optional[Union[int, Literal["auto"]]] = Field(
        None, description="Samples per GPU per forward/backward pass."
    )
    gradient_accumulation_steps: Optional[Union[int, Literal["auto"]]] = Field(
        None, description="Micro batches accumulated before each optimizer step."
    )
    gradient_clipping: Union[Number, Literal["auto"]] = Field(
        1.0, description="Clip gradients to this global norm (0 disables)."
    )
    optimizer: Optional[OptimizerConfig] = Field(None, description="Optimizer built by DeepSpeed.")
    scheduler: Optional[SchedulerConfig] = Field(None, description="Learning-rate scheduler built by DeepSpeed.")
    zero_optimization: Union[ZeroConfig, bool, None] = Field(
        None, description="ZeRO settings (legacy: true means stage 1)."
    )
    fp16: Optional[FP16Config] = Field(None, description="float16 mixed precision.")
    bf16: Optional[BF16Config] = Field(None, description="bfloat16 mixed precision.")
    bfloat16: Optional[BF16Config] = Field(
        None, description="Legacy name of bf16 (used only when bf16 is absent).", json_schema_extra=_dep("bf16")
    )
    data_types: Optional[DataTypesConfig] = Field(None, description="Gradient accumulation and storage dtypes.")
    communication_data_type: Optional[str] = Field(
        None, description="Dtype for gradient communication: fp16, bf16 or fp32 (case-insensitive)."
    )
    seq_parallel_communication_data_type: Optional[str] = Field(
        "fp32", description="Dtype for sequence-parallel communication: fp16, bf16 or fp32."
    )
    prescale_gradients: bool = Field(False, description="Scale gradients before all-reduce instead of after.")
    gradient_predivide_factor: Number = Field(1.0, description="Divide gradients by this before averaging.")
    gradient_allreduce_op: Literal["mean", "sum"] = Field(
        "mean", description="How gradients are combined across ranks; sum is not allowed with ZeRO-3."
    )
    steps_per_print: Optional[Number] = Field(None, description="Print progress every this many steps.")
    wall_clock_breakdown: bool = Field(False, description="Time forward, backward and step separately.")
    memory_breakdown: bool = Field(False, description="Report memory use at each step.")
    dump_state: bool = Field(False, description="Print the engine state after initialisation.")
    disable_python_gc: bool = Field(False, description="Disable Python's garbage collector during training.")
    disable_allgather: bool = Field(False, description="Disable all-gather (debugging).")
    zero_allow_untested_optimizer: bool = Field(
        False, description="Allow ZeRO with an optimizer DeepSpeed has not validated."
    )
    zero_force_ds_cpu_optimizer: bool = Field(
        True, description="With CPU offload, require DeepSpeed's CPU optimizer."
    )
    managed_gradient_accumulation: bool = Field(True, description="Let the engine manage gradient accumulation.")
    torch_autocast: Optional[Dict[str, Any]] = Field(None, description="torch.autocast settings (enabled, dtype).")
    activation_checkpointing: Optional[Dict[str, Any]] = Field(None, description="Activation checkpointing.")
    flops_profiler: Optional[Dict[str, Any]] = Field(None, description="FLOPs profiler settings.")
    autotuning: Optional[Dict[str, Any]] = Field(None, description="Autotuner settings.")
    aio: Optional[Dict[str, Any]] = Field(None, description="Asynchronous I/O settings for NVMe offload.")
    checkpoint: Optional[Dict[str, Any]] = Field(None, description="Checkpoint saving and loading options.")
    data_efficiency: Optional[Dict[str, Any]] = Field(None, description="Data sampling / routing efficiency.")
    pipeline: Optional[Dict[str, Any]] = Field(None, description="Pipeline-parallel engine options.")
    tensor_parallel: Optional[TensorParallelConfig] = Field(None, description="AutoTP training settings.")
    expert_parallel: Optional[Dict[str, Any]] = Field(None, description="AutoEP expert-parallel settings.")
    hybrid_engine: Optional[HybridEngineConfig] = Field(None, description="Hybrid training/inference engine.")
    compile: Optional[CompileConfig] = Field(None, description="DeepCompile settings.")
    weight_quantization: Optional[WeightQuantizationConfig] = Field(None, description="Weight quantization.")
    tensorboard: Optional[TensorBoardConfig] = Field(None, description="TensorBoard monitor.")
    wandb: Optional[WandbConfig] = Field(None, description="Weights & Biases monitor.")
    csv_monitor: Optional[CSVMonitorConfig] = Field(None, description="CSV monitor.")
    comet: Optional[CometConfig] = Field(None, description="Comet monitor.")
    comms_logger: Optional[CommsLoggerConfig] = Field(None, description="Communication logger.")
    timers: Optional[Dict[str, Any]] = Field(None, description="Timers; `throughput` holds the throughput timer.")
    datastates_ckpt: Optional[Dict[str, Any]] = Field(None, description="DataStates asynchronous checkpointing.")
    dataloader_drop_last: bool = Field(False, description="Drop the last incomplete batch in DeepSpeed's loader.")
    log_level: Optional[str] = Field(None, description="Logging level for DeepSpeed.")
    use_data_before_expert_parallelism: bool = Field(
        False, description="Lay out data-parallel groups before expert-parallel ones."
    )
    sequence_parallel_size: Optional[int] = Field(
        None, description="Sequence-parallel degree; divides the world size for batch arithmetic."
    )
    vocabulary_size: Optional[int] = Field(None, description="Vocabulary size (a warning if not a multiple of 8).")
    allgather_size: Optional[int] = Field(
        None, description='Legacy: all-gather bucket size used with "zero_optimization": true.'
    )
