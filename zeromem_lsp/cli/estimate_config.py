"""`zeromem estimate --config FILE`: the estimate of a training config, read as `zeromem check` reads it.

The file goes through the one pipeline (analysis.analyse_bytes with the project's settings layers), so
its zeromem block, buckets, overlap_comm, stage and offload are what `check` and the hover use; the
command-line options are the highest layer, each credited as its `--flag`.
"""

from __future__ import annotations

from pathlib import Path

from zeromem_lsp.cli.errors import UsageError
from zeromem_lsp.configs.settings_values import GRPO_KEYS  # the recipe's keys when a config is given
from zeromem_lsp.memory.estimate import Estimate

#: Options that are settings of the same name (the `zeromem` block's), passed through as written.
AS_WRITTEN = ("gpu_memory", "parameters", "precision", "optimizer", "attention", "reserved", "engine", "fsdp_version",
              "param_dtype", "optimizer_impl", "parameter_bytes", "gradient_bytes", "optimizer_bytes", "lora_targets", "modules_to_save",
              "quantization", "loss_kernel", "trainer", "transformers_version")
#: Options that are whole numbers.
COUNTS = ("world_size", "sequence_length", "micro_batch", "gradient_accumulation_steps", "lora_rank")
#: Options that are switches (store_true): a setting only when given.
SWITCHES = ("gradient_checkpointing", "dora", "double_quant", "precompute_ref_log_probs")


def positive(option: str, text: str | None) -> int | None:
    """A whole number >= 1 from the command line (None when the option is absent)."""
    if text is None:
        return None
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{option}: expected a whole number >= 1, got {text!r}")
    return value


#: The PEFT matching options → (Adapter field, its setting): parsed by `matching_options`.
MATCHING_OPTIONS = {"lora_target_regex": ("targets", "lora_targets"), "lora_rank_pattern": ("rank_pattern",
                    "lora_rank_pattern"), "layers_to_transform": ("layers_to_transform", "layers_to_transform")}


def matching_options(args) -> dict:
    """--lora-target-regex, --lora-rank-pattern, --layers-to-transform as the settings write them, each checked by
    the setting's own check (a usage error naming the option)."""
    from zeromem_lsp.configs.settings_values import check_layer_indices, check_rank_pattern, check_targets

    values = {}
    if args.lora_target_regex is not None:
        values["lora_targets"] = _through("--lora-target-regex", check_targets, {"regex": args.lora_target_regex})
    if args.lora_rank_pattern:
        pairs = {}
        for text in args.lora_rank_pattern:
            key, equals, rank = text.rpartition("=")
            if not equals:
                raise UsageError(f"--lora-rank-pattern: expected REGEX=R, got {text!r}")
            pairs[key] = int(rank) if rank.strip().isdigit() else rank
        values["lora_rank_pattern"] = _through("--lora-rank-pattern", check_rank_pattern, pairs)
    if args.layers_to_transform is not None:
        indices = [int(part) if part.strip().isdigit() else part for part in args.layers_to_transform.split(",")]
        values["layers_to_transform"] = _through("--layers-to-transform", check_layer_indices, indices)
    return values


#: The N-D parallel options: whole numbers, the settings of the same name (configs/parallelism.SETTINGS).
DEGREES = ("tensor_parallel", "context_parallel", "ulysses", "expert_parallel")


def parallel_options(args) -> dict:
    """--tensor-parallel, --context-parallel, --ulysses, --expert-parallel, --activation-offload, --tiled-mlp [N] as
    the settings write them (a usage error naming the option)."""
    from zeromem_lsp.configs.settings_values import check_tiled_mlp

    values: dict = {}
    for name in DEGREES:
        value = positive("--" + name.replace("_", "-"), getattr(args, name, None))
        if value is not None:
            values[name] = value
    if getattr(args, "activation_offload", None) is not None:
        values["activation_offload"] = args.activation_offload
    tiled = getattr(args, "tiled_mlp", None)
    if tiled is not None:  # --tiled-mlp alone: True (the default shard count); --tiled-mlp N: N shards
        values["tiled_mlp"] = tiled if tiled is True else _through("--tiled-mlp", check_tiled_mlp,
                                                                   positive("--tiled-mlp", tiled))
    return values


