"""The inputs of the peak for one document: the config's own values, then the zeromem settings layers.

A value the training config sets (train_micro_batch_size_per_gpu, per_device_train_batch_size,
max_seq_length, gradient_checkpointing, ...) is what will run, so it wins; zeromem settings (command
line, the file's block, project or editor settings) supply what the config does not say, and replace
library defaults. Every input keeps its origin for the hover.
"""

from __future__ import annotations

from zeromem_lsp.provenance import Path

from typing import NamedTuple

from zeromem_lsp.configs.model_config import ModelShape, ParameterCount, UnsupportedModel, model_shape_from_text
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup
from zeromem_lsp.configs.workload import Given, Workload
from zeromem_lsp.memory.peak import DEFAULT_RESERVED, Input, PeakInputs, estimate_peak
from zeromem_lsp.memory.plan import MemoryPlan


class ModelRead(NamedTuple):
    """What the config.json of `parameters.from_config` gave: the count and the activation shape."""

    counted: ParameterCount | None = None
    shape: ModelShape | None = None
    shape_problem: str | None = None
    path: str | None = None


def read_model(text: str, counted: ParameterCount, path: str) -> ModelRead:
    try:
        return ModelRead(counted, model_shape_from_text(text), None, path)
    except UnsupportedModel as error:
        return ModelRead(counted, None, f"{path}: {error}", path)


class Layers(NamedTuple):
    """The settings layers, to say which one supplied a value."""

    block: ZeromemSettings
    forced: ZeromemSettings
    block_path: Path

    def origin(self, name: str) -> tuple[str, Path | None]:
        if getattr(self.forced, name) is not None:
            return "command line", None
        if getattr(self.block, name) is not None:
            return f"zeromem.{name}", (*self.block_path, name)
        return f"zeromem.{name} (project or editor settings)", None


def _pick(label: str, given: Given | None, setting: str, settings: ZeromemSettings, layers: Layers,
          default: Input | None = None) -> Input | None:
    """The config's value unless it is only a library default; else the setting; else `default`."""
    if given is not None and not given.note.endswith("default"):
        return Input(label, given.value, given.note, given.path)
    value = getattr(settings, setting)
    if value is not None:
        return Input(label, value, *layers.origin(setting))
    if given is not None:
        return Input(label, given.value, given.note, given.path)
    return default


def _derived_micro_batch(setup: TrainingSetup | None, world_size: int) -> Input | None:
    """train_batch_size / (gradient_accumulation_steps × world size), when it divides."""
    if setup is None or setup.train_batch_size is None or setup.gradient_accumulation_steps is None:
        return None
    micro, rest = divmod(setup.train_batch_size, setup.gradient_accumulation_steps * world_size)
    if rest or micro < 1:
        return None
    return Input("micro-batch", micro, f"train_batch_size / (gradient_accumulation_steps × world size) = "
                 f"{setup.train_batch_size} / ({setup.gradient_accumulation_steps} × {world_size})")


def with_peak(plan, workload: Workload, settings: ZeromemSettings, layers: Layers, setup: TrainingSetup | None,
              model: ModelRead):
    """The plan with its peak beside the model state (an Unplanned plan is returned as it is)."""
    if not isinstance(plan, MemoryPlan):
        return plan
    micro = _pick("micro-batch", workload.micro_batch, "micro_batch", settings, layers)
    if micro is None:
        micro = _derived_micro_batch(setup, plan.inputs.world_size)
    precision = plan.inputs.per_parameter.precision if plan.inputs.per_parameter is not None else settings.precision
    origin = plan.origins.get("precision")
    dtype = (Input("dtype", precision, origin.note if origin else "zeromem.precision", origin.path if origin else None)
             if precision else None)
    if workload.compute_dtype is not None:  # mixed precision: activations and gathered layers in the compute dtype
        given = workload.compute_dtype
        dtype = Input("dtype", given.value, f"{given.note} (mixed-precision compute)", given.path)
    inputs = PeakInputs(
        shape=model.shape,
        shape_problem=model.shape_problem,
        sequence_length=_pick("sequence length", workload.sequence_length, "sequence_length", settings, layers),
        micro_batch=micro,
        checkpointing=_pick("gradient checkpointing", workload.checkpointing, "gradient_checkpointing", settings,
                            layers, PeakInputs.checkpointing),
        attention=_pick("attention", None, "attention", settings, layers, PeakInputs.attention),
        dtype=dtype,
        reserved=_pick("reserved", None, "reserved", settings, layers,
                       Input("reserved", DEFAULT_RESERVED, "default (CUDA context + allocator)")),
        zero={key: Input(key, given.value, given.note, given.path) for key, given in workload.zero.items()},
        fsdp_prefetch=(Input("FSDP prefetch", workload.fsdp_prefetch.value, workload.fsdp_prefetch.note,
                             workload.fsdp_prefetch.path) if workload.fsdp_prefetch else PeakInputs.fsdp_prefetch),
        parameters=plan.inputs.parameters,
        largest_layer=model.counted.largest_layer if model.counted is not None else None,
    )
    state = {stage: plan.placement.gpu[stage] for stage in plan.stages}
    return plan._replace(peak=estimate_peak(state, plan.family, inputs))
