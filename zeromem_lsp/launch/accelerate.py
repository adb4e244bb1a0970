"""A recipe paired with the Accelerate config it is launched with (`accelerate_config`).

`accelerate launch --config_file zero3.yaml train.py recipe.yaml`: the YAML says how many processes run
and which engine Accelerate sets up; the recipe says what trains. Facts (accelerate 1.16, transformers
5.24; docs/recipes.md has each with its file):

- World size: `num_processes` is the total over all machines (launch's `--num_processes` help: "The total
  number of processes"); each machine starts `num_processes // num_machines` (utils/launch.py), so the world
  is that × `num_machines`. Absent with `distributed_type: NO`: 1 (config_args.py process_config); absent
  otherwise: -1, which `accelerate launch` refuses without `--num_processes`. `NO` runs one process.
- Engine: a recipe's `deepspeed:` file wins (TrainingArguments builds the DeepSpeed plugin from it, and
  AcceleratorState picks DEEPSPEED before FSDP); Accelerate's DeepSpeed (from the launcher's environment)
  wins over a recipe's `fsdp_config`; a recipe's `fsdp_config` wins over the YAML's (the Trainer passes its
  own FSDP plugin). With the recipe's file, Accelerate refuses YAML `deepspeed_config` keys that the file
  owns and a YAML `mixed_precision` (DeepSpeedPlugin._deepspeed_config_checks).
- Mixed precision: the recipe's bf16 / fp16 win; else the YAML's (TrainingArguments reads
  ACCELERATE_MIXED_PRECISION first, then its own flags).

Each value taken from the YAML is credited to it (the world size as a settings layer below the recipe's
own zeromem block and the command line, above project and editor settings).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, cast

from zeromem_lsp.configs.accelerate import OWNED_BY_DEEPSPEED_FILE, AccelerateSetup, validate_accelerate
from zeromem_lsp.configs.detect import yaml_kind
from zeromem_lsp.configs.fsdp import FsdpSetup
from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs.layers import Resolved, config_values
from zeromem_lsp.configs.parallel_keys import accelerate_parallel
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.training import positive_int
from zeromem_lsp.configs.workload import Workload
from zeromem_lsp.resolved.planner import DeepSpeedSource, FsdpSource, PlanSource, TorchSource
from zeromem_lsp.provenance import Given, Origin, Path
from zeromem_lsp.readers import Loader, Reading, ignored_keys, with_recipe_optimizer

if TYPE_CHECKING:
    from zeromem_lsp.configs.recipes import RecipeSetup

DEEPSPEED_OVER_FSDP = "AcceleratorState picks DEEPSPEED before FSDP when a DeepSpeed plugin exists"


def _issue(kind: str, path: Path, target: str, message: str) -> ConfigIssue:
    return ConfigIssue(kind, tuple(path), target, message, None, "recipe")


def _read(loader: Loader | None, name: str) -> tuple[str | None, str]:
    """(text, where it was looked for)."""
    if loader is None:
        return None, "no file access in this front end"
    folder = getattr(loader, "folder", None)
    tried = str(FilePath(folder) / name) if folder is not None else name
    text = loader(name)
    if text is None:
        why = getattr(loader, "why_unreadable", lambda _: "file not found")(name)
        return None, f"looked for {tried}: {why}"
    return text, tried


def shown_path(name: str) -> str:
    """The path as written, or an absolute one (project settings, the command line) below the working
    directory as a relative one."""
    path = FilePath(name)
    if not path.is_absolute():
        return name
    try:
        return path.relative_to(FilePath.cwd()).as_posix()
    except ValueError:
        return name


def parsed_accelerate(text: str) -> tuple[dict | None, str]:
    """The YAML as a dict, or why it is not an Accelerate config."""
    from zeromem_lsp.document.yaml_document import parse_yaml_document

    document = parse_yaml_document(text)
    if document.syntax_errors:
        return None, f"does not parse as YAML ({document.syntax_errors[0].message})"
    root = document.root
    if root is None or root.kind != "object":
        return None, "is not a YAML mapping"
    data = cast(dict, document.to_python())  # an object root decodes to a dict
    if yaml_kind({str(key) for key in data}) != "accelerate" or "distributed_type" not in data:
        return None, "is not an Accelerate config (no distributed_type; `accelerate config` writes one)"
    return data, ""


def world_size(data: dict, setup: AccelerateSetup, shown: str) -> tuple[Given | None, str]:
    """The ranks `accelerate launch` starts from this YAML (without launch flags), or why there is no figure."""
    if setup.distributed_type == "NO":
        return Given(1, f"{shown} distributed_type NO: one process"), ""
    if "num_processes" not in data:
        return None, f"{shown} has no num_processes (accelerate launch then needs --num_processes)"
    total = positive_int(data.get("num_processes"))
    machines = positive_int(data.get("num_machines", 1))
    if total is None or machines is None:
        return None, f"{shown} num_processes / num_machines are not positive integers"
    if machines == 1:
        return Given(total, f"{shown} num_processes"), ""
    per_machine = total // machines
    if per_machine == 0:
        return None, f"{shown} num_processes {total} < num_machines {machines}: no process per machine"
    return Given(per_machine * machines, f"{shown} num_processes {total} over num_machines {machines}: "
                 f"{per_machine} per machine × {machines}"), ""


def pair_accelerate(reading: Reading, resolved: Resolved, loader: Loader | None) -> Reading:
    """The recipe's reading with what the Accelerate config named by `accelerate_config` says, or with a
    ZM312 issue (on the setting when it is written in this document) when it cannot be used."""
    recipe, name = reading.recipe, resolved.settings.accelerate_config
    assert recipe is not None and name is not None, "analysis pairs a recipe that names its Accelerate config"
    origin = resolved.origin("accelerate_config") or Origin("accelerate_config")
    at, target = (tuple(origin.path), "value") if origin.path else ((), "key")
    text, where = _read(loader, name)
    data, problem = parsed_accelerate(text) if text is not None else (None, f"cannot be read ({where})")
    if data is None:
        message = (f"the Accelerate config {shown_path(name)!r} ({origin.note}) {problem}; the recipe is planned "
                   "without it")
        return reading._replace(issues=[*reading.issues, _issue("accelerate_unreadable", at, target, message)],
                                launch_file=where if text is not None else None)
    found, setup = validate_accelerate(data)
    if setup.distributed_type is None:
        refused = next((issue.message for issue in found if issue.path in ((), ("distributed_type",))),
                       "no valid distributed_type")
        message = f"the Accelerate config {shown_path(name)!r} ({origin.note}) is refused by Accelerate: {refused}"
        return reading._replace(issues=[*reading.issues, _issue("accelerate_unreadable", at, target, message)],
                                launch_file=where)
    return _paired(reading, recipe, data, setup, shown_path(name), at, loader)._replace(launch_file=where)


def _paired(reading: Reading, recipe: RecipeSetup, data: dict, setup: AccelerateSetup, shown: str, at: Path,
            loader: Loader | None) -> Reading:
    issues = list(reading.issues)
    ranks, why = world_size(data, setup, shown)
    source, workload = reading.source, reading.workload
    kind = setup.distributed_type
    if recipe.deepspeed is not None:
        issues += _deepspeed_conflicts(recipe.deepspeed, data, setup, shown)
    elif recipe.fsdp_config is not None and isinstance(recipe.fsdp_config.value, dict):
        if kind == "DEEPSPEED":
            issues.append(_issue("launch_overridden", recipe.fsdp_config.path or ("fsdp_config",), "key",
                                 f"{shown} launches DeepSpeed, which wins over this fsdp_config: TrainingArguments "
                                 f"builds a DeepSpeed plugin from the launcher's environment and {DEEPSPEED_OVER_FSDP}"))
            source, workload = _accelerate_deepspeed(reading, recipe, setup, shown, at, loader, issues)
        elif (isinstance(source, FsdpSource) and isinstance(source.fsdp, FsdpSetup) and ranks is not None
              and source.fsdp.strategy in ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2")):
            ranks = _shard_group(data, shown) or ranks
    elif kind == "DEEPSPEED":
        source, workload = _accelerate_deepspeed(reading, recipe, setup, shown, at, loader, issues)
    elif kind == "FSDP" and setup.fsdp is not None:
        written = setup.fsdp.version_note
        version_note = (f"{written}; {shown} names no fsdp_version" if written.startswith("default")
                        else f"{shown} {written}")
        fsdp = setup.fsdp._replace(strategy_path=None, offload_path=None, version_path=None, version_note=version_note,
                                   strategy_note=f"{shown} {setup.fsdp.strategy_note}",
                                   mixed_precision=_compute(recipe) or setup.mixed_precision)
        source = FsdpSource(fsdp, world_hint=why or None)
        if ranks is not None and fsdp.strategy in ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2"):
            ranks = _shard_group(data, shown) or ranks
    launched = {name: Given(given.value, f"{given.note} (in {shown})") for name, given in
                accelerate_parallel(data.get("parallelism_config")).items()}
    workload = dataclasses.replace(workload, parallel={**launched, **workload.parallel})  # the recipe's own win
    refuser = getattr(reading.source, "refuser", None)  # the recipe's tool still refuses a zeromem block
    if refuser is not None and isinstance(source, (DeepSpeedSource, FsdpSource, TorchSource)):
        source = source._replace(refuser=refuser)
    if why and isinstance(source, (DeepSpeedSource, FsdpSource)):
        source = source._replace(world_hint=f"{why}; give --world-size or world_size")
    layers, deepspeed_setup = reading.layers, reading.setup
    if isinstance(source, DeepSpeedSource) and source is not reading.source:  # DeepSpeed keeps its own precision
        deepspeed_setup = source.setup
        layers = tuple(layer._replace(settings=layer.settings.model_copy(update={"precision": None}))
                       for layer in layers)
    values = {"world_size": ranks} if ranks is not None else {}
    if source is not reading.source or (recipe.deepspeed is None and recipe.fsdp_config is None):
        values["engine"] = _engine(source, data, setup, shown)  # the YAML's engine runs: credited to it
    if values:
        layer = config_values(ZeromemSettings.from_checked({name: found.value for name, found in values.items()}),
                              {name: found.origin for name, found in values.items()})
        layers = (*layers, layer)
    return reading._replace(issues=issues, source=source, workload=workload, layers=layers, setup=deepspeed_setup,
                            ignored=(*reading.ignored, *ignored_keys("accelerate", data, shown)))


def _engine(source: PlanSource, data: dict, setup: AccelerateSetup, shown: str) -> Given:
    """The engine the YAML sets up, with what in it says so."""
    written = f"{shown} distributed_type {setup.distributed_type}"
    if isinstance(source, DeepSpeedSource):
        block = _deepspeed_block(data)
        detail = (f"deepspeed_config_file {setup.deepspeed_file}" if setup.deepspeed_file
                  else f"zero_stage {block['zero_stage']}" if "zero_stage" in block
                  else "no zero_stage: Accelerate's default 2")
        return Given("deepspeed", f"{written}, {detail}")
    if isinstance(source, FsdpSource):
        return Given("fsdp", written)
    return Given("torch", f"{written}: " + ("one process" if setup.distributed_type == "NO" else "torch DDP"))


def _deepspeed_block(data: dict) -> dict:
    """The YAML's deepspeed_config block, or {} when it is not a mapping."""
    block = data.get("deepspeed_config")
    return block if isinstance(block, dict) else {}


