"""`analyse(text, name, settings)`: the single entry both front ends call, one pipeline for every kind.

text → positioned document → kind → the kind's reader (readers.py: plain data) → one settings
resolution (configs/layers.py: command line over the file's block over project over editor, each
value with its origin; then from_config counted; problems are ZM104) → the plan built once with its
peak (memory/planner.py) → rules. A broken document still gets every stage that makes sense for the
part that parsed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, cast

from zeromem_lsp.configs.detect import Kind, detect_kind, yaml_kind
from zeromem_lsp.configs.layers import Resolved, SettingsLayer, as_layers, command_line, file_block, resolve
from zeromem_lsp.configs.settings import validate_settings, ParametersFromConfig, ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup
from zeromem_lsp.findings import Finding
from zeromem_lsp.document import Document, LineIndex, parse_document
from zeromem_lsp.document.decoding import decode_config
from zeromem_lsp.resolved.adapter_settings import adapter_from_settings, adapter_problem
from zeromem_lsp.resolved.peak_inputs import ModelRead, PeakSource, read_model
from zeromem_lsp.memory.plan import MemoryPlan, Unplanned
from zeromem_lsp.resolved import planner
from zeromem_lsp.provenance import Assumed, Origin, Path
from zeromem_lsp.readers import READERS, Loader, issues_with, read_deepspeed
from zeromem_lsp.rules import issues as issue_rules
from zeromem_lsp.rules import memory as memory_rules
from zeromem_lsp.rules import peak as peak_rules
from zeromem_lsp.rules import parallel as parallel_rules
from zeromem_lsp.rules import settings as settings_rules
from zeromem_lsp.rules import syntax as syntax_rules
from zeromem_lsp.rules.context import Context
from zeromem_lsp.units import format_count

if TYPE_CHECKING:
    from zeromem_lsp.configs.model_config import ParameterCount
    from zeromem_lsp.configs.recipes import RecipeSetup

MAX_DOCUMENT_CHARS = 16 * 2**20
Refusal = Literal["oversized", "binary"]  # outcomes, not kinds: the document was never read
NO_SETTINGS = ZeromemSettings()
YAML_SUFFIXES = (".yaml", ".yml")
NO_MODEL = ModelRead()


@dataclass
class Analysis:
    text: str
    kind: Kind | None  # None: not a training config (or refused before it could be read)
    document: Document | None
    findings: list[Finding] = field(default_factory=list)
    settings: ZeromemSettings = NO_SETTINGS
    setup: TrainingSetup | None = None
    plan: MemoryPlan | Unplanned | None = None
    parameter_source: str | None = None  # e.g. "llama: 32 layers, untied embeddings (model/config.json)"
    origins: dict[str, Origin] = field(default_factory=dict)  # setting name -> the layer that supplied it
    refused: Refusal | None = None  # the input was not analysed at all: too large, or not text
    recipe: RecipeSetup | None = None  # a recipe's run (its adapter as plain data), else None
    launch_file: str | None = None  # the Accelerate config a recipe was paired with (the editor watches it)

    @property
    def reported(self) -> bool:
        """Whether front ends report on this document: a training config, or an input refused outright."""
        return self.kind is not None or self.refused is not None

    @cached_property
    def lines(self) -> LineIndex:
        """Offsets ↔ line/character for the findings (also when nothing parsed)."""
        return self.document.lines if self.document is not None else LineIndex(self.text)


class Memo:
    """What an editor session would otherwise derive again on every keystroke although its inputs did not change:
    the model config.json's count and shape (keyed by the file's text and path), and the plan with its peak (keyed by
    the pickled inputs of `planner.plan`: equal bytes mean equal values of equal types, so an equal plan). A reused
    plan keeps its peak's memo (each stage's step, computed once), so a keystroke that leaves every input of the plan
    as it was costs no phase model at all. Both are pure functions of their keys; the last `size` of each are kept.
    The language server passes one (`analyse(..., memo=)`), shared by its worker thread; `zeromem check` does not."""

    def __init__(self, size: int = 16) -> None:
        import threading

        self.size = size
        self._lock = threading.Lock()
        self._models: OrderedDict[tuple[str, str], tuple] = OrderedDict()
        self._plans: OrderedDict[bytes, MemoryPlan | Unplanned] = OrderedDict()

    def _get(self, table: OrderedDict, key: object) -> object | None:
        with self._lock:
            found = table.get(key)
            if found is not None:
                table.move_to_end(key)
            return found

    def _keep(self, table: OrderedDict, key: object, value: object) -> None:
        with self._lock:
            table[key] = value
            if len(table) > self.size:
                table.popitem(last=False)

    def model(self, text: str, path: str) -> tuple[ParameterCount, ModelRead]:
        """(count, ModelRead) of a config.json that counts; UnsupportedModel as without the memo (not kept)."""
        key = (text, path)
        found = self._get(self._models, key)
        if found is None:
            from zeromem_lsp.configs.model_config import count_parameters_from_text

            counted = count_parameters_from_text(text)
            found = (counted, read_model(text, counted, path))
            self._keep(self._models, key, found)
        return cast("tuple[ParameterCount, ModelRead]", found)

    def plan(self, *arguments: Any) -> MemoryPlan | Unplanned:
        """`planner.plan(*arguments)`, once per distinct content of its arguments (unpicklable ones: always)."""
        import pickle

        try:
            key = pickle.dumps(arguments, pickle.HIGHEST_PROTOCOL)
        except Exception:  # something without a content form: plan it, keep nothing
            return planner.plan(*arguments)
        found = self._get(self._plans, key)
        if found is None:
            found = planner.plan(*arguments)
            self._keep(self._plans, key, found)
        return cast("MemoryPlan | Unplanned", found)


def _model_text(loader: Loader | None, name: str, revision: str | None = None) -> tuple[str | None, str, str]:
    """(text, where it was found, why not): a project FileLoader also finds model directories and hub ids (at
    `revision`)."""
    if loader is None:
        return None, name, "no file access in this front end"
    find = getattr(loader, "model_config", None)
    if find is not None:
        source = find(name, revision) if revision else find(name)
        return source.text, source.shown, source.why
    text = loader(name)
    if text is not None:
        return text, name, ""
    from zeromem_lsp.configs.hf_arguments import unreadable_reason  # the failure path only

    return None, name, unreadable_reason(loader, name)


def _model_key(resolved: Resolved) -> str:
    """How the model was named: `parameters.from_config`, or a training config's own key (`base_model`)."""
    named = resolved.origin("parameters")
    if named is not None and named.path and named.path[-1] != "parameters":
        return named.note
    return "parameters.from_config"


