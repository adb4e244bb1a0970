"""`zeromem estimate`: the calculator over explicit bytes or a parameter count, and the peak beside it."""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap
import sys
from typing import TYPE_CHECKING, cast
from collections.abc import Sequence
from pathlib import Path

from zeromem_lsp.memory.activations import ATTENTION
from zeromem_lsp.cli.check import add_offline, hub_access
from zeromem_lsp.cli.errors import UsageError
from zeromem_lsp.cli.estimate_config import MATCHING_OPTIONS, matching_options, parallel_options
from zeromem_lsp.cli.estimate_config import positive as _positive
from zeromem_lsp.configs.model_config import (MAX_SIZE, ImageTokensUnmodelled, UnsupportedModel,
                                              count_parameters_from_text, model_shape_from_text)
from zeromem_lsp.configs.settings_values import GRPO_KEYS
from zeromem_lsp.memory.peak import Peak
from zeromem_lsp.resolved.peak_inputs import ModelRead, PeakSource

if TYPE_CHECKING:
    from zeromem_lsp.memory.adapter_plan import Adapter
from zeromem_lsp.memory.plan import Unplanned
from zeromem_lsp.provenance import Given, Origin
from zeromem_lsp.memory.estimate import Estimate
from zeromem_lsp.configs.settings_values import ACTIVATION_OFFLOAD_CHOICES, ENGINES, FSDP_VERSIONS, LOSS_KERNELS, OPTIMIZER_IMPLS, PARAM_DTYPES, QUANTIZATIONS, TRAINERS
from zeromem_lsp.configs.settings_values import check_memory, check_parameters, check_reserve, check_version, decimal_budget_note
from zeromem_lsp.configs.model_source import find_model_config
from zeromem_lsp.rules.registry import rule_named
from zeromem_lsp.memory.precision import OPTIMIZERS, PRECISIONS
from zeromem_lsp.present import (
    activation_lines, adapter_lines, allocator_line, human_and_exact, input_notes, parallelism_json, parallelism_lines,
    peak_sum, phase_peaks, peak_table, stage_table,
)
from zeromem_lsp.present import (
    approximation_lines, approximation_note, below_state_line, coverage_line, largest_line, no_fit, suggestion_line,
    summary_table, verdict_line,
)
from zeromem_lsp.memory.stages import stage as stage_named
from zeromem_lsp.units import UnitError, format_bytes, format_count, format_parameters, parse_bytes

INVALID = rule_named("invalid-zeromem-setting").code  # a bad --model-config is reported as the settings error


