"""The inputs of the peak for one document: the config's own values, then the resolved zeromem settings.

A value the training config sets (train_micro_batch_size_per_gpu, per_device_train_batch_size,
max_seq_length, gradient_checkpointing, ...) is what will run, so it wins; the resolved settings
(configs/layers.py: command line, the file's block, project, editor) supply what the config does not
say, and replace library defaults. Every input keeps its origin. Called by planner.build, so a plan
is built once with its peak.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, overload

from zeromem_lsp.configs.layers import Resolved
from zeromem_lsp.configs.image_tokens import Processor
from zeromem_lsp.configs.loss_kernels import LossRequest, applied
from zeromem_lsp.configs.model_config import ModelShape, ParameterCount, UnsupportedModel, model_shape_from_text
from zeromem_lsp.configs.parallelism import AXOLOTL_TILE_TOKENS, SETTINGS, Parallelism, axolotl_shards, parallelism_of
from zeromem_lsp.configs.training import TrainingSetup
from zeromem_lsp.configs.versions import installed
from zeromem_lsp.configs.workload import Workload
from zeromem_lsp.memory.adapter_plan import AdapterBreakdown, lora_peak
from zeromem_lsp.configs.settings_values import GRPO_KEYS
from zeromem_lsp.memory.grpo import MAX_COMPLETION_LENGTH
from zeromem_lsp.memory.peak import PeakInputs
from zeromem_lsp.memory.plan import Inputs
from zeromem_lsp.provenance import Given, Origin


class ModelRead(NamedTuple):
    """What the config.json of `parameters.from_config` gave: the count and the activation shape."""

    counted: ParameterCount | None = None
    shape: ModelShape | None = None
    shape_problem: str | None = None
    path: str | None = None
    config: dict[str, Any] | None = None  # the config.json itself: LoRA's targets are its linear layers (memory/adapters.py)
    freeze_note: str | None = None  # a vision-language model under a recipe's freeze keys: which parts they freeze
    processor: Processor | None = None  # a composite's image processor config as read (configs/processor_config.py)


def read_model(text: str, counted: ParameterCount, path: str) -> ModelRead:
    config = json.loads(text)  # counted already, so it parses
    try:
        return ModelRead(counted, model_shape_from_text(text), None, path, config)
    except UnsupportedModel as error:
        return ModelRead(counted, None, f"{path}: {error}", path, config)


class PeakSource(NamedTuple):
    """What the peak needs beside the model state: the workload as written, the DeepSpeed setup, the model."""

    workload: Workload = Workload()
    setup: TrainingSetup | None = None
    model: ModelRead = ModelRead()


@overload
def _pick(given: Given | None, name: str, resolved: Resolved, default: Given) -> Given: ...


@overload
def _pick(given: Given | None, name: str, resolved: Resolved, default: None = None) -> Given | None: ...


def _pick(given: Given | None, name: str, resolved: Resolved, default: Given | None = None) -> Given | None:
    """The config's value unless it is only a library default (or a flag overrides it); else the setting `name`;
    else `default`."""
    if given is not None and not given.note.endswith("default") and not resolved.commanded(name):
        return given
    value = getattr(resolved.settings, name)
    if value is not None:
        return Given.of(value, resolved.origin(name) or Origin(f"zeromem.{name}"))
    return given if given is not None else default


def _derived_micro_batch(setup: TrainingSetup | None, world_size: int) -> Given | None:
    """train_batch_size / (gradient_accumulation_steps × world size), when it divides."""
    if setup is None or setup.train_batch_size is None or setup.gradient_accumulation_steps is None:
        return None
    micro, rest = divmod(setup.train_batch_size, setup.gradient_accumulation_steps * world_size)
    if rest or micro < 1:
        return None
    return Given(micro, f"train_batch_size / (gradient_accumulation_steps × world size) = "
                 f"{setup.train_batch_size} / ({setup.gradient_accumulation_steps} × {world_size})")


def _derived_accumulation(setup: TrainingSetup | None, world_size: int) -> Given | None:
    """DeepSpeed's own when the config leaves it out (deepspeed/runtime/config.py `_set_batch_related_parameters`):
    train_batch_size // train_micro_batch_size_per_gpu // world size; 1 beside train_batch_size alone."""
    if setup is None or setup.gradient_accumulation_steps is not None or setup.train_batch_size is None:
        return None
    if setup.micro_batch_size is None:
        return Given(1, "gradient_accumulation_steps absent beside train_batch_size alone: DeepSpeed's 1")
    steps = setup.train_batch_size // setup.micro_batch_size // world_size
    if steps < 1:
        return None
    return Given(steps, f"train_batch_size // train_micro_batch_size_per_gpu // world size = "
                 f"{setup.train_batch_size} // {setup.micro_batch_size} // {world_size}")