def resolve_parameters(resolved: Resolved, loader: Loader | None,
                       memo: Memo | None = None) -> tuple[Resolved, str | None, str | None, ModelRead]:
    """Replace {"from_config": path} by the exact count: (resolved, note, problem message, what the file gave).

    The count keeps the origin of the layer that named the file, with how it was counted; `memo` keeps a
    file's count and shape while its text stays the same."""
    settings = resolved.settings
    wanted = settings.parameters
    if not isinstance(wanted, ParametersFromConfig):
        return resolved, None, None, NO_MODEL
    from zeromem_lsp.configs.model_config import UnsupportedModel, count_parameters_from_text

    cleared = Resolved(settings.model_copy(update={"parameters": None}), resolved.origins)
    text, path, reason = _model_text(loader, wanted.from_config, getattr(wanted, "revision", None))
    if text is None:
        problem = f"{_model_key(resolved)}: cannot read {wanted.from_config!r} ({reason})"
        return cleared, None, problem, ModelRead(shape_problem=problem)
    try:
        counted, model = memo.model(text, path) if memo is not None else (count_parameters_from_text(text), None)
    except UnsupportedModel as error:
        from zeromem_lsp.configs.meta_count import fallback, peak_unknown

        counted, why = fallback(text, error, getattr(loader, "may_block", False))
        if counted is None:
            problem = f"{_model_key(resolved)} {path!r}: {why}"
            return cleared, None, problem, ModelRead(shape_problem=problem)
        model = ModelRead(counted, None, peak_unknown(counted.model_type), path)
    note = f"{format_count(counted.total)} parameters counted from {path} ({counted.note})"
    named = resolved.origins["parameters"]
    origins = {**resolved.origins, "parameters": Origin(f"{named.note}: {note}", named.path)}
    counted_settings = settings.model_copy(update={"parameters": counted.total})
    model = read_model(text, counted, path) if model is None else model
    return Resolved(counted_settings, origins), note, None, _with_processor(model, loader, wanted.from_config,
                                                                            getattr(wanted, "revision", None))