def register(commands) -> None:
    parser = commands.add_parser(
        "estimate",
        help="per-GPU model-state bytes for DDP and ZeRO 1-3",
        description="Per-GPU persistent model-state bytes for DDP and ZeRO stages 1-3 (exact integers), and the "
                    "peak of the training step beside them once the model, sequence length and micro-batch are "
                    "known. Exit status: 0, or 1 when --gpu-memory is given and no stage fits it (judged on the "
                    "peak when known, else on model state); 2 bad usage.",
    )
    explicit = parser.add_argument_group("explicit bytes (all three)")
    explicit.add_argument("--parameter-bytes", metavar="N", help="P: parameter bytes, e.g. 14e9 or 13GiB")
    explicit.add_argument("--gradient-bytes", metavar="N", help="G: gradient bytes")
    explicit.add_argument("--optimizer-bytes", metavar="N", help="O: optimizer-state bytes")
    model = parser.add_argument_group("or a model")
    model.add_argument("--parameters", metavar="COUNT", help="parameter count, e.g. 7B, 350M, 8_030_261_248")
    model.add_argument("--precision", choices=PRECISIONS, help="training precision (default bf16)")
    model.add_argument("--optimizer", choices=OPTIMIZERS, help="optimizer (default adamw)")
    model.add_argument("--model-config", metavar="PATH",
                       help="a Hugging Face config.json, a model directory, or a hub id (the local Hugging Face cache "
                            "(HF_HUB_CACHE / HF_HOME), else fetched from the Hub): counts the parameters and gives the "
                            "shape for activations")
    add_offline(model)
    peak = parser.add_argument_group("peak per GPU (beside model state): activations, buffers, reserve")
    peak.add_argument("--sequence-length", metavar="N", help="tokens per sequence")
    peak.add_argument("--micro-batch", metavar="N", help="sequences per GPU per step")
    peak.add_argument("--gradient-accumulation-steps", metavar="N",
                      help="micro-batches per optimizer step (the later ones hold the accumulated gradients)")
    peak.add_argument("--gradient-checkpointing", action="store_true", help="activation checkpointing is on")
    peak.add_argument("--attention", choices=ATTENTION, help="attention implementation (default sdpa)")
    peak.add_argument("--reserved", metavar="SIZE", help="a fixed reserve per GPU for CUDA context + allocator "
                      "(default: per stage, cuBLAS workspaces + CUDA context + NCCL)")
    step = parser.add_argument_group("the training step the peak follows")
    step.add_argument("--engine", choices=ENGINES, help="what runs the step: torch (one process or DDP; only the DDP "
                      "stage), deepspeed (default) or fsdp; with --config: the config's own, which this overrides")
    step.add_argument("--fsdp-version", type=int, choices=FSDP_VERSIONS,
                      help="with --engine fsdp: FSDP1 (1, FullyShardedDataParallel) or FSDP2 (2, fully_shard; default, "
                      "as Transformers' TrainingArguments); with --config: the config's, which this overrides")
    step.add_argument("--param-dtype", choices=PARAM_DTYPES,
                      help="the dtype weights are stored in (default per engine: deepspeed and torch the precision, "
                      "fsdp fp32)")
    step.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS,
                      help="torch AdamW implementation (default foreach; fused for a ds_config optimizer section)")
    step.add_argument("--loss-kernel", choices=LOSS_KERNELS,
                      help="the causal-LM loss: hf (Transformers', default), liger_flce, cut_cross_entropy or "
                      "chunked_ce (axolotl); with --config: the recipe's keys, which this overrides")
    step.add_argument("--transformers-version", metavar="X.Y[.Z]",
                      help="the Transformers release the training runs: what its loss and sdpa layers keep (default: the one "
                      "installed beside zeromem, else the newest followed, 5.24; docs/memory-model.md, \"Versions\")")
    parallel = parser.add_argument_group("N-D parallelism and long context (docs/cli.md; the settings of the same name)")
    parallel.add_argument("--tensor-parallel", metavar="N", help="tensor-parallel degree t (tp_plan, DeepSpeed AutoTP)")
    parallel.add_argument("--context-parallel", metavar="N", help="ring-attention context-parallel degree c (torch CP, "
                          "axolotl's ring-flash-attn)")
    parallel.add_argument("--ulysses", metavar="N", help="Ulysses sequence-parallel degree u (DeepSpeed ALST)")
    parallel.add_argument("--expert-parallel", metavar="N", help="expert-parallel degree e (routed experts ÷ e)")
    parallel.add_argument("--activation-offload", choices=ACTIVATION_OFFLOAD_CHOICES,
                          help="after a checkpointed forward: none, cpu (the checkpointed layer inputs) or cpu_all "
                          "(every saved tensor) in host memory")
    parallel.add_argument("--tiled-mlp", metavar="N", nargs="?", const=True, default=None,
                          help="TiledMLP: alone, axolotl's default shard count (ceil(tokens per rank / 32768)); "
                          "with N, N shards")
    step.add_argument("--trainer", choices=TRAINERS,
                      help="what trains (default sft): dpo and kto add TRL's frozen reference model and their loss "
                      "(docs/adapters.md, Preference trainers); orpo, simpo, cpo: TRL's reference-free trainers; "
                      "grpo: TRL's GRPOTrainer, its generation and reference log-probs in the step (the sequence "
                      "length is prompt + completion)")
    step.add_argument("--max-completion-length", metavar="N", type=int,
                      help="with --trainer grpo: tokens generated per completion (default TRL's 512, half the "
                      "sequence length when that is not above 512)")
    step.add_argument("--steps-per-generation", metavar="N", type=int,
                      help="with --trainer grpo: micro-batches generated at once (default, as TRL's: "
                      "--gradient-accumulation-steps)")
    step.add_argument("--beta", type=float, help="with --trainer grpo: the KL coefficient; not 0 adds the reference "
                      "model (default TRL's 0.0)")
    step.add_argument("--use-vllm", action="store_true", default=None,
                      help="with --trainer grpo: generation by vLLM (its memory is not modelled: peak unknown)")
    step.add_argument("--precompute-ref-log-probs", action="store_true", default=None,
                      help="TRL's precompute_ref_log_probs: no reference model in the training step")
    lora = parser.add_argument_group("LoRA / QLoRA (needs --model-config: the adapters go on its linear layers)")
    lora.add_argument("--lora-rank", metavar="R", help="LoRA rank r: the base is frozen, r·(in + out) adapter "
                      "parameters per targeted linear layer are trained")
    targets = lora.add_mutually_exclusive_group()
    targets.add_argument("--lora-targets", metavar="NAMES", help="the modules adapted, comma-separated (q_proj,v_proj) "
                         "or all-linear (default)")
    targets.add_argument("--lora-target-regex", metavar="REGEX", help="the modules adapted, as one Python regular "
                         "expression matched against each module's full name (PEFT's string target_modules)")
    lora.add_argument("--lora-rank-pattern", metavar="REGEX=R", action="append", help="PEFT's rank_pattern: modules "
                      "whose name ends with a match of REGEX (after a dot) get rank R; repeat it, the first match wins")
    lora.add_argument("--layers-to-transform", metavar="INDICES", help="adapt only these decoder layers, "
                      "comma-separated (0,1,2; PEFT's layers_to_transform, with --lora-targets)")
    lora.add_argument("--modules-to-save", metavar="NAMES", help="modules trained in full beside the adapters, "
                      "comma-separated (lm_head)")
    lora.add_argument("--lora-target-parameters", metavar="NAMES", help="PEFT's target_parameters: parameters "
                      "adapted directly, comma-separated (mlp.experts.gate_up_proj,mlp.experts.down_proj: the routed "
                      "experts; axolotl's lora_target_parameters)")
    lora.add_argument("--dora", action="store_true", default=None, help="DoRA: a magnitude vector per adapted weight")
    lora.add_argument("--quantization", choices=QUANTIZATIONS, help="how the frozen base is stored (bitsandbytes): "
                      "none (default), int8, nf4, fp4")
    lora.add_argument("--double-quant", action="store_true", default=None,
                      help="4-bit quantization constants quantized again (bnb_4bit_use_double_quant)")
    lora.add_argument("--kbit-prepare", action=argparse.BooleanOptionalAction, default=None,
                      help="whether PEFT's prepare_model_for_kbit_training runs on the quantized base (default: "
                      "yes, fp32 non-quantized weights and activations); --no-kbit-prepare keeps them in the compute "
                      "dtype, as axolotl, LLaMA-Factory and TRL's SFT / DPO trainers do")
    lora.add_argument("--lora-dropout", metavar="P", type=_dropout, default=None,
                      help="LoRA's dropout probability (default 0): above 0 each adapter keeps its dropped-out input "
                      "and a mask for backward")
    lora.add_argument("--autocast-adapter-dtype", action=argparse.BooleanOptionalAction, default=None,
                      help="PEFT's autocast_adapter_dtype (default: yes, PEFT 0.12 on: fp32 adapters); "
                      "--no-autocast-adapter-dtype keeps the adapters in the base weights' dtype, as PEFT before "
                      "0.12 always did")
    parser.add_argument("--config", metavar="FILE",
                        help="a training config read as `zeromem check` reads it (its zeromem block, project "
                        "settings, buckets, stage, offload); the options here override it")
    parser.add_argument("--accelerate-config", metavar="PATH",
                        help="with --config (a recipe): the Accelerate config it is launched with (accelerate "
                        "launch --config_file PATH): world size, engine and mixed precision from it")
    parser.add_argument("--world-size", "-R", metavar="R", help="number of ranks (GPUs); required without --config")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="per-GPU budget, e.g. 80GiB or 24GB")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text (default) or json (exact integers)")
    parser.add_argument("--max-sequence-length", action="store_true",
                        help="with --gpu-memory and a model: the longest sequence whose peak fits, per stage (a search "
                        "over the step model; JSON max_sequence_length)")
    parser.add_argument("--max-micro-batch", action="store_true",
                        help="with --gpu-memory and a model: the largest micro-batch whose peak fits, per stage (JSON "
                        "max_micro_batch)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="text: after the verdict and the table, the arithmetic — P, G, O, the formulas, every "
                        "phase and part in exact bytes, each input and where it came from")
    parser.add_argument("--html", metavar="PATH",
                        help="also write a picture of the training step to PATH: one self-contained HTML page "
                        "(inline SVG, no script, nothing loaded) with, per stage, the memory at each moment of the "
                        "step stacked by part, the --gpu-memory budget line, the stage table and the inputs with "
                        "their sources; the figures are --format json's")
    parser.set_defaults(run=run)


