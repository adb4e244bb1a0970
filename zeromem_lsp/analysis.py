"""`analyse(text, name, settings)`: the single entry both front ends call, one pipeline for every kind.

text → positioned document → kind → the kind's reader (readers.py) → one settings resolution
(file block over project files over editor/CLI settings; from_config; ZM104) → one plan
(planner.py) → rules. A broken document still gets every stage that makes sense for the part
that parsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from zeromem_lsp.configs.detect import Kind, detect_kind
from zeromem_lsp.configs.settings import validate_settings, ParametersFromConfig, ZeromemSettings
from zeromem_lsp.configs.training import Path, TrainingSetup
from zeromem_lsp.findings import Finding
from zeromem_lsp.document import Document, LineIndex, parse_document
from zeromem_lsp.document.decoding import decode_config
from zeromem_lsp.peak_inputs import Layers, ModelRead, read_model, with_peak
from zeromem_lsp.plan import MemoryPlan, Origin, Unplanned
from zeromem_lsp.readers import READERS, Loader
from zeromem_lsp.rules import issues as issue_rules
from zeromem_lsp.rules import memory as memory_rules
from zeromem_lsp.rules import peak as peak_rules
from zeromem_lsp.rules import settings as settings_rules
from zeromem_lsp.rules import syntax as syntax_rules
from zeromem_lsp.rules.context import Context
from zeromem_lsp.units import format_count

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
    refused: Refusal | None = None  # the input was not analysed at all: too large, or not text

    @property
    def reported(self) -> bool:
        """Whether front ends report on this document: a training config, or an input refused outright."""
        return self.kind is not None or self.refused is not None

    @cached_property
    def lines(self) -> LineIndex:
        """Offsets ↔ line/character for the findings (also when nothing parsed)."""
        return self.document.lines if self.document is not None else LineIndex(self.text)


def _model_text(loader: Loader | None, name: str) -> tuple[str | None, str, str]:
    """(text, where it was found, why not): a project FileLoader also finds model directories and hub ids."""
    if loader is None:
        return None, name, "no file access in this front end"
    find = getattr(loader, "model_config", None)
    if find is not None:
        source = find(name)
        return source.text, source.shown, source.why
    text = loader(name)
    if text is not None:
        return text, name, ""
    from zeromem_lsp.configs.hf_arguments import unreadable_reason  # the failure path only

    return None, name, unreadable_reason(loader, name)


def resolve_parameters(settings: ZeromemSettings, loader: Loader | None) -> tuple[ZeromemSettings, str | None, str | None, ModelRead]:
    """Replace {"from_config": path} by the exact count: (settings, note, problem message, what the file gave)."""
    wanted = settings.parameters
    if not isinstance(wanted, ParametersFromConfig):
        return settings, None, None, NO_MODEL
    from zeromem_lsp.configs.model_config import UnsupportedModel, count_parameters_from_text

    cleared = settings.model_copy(update={"parameters": None})
    text, path, reason = _model_text(loader, wanted.from_config)
    if text is None:
        problem = f"parameters.from_config: cannot read {wanted.from_config!r} ({reason})"
        return cleared, None, problem, ModelRead(shape_problem=problem)
    try:
        counted = count_parameters_from_text(text)
    except UnsupportedModel as error:
        problem = f"parameters.from_config {path!r}: {error}"
        return cleared, None, problem, ModelRead(shape_problem=problem)
    note = f"{format_count(counted.total)} parameters counted from {path} ({counted.note})"
    return settings.model_copy(update={"parameters": counted.total}), note, None, read_model(text, counted, path)


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


def with_parameter_origin(plan, block: ZeromemSettings, forced: ZeromemSettings, note: str | None):
    """Say which layer supplied the parameter count (and how a from_config count was made)."""
    if not isinstance(plan, MemoryPlan) or "parameters" not in plan.origins:
        return plan
    if forced.parameters is not None:
        origin = Origin("--parameters")
    elif block.parameters is not None:
        origin = plan.origins["parameters"]
    else:
        origin = Origin("project or editor settings")
    if note:
        origin = Origin(f"{origin.note}: {note}", origin.path)
    return plan._replace(origins={**plan.origins, "parameters": origin})


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
    settings: ZeromemSettings = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
    loader: Loader | None = None,
    previous: Document | None = None,
    edit: tuple[int, int, int] | None = None,
) -> Analysis:
    """Findings for one document: text → document → kind → reader → settings → plan → rules.

    `settings`: project and editor defaults (below the file's own zeromem block);
    `forced`: command-line values (above it); `loader`: reads files the document names
    (a model config.json, a DeepSpeed or fsdp_config file) — without it they are not read.
    `previous` and `edit` (start, old end, new end): the document before one edit, so that only
    the value the edit is in is parsed again (document/splice.py checks it can; else a full parse).
    """
    if len(text) > MAX_DOCUMENT_CHARS:
        return Analysis(text, None, None, [settings_rules.too_large(len(text), MAX_DOCUMENT_CHARS)], refused="oversized")
    document = _parse(text, name, previous, edit)
    root = document.root
    keys = {m.key for m in root.members} if root is not None and root.kind == "object" else None
    kind = _yaml_kind(keys, document) if document.flavour == "yaml" else detect_kind(keys, name)
    reader = READERS.get(kind)
    if reader is None:
        return Analysis(text, kind, document)
    data = document.to_python()
    if kind != "deepspeed" and not isinstance(data, dict):
        data = {}
    reading = reader(data, loader)
    block, block_problems, block_path = _settings_block(data, reading.block_paths)
    effective = forced.merged_over(block.merged_over(settings))
    effective, parameter_note, parameter_problem, model = resolve_parameters(effective, loader)
    if parameter_problem:
        block_problems.append(((*block_path, "parameters"), parameter_problem, "value"))
    elif model.shape_problem and effective.sequence_length is not None:  # activations asked for, shape refused
        block_problems.append(((*block_path, "parameters"), f"parameters.from_config {model.shape_problem}", "value"))
    plan = with_parameter_origin(reading.plan(effective, block_path), block, forced, parameter_note)
    plan = with_peak(plan, reading.workload, effective, Layers(block, forced, block_path), reading.setup, model)
    context = Context(document, data, effective, reading.rule_setup, plan, reading.workload)
    findings = _syntax_findings(kind, context)
    findings += settings_rules.block_findings(context, block_problems)
    if root is not None and (isinstance(data, dict) or not document.syntax_errors):
        findings += issue_rules.check(context, reading.issues(effective))  # else the syntax error says why
    findings += memory_rules.check(context)
    findings += peak_rules.check(context)
    findings.sort(key=lambda f: (f.start, f.end, f.code))
    return Analysis(text, kind, document, findings, effective, reading.setup, plan, parameter_note)


def _yaml_kind(keys: set[str] | None, document: Document) -> str | None:
    """YAML documents are analysed only as Accelerate configs (GPT-NeoX, CI files... are not)."""
    if keys is None:
        broken = document.syntax_errors and any(
            marker in document.text for marker in ("distributed_type", "fsdp_config", "deepspeed_config"))
        return "accelerate" if broken else None
    kind = detect_kind(keys, None)
    return "accelerate" if kind == "accelerate" else None


def analyse_bytes(
    data: bytes,
    name: str | None = None,
    settings: ZeromemSettings = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
    loader: Loader | None = None,
) -> Analysis:
    """`analyse` for file contents: an encoding DeepSpeed cannot read is a ZM003 finding."""
    decoded = decode_config(data)
    if decoded.binary:
        return Analysis(decoded.text, None, None, [settings_rules.unreadable(decoded.problem)], refused="binary")
    analysis = analyse(decoded.text, name, settings, forced, loader)
    if decoded.problem is not None and analysis.kind == "deepspeed":
        end = min(decoded.offset + 1, len(decoded.text))
        analysis.findings.insert(0, settings_rules.unreadable(decoded.problem, decoded.offset, end))
    return analysis