def _with_processor(model: ModelRead, loader: Loader | None, name: str, revision: str | None) -> ModelRead:
    """A composite whose image tokens the processor config bounds: shaped under the preprocessor_config.json the run
    loads (configs/processor_config.py), found beside config.json as the loader finds that (a loader with no model
    lookup: the processor class's defaults, as before)."""
    from zeromem_lsp.configs.processor_config import wanted

    find = getattr(loader, "processor_config", None)
    if find is None or model.shape is None or model.shape.vision is None or not wanted(model.config):
        return model
    from zeromem_lsp.configs.freeze_keys import AS_GIVEN, recipe_vision

    processor = find(name, revision)
    shape, why = recipe_vision(cast(dict, model.config), AS_GIVEN, "transformers", processor)
    return model._replace(processor=processor, shape=shape, shape_problem=why and f"{model.path}: {why}")


def model_elsewhere(model: ModelRead) -> bool:
    """Whether the model's count came from Transformers (a family zeromem does not describe): no peak, no error."""
    from zeromem_lsp.configs.model_config import SUPPORTED

    return model.counted is not None and model.shape is None and model.counted.model_type not in SUPPORTED


def _nested_block(data: object, block_path: Path) -> tuple[ZeromemSettings, list[tuple]]:
    """The zeromem block at `block_path`, and its problems as (path, message, target)."""
    container = data
    for step in block_path[:-1]:
        container = container.get(step) if isinstance(container, dict) else None
    if not isinstance(container, dict) or block_path[-1] not in container:
        return NO_SETTINGS, []
    block = container[block_path[-1]]
    if not isinstance(block, dict):
        return NO_SETTINGS, [(block_path, "the zeromem block must be an object", "value")]
    settings, found = validate_settings(block)
    problems = []
    for problem in found:
        if problem.unknown:
            message = f"unknown zeromem setting {problem.name!r}; known: {', '.join(ZeromemSettings.model_fields)}"
        else:
            message = f"zeromem.{problem.name}: {problem.message}"
        problems.append(((*block_path, problem.name), message, "key" if problem.unknown else "value"))
    return settings, problems


def _settings_block(data: object, block_paths: tuple[Path, ...]) -> tuple[ZeromemSettings, list[tuple], Path]:
    """The document's own zeromem block (the first of `block_paths` written), its problems, its path."""
    for candidate in block_paths:
        block, problems = _nested_block(data, candidate)
        if problems or block != NO_SETTINGS:
            return block, problems, candidate
    return NO_SETTINGS, [], ("zeromem",)


def _syntax_findings(kind: str, context: Context) -> list[Finding]:
    """DeepSpeed reads hjson; fsdp_config and TrainingArguments files are read with json.load."""
    if context.document.flavour == "yaml":
        return list(syntax_rules.check_yaml(context))
    if kind == "deepspeed":
        return list(syntax_rules.check(context))
    return list(syntax_rules.check_strict(context, "Transformers" if kind == "fsdp" else "HfArgumentParser"))