def _bytes(option: str, text: str) -> int:
    try:
        return parse_bytes(text)
    except UnitError as error:
        raise UsageError(f"{option}: {error}") from None


def _checked(option: str, check, text: str) -> int:
    """A value through the check the zeromem block uses for it: one message, a usage error here."""
    try:
        return check(text)
    except ValueError as error:
        raise UsageError(f"{option}: {error}") from None


def _world_size(text: str | None) -> int:
    value = _positive("--world-size", text)
    if value is None:
        raise UsageError("--world-size R is required without --config")
    return value


#: The LoRA settings (resolved/adapter_settings.SETTING_OF_FIELD's) → the option that sets each; any other: --lora-rank.
OPTION_OF_SETTING = {"lora_rank": "--lora-rank", "lora_targets": "--lora-targets",
                     "modules_to_save": "--modules-to-save", "dora": "--dora", "quantization": "--quantization",
                     "lora_rank_pattern": "--lora-rank-pattern", "layers_to_transform": "--layers-to-transform",
                     "target_parameters": "--lora-target-parameters"}


def _dropout(text: str) -> float:
    """--lora-dropout: a probability in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a probability from 0 to below 1, got {text!r}")
    return value


def adapter_from_args(args):
    """The Adapter the LoRA options describe (None without --lora-rank); a bad value is a usage error."""
    from zeromem_lsp.memory.adapter_plan import Adapter
    from zeromem_lsp.configs.settings_values import check_module_names

    given = [name for name in ("lora_targets", "modules_to_save", "lora_target_parameters", "dora", "quantization", "double_quant", "kbit_prepare",
                               "lora_dropout", "autocast_adapter_dtype", *MATCHING_OPTIONS) if getattr(args, name) is not None]
    if args.lora_rank is None:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} describes a LoRA run: give --lora-rank R too")
        return None
    rank = _positive("--lora-rank", args.lora_rank)
    assert rank is not None  # (args.lora_rank is given here)
    if rank > MAX_SIZE:
        raise UsageError(f"--lora-rank: {rank:,} is absurd (more than {MAX_SIZE:,})")
    values: dict = {"rank": rank}
    fields = {"lora_targets": "targets", "modules_to_save": "modules_to_save",
              "lora_target_parameters": "target_parameters"}
    for name, field in fields.items():
        if getattr(args, name) is not None:
            option = "--" + name.replace("_", "-")
            value = _checked(option, lambda text: check_module_names(text, name == "lora_targets"), getattr(args, name))
            values[field] = value
    flags = {"dora": args.dora, "quantization": args.quantization, "double_quant": args.double_quant,
             "kbit_prepare": args.kbit_prepare, "dropout": args.lora_dropout, "autocast": args.autocast_adapter_dtype}
    values.update({name: value for name, value in flags.items() if value is not None})
    origins = [(field, Origin("--" + option)) for field, option in (
        ("rank", "lora-rank"), ("targets", "lora-targets"), ("modules_to_save", "modules-to-save"),
        ("target_parameters", "lora-target-parameters"), ("dora", "dora"),
        ("quantization", "quantization"), ("double_quant", "double-quant"),
        ("kbit_prepare", "kbit-prepare" if args.kbit_prepare else "no-kbit-prepare"), ("dropout", "lora-dropout"),
        ("autocast", "autocast-adapter-dtype" if args.autocast_adapter_dtype else "no-autocast-adapter-dtype"))
        if field in values]
    matched = matching_options(args)
    for option, (field, setting) in MATCHING_OPTIONS.items():
        if setting in matched:
            values[field] = getattr(matched[setting], "regex", matched[setting])
            origins = [entry for entry in origins if entry[0] != field] + [(field, Origin("--" + option.replace("_", "-")))]
    return Adapter(**values, origins=tuple(origins))


def _adapter(args, model: ModelRead):
    """The LoRA run the options describe, checked against the model --model-config names (usage errors)."""
    from zeromem_lsp.resolved.adapter_settings import adapter_problem

    adapter = adapter_from_args(args)
    if adapter is None:
        return None
    if model.config is None:
        raise UsageError("--lora-rank needs the model's shape: give --model-config PATH (a config.json, a model "
                         "directory or a hub id); the adapters go on its linear layers, which --parameters does not name")
    if any(value is not None for value in (args.parameters, args.parameter_bytes)):
        raise UsageError("--lora-rank counts the parameters from --model-config: drop --parameters / --*-bytes")
    found = adapter_problem(adapter, model.config)
    if found is not None:
        setting, why = found
        option = OPTION_OF_SETTING.get(setting, "--lora-rank")
        raise UsageError(f"{'--lora-target-regex' if args.lora_target_regex and setting == 'lora_targets' else option}: "
                         f"{why}")
    return adapter


def _model_state(args, model: ModelRead) -> tuple[dict[str, object], tuple[str, ...], Adapter | None]:
    """The settings the model-state options give, the notes on how the count was found, and the LoRA run."""
    values: dict[str, object] = {"world_size": _world_size(args.world_size)}
    values.update({name: getattr(args, name) for name in ("engine", "fsdp_version", "precision", "optimizer",
                                                          "param_dtype") if getattr(args, name) is not None})
    explicit = {name: getattr(args, name) for name in ("parameter_bytes", "gradient_bytes", "optimizer_bytes")}
    if any(value is not None for value in explicit.values()):
        if args.parameters is not None:
            raise UsageError("give either --parameters or the three --*-bytes options, not both")
        if any(value is None for value in explicit.values()):
            raise UsageError("--parameter-bytes, --gradient-bytes and --optimizer-bytes go together: give all three")
        values.update({name: _bytes("--" + name.replace("_", "-"), text) for name, text in explicit.items()})
        return values, (), None
    adapter = _adapter(args, model)
    if adapter is not None:
        return values, (f"model from {args.model_config}",), adapter
    counted = model.counted
    if args.parameters is None and counted is not None:
        values["parameters"] = counted.total
        return values, (f"parameters counted from {args.model_config} ({counted.note})",), None
    if args.parameters is None:
        raise UsageError("give --parameters COUNT, --model-config PATH, or --parameter-bytes, --gradient-bytes and "
                         "--optimizer-bytes")
    values["parameters"] = parameters = _checked("--parameters", check_parameters, args.parameters)
    notes: tuple[str, ...] = ()
    if counted is not None and counted.total != parameters:
        notes = (f"--parameters {args.parameters} ({format_count(parameters)}) wins over the "
                 f"{format_count(counted.total)} parameters {args.model_config} counts; the config still gives "
                 "the model shape for activations",)
    return values, notes, None


def _read_model(args) -> ModelRead:
    """What --model-config names (a config.json, a model directory or a hub id: the caches, else the Hub),
    counted and shaped; a bad config.json is a ZM104 problem (`shape_problem`), never a traceback. Without
    --model-config: the shape the peak misses, and what gives it."""
    if args.model_config is None:
        return ModelRead(shape_problem="give --model-config PATH")
    name = args.model_config
    source = find_model_config(name, Path.cwd(), hub=hub_access(args))
    if source.text is None:
        raise UsageError(f"--model-config: cannot read {args.model_config!r} ({source.why})")
    args.model_config = shown = source.shown  # what the notes name
    try:
        counted = count_parameters_from_text(source.text)
    except UnsupportedModel as error:
        from zeromem_lsp.configs.meta_count import fallback, peak_unknown

        counted, why = fallback(source.text, error, may_run=True)
        if counted is None:
            return ModelRead(shape_problem=f"{INVALID} --model-config {shown}: {why}", path=shown)
        return ModelRead(counted, None, peak_unknown(counted.model_type), shown)
    config = json.loads(source.text)  # counted, so it parses
    try:
        shape = model_shape_from_text(source.text)
    except ImageTokensUnmodelled as error:  # a vision-language model: counted whole, no peak; not a bad input
        return ModelRead(counted, None, str(error), shown, config)
    except UnsupportedModel as error:
        return ModelRead(counted, None, f"{INVALID} --model-config {shown}: {error}", shown, config)
    from zeromem_lsp.configs import processor_config

    if shape.vision is None or not processor_config.wanted(config):
        return ModelRead(counted, shape, None, shown, config)
    from zeromem_lsp.configs.freeze_keys import AS_GIVEN, recipe_vision

    # the image processor config the run loads beside it bounds the image tokens (configs/processor_config.py)
    processor = processor_config.find_processor_config(name, Path.cwd(), hub=hub_access(args))
    shape_read, why = recipe_vision(config, AS_GIVEN, "transformers", processor)
    return ModelRead(counted, shape_read, why, shown, config, processor=processor)


def _step(args) -> dict[str, object] | None:
    """The settings the step options give, when any describes the step (a model, a sequence length, a micro-batch,
    checkpointing): the peak is estimated beside the model state. None: model state alone."""
    wanted = (args.model_config, args.sequence_length, args.micro_batch)
    if all(value is None for value in wanted) and not args.gradient_checkpointing:
        return None
    values: dict[str, object | None] = {
        name: _positive("--" + name.replace("_", "-"), getattr(args, name))
        for name in ("sequence_length", "micro_batch", "gradient_accumulation_steps")}
    values["reserved"] = _checked("--reserved", check_reserve, args.reserved) if args.reserved else None
    values.update({name: getattr(args, name) for name in ("attention", "optimizer_impl", "loss_kernel", "trainer")})
    if args.transformers_version is not None:
        values["transformers_version"] = _checked("--transformers-version", check_version, args.transformers_version)
    values.update({name: True for name in ("gradient_checkpointing", "precompute_ref_log_probs") if getattr(args, name)})
    return {name: value for name, value in values.items() if value is not None}


def _generation_flags(args) -> dict[str, Given]:
    """GRPO's inputs given as options (memory/grpo.py KEYS): the workload the command line writes."""
    return {key: Given(getattr(args, key), "--" + key.replace("_", "-")) for key in GRPO_KEYS
            if getattr(args, key, None) is not None}


