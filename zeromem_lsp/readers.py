"""One reader per config kind: plain data in, plain data out — issues, where the zeromem block may be,
the setup, what to plan (a planner.PlanSource) and the workload. No closures: the pipeline in
analysis.py resolves the settings once, then plans through planner.plan and runs the rules.
A DeepSpeed config's batch check needs the resolved world size: `issues_with(reading, world_size)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from zeromem_lsp.configs.deepspeed.validation import validate_deepspeed
from zeromem_lsp.configs.deepspeed.catalog import HF_AUTO_STAGE
from zeromem_lsp.configs.detect import Kind
from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs.loss_kernels import recipe_loss, trainer_loss
from zeromem_lsp.configs.training import TrainingSetup, read_training_setup
from zeromem_lsp.configs.workload import (
    Workload, accelerate_workload, deepspeed_workload, fsdp_file_workload, hf_arguments_workload, read_flag,
)
from zeromem_lsp.document import parse_document
from zeromem_lsp.memory.plan import Ignored
from zeromem_lsp.resolved.planner import DeepSpeedSource, FsdpSource, NoSource, PlanSource, TorchSource
from zeromem_lsp.provenance import Given, Origin, Path
from zeromem_lsp.document.hjson_numbers import hjson_numbers

if TYPE_CHECKING:
    from zeromem_lsp.configs.recipes import RecipeSetup, Tool


class Loader(Protocol):
    """Reads a file named in the document (path as written; relative to the analysed file) -> text, or None.

    A Protocol rather than a Callable alias: project.FileLoader is a NamedTuple with `__call__`, which mypy
    does not match against a Callable type."""

    def __call__(self, name: str, /) -> str | None: ...

BLANK_SETUP = read_training_setup({})
TOP_BLOCK: tuple[Path, ...] = (("zeromem",),)


class Reading(NamedTuple):
    data: object  # the document as plain Python
    issues: list[ConfigIssue]  # issue paths are document paths
    block_paths: tuple[Path, ...]  # where a zeromem block may be; the first one written wins
    setup: TrainingSetup | None  # the DeepSpeed setup the document uses, if any
    rule_setup: TrainingSetup  # what the rules see (blank outside a plain DeepSpeed config)
    source: PlanSource  # what to plan: planner.plan(source, resolved settings, peak source)
    workload: Workload = Workload()  # micro-batch, sequence length, checkpointing, buffer sizes as written
    deepspeed_config: dict | None = None  # a plain DeepSpeed config, validated once the world size is resolved
    layers: tuple = ()  # configs.layers.SettingsLayer: what the config says that settings carry (a recipe's model)
    recipe: RecipeSetup | None = None  # a recipe's run, adapter included, as plain data
    launch_file: str | None = None  # the Accelerate config a recipe is paired with, as read (launch/accelerate.py)
    ignored: tuple[Ignored, ...] = ()  # keys set that change memory but are not modelled (configs/key_inventory.py)


def ignored_keys(fmt: str, data: object, file: str | None = None, root: Path | None = ()) -> tuple[Ignored, ...]:
    """The keys of `data` (a config of format `fmt`) set to a value that changes per-GPU memory in a way the
    figures do not model, each with what it does. `file`: the data is another file's (shown by name, no
    position here); `root`: where `data` sits in this document."""
    from zeromem_lsp.configs.key_inventory import changes_model_state, not_modelled

    if not isinstance(data, dict):
        return ()
    return tuple(Ignored(f"{file}: {'.'.join(path)}" if file else ".".join(map(str, (*(root or ()), *path))), value, why,
                         None if file or root is None else (*root, *path), changes_model_state(fmt, ".".join(path)))
                 for path, value, why in not_modelled(fmt, data))


def issues_with(reading: Reading, world_size: int | None) -> list[ConfigIssue]:
    """The reader's issues; a plain DeepSpeed config is validated here, with the resolved world size
    (DeepSpeed's batch check needs it)."""
    if reading.deepspeed_config is None:
        return reading.issues
    config = reading.deepspeed_config
    return validate_deepspeed(config, world_size=data_parallel_world(config, world_size))


def data_parallel_world(config: dict, world_size: int | None) -> int | None:
    """The world DeepSpeed's batch check divides by: the ranks over `sequence_parallel_size` (Ulysses ranks share a
    batch: deepspeed 0.19.8 runtime/config.py DeepSpeedConfig.__init__, world / sequence_parallel_size without an
    mpu, the mpu's data-parallel size with one); None when that is not a whole number (no batch figure is certain)."""
    degree = config.get("sequence_parallel_size")
    if world_size is None or type(degree) is not int or degree <= 1:
        return world_size
    return world_size // degree if world_size % degree == 0 else None


def read_deepspeed(data: object, loader: Loader | None) -> Reading:
    loaded = hjson_numbers(data)  # DeepSpeed opens the path with hjson: `1.0` is 1 there
    setup = read_training_setup(loaded)
    if not isinstance(loaded, dict):  # a top-level array, string, null: DeepSpeed says it wants an object
        return Reading(data, validate_deepspeed(loaded), TOP_BLOCK, setup, setup, DeepSpeedSource(setup))
    config = {key: value for key, value in loaded.items() if key != "zeromem"}
    return Reading(data, [], TOP_BLOCK, setup, setup, DeepSpeedSource(setup), deepspeed_workload(config, ()), config,
                   ignored=ignored_keys("deepspeed", config))


def _rerooted(setup: TrainingSetup, root: tuple | None) -> TrainingSetup:
    """A DeepSpeed setup read from a dict at `root` in this document, its paths made document paths.

    `root` None: the config came from another file, so none of its paths is a position here."""

    def at(path):
        return None if path is None or root is None else (*root, *path)

    return setup._replace(stage_path=at(setup.stage_path), precision_path=at(setup.precision_path),
                   optimizer_path=at(setup.optimizer_path))


NO_SETUP = "an FSDP or DeepSpeed setup in this file"


def _family_reading(data: dict, issues: list[ConfigIssue], block_paths: tuple[Path, ...], fsdp_setup,
                    accelerate, setup: TrainingSetup | None, missing: str, workload: Workload) -> Reading:
    if fsdp_setup is not None:
        source: PlanSource = FsdpSource(fsdp_setup, accelerate, "num_machines" in data)
    elif setup is not None:
        launcher = (Given(accelerate.world_size, "num_processes", ("num_processes",))
                    if accelerate is not None and accelerate.world_size else None)
        source = DeepSpeedSource(setup, launcher)
    else:
        source = NoSource(missing)
    return Reading(data, issues, block_paths, setup, BLANK_SETUP, source, workload)


def read_accelerate(data: dict, loader: Loader | None) -> Reading:
    from zeromem_lsp.configs.accelerate import validate_accelerate

    issues, accelerate = validate_accelerate(data)
    setup, missing, workload = None, NO_SETUP, accelerate_workload(data)
    ignored = ignored_keys("accelerate", data)
    if accelerate.fsdp is None and accelerate.deepspeed is not None:
        setup = accelerate.deepspeed
    elif accelerate.fsdp is None and accelerate.deepspeed_file:
        loaded = loader(accelerate.deepspeed_file) if loader is not None else None
        if loaded is None:
            missing = f"the DeepSpeed config {accelerate.deepspeed_file!r} (could not be read next to this file)"
        else:
            config = parse_document(loaded).to_python()  # Accelerate fills "stage": "auto" (HF_AUTO_STAGE)
            setup = _rerooted(read_training_setup(config, HF_AUTO_STAGE), None)._replace(
                written_in=accelerate.deepspeed_file)
            launched = workload.parallel  # parallelism_config's, over the DeepSpeed file's
            workload = deepspeed_workload(config, None, accelerate.deepspeed_file)
            workload = replace(workload, parallel={**workload.parallel, **launched})
            ignored += ignored_keys("deepspeed", config, accelerate.deepspeed_file)
    blocks = (("fsdp_config", "zeromem"), ("deepspeed_config", "zeromem"), ("zeromem",))
    return _family_reading(data, issues, blocks, accelerate.fsdp, accelerate, setup, missing,
                           workload)._replace(ignored=ignored)


def read_fsdp(data: dict, loader: Loader | None) -> Reading:
    from zeromem_lsp.configs.fsdp import validate_transformers_fsdp

    issues, fsdp_setup = validate_transformers_fsdp(data, ())
    return _family_reading(data, issues, TOP_BLOCK, fsdp_setup, None, None, NO_SETUP, fsdp_file_workload(data))


def read_hf_arguments(data: dict, loader: Loader | None) -> Reading:
    from zeromem_lsp.configs.hf_arguments import validate_hf_arguments

    fsdp_issues, deepspeed_issues, hf_setup = validate_hf_arguments(data, loader)
    setup, missing = None, NO_SETUP
    if hf_setup.fsdp is None and hf_setup.deepspeed is not None:
        setup = read_training_setup(hf_setup.deepspeed, HF_AUTO_STAGE)  # via Accelerate's DeepSpeedPlugin
        setup = _rerooted(setup, hf_setup.deepspeed_path)
        if hf_setup.deepspeed_path is None:  # the file the "deepspeed" argument names
            setup = setup._replace(written_in=str(data["deepspeed"]))
    elif hf_setup.fsdp is None and hf_setup.unread:
        missing = "; ".join(f"the referenced {item}" for item in hf_setup.unread)
    blocks = ((hf_setup.block_path,) if hf_setup.block_path else ()) + TOP_BLOCK
    deepspeed = deepspeed_workload(hf_setup.deepspeed, hf_setup.deepspeed_path,
                                   "" if hf_setup.deepspeed_path else str(data.get("deepspeed")))
    workload = replace(hf_arguments_workload(data, deepspeed), loss=trainer_loss(data))
    ignored = ignored_keys("transformers", data)
    if hf_setup.deepspeed is not None:
        ignored += (ignored_keys("deepspeed", hf_setup.deepspeed, root=hf_setup.deepspeed_path)
                    if hf_setup.deepspeed_path is not None else
                    ignored_keys("deepspeed", hf_setup.deepspeed, str(data.get("deepspeed"))))
    return _family_reading(data, [*fsdp_issues, *deepspeed_issues], blocks, hf_setup.fsdp, None, setup, missing,
                           workload)._replace(ignored=ignored)


DDP_NOTE = ("no deepspeed or fsdp_config in the recipe: torch DDP, every rank keeps the whole model, its gradients "
            "and optimizer state in the dtype it is loaded in")


def _launch_file(loader: Loader | None, name: str) -> tuple[str | None, str, str]:
    """(text, where it was found, where it was looked for): the recipe's folder, then up to the project root
    (LLaMA-Factory and axolotl open the path from the directory they are launched in)."""
    if loader is None:
        return None, name, "no file access in this front end"
    find = getattr(loader, "launch_file", None)
    if find is not None:
        return find(name)
    text = loader(name)
    return text, name, "" if text is not None else f"looked for {name}"


def _recipe_deepspeed(recipe: RecipeSetup, loader: Loader | None, issues: list[ConfigIssue],
                      ) -> tuple[TrainingSetup | None, Workload, str, tuple[Ignored, ...]]:
    """(DeepSpeed setup, its workload, why there is none, its keys not modelled) for the recipe's `deepspeed:`
    (the recipe names one)."""
    from zeromem_lsp.configs.recipes import fill_auto

    written = recipe.deepspeed
    assert written is not None and written.path is not None, "a recipe's DeepSpeed config, named at its key"
    if isinstance(written.value, dict):
        config, where, root = written.value, "", written.path
    else:
        text, where, looked = _launch_file(loader, str(written.value))
        if text is None:
            issues.append(ConfigIssue("missing_file", written.path, "value",
                                      f"the DeepSpeed config {written.value!r} cannot be read: {looked}",
                                      reader="recipe"))
            return None, Workload(), f"the DeepSpeed config {written.value!r} ({looked})", ()
        document = parse_document(text)
        if document.syntax_errors or document.root is None or document.root.kind != "object":
            problem = (f"does not parse ({document.syntax_errors[0].message})" if document.syntax_errors
                       else "is not a JSON object")
            issues.append(ConfigIssue("missing_file", written.path, "value",
                                      f"the DeepSpeed config {written.value!r} ({where}) {problem}; "
                                      "that file's own check shows where", reader="recipe"))
            return None, Workload(), f"the DeepSpeed config {written.value!r} ({where}: it {problem})", ()
        config, root = cast("dict", document.to_python()), None  # an object root decodes to a dict
    config = fill_auto(cast("dict", hjson_numbers(config)), recipe)  # a dict stays a dict
    setup = read_training_setup(config, HF_AUTO_STAGE)
    setup = _rerooted(setup, root)
    if root is None:  # the settings are in that file: a hint names it
        setup = setup._replace(written_in=str(written.value))
    if "optimizer" not in config and recipe.optimizer is not None:  # the Trainer builds the recipe's optimizer
        setup = with_recipe_optimizer(setup, recipe.optimizer)
    ignored = ignored_keys("deepspeed", config, root=root) if root is not None else \
        ignored_keys("deepspeed", config, str(written.value))
    return setup, deepspeed_workload(config, root, where), "", ignored


def with_recipe_optimizer(setup: TrainingSetup, optimizer: Given) -> TrainingSetup:
    """`setup` with the recipe's optimizer, which the Trainer builds (configs.recipes._optimizer: a str value)."""
    return setup._replace(optimizer=cast(str, optimizer.value), optimizer_note=optimizer.note,
                          optimizer_path=optimizer.path)


def _refuser(tool: str) -> str | None:
    """The tool that refuses a zeromem block in its recipe (its parser rejects unknown keys), or None (axolotl)."""
    from zeromem_lsp.configs.recipes import TOOL_NAMES

    return None if tool == "axolotl" else TOOL_NAMES[tool]


def _world_hint(tool: str) -> str:
    """Where a recipe's world size can be given: not in LLaMA-Factory or TRL recipes (they refuse the block)."""
    where = "the recipe does not name its launcher; give --world-size, or world_size in [tool.zeromem] (an override "
    block = ", or a zeromem block (axolotl ignores it)" if tool == "axolotl" else ""
    return f"{where}for this recipe's glob){block}"


def _transformers_pin(find) -> Given | None:
    """The Transformers release the recipe's project pins exactly (what it keeps: configs/transformers_paths.py)."""
    from zeromem_lsp.configs.recipes import package_pin

    pin = package_pin("transformers", find) if find is not None else None
    return Given(pin[0], f"pinned in {pin[1]}") if pin is not None else None


def read_recipe(data: dict, loader: Loader | None, tool: Tool) -> Reading:
    """An axolotl / LLaMA-Factory / TRL recipe: its keys checked, its model, batch, sequence and
    checkpointing as the tool defaults them, the DeepSpeed file it names followed (its "auto" filled
    from the recipe as Transformers does), FSDP from its fsdp_config, else DDP."""
    from zeromem_lsp.configs.fsdp import AXOLOTL_DEFAULT_VERSION, strip_prefix, validate_accelerate_fsdp
    from zeromem_lsp.configs.layers import config_values
    from zeromem_lsp.configs.recipes import read_recipe as read
    from zeromem_lsp.configs.settings import ParametersFromConfig, ZeromemSettings

    folder = getattr(loader, "folder", None)  # where the recipe is: its folder may name its trainer
    issues, recipe = read(tool, data, tuple(folder.parts[-3:]) if folder is not None else ())
    find = getattr(loader, "launch_file", None)
    if recipe.sft_loss is not None and find is not None:  # the TRL the project pins, when none is installed
        from zeromem_lsp.configs.recipes import trl_pin, trl_sft_loss

        pin = trl_pin(find)
        if pin is not None:
            recipe = replace(recipe, sft_loss=trl_sft_loss(data, pin))
    setup, workload, missing, ignored = None, Workload(), "", ignored_keys(tool, data)
    ignored += tuple(Ignored(".".join(path), value, why, path) for path, value, why in recipe.unread)
    values: dict[str, object] = {}
    origins: dict[str, Origin] = {}
    if recipe.model is not None and isinstance(recipe.model.value, str):
        # configs.recipes._revision keeps a str revision only
        revision = cast(str, recipe.revision.value) if recipe.revision is not None else None
        values["parameters"] = ParametersFromConfig(recipe.model.value, revision)
        origins["parameters"] = recipe.model.origin
    if recipe.deepspeed is not None:
        setup, workload, missing, in_file = _recipe_deepspeed(recipe, loader, issues)
        ignored += in_file
        if tool == "llamafactory" and setup is not None and setup.stage == "zero3" and read_flag(data.get("pure_bf16")):
            issues.append(ConfigIssue("invalid_value", ("pure_bf16",), "key", "LLaMA-Factory refuses pure_bf16 with "
                                      f"the ZeRO-3 config {recipe.deepspeed.value!r} ('`pure_bf16` is incompatible "
                                      "with DeepSpeed ZeRO-3', hparams/parser.py get_train_args)",
                                      reader="recipe"))
        source: PlanSource = (DeepSpeedSource(setup, None, _world_hint(tool), _refuser(tool)) if setup is not None
                              else NoSource(missing))
    else:
        fsdp = recipe.fsdp_config.value if recipe.fsdp_config is not None else None
        if isinstance(fsdp, dict):
            top = data.get("fsdp_version")  # axolotl: the top-level key wins over the block's (validation.py)
            if top is not None:
                fsdp = {**{key: value for key, value in fsdp.items() if strip_prefix(str(key)) != "version"},
                        "fsdp_version": top}
            fsdp_setup = validate_accelerate_fsdp(fsdp, ("fsdp_config",), AXOLOTL_DEFAULT_VERSION)[1]
            if top is not None and fsdp_setup.version_path is not None:
                fsdp_setup = fsdp_setup._replace(version_path=("fsdp_version",))
            source = FsdpSource(fsdp_setup, world_hint=_world_hint(tool), refuser=_refuser(tool))
        else:
            source = TorchSource(DDP_NOTE, _refuser(tool))
        if recipe.dtype is not None:  # FSDP and torch keep parameters in the dtype the model is loaded in
            values["precision"], origins["precision"] = recipe.dtype.value, recipe.dtype.origin
    if recipe.optimizer is not None and setup is None:
        values["optimizer"], origins["optimizer"] = recipe.optimizer.value, recipe.optimizer.origin
    workload = Workload(micro_batch=recipe.micro_batch, sequence_length=recipe.sequence_length,
                        checkpointing=recipe.checkpointing, zero=workload.zero, compute_dtype=recipe.compute_dtype,
                        checkpointing_path=(recipe.checkpointing.path if recipe.checkpointing is not None else None)
                        or ("gradient_checkpointing",),
                        zero_root=workload.zero_root,
                        loss=recipe_loss(tool, data),
                        preference_loss=recipe.preference_loss, sft_loss=recipe.sft_loss,
                        transformers_version=_transformers_pin(find),
                        reference_model=recipe.reference_model,
                        reference_dtype=recipe.reference_dtype,
                        accumulation=recipe.accumulation, generation=recipe.generation,
                        parallel={**workload.parallel, **recipe.parallel}, data_parallel=recipe.data_parallel)
    _adapter_values(recipe.adapter, values, origins)
    for name in ("trainer", "precompute_ref_log_probs"):  # credited to the key that names them
        found = getattr(recipe, name)
        if found is not None:
            values[name], origins[name] = found.value, found.origin
    layer = config_values(ZeromemSettings.from_checked(values), origins)
    return Reading(data, issues, TOP_BLOCK, setup, BLANK_SETUP, source, workload, layers=(layer,), recipe=recipe,
                   ignored=ignored)


#: A recipe's adapter field -> the zeromem setting the adapter model reads (memory/adapter_plan.py).
_ADAPTER_SETTINGS = (("rank", "lora_rank"), ("targets", "lora_targets"), ("modules_to_save", "modules_to_save"),
                     ("dora", "dora"), ("quantization", "quantization"), ("double_quantization", "double_quant"),
                     ("layers_to_transform", "layers_to_transform"), ("layers_pattern", "layers_pattern"),
                     ("rank_pattern", "lora_rank_pattern"), ("target_parameters", "target_parameters"),
                     ("target_linear", "lora_target_linear"), ("kbit_prepare", "kbit_prepare"),
                     ("dropout", "lora_dropout"), ("autocast", "autocast_adapter_dtype"))


def _adapter_values(adapter, values: dict, origins: dict) -> None:
    """The recipe's LoRA / QLoRA fields as settings of the recipe's own layer, each at its key: the plan
    then counts frozen and trainable parameters as for `lora_rank` given anywhere else. A value the
    settings check is not certain of is left out (the recipe's own check reports it)."""
    from zeromem_lsp.configs.settings import certainly_valid

    if adapter is None or adapter.rank is None:
        return
    for field, name in _ADAPTER_SETTINGS:
        found = getattr(adapter, field)
        checked = certainly_valid({name: found.value}) if found is not None else None
        if checked:
            values[name], origins[name] = checked[name], found.origin


#: document kind -> its reader; each gets the top level as a dict but DeepSpeed's, which takes any value
#: (analysis.analyse calls read_deepspeed itself: DeepSpeed says what is wrong with a top level that is no object).
READERS: dict[Kind, Callable[[dict, Loader | None], Reading]] = {
    "deepspeed": read_deepspeed,
    "accelerate": read_accelerate,
    "fsdp": read_fsdp,
    "hf-arguments": read_hf_arguments,
    "axolotl": lambda data, loader: read_recipe(data, loader, "axolotl"),
    "llamafactory": lambda data, loader: read_recipe(data, loader, "llamafactory"),
    "trl": lambda data, loader: read_recipe(data, loader, "trl"),
}