def _parse(text: str, name: str | None, previous: Document | None, edit: tuple[int, int, int] | None) -> Document:
    """The positioned document: only the edited value parsed again when that provably suffices."""
    if previous is not None and edit is not None:
        from zeromem_lsp.document.splice import reparse

        document = reparse(previous, text, *edit)
        if document is not None:
            return document
    if name is not None and name.lower().endswith(YAML_SUFFIXES):
        from zeromem_lsp.document.yaml_document import parse_yaml_document

        return parse_yaml_document(text)
    return parse_document(text)


def analyse(
    text: str,
    name: str | None = None,
    settings: ZeromemSettings | tuple[SettingsLayer, ...] = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
    loader: Loader | None = None,
    previous: Document | None = None,
    edit: tuple[int, int, int] | None = None,
    memo: Memo | None = None,
) -> Analysis:
    """Findings for one document: text → document → kind → reader → settings → plan → rules.

    `settings`: project and editor settings, below the file's own zeromem block — layers
    (configs/layers.py, highest first) that name where each value was written, or one plain value;
    `forced`: command-line values, above the block; `loader`: reads files the document names
    (a model config.json, a DeepSpeed or fsdp_config file) — without it they are not read.
    `previous` and `edit` (start, old end, new end): the document before one edit, so that only
    the value the edit is in is parsed again (document/splice.py checks it can; else a full parse).
    `memo`: the model's count and the plan kept from earlier analyses with the same inputs (`Memo`).
    """
    if len(text) > MAX_DOCUMENT_CHARS:
        return Analysis(text, None, None, [settings_rules.too_large(len(text), MAX_DOCUMENT_CHARS)], refused="oversized")
    document = _parse(text, name, previous, edit)
    root = document.root
    keys = {m.key for m in root.members or ()} if root is not None and root.kind == "object" else None
    kind = _yaml_kind(keys, document) if document.flavour == "yaml" else detect_kind(keys, name)
    if kind is None:
        return Analysis(text, kind, document)
    reader = READERS[kind]  # one per kind
    data = document.to_python()
    if kind == "deepspeed":
        reading = read_deepspeed(data, loader)
    else:
        if not isinstance(data, dict):
            data = {}
        reading = reader(data, loader)
    block, block_problems, block_path = _settings_block(data, reading.block_paths)
    layers = (command_line(forced), file_block(block, block_path), *reading.layers, *as_layers(settings))
    first = resolve(layers)
    if reading.recipe is not None and first.settings.accelerate_config is not None:  # what it is launched with
        from zeromem_lsp.launch.accelerate import pair_accelerate

        reading = pair_accelerate(reading, first, loader)
        first = resolve((command_line(forced), file_block(block, block_path), *reading.layers, *as_layers(settings)))
    first = planner.assume_world(first, reading.source, reading.workload)  # the degrees' smallest world, if no source
    resolved, parameter_note, parameter_problem, model = resolve_parameters(first, loader, memo)  # once
    if model.counted is not None and model.counted.parts and model.config is not None and reading.recipe is not None \
            and reading.recipe.tool in ("llamafactory", "axolotl") and isinstance(data, dict):  # what its keys freeze
        from zeromem_lsp.configs.freeze_keys import LLAMAFACTORY_PARTS, note, recipe_vision

        config = model.config
        if config.get("model_type") in LLAMAFACTORY_PARTS:
            model = model._replace(freeze_note=note(config, data, data.get("finetuning_type", "lora"),
                                                    reading.recipe.tool))
            shape, why = recipe_vision(config, data, reading.recipe.tool, model.processor)  # image settings, freezes
            model = model._replace(shape=shape, shape_problem=why and f"{model.path}: {why}")
    effective = resolved.settings
    adapter = adapter_from_settings(effective, resolved.origins)
    if adapter is not None and model.config is not None and model.counted is not None and model.counted.parts and (
            reading.recipe is None or reading.recipe.tool not in ("llamafactory", "axolotl")):
        from zeromem_lsp.configs.freeze_keys import ADAPTER, recipe_vision

        shape, why = recipe_vision(model.config, ADAPTER, "peft", model.processor)  # LoRA freezes the tower too
        model = model._replace(shape=shape, shape_problem=why and f"{model.path}: {why}")
    named = resolved.origin("parameters")
    parameters_at = named.path if named is not None and named.path else (*block_path, "parameters")
    from_recipe = parameters_at != (*block_path, "parameters")
    missing_model = from_recipe and parameter_problem is not None
    if parameter_problem and not missing_model:
        block_problems.append((parameters_at, parameter_problem, "value"))
    elif model.shape_problem and effective.sequence_length is not None and not model_elsewhere(model):
        # activations asked for, shape refused
        block_problems.append((parameters_at, f"parameters.from_config {model.shape_problem}", "value"))
    found = adapter_problem(adapter, model.config) if adapter is not None and not parameter_problem else None
    if found is not None:
        named = resolved.origin(found[0])  # the flag, the block's key, a recipe's key, the project file or the editor
        at = named.path if named is not None and named.path else (*block_path, found[0])
        block_problems.append((at, f"{named.note if named else 'zeromem.' + found[0]}: {found[1]}", "value"))
    engine_named = reading.recipe is None or not isinstance(reading.source, planner.TorchSource)
    # the phase model needs the model's shape: without one, planning costs less than the memo's key
    make_plan = memo.plan if memo is not None and model.shape is not None else planner.plan
    plan = make_plan(reading.source, resolved, PeakSource(reading.workload, reading.setup, model), adapter,
                     reading.ignored, engine_named)
    context = Context(document, data, effective, reading.rule_setup, plan, reading.workload, resolved.origins,
                      reading.setup, model_unread=missing_model)
    findings = _syntax_findings(kind, context)
    findings += settings_rules.block_findings(context, block_problems)
    findings += settings_rules.budget_note(context, block_path)
    if missing_model and parameter_problem is not None:  # the tool downloads it at launch, or counts what zeromem cannot: not an error in the recipe
        findings += settings_rules.model_not_found(context, parameters_at, parameter_problem)
    if root is not None and (isinstance(data, dict) or not document.syntax_errors):
        world = None if isinstance(resolved.origin("world_size"), Assumed) else effective.world_size  # a source's
        findings += issue_rules.check(context, issues_with(reading, world))  # else the syntax error says why
    findings += memory_rules.check(context)
    findings += peak_rules.check(context)
    findings += parallel_rules.check(context)
    if kind == "deepspeed" and document.flavour != "yaml":
        findings = syntax_rules.with_placeholders(context, findings)
    findings.sort(key=lambda f: (f.start, f.end, f.code))
    return Analysis(text, kind, document, findings, effective, reading.setup, plan, parameter_note, resolved.origins,
                    recipe=reading.recipe, launch_file=reading.launch_file)


def _yaml_kind(keys: set[str] | None, document: Document) -> Kind | None:
    """YAML documents are analysed as Accelerate configs or recipes (GPT-NeoX, CI files... are not)."""
    if keys is None:
        broken = document.syntax_errors and any(
            marker in document.text for marker in ("distributed_type", "fsdp_config", "deepspeed_config"))
        return "accelerate" if broken else None
    return yaml_kind(keys)


def analyse_bytes(
    data: bytes,
    name: str | None = None,
    settings: ZeromemSettings | tuple[SettingsLayer, ...] = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
    loader: Loader | None = None,
) -> Analysis:
    """`analyse` for file contents: an encoding DeepSpeed cannot read is a ZM003 finding."""
    decoded = decode_config(data)
    if decoded.binary:
        assert decoded.problem is not None, "decode_config says why bytes are binary"
        return Analysis(decoded.text, None, None, [settings_rules.unreadable(decoded.problem)], refused="binary")
    analysis = analyse(decoded.text, name, settings, forced, loader)
    if decoded.problem is not None and analysis.kind == "deepspeed":
        end = min(decoded.offset + 1, len(decoded.text))
        analysis.findings.insert(0, settings_rules.unreadable(decoded.problem, decoded.offset, end))
    return analysis