def _shard_group(data: dict, shown: str) -> Given | None:
    """HYBRID strategies shard one copy over a machine's GPUs: num_processes // num_machines."""
    total, machines = positive_int(data.get("num_processes")), positive_int(data.get("num_machines", 1))
    if total is None or machines is None or total // machines == 0:
        return None
    return Given(total // machines, f"{shown} GPUs per machine (num_processes {total} // num_machines {machines}), "
                 "the shard group of the hybrid strategy")


def _compute(recipe: RecipeSetup) -> str | None:
    """The recipe's own bf16 / fp16 (they win over the YAML's mixed_precision)."""
    return next((name for name in ("bf16", "fp16") if recipe.flags.get(name)), None)


def _deepspeed_conflicts(deepspeed: Given, data: dict, setup: AccelerateSetup,
                         shown: str) -> list[ConfigIssue]:
    """The recipe names its own DeepSpeed file (`deepspeed`): what the YAML says about the engine is not used, or
    stops the launch."""
    at = deepspeed.path or ("deepspeed",)
    if setup.distributed_type == "DEEPSPEED":
        block = _deepspeed_block(data)
        owned = [key for key in OWNED_BY_DEEPSPEED_FILE if key in block]
        if data.get("mixed_precision") is not None or data.get("fp16"):  # `fp16` is the old spelling, converted
            owned.append("mixed_precision")
        if owned:
            return [_issue("launch_refused", at, "key",
                           f"accelerate launch with {shown} stops here: the recipe's DeepSpeed file goes to Accelerate's "
                           f"DeepSpeedPlugin, which refuses a YAML that also sets {', '.join(owned)} (\"will be "
                           f"ignored\"); remove them from {shown}, or drop deepspeed: and let the YAML choose")]
        named = setup.deepspeed_file
        if named and named != deepspeed.value:
            return [_issue("launch_overridden", at, "key",
                           f"this DeepSpeed file wins over {shown}'s deepspeed_config_file {named!r}: TrainingArguments "
                           "hands it to the DeepSpeed plugin itself, so the YAML's file is not read")]
    if setup.distributed_type == "FSDP":
        return [_issue("launch_overridden", at, "key",
                       f"this DeepSpeed file wins over {shown}'s distributed_type FSDP: TrainingArguments builds a "
                       f"DeepSpeed plugin from it and {DEEPSPEED_OVER_FSDP}")]
    return []