def step_choices(family: str, resolved: Resolved, precision: str | None,
                 setup: TrainingSetup | None = None) -> tuple[Given, Given | None, Given]:
    """(engine, param_dtype, optimizer_impl) for the peak: a setting (flag, block, project, editor) wins; else
    the engine the config is, the weights in the stored precision (fp32 shards under FSDP), and torch's foreach
    AdamW (DeepSpeed's FusedAdam for a ds_config `optimizer` section). A setting that contradicts the config
    says so in its note."""
    settings = resolved.settings
    engine = Given(family, f"default: the config is {family}")
    if settings.engine is not None:
        origin = resolved.origin("engine") or Origin("zeromem.engine")
        note = origin.note if settings.engine == family else f"{origin.note} (overrides {family}, which the config is)"
        engine = Given(settings.engine, note, origin.path)
    param_dtype = Given(precision, f"default: the stored precision under {engine.value}") if precision else None
    if settings.param_dtype is not None:
        param_dtype = Given.of(settings.param_dtype, resolved.origin("param_dtype") or Origin("zeromem.param_dtype"))
    impl = Given("foreach", "default: torch AdamW's foreach implementation (what runs on a GPU)")
    if engine.value == "deepspeed" and setup is not None and setup.optimizer_path is not None:
        fused = {"lion": "FusedLion", "lamb": "FusedLamb"}.get(str(setup.optimizer), "FusedAdam")
        impl = Given("fused", f"DeepSpeed's {fused} for the config's optimizer section", setup.optimizer_path)
        if setup.optimizer == "adagrad":  # deepspeed/runtime/engine.py `_configure_basic_optimizer`
            impl = Given("foreach", "torch Adagrad for the config's optimizer section (its foreach path on a GPU)",
                         setup.optimizer_path)
    if settings.optimizer_impl is not None:
        impl = Given.of(settings.optimizer_impl, resolved.origin("optimizer_impl") or Origin("zeromem.optimizer_impl"))
    return engine, param_dtype, impl


#: What runs when nothing names an FSDP version (`estimate --engine fsdp`, a non-FSDP config with engine fsdp):
#: Transformers' TrainingArguments default (transformers 5.24 training_args.py `_process_fsdp_args`), which is also
#: the answer `accelerate config` offers first (accelerate 1.16 commands/config/cluster.py).
DEFAULT_FSDP_VERSION = Given(2, "default: FSDP2 (Transformers' TrainingArguments default, transformers 5.24)")


def fsdp_version(config: Given | None, resolved: Resolved) -> Given:
    """The FSDP version the step runs, with its origin: a command-line flag; else the version the config writes;
    else the `fsdp_version` setting (block, project, editor); else the config's loader default (`config` with a
    "default" note); else DEFAULT_FSDP_VERSION."""
    written = config is not None and not config.note.startswith("default")
    value = resolved.settings.fsdp_version
    if value is not None and (resolved.commanded("fsdp_version") or not written):
        origin = resolved.origin("fsdp_version") or Origin("zeromem.fsdp_version")
        if config is not None and written and value != config.value:
            return Given(value, f"{origin.note} (overrides {config.note})", origin.path)
        return Given.of(value, origin)
    return config if config is not None else DEFAULT_FSDP_VERSION


