"""ZM3xx: quick fixes for what HF Transformers, Accelerate and PyTorch FSDP refuse or silently ignore.

The judgements are in `configs.fsdp` and `configs.accelerate`, their rules in `rules.kinds`; this module
gives an issue a fix where one is obvious, plus the quick fixes of ZM101 for FSDP plans
(switch the sharding strategy, enable CPU offload).
"""

from __future__ import annotations

import json

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs.fsdp import FSDP_OPTIONS, parse_fsdp_options
from zeromem_lsp.document import Member
from zeromem_lsp.edits import rename_key, replace_value, set_value
from zeromem_lsp.findings import Fix, TextEdit, overlapping
from zeromem_lsp.memory.plan import MemoryPlan, Suggestion
from zeromem_lsp.present import describe_suggestion
from zeromem_lsp.memory.stages import FSDP_KEYS, stage as stage_named
from zeromem_lsp.configs.recipes import recipe_tool
from zeromem_lsp.rules.context import Context

#: ZeRO-stage name of a plan -> the FSDP strategy with the same persistent state.
STRATEGY_FOR_STAGE = {stage.key: stage.fsdp for stage in map(stage_named, FSDP_KEYS) if stage.fsdp}


def scalar(context: Context, value: object) -> str:
    """A value written in the document's own syntax (plain scalars in YAML)."""
    if context.document.flavour == "yaml":
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str) and value.replace("_", "").isalnum():
            return value
    return json.dumps(value)


def _member(context: Context, path) -> Member | None:
    found = context.document.find(tuple(path))
    return found if isinstance(found, Member) else None


def _rename(context: Context, member: Member, issue: ConfigIssue) -> Fix | None:
    if not issue.replacement:
        return None
    return Fix(f"Rename {member.key!r} to {issue.replacement!r}",
               (rename_key(member, issue.replacement, context.document),), preferred=True)


def _use_value(context: Context, member: Member, issue: ConfigIssue) -> Fix | None:
    if not issue.replacement or member.value is None:
        return None
    return Fix(f"Use {issue.replacement}", (replace_value(member, issue.replacement),), preferred=True)


def _sync_module_states(context: Context, member: Member, issue: ConfigIssue) -> Fix | None:
    return Fix("Set sync_module_states to true", (replace_value(member, scalar(context, True)),), preferred=True)


def _reshard_after_forward(context: Context, member: Member, issue: ConfigIssue) -> Fix | None:
    if not member.key.endswith("reshard_after_forward"):
        return None
    return Fix("Set reshard_after_forward to true (≈ FULL_SHARD)",
               (replace_value(member, scalar(context, True)),), preferred=True)


def _offload_alone(context: Context, member: Member, issue: ConfigIssue) -> Fix | None:
    return _options_fix(member, ["full_shard", "offload"])


def _both_shardings(context: Context, member: Member, issue: ConfigIssue) -> Fix | None:
    if member.value is None:
        return None
    options, _ = parse_fsdp_options(member.value.value)
    return _options_fix(member, [option for option in options if option != "shard_grad_op"])


def _options_fix(member: Member, fixed: list[str]) -> Fix | None:
    if member.value is None:
        return None
    text = " ".join(fixed)
    return Fix(f'Use --fsdp "{text}"', (replace_value(member, json.dumps(text)),), preferred=True)


#: namespaced issue kind -> its quick fix (kinds without one are absent).
FIXERS = {
    "accelerate.unknown_key": _rename,
    "recipe.unknown_key": _rename,
    "recipe.ignored_key": _rename,
    "recipe.unknown_script_key": _rename,
    "fsdp.deprecated_key": _rename,
    "fsdp.ignored_setting": _rename,
    "accelerate.ignored_setting": _rename,
    "accelerate.accelerate_value": _use_value,
    "fsdp.ram_efficient_without_sync": _sync_module_states,
    "fsdp.fsdp2_rejects": _reshard_after_forward,
    "fsdp.offload_alone": _offload_alone,
    "fsdp.full_shard_with_shard_grad_op": _both_shardings,
}


def fixes_for(context: Context, issue: ConfigIssue) -> tuple[Fix, ...]:
    """The quick fix of an FSDP or Accelerate issue, if one is obvious."""
    fixer = FIXERS.get(issue.key)
    if fixer is None:
        return ()
    member = _member(context, issue.path)
    fix = fixer(context, member, issue) if member is not None else None
    return (fix,) if fix is not None else ()


def _fsdp_section(context: Context) -> tuple[tuple, str] | None:
    """Where this document's settings are written, and which reader: (base path, reader)."""
    data = context.data if isinstance(context.data, dict) else {}
    if "distributed_type" in data:
        if data.get("distributed_type") == "DEEPSPEED":
            return ("deepspeed_config",), "accelerate-deepspeed"
        return ("fsdp_config",), "accelerate"
    if "fsdp" in data and data.get("fsdp"):
        return ("fsdp",), "options"
    if isinstance(data.get("deepspeed"), dict):
        return ("deepspeed",), "inline-deepspeed"
    return None