def calculator(args) -> tuple[Estimate, str | None]:
    """The estimate from the options alone (no config): they are the command-line settings layer, resolved and
    planned as a config's settings are (planner.SettingsSource). (the estimate, a problem with --model-config)"""
    from zeromem_lsp.configs.layers import command_line, resolve
    from zeromem_lsp.configs.settings import ZeromemSettings
    from zeromem_lsp.configs.workload import Workload
    from zeromem_lsp.resolved import planner

    model = _read_model(args)
    if model.config is not None and model.counted is not None and model.counted.parts and \
            adapter_from_args(args) is not None:
        from zeromem_lsp.configs.freeze_keys import ADAPTER, recipe_vision

        shape, why = recipe_vision(model.config, ADAPTER, "peft", model.processor)  # LoRA freezes the tower too
        model = model._replace(shape=shape, shape_problem=why)
    problem = model.shape_problem if args.model_config is not None else None
    explicit = any(value is not None for value in (args.parameter_bytes, args.gradient_bytes, args.optimizer_bytes))
    if problem and model.counted is None and args.parameters is None and not explicit:
        raise UsageError(problem)  # no model-state figure without a parameter count
    values, notes, adapter = _model_state(args, model)
    step = _step(args)
    if model.shape is not None and model.shape.vision is not None:  # configs/image_tokens.py
        notes = (*notes, f"images: {model.shape.vision.said(cast(int | None, (step or {}).get('sequence_length')))}")
    values.update(step or {})
    values.update(parallel_options(args))
    if args.gpu_memory:
        values["gpu_memory"] = _checked("--gpu-memory", check_memory, args.gpu_memory)
    resolved = resolve((command_line(ZeromemSettings.from_checked(values)),))
    peak = PeakSource(Workload(generation=_generation_flags(args)), model=model) if step is not None else None
    plan = planner.plan(planner.SettingsSource(model, notes), resolved, peak, adapter)
    if isinstance(plan, Unplanned):  # the model the adapter goes on, refused (adapter_problem's are usage errors)
        why = "; ".join(plan.missing).removeprefix(planner.ADAPTER_REFUSED)
        raise UsageError(f"{INVALID} --model-config {args.model_config}: {why}")
    return Estimate(plan), problem