def _through(option: str, check, value):
    """A value through the check the zeromem block uses for it; a usage error naming the option."""
    try:
        return check(value)
    except ValueError as error:
        raise UsageError(f"{option}: {error}") from None


def forced_settings(args):
    """The options given, as the highest settings layer (validated like a zeromem block)."""
    from zeromem_lsp.configs.settings import validate_settings

    values: dict = {name: getattr(args, name) for name in AS_WRITTEN if getattr(args, name) is not None}
    for name in COUNTS:
        value = positive("--" + name.replace("_", "-"), getattr(args, name))
        if value is not None:
            values[name] = value
    values.update({name: True for name in SWITCHES if getattr(args, name)})
    if getattr(args, "kbit_prepare", None) is not None:  # --kbit-prepare / --no-kbit-prepare
        values["kbit_prepare"] = args.kbit_prepare
    if getattr(args, "lora_dropout", None) is not None:
        values["lora_dropout"] = args.lora_dropout
    values.update(matching_options(args))
    values.update(parallel_options(args))
    if args.model_config is not None and "parameters" not in values:
        model = Path(args.model_config)
        values["parameters"] = {"from_config": str(model.resolve()) if model.exists() else args.model_config}
    if args.accelerate_config is not None:
        from zeromem_lsp.cli.launch_option import accelerate_config

        values["accelerate_config"] = accelerate_config(args.accelerate_config)
    settings, problems = validate_settings(values)
    if problems:
        raise UsageError(f"--{problems[0].name.replace('_', '-')}: {problems[0].message}")
    return settings


def _positioned(path: Path, analysis, codes: set[str]) -> list[str]:
    """`path:line:column: CODE error: message` as `check` prints them, for the errors with these codes."""
    from zeromem_lsp.cli.reporters import text_report
    from zeromem_lsp.lint import FileResult

    found = [finding for finding in analysis.findings if finding.code in codes and finding.severity == "error"]
    return text_report([FileResult(str(path), found, analysis.lines)]).splitlines()


def estimate_of_config(args) -> tuple[Estimate, str | None]:
    """The estimate of the config at --config, with the options over it; a usage error when it cannot be read,
    has an invalid setting (positioned, as `check` reports it) or lacks what the model state needs."""
    from zeromem_lsp.analysis import analyse_bytes
    from zeromem_lsp.cli.check import hub_access
    from zeromem_lsp.lint import unrecognised
    from zeromem_lsp.memory.plan import Unplanned
    from zeromem_lsp.project import discover, file_loader
    from zeromem_lsp.rules.registry import rule_named

    given = [name for name in GRPO_KEYS if getattr(args, name, None) is not None]
    if given:  # GRPO's keys are the recipe's (its own or axolotl's trl: block), not settings
        option = "--" + given[0].replace("_", "-")
        raise UsageError(f"{option} goes with --model-config; with --config, write it in the recipe "
                         f"({given[0]}, or trl.{given[0]} for axolotl)")
    path = Path(args.config)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"--config: cannot read {args.config!r} ({error.strerror or error})") from None
    forced = forced_settings(args)
    analysis = analyse_bytes(data, path.name, discover(path).layers_for(path), forced,
                             file_loader(path, hub_access(args)))
    if analysis.kind is None:
        raise UsageError(f"--config {path}: {unrecognised(analysis)}")
    if args.accelerate_config is not None and analysis.recipe is None:
        raise UsageError(f"--accelerate-config pairs a recipe with its launch; --config {path} is a {analysis.kind} "
                         "config, not an axolotl, LLaMA-Factory or TRL recipe")
    refused = {rule_named(name).code for name in ("syntax-error", "invalid-zeromem-setting")}
    problems = _positioned(path, analysis, refused)
    if problems:
        raise UsageError("\n".join(["the config has errors the estimate cannot go past:", *problems]))
    plan = analysis.plan
    if plan is None or isinstance(plan, Unplanned):
        uncounted = rule_named("recipe-model-not-counted").code
        unread = next((finding.message for finding in analysis.findings if finding.code == uncounted), None)
        missing = ("; ".join(plan.missing) if plan is not None else "nothing to plan") if unread is None else unread
        raise UsageError(f"--config {path}: cannot estimate: {'' if unread else 'missing '}{missing}")
    return Estimate(plan), None