def peak_inputs(source: PeakSource, resolved: Resolved, inputs: Inputs, precision_origin: Origin | None,
                family: str = "deepspeed", version: Given | None = None) -> PeakInputs:
    """Every input of the peak, each with its origin, for a plan of these `inputs`. `version`: the FSDP version
    the config gives (`fsdp_version`), resolved here when the step is FSDP's."""
    workload, settings = source.workload, resolved.settings
    micro = _pick(workload.micro_batch, "micro_batch", resolved) or _derived_micro_batch(source.setup,
                                                                                        inputs.world_size)
    precision = inputs.per_parameter.precision if inputs.per_parameter is not None else settings.precision
    if inputs.adapter is not None:
        precision = inputs.adapter.precision
    origin = precision_origin or resolved.origin("precision") or Origin("zeromem.precision")
    dtype = Given.of(precision, origin) if precision else None
    if workload.compute_dtype is not None:  # mixed precision: activations and gathered layers in the compute dtype
        given = workload.compute_dtype
        dtype = Given(given.value, f"{given.note} (mixed-precision compute)", given.path)
    model = source.model
    engine, param_dtype, impl = step_choices(family, resolved, precision, source.setup)
    accumulation = _pick(workload.accumulation or _derived_accumulation(source.setup, inputs.world_size),
                         "gradient_accumulation_steps", resolved, PeakInputs.gradient_accumulation_steps)
    return PeakInputs(
        engine=engine, param_dtype=param_dtype, optimizer_impl=impl,
        fsdp_version=fsdp_version(version, resolved) if engine.value == "fsdp" else None,
        loss_kernel=_pick(applied(workload.loss, model.shape.model_type if model.shape else None)
                          if isinstance(workload.loss, LossRequest) else None, "loss_kernel", resolved, PeakInputs.loss_kernel),
        shape=model.shape,
        shape_problem=model.shape_problem,
        sequence_length=_pick(workload.sequence_length, "sequence_length", resolved),
        micro_batch=micro,
        gradient_accumulation_steps=accumulation,
        gradient_checkpointing=_pick(workload.checkpointing, "gradient_checkpointing", resolved,
                                     PeakInputs.gradient_checkpointing),
        attention=_pick(None, "attention", resolved, PeakInputs.attention),
        dtype=dtype,
        reserved=_pick(None, "reserved", resolved, PeakInputs.reserved),
        zero=dict(workload.zero),
        parameters=inputs.parameters,
        ranks=inputs.world_size,
        optimizer=(inputs.per_parameter.optimizer_name if inputs.per_parameter is not None
                   else inputs.adapter.optimizer if inputs.adapter is not None else "adamw"),
        lora=lora_peak(inputs.adapter, str(dtype.value) if dtype is not None else None),
        kbit_prepare=_kbit_prepare(inputs),
        transformers_version=_transformers_version(workload, resolved),
        parallel=resolve_parallel(workload.parallel, resolved, _value_of(_pick(workload.sequence_length,
                                                                               "sequence_length", resolved))),
        trainer=_pick(None, "trainer", resolved, PeakInputs.trainer),
        precompute_ref_log_probs=_pick(None, "precompute_ref_log_probs", resolved),
        preference_loss=workload.preference_loss,
        sft_loss=workload.sft_loss,
        reference_model=workload.reference_model,
        reference_dtype=workload.reference_dtype,
        generation=generation_inputs(workload.generation, _value_of(_pick(workload.sequence_length, "sequence_length",
                                                                          resolved)), accumulation,
                                     trl18=workload.preference_loss is not None
                                     and workload.preference_loss.value == "logits"),
    )


def resolve_parallel(written: dict[str, Given], resolved: Resolved, sequence: int | None) -> dict[str, Given]:
    """The N-D degrees and long-context mechanisms by Parallelism field, each with its source: what the config
    writes (configs/parallel_keys.py) unless a flag says otherwise; else the setting of the same name
    (parallelism.SETTINGS); absent: the field's default (`Parallelism()`), not listed. `tiled_mlp: true` takes
    axolotl's default shard count for the tokens each rank holds (`sequence` / (c·u))."""
    out = dict(written)
    for name, setting in SETTINGS.items():
        if setting is None or getattr(resolved.settings, setting) is None:
            continue
        found = _pick(written.get(name), setting, resolved)
        if found is not None and found is not written.get(name) and name == "tiled_mlp_shards":
            found = _tiles(found, parallelism_of(out), sequence)
        before = written.get(name)
        if found is not None and before is not None and found is not before and found.value != before.value:
            found = Given(found.value, f"{found.note} (overrides {before.note}: {before.value})", found.path)
        if found is not None:
            out[name] = found
    return out