def run(args) -> int:
    if args.config is not None:
        from zeromem_lsp.cli.estimate_config import estimate_of_config

        result, problem = estimate_of_config(args)
    elif args.accelerate_config is not None:
        raise UsageError("--accelerate-config goes with --config (the recipe launched with it)")
    else:
        result, problem = calculator(args)
    peak = result.peak
    if problem:
        print(f"zeromem: {problem}", file=sys.stderr)
    note = decimal_budget_note(args.gpu_memory)
    if note:
        print(f"zeromem: note: --gpu-memory {note}", file=sys.stderr)
    notes = [fsdp_note(result)] if args.config is None and result.plan.family == "deepspeed" and fsdp_note(result) else []
    searched = _searched(args, result)
    if args.format == "json":
        data = result.to_json()
        if peak is not None:
            data.update(peak.to_json())
            if peak.source.parallel:  # absent: plain data parallelism (every Parallelism default)
                data["parallelism"] = parallelism_json(peak.source)
        data.update(searched)
        data["notes"] = notes
        print(json.dumps(data, indent=2))
    else:
        lines = summary_text(result, shutil.get_terminal_size().columns,
                             [largest_line(result.plan, name, values) for name, values in searched.items()])
        if args.verbose:
            lines += ["", *render_text(result), *[f"note: {note}" for note in notes],
                      *(render_peak(peak) if peak is not None else [])]
        print("\n".join(lines))
    if args.html is not None:
        write_html(args.html, result)
    return exit_status(result)