def _deepspeed_fixes(context: Context, plan: MemoryPlan, suggestion: Suggestion, base: tuple,
                     reader: str) -> list[TextEdit | None]:
    edits: list[TextEdit | None] = []
    number = stage_named(suggestion.stage).number
    if reader == "accelerate-deepspeed":
        block = context.data.get("deepspeed_config") if isinstance(context.data, dict) else None
        if isinstance(block, dict) and block.get("deepspeed_config_file"):
            return []
        if suggestion.stage != plan.stage:
            edits.append(set_value(context.document, (*base, "zero_stage"), str(number)))
        if suggestion.offload.optimizer and not plan.offload.optimizer:
            edits.append(set_value(context.document, (*base, "offload_optimizer_device"), "cpu"))
        if suggestion.offload.param and not plan.offload.param:
            edits.append(set_value(context.document, (*base, "offload_param_device"), "cpu"))
    else:
        if suggestion.stage != plan.stage:
            edits.append(set_value(context.document, (*base, "zero_optimization", "stage"), str(number)))
        if suggestion.offload.optimizer and not plan.offload.optimizer:
            edits.append(set_value(context.document, (*base, "zero_optimization", "offload_optimizer"), '{"device": "cpu"}'))
        if suggestion.offload.param and not plan.offload.param:
            edits.append(set_value(context.document, (*base, "zero_optimization", "offload_param"), '{"device": "cpu"}'))
    return edits


def _all_written(edits: list[TextEdit | None]) -> list[TextEdit] | None:
    """The edits, or None when there are none or one cannot be written."""
    written = [edit for edit in edits if edit is not None]
    return written if written and len(written) == len(edits) else None


def _key_in(context: Context, base: tuple, name: str) -> tuple:
    """The spelling already used in the section (fsdp_x or x); Accelerate's config writes fsdp_x."""
    found = context.document.find(base)
    container = found.value if isinstance(found, Member) else None
    if container is not None and container.members:
        if any(m.key == name for m in container.members) and not any(m.key == f"fsdp_{name}" for m in container.members):
            return (*base, name)
    return (*base, f"fsdp_{name}")


def suggestion_fixes(context: Context, plan: MemoryPlan, suggestion: Suggestion) -> tuple[Fix, ...] | None:
    """ZM101's quick fix outside a plain DeepSpeed config (None there): switch the sharding strategy
    and/or enable CPU offload; for DeepSpeed inside Accelerate or TrainingArguments, its own keys."""
    data = context.data if isinstance(context.data, dict) else {}
    if context.document.flavour == "yaml" and recipe_tool({key for key in data if isinstance(key, str)}):
        return ()  # a recipe: its engine is in another file or in keys the tool rewrites; no edit here
    where = _fsdp_section(context)
    if where is None:
        return None
    base, reader = where
    edits: list[TextEdit | None] = []
    if plan.family != "fsdp":
        if reader not in ("accelerate-deepspeed", "inline-deepspeed"):
            return ()
        switched = _all_written(_deepspeed_fixes(context, plan, suggestion, base, reader))
        if switched is None:
            return ()
        return (Fix(f"Switch to {describe_suggestion(suggestion, plan.family)}", tuple(switched), preferred=True),)
    if reader not in ("options", "accelerate"):
        return ()
    strategy = STRATEGY_FOR_STAGE[suggestion.stage]
    offload = getattr(suggestion.offload, "cpu", False) and not getattr(plan.offload, "cpu", False)
    if reader == "options":
        member = _member(context, base)
        if member is None or member.value is None:
            return ()
        block = data.get("fsdp_config")
        written = block if isinstance(block, dict) else {}
        version = written.get("version", written.get("fsdp_version", 2))  # transformers 5.24: FSDP2 by default
        if suggestion.stage == "ddp" and str(version) != "1":
            return ()  # no_shard is FSDP1's only (TrainingArguments raises under FSDP2)
        options, _ = parse_fsdp_options(member.value.value)
        words = [w for w in options if w.upper() not in STRATEGY_FOR_STAGE.values() and not w.startswith("hybrid")]
        words = [strategy.lower()] + [w for w in words if w != "offload"] + (["offload"] if offload or "offload" in options else [])
        words = [w for w in dict.fromkeys(words) if w in FSDP_OPTIONS]
        edits.append(replace_value(member, json.dumps(" ".join(words))))
    else:
        version = (data.get("fsdp_config") or {}).get("fsdp_version", 1)
        if suggestion.stage != plan.stage:
            if str(version) == "2":
                if suggestion.stage == "ddp":
                    return ()
                edits.append(set_value(context.document, _key_in(context, base, "reshard_after_forward"),
                                       scalar(context, suggestion.stage == "zero3")))
            else:
                edits.append(set_value(context.document, _key_in(context, base, "sharding_strategy"),
                                       scalar(context, strategy)))
        if offload:
            edits.append(set_value(context.document, _key_in(context, base, "offload_params"), scalar(context, True)))
    done = _all_written(edits)
    if done is None or overlapping(done):
        return ()
    label = STRATEGY_FOR_STAGE[suggestion.stage] + (" with CPU offload" if getattr(suggestion.offload, "cpu", False) else "")
    return (Fix(f"Switch to {label}", tuple(done), preferred=True),)