def _tiles(setting: Given, degrees: Parallelism, sequence: int | None) -> Given:
    """The `tiled_mlp` setting as a shard count: false 0, a count itself, true axolotl's default."""
    if setting.value is False or isinstance(setting.value, int) and setting.value is not True:
        return Given(int(setting.value), setting.note, setting.path)
    local = (sequence or AXOLOTL_TILE_TOKENS) // degrees.sequence_divisor
    return Given(axolotl_shards(local), f"{setting.note}: true, axolotl's default ceil({local:,} tokens per rank / "
                 f"{AXOLOTL_TILE_TOKENS})", setting.path)


def _transformers_version(workload: Workload, resolved: Resolved) -> Given | None:
    """The Transformers release whose loss path the step follows (configs/transformers_paths.py): the
    `transformers_version` setting or flag; else the one installed beside zeromem (its metadata, no import); else
    the recipe project's exact pin (`Workload.transformers_version`); else None: the newest followed."""
    given = _pick(None, "transformers_version", resolved)
    found = installed("transformers")
    if given is None and found is not None:
        return Given(found, "installed beside zeromem (its package metadata)")
    return given or workload.transformers_version


def _kbit_prepare(inputs: Inputs) -> Given | None:
    """Whether prepare_model_for_kbit_training ran on a quantized base, where it was said (a setting, a flag, a
    recipe's reading; the readers say nothing under DeepSpeed, which recasts every float parameter)."""
    found = inputs.adapter
    if not isinstance(found, AdapterBreakdown) or found.adapter.quantization == "none":
        return None
    origin = found.adapter.origin("kbit_prepare")
    return Given.of(found.adapter.kbit_prepare, origin) if origin is not None else None


def _value_of(given: Given | None) -> int | None:
    return given.value if given is not None and isinstance(given.value, int) else None


#: GRPOConfig's defaults beyond memory/grpo.MAX_COMPLETION_LENGTH (trl/trainer/grpo_config.py, TRL 1.16 and 1.8)
MAX_COMPLETION_LENGTH_TRL18 = 256  # TRL 1.8.0's GRPOConfig (axolotl's pin)
#: axolotl passes trl.max_completion_length even when unset (core/trainers/grpo/__init__.py): None
TRL18_UNSET = (" (axolotl passes None when trl.max_completion_length is unset: the model's generation_config then "
               "bounds the completions; set it)")
BETA = 0.0


def generation_inputs(written: dict[str, Given], sequence_length: int | None,
                      accumulation: Given | None = None, trl18: bool = False) -> dict[str, Given]:
    """Every GRPO input: as written, else TRL's default. The sequence length is prompt + completion; when it is
    not above TRL's max_completion_length (512), half of it is taken for the completion. steps_per_generation
    defaults to gradient_accumulation_steps (TRL's `__post_init__`), 1 when that is not known."""
    found = dict(written)
    default, version = (MAX_COMPLETION_LENGTH_TRL18, "TRL 1.8") if trl18 else (MAX_COMPLETION_LENGTH, "TRL")
    if "max_completion_length" not in found:
        if sequence_length is None or sequence_length > default:
            found["max_completion_length"] = Given(default, f"default: {version} GRPOConfig's "
                                                   f"max_completion_length {default}" + TRL18_UNSET * trl18)
        else:
            found["max_completion_length"] = Given(sequence_length // 2, "default: half the sequence length (prompt "
                                                   f"+ completion; {version}'s {default} leaves no prompt)")
    if "steps_per_generation" not in found:
        found["steps_per_generation"] = (
            Given(accumulation.value, f"{accumulation.note}: TRL's default steps_per_generation", accumulation.path)
            if accumulation is not None else Given(1, "default: 1 (TRL: gradient_accumulation_steps; the generation "
                                                  "batch is micro-batch × this)"))
    found.setdefault("beta", Given(BETA, "default: TRL GRPOConfig's beta 0.0 (no reference model)"))
    found.setdefault("use_vllm", Given(False, "default: TRL's use_vllm false (transformers' generate)"))
    return {key: found[key] for key in GRPO_KEYS}
