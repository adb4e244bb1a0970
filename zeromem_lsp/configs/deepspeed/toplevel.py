"""Checks of the non-strict top-level keys DeepSpeed 0.19.8 still validates by hand
(communication dtypes, gradient_allreduce_op, checkpoint, data_types, torch_autocast) and of
the optimizer that ``deepspeed.initialize`` builds from ``optimizer.type``.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional

from .catalog import (
    DEEPSPEED_OPTIMIZERS,
    DTYPE_NAMES,
    REMOVED_OPTIMIZERS,
    TORCH_OPTIMIZERS,
    ZERO_TESTED_OPTIMIZERS,
)
from .data_efficiency import check_data_efficiency
from .issue import ConfigIssue, dotted, is_auto, issue, mapping_error


def check_top_level_values(config: dict, stage: Optional[int], zero: Any, compile_cfg: Any,
                            out: list[ConfigIssue]) -> None:
    for key in ("communication_data_type", "seq_parallel_communication_data_type"):
        value = config.get(key)
        if key in config and value is not None and (
                not isinstance(value, str) or value.lower() not in ("fp16", "bf16", "fp32")):
            out.append(issue("invalid_value", (key,), "value",
                             f"DeepSpeed refuses {value!r} for '{key}': use fp16, bf16 or fp32."))
    op = config.get("gradient_allreduce_op", "mean")
    if isinstance(op, str):
        op = op.lower()
    if op not in ("mean", "sum"):  # nobody fills "auto" here: DeepSpeed sees the literal string
        out.append(issue("invalid_value", ("gradient_allreduce_op",), "value",
                         f"DeepSpeed refuses {config.get('gradient_allreduce_op')!r} for 'gradient_allreduce_op':"
                         " use mean or sum."))
    elif op == "sum":
        reasons = []
        if stage == 3:
            reasons.append("ZeRO stage 3")
        if zero is not None and zero.zenflow is not None:
            reasons.append("ZenFlow")
        if compile_cfg is not None and compile_cfg.deepcompile:
            reasons.append("DeepCompile")
        for why in reasons:
            out.append(issue("invalid_combination", ("gradient_allreduce_op",), "value",
                             f"gradient_allreduce_op 'sum' is not supported with {why}: DeepSpeed refuses it."))
    for key in ("optimizer", "scheduler", "pipeline", "checkpoint", "data_types", "torch_autocast"):
        if key in config and not isinstance(config[key], dict):
            out.append(mapping_error((key,), config[key]))
    checkpoint = config.get("checkpoint")
    if isinstance(checkpoint, dict):
        tag = checkpoint.get("tag_validation", "Warn")
        if not isinstance(tag, str) or tag.upper() not in ("WARN", "IGNORE", "FAIL"):
            out.append(issue("invalid_value", ("checkpoint", "tag_validation"), "value",
                             f"DeepSpeed refuses {tag!r} for 'checkpoint.tag_validation': use Warn, Ignore or Fail."))
        _check_checkpoint_writer(checkpoint.get("writer"), out)
        par = checkpoint.get("parallel_write", {})
        stage_flag = par.get("pipeline_stage", False) if isinstance(par, dict) else None
        if stage_flag not in (True, False):
            out.append(issue("invalid_value", ("checkpoint", "parallel_write", "pipeline_stage"), "value",
                             f"DeepSpeed refuses {stage_flag!r} for 'checkpoint.parallel_write.pipeline_stage':"
                             " use true or false."))
    data_types = config.get("data_types")
    if isinstance(data_types, dict):
        keep = data_types.get("keep_in_fp32_modules", "auto")
        if keep != "auto" and not (isinstance(keep, list) and all(isinstance(n, str) for n in keep)):
            out.append(issue("invalid_value", ("data_types", "keep_in_fp32_modules"), "value",
                             f"DeepSpeed refuses {keep!r} for 'data_types.keep_in_fp32_modules': use \"auto\""
                             " or a list of name patterns."))
        dtype = data_types.get("grad_accum_dtype")
        if dtype is not None and not is_auto(dtype) and dtype not in DTYPE_NAMES:
            out.append(issue("suspicious_value", ("data_types", "grad_accum_dtype"), "value",
                             f"{dtype!r} is not a dtype DeepSpeed knows for 'data_types.grad_accum_dtype';"
                             " deepspeed.initialize fails on it once it sets up the optimizer. Use fp32, fp16 or bf16."))
    autocast = config.get("torch_autocast")
    if isinstance(autocast, dict):
        dtype = autocast.get("dtype")
        if "dtype" in autocast and dtype not in DTYPE_NAMES:
            out.append(issue("invalid_value", ("torch_autocast", "dtype"), "value",
                             f"DeepSpeed refuses {dtype!r} for 'torch_autocast.dtype': use bf16, fp16 or fp32."))
        mods = autocast.get("lower_precision_safe_modules")
        if "lower_precision_safe_modules" in autocast and not (
                isinstance(mods, (list, tuple, str, dict)) and all(isinstance(n, str) for n in mods)):
            out.append(issue("invalid_value", ("torch_autocast", "lower_precision_safe_modules"), "value",
                             f"DeepSpeed refuses {mods!r} for 'torch_autocast.lower_precision_safe_modules':"
                             " use a list of module names."))


def check_optimizer(config: dict, stage: Optional[int], out: list[ConfigIssue]) -> None:
    opt = config.get("optimizer")
    if not isinstance(opt, dict) or opt.get("type") is None:
        return
    name = opt["type"]
    if not isinstance(name, str):
        out.append(issue("invalid_value", ("optimizer", "type"), "value",
                         f"DeepSpeed refuses {name!r} for 'optimizer.type': it must be a name."))
        return
    params = opt.get("params")
    if params is not None and not isinstance(params, dict):
        out.append(mapping_error(("optimizer", "params"), params))
    elif isinstance(params, dict) and "max_grad_norm" in params:
        try:  # DeepSpeedConfig compares it with 0 to decide whether to warn
            params["max_grad_norm"] > 0
        except TypeError:
            out.append(issue("invalid_value", ("optimizer", "params", "max_grad_norm"), "value",
                             f"DeepSpeed fails on {params['max_grad_norm']!r} for 'optimizer.params.max_grad_norm';"
                             " remove it and use the top-level 'gradient_clipping'."))
        out.append(issue("unsupported_optimizer_param", ("optimizer", "params", "max_grad_norm"), "key",
                         "deepspeed.initialize refuses 'optimizer.params.max_grad_norm' when it builds the"
                         " optimizer from this section (always under HF Trainer and Accelerate; an optimizer"
                         " passed to deepspeed.initialize in code, as Megatron-DeepSpeed does, never reads it);"
                         " use the top-level 'gradient_clipping' instead.", replacement="gradient_clipping"))
    known = name.lower() in DEEPSPEED_OPTIMIZERS or name in TORCH_OPTIMIZERS
    if not known:
        if name.lower() in REMOVED_OPTIMIZERS:
            why = f"the 1-bit optimizer '{name}' was removed from DeepSpeed"
        else:
            close = difflib.get_close_matches(name, list(DEEPSPEED_OPTIMIZERS) + list(TORCH_OPTIMIZERS), n=1)
            why = f"'{name}' is neither a DeepSpeed optimizer nor a torch.optim class" + (
                f" (did you mean '{close[0]}'?)" if close else "")
        out.append(issue("unknown_optimizer", ("optimizer", "type"), "value",
                         f"deepspeed.initialize fails: {why}."))
        return
    resolved = name.lower() if name.lower() in DEEPSPEED_OPTIMIZERS else name
    if stage is not None and stage >= 1 and resolved not in ZERO_TESTED_OPTIMIZERS and not (
            config.get("zero_allow_untested_optimizer") is True):
        out.append(issue("incompatible_optimizer", ("optimizer", "type"), "value",
                         f"ZeRO has not been validated with optimizer '{name}': deepspeed.initialize refuses it"
                         " unless \"zero_allow_untested_optimizer\": true is set."))


#: Top-level blocks DeepSpeedConfig reads key by key: anything but an object (null included) crashes it.
OBJECT_ONLY_SECTIONS = ("activation_checkpointing", "flops_profiler", "autotuning", "data_efficiency")


def check_loose_sections(config: dict, out: list[ConfigIssue]) -> None:
    """Blocks DeepSpeedConfig reads with ``.get`` (no schema): only their shape and a few values matter."""
    for key in OBJECT_ONLY_SECTIONS:
        if key in config and not isinstance(config[key], dict):
            out.append(mapping_error((key,), config[key]))
    if "aio" in config and config["aio"] is not None and not isinstance(config["aio"], dict):
        out.append(mapping_error(("aio",), config["aio"]))
    expert = config.get("expert_parallel")
    if expert and not isinstance(expert, dict):  # an empty/false value means "off"
        out.append(mapping_error(("expert_parallel",), expert))
    elif isinstance(expert, dict) and expert.get("load_balance_coeff") is not None:
        out.append(issue("invalid_value", ("expert_parallel", "load_balance_coeff"), "value",
                         "DeepSpeed refuses 'expert_parallel.load_balance_coeff': AutoEP does not support an"
                         " auxiliary load-balancing loss; remove the key or set it to null."))
    flops = config.get("flops_profiler")
    flops_on = flops.get("enabled", False) if isinstance(flops, dict) else False
    breakdown = config.get("wall_clock_breakdown", False)
    try:  # DeepSpeed ORs the two flags together
        breakdown | flops_on
    except TypeError:
        bad = ("wall_clock_breakdown",) if not isinstance(breakdown, int) else ("flops_profiler", "enabled")
        value = breakdown if bad == ("wall_clock_breakdown",) else flops_on
        out.append(issue("invalid_value", bad, "value",
                         f"DeepSpeed refuses {value!r} for '{dotted(bad)}': use true or false."))
    autotuning = config.get("autotuning")
    if isinstance(autotuning, dict):
        for key in ("results_dir", "exps_dir"):
            if key in autotuning and not autotuning[key]:
                out.append(issue("invalid_value", ("autotuning", key), "value",
                                 f"DeepSpeed refuses an empty 'autotuning.{key}'."))
        info = autotuning.get("model_info")
        if info is not None and not isinstance(info, dict):
            out.append(mapping_error(("autotuning", "model_info"), info))
    efficiency = config.get("data_efficiency")
    if isinstance(efficiency, dict):
        check_data_efficiency(efficiency, out)
    vocab = config.get("vocabulary_size")
    if vocab:
        try:  # DeepSpeed checks the alignment with "%"
            vocab % 8
        except TypeError:
            out.append(issue("invalid_value", ("vocabulary_size",), "value",
                             f"DeepSpeed fails on {vocab!r} for 'vocabulary_size': use an integer."))


WRITER_CHOICES = {"type": ("MOCK", "PYTHON", "FAST"), "data_parallel": ("REPLICA", "SOCKET", "MACHINE")}


def _check_checkpoint_writer(writer: Any, out: list[ConfigIssue]) -> None:
    """``checkpoint.writer``: null means the default writer; otherwise an object with two upper-cased enums."""
    if writer is None:
        return
    if not isinstance(writer, dict):
        out.append(mapping_error(("checkpoint", "writer"), writer))
        return
    for key, choices in WRITER_CHOICES.items():
        value = writer.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or value.upper() not in choices:
            out.append(issue("invalid_value", ("checkpoint", "writer", key), "value",
                             f"DeepSpeed refuses {value!r} for 'checkpoint.writer.{key}': use one of"
                             f" {', '.join(c.lower() for c in choices)}."))