def _accelerate_deepspeed(reading: Reading, recipe: RecipeSetup, setup: AccelerateSetup, shown: str, at: Path,
                          loader: Loader | None, issues: list[ConfigIssue]) -> tuple[PlanSource, Workload]:
    """DeepSpeed as Accelerate's plugin sets it up from the YAML, with the recipe's precision and optimizer."""
    from zeromem_lsp.readers import _recipe_deepspeed

    if setup.deepspeed_file:  # the plugin opens it; the Trainer fills its "auto" from the recipe
        named = dataclasses.replace(recipe, deepspeed=Given(setup.deepspeed_file,
                                                            f"{shown} deepspeed_config_file", at))
        found, workload, missing, _ = _recipe_deepspeed(named, loader, issues)  # its keys: the YAML's own file
        if found is None:
            return reading.source, reading.workload
        return DeepSpeedSource(found), _with_recipe(reading.workload, workload)
    precision = _compute(recipe) or {"no": "fp32", None: "fp32"}.get(setup.mixed_precision, setup.mixed_precision)
    note = (f"the recipe's {precision}" if _compute(recipe) else f"{shown} mixed_precision {setup.mixed_precision!r}"
            if setup.mixed_precision else f"no bf16 / fp16 in the recipe or {shown}: fp32")
    inline = setup.deepspeed
    assert inline is not None, "validate_accelerate reads DEEPSPEED without deepspeed_config_file from its block"
    found = inline._replace(stage_path=None, precision=precision if precision != "fp8" else None,
                                     precision_path=None, precision_note=note, written_in=shown)
    if recipe.optimizer is not None:  # the Trainer builds the recipe's optimizer
        found = with_recipe_optimizer(found, recipe.optimizer)
    return DeepSpeedSource(found), dataclasses.replace(reading.workload, zero={}, zero_root=None)


def _with_recipe(recipe_workload: Workload, deepspeed: Workload) -> Workload:
    """The recipe's batch, sequence and checkpointing; the DeepSpeed file's buckets."""
    return dataclasses.replace(recipe_workload, zero=deepspeed.zero, zero_root=None,
                               parallel={**deepspeed.parallel, **recipe_workload.parallel})