SEARCHES = {"max_sequence_length": "sequence_length", "max_micro_batch": "micro_batch"}


def _searched(args, result: Estimate) -> dict[str, dict[str, int | None]]:
    """--max-sequence-length / --max-micro-batch: per stage, the largest value whose peak fits (JSON keys)."""
    asked = [key for key in SEARCHES if getattr(args, key, False)]
    if not asked:
        return {}
    option = "--" + asked[0].replace("_", "-")
    if result.gpu_memory is None:
        raise UsageError(f"{option} needs --gpu-memory: the budget the peak must fit")
    if not result.plan.peak_known:
        missing = "; ".join(result.peak.missing) if result.peak is not None else "a model (--model-config or --config)"
        raise UsageError(f"{option} needs the peak: missing {missing}")
    return {key: result.largest(SEARCHES[key]) for key in asked}


def summary_text(result: Estimate, columns: int, searched: Sequence[str] = ()) -> list[str]:
    """The answer first (at most 20 lines, prose wrapped to the terminal, the table within 80 columns): the
    verdict, the stage table, why a peak is below its model state, what the figure leaves out and the versions it
    is for, the searches asked for (`searched`), one suggestion."""
    plan = result.plan
    width = max(40, columns - 1)

    def wrapped(text: str) -> list[str]:
        return textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False) or [""]

    lines = [*wrapped(verdict_line(plan)), "", *summary_table(plan), ""]
    below = below_state_line(plan)
    for text in ([below] if below else []) + [coverage_line(plan), *searched, suggestion_line(plan)]:
        lines += wrapped(text)
    return lines


def write_html(path: str, result: Estimate) -> None:
    """`--html PATH`: the page report/ makes of the estimate, written whole (a failure to write is a usage error)."""
    from zeromem_lsp.report import html_report

    try:
        Path(path).write_text(html_report(result), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--html: cannot write {path!r} ({error.strerror or error})") from None
    print(f"zeromem: wrote {path}", file=sys.stderr)


def exit_status(result: Estimate) -> int:
    """1 when a budget is given and no stage fits it — by its peak when known, else its model state — else 0; 0 when
    the figures are approximate (a key set that is not modelled, an assumed engine): never certain of a failure."""
    if result.plan.approximate:
        return 0
    return 1 if result.gpu_memory is not None and result.cheapest_fitting is None else 0


#: What `reserved` is when the user sets none (the per-stage sum is in each stage's `peak =` line).
RESERVE_MODELLED = ("per stage: the cuBLAS workspaces + the CUDA context + one NCCL communicator's buffers when "
                    "ranks > 1, each measured or cited for a Hopper GPU (H100 / H200: the context measured on an H200 "
                    "under torch 2.11, CUDA 13.0; docs/gpu.md); the caching allocator's reserve above the live bytes "
                    "is modelled and shown, not counted (set --reserved for a fixed figure)")


def render_peak(peak: Peak) -> list[str]:
    """The arithmetic behind the table's peak column: inputs, activations, every phase and the sum per stage."""
    lines = ["", "peak per GPU (the largest phase of one training step + reserved):"]
    lines += [f"  {note}" for note in input_notes(peak)]
    lines += [f"  {note}" for note in parallelism_lines(peak.source)]
    if peak.missing:
        return lines + [f"  not computable: missing {item}" for item in peak.missing]
    lines += [f"  {line}" for line in activation_lines(peak)]
    lines.append(f"  reserved (CUDA context, workspaces, allocator) = {format_count(peak.reserved)} B" if peak.reserved
                 is not None else f"  reserved: {RESERVE_MODELLED}")
    labels = {key: stage_named(key).label_in(peak.family) for key in peak.state}
    width = max(len(label) for label in labels.values())
    for key, label in labels.items():
        why = peak.unknown(key)
        if why:
            lines.append(f"  {label:<{width}} {why}")
            continue
        lines.append(f"  {label:<{width}} phases: {phase_peaks(peak, key)}")
        lines.append(f"  {label:<{width}} peak = {peak_sum(peak, key)}")
        allocator = allocator_line(peak.stage_peak(key))
        if allocator is not None:
            lines.append(f"  {label:<{width}} {allocator}")
    return lines


def fsdp_note(result: Estimate) -> str | None:
    """Under mixed precision, the FSDP parameter dtype: fp32 sharded parameters, not DeepSpeed's 16-bit ones."""
    from zeromem_lsp.resolved.planner import fsdp_bytes_per_parameter

    bpp = result.inputs.per_parameter
    if bpp is None or bpp.precision not in ("bf16", "fp16"):
        return None
    fsdp = fsdp_bytes_per_parameter("fp32", bpp.optimizer_name)
    return (f"these are DeepSpeed's bytes per parameter ({bpp.precision} parameters, fp32 master copy). FSDP "
            f"parameter dtype under {bpp.precision} mixed precision: fp32 (Accelerate upcasts the sharded "
            f"parameters; only the gathered copy is {bpp.precision}), so FSDP holds {fsdp.parameter} + "
            f"{fsdp.gradient} + {fsdp.optimizer} bytes/parameter with no master copy — what `zeromem check` "
            "counts for an FSDP config (docs/fsdp-accelerate.md)")


def render_text(result: Estimate) -> list[str]:
    inputs = result.inputs
    lines = []
    if inputs.parameters is not None and inputs.per_parameter is not None:
        bpp = inputs.per_parameter
        lines.append(
            f"model: {format_parameters(inputs.parameters)} parameters ({format_count(inputs.parameters)}), "
            f"{bpp.precision}, {bpp.optimizer_name}: {bpp.parameter} + {bpp.gradient} + {bpp.optimizer} bytes/parameter"
        )
    if inputs.adapter is not None:
        lines.extend(adapter_lines(inputs.adapter))
    lines.append(f"P = {human_and_exact(inputs.parameter_bytes)}")
    lines.append(f"G = {human_and_exact(inputs.gradient_bytes)}")
    lines.append(f"O = {human_and_exact(inputs.optimizer_bytes)}")
    world = result.plan.origins.get("world_size")  # `--config`: where the ranks came from
    lines.append(f"R = {inputs.world_size} ranks" + (f" — {world.note}" if world is not None else ""))
    if result.gpu_memory is not None:
        lines.append(f"budget = {human_and_exact(result.gpu_memory)} per GPU")
    lines.append("")
    peak_known = result.plan.peak_known
    lines.extend(peak_table(result.plan) if peak_known else stage_table(result))
    lines.append("")
    for key, figure in result.figures.items():
        stage = stage_named(key)
        lines.append(f"{stage.label:<7} = {stage.formula} = {format_count(figure)} B = {format_bytes(figure)}")
    if result.gpu_memory is not None:
        cheapest = result.cheapest_fitting
        lines.append("")
        if cheapest is None:
            what = "stage's peak" if peak_known else "stage"
            lines.append(no_fit("torch", peak_known) if result.plan.family == "torch" else
                         f"no {what} fits {format_bytes(result.gpu_memory)} per GPU without offload or more GPUs")
        else:
            figure, judged = result.plan.verdict_bytes(cheapest), result.plan.judged_by(cheapest)
            unknown = "; its peak is unknown" if peak_known and judged == "model state" else ""
            lines.append(f"cheapest stage that fits: {stage_named(cheapest).label_in(result.plan.family)} "
                         f"({judged} {format_bytes(figure)} per GPU{unknown})")
    for assumption in inputs.assumptions:
        lines.append(f"assumes: {assumption}")
    if result.plan.approximate:
        lines.append("")
        lines.append(f"{approximation_note(result.plan)} — the figures above leave this out:")
        lines.extend(f"  {line}" for line in approximation_lines(result.plan))
    return lines
