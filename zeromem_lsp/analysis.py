"""`analyse(text, name, settings)`: the single entry both front ends call.

Stages: syntax → structure (duplicates, strictness) → loader validity → memory. A broken document
still gets every stage that makes sense for the part that parsed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace


from zeromem_lsp.configs.deepspeed_catalog import HF_AUTO_STAGE
from zeromem_lsp.configs.detect import detect_kind
from zeromem_lsp.configs.hf_arguments import unreadable_reason
from zeromem_lsp.configs.settings import validate_settings, ParametersFromConfig, ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup, read_training_setup
from zeromem_lsp.document import Document, parse_document
from zeromem_lsp.document.decoding import decode_config
from zeromem_lsp.findings import Finding
from zeromem_lsp.plan import MemoryPlan, Origin, Unplanned, build_plan, plan_fsdp_family
from zeromem_lsp.rules import deepspeed as deepspeed_rules
from zeromem_lsp.rules import memory as memory_rules
from zeromem_lsp.rules import syntax as syntax_rules
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule
from zeromem_lsp.units import format_count

MAX_DOCUMENT_CHARS = 16 * 2**20
NO_SETTINGS = ZeromemSettings()
YAML_SUFFIXES = (".yaml", ".yml")
#: Reads a file named in the document (path as written; relative to the analysed file) -> text, or None.
Loader = Callable[[str], "str | None"]


@dataclass
class Analysis:
    text: str
    kind: str | None
    document: Document | None
    findings: list[Finding] = field(default_factory=list)
    settings: ZeromemSettings = NO_SETTINGS
    setup: TrainingSetup | None = None
    plan: MemoryPlan | Unplanned | None = None
    parameter_source: str | None = None  # e.g. "llama: 32 layers, untied embeddings (model/config.json)"


def resolve_parameters(settings: ZeromemSettings, loader: Loader | None) -> tuple[ZeromemSettings, str | None, str | None]:
    """Replace {"from_config": path} by the exact count: (settings, note, problem message)."""
    wanted = settings.parameters
    if not isinstance(wanted, ParametersFromConfig):
        return settings, None, None
    from zeromem_lsp.configs.model_config import UnsupportedModel, count_parameters_from_text

    cleared = settings.model_copy(update={"parameters": None})
    path = wanted.from_config
    text = loader(path) if loader is not None else None
    if text is None:
        reason = "no file access in this front end" if loader is None else unreadable_reason(loader, path)
        return cleared, None, f"parameters.from_config: cannot read {path!r} ({reason})"
    try:
        counted = count_parameters_from_text(text)
    except UnsupportedModel as error:
        return cleared, None, f"parameters.from_config {path!r}: {error}"
    note = f"{format_count(counted.total)} parameters counted from {path} ({counted.note})"
    return settings.model_copy(update={"parameters": counted.total}), note, None


def _block_settings(context_document: Document, data: object) -> tuple[ZeromemSettings, list[tuple]]:
    """The file's own `zeromem` block, and its validation errors as (path, message)."""
    if not isinstance(data, dict) or "zeromem" not in data:
        return NO_SETTINGS, []
    block = data["zeromem"]
    if not isinstance(block, dict):
        return NO_SETTINGS, [(("zeromem",), "the zeromem block must be an object", "value")]
    settings, found = validate_settings(block)
    problems = []
    for problem in found:
        if problem.unknown:
            message = f"unknown zeromem setting {problem.name!r}; known: {', '.join(ZeromemSettings.model_fields)}"
        else:
            message = f"zeromem.{problem.name}: {problem.message}"
        problems.append((("zeromem", problem.name), message, "key" if problem.unknown else "value"))
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
    return replace(plan, origins={**plan.origins, "parameters": origin})


def analyse(
    text: str,
    name: str | None = None,
    settings: ZeromemSettings = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
    loader: Loader | None = None,
) -> Analysis:
    """Findings for one document.

    `settings`: project and editor defaults (below the file's own zeromem block);
    `forced`: command-line values (above it); `loader`: reads files the document names
    (a model config.json, a DeepSpeed or fsdp_config file) — without it they are not read.
    """
    if len(text) > MAX_DOCUMENT_CHARS:
        message = (f"document not analysed: {format_count(len(text))} characters exceeds the "
                   f"{format_count(MAX_DOCUMENT_CHARS)} limit")
        finding = Finding("ZM002", rule("ZM002").severity, message, 0, 0)
        return Analysis(text, "oversized", None, [finding])
    if name is not None and name.lower().endswith(YAML_SUFFIXES):
        from zeromem_lsp.document.yaml_document import parse_yaml_document

        document = parse_yaml_document(text)
    else:
        document = parse_document(text)
    root = document.root
    keys = {m.key for m in root.members} if root is not None and root.kind == "object" else None
    if getattr(document, "flavour", "json") == "yaml":
        kind = _yaml_kind(keys, document)
    else:
        kind = detect_kind(keys, name)
    if kind in ("accelerate", "fsdp", "hf-arguments"):
        return _analyse_fsdp_family(text, kind, document, settings, forced, loader)
    if kind != "deepspeed":
        return Analysis(text, kind, document)
    data = document.to_python()
    block, block_problems = _block_settings(document, data)
    effective = forced.merged_over(block.merged_over(settings))
    effective, parameter_note, parameter_problem = resolve_parameters(effective, loader)
    if parameter_problem:
        block_problems.append((("zeromem", "parameters"), parameter_problem, "value"))
    setup = read_training_setup(data)
    plan = with_parameter_origin(build_plan(setup, effective), block, forced, parameter_note)
    context = Context(document, data, effective, setup, plan)
    findings = list(syntax_rules.check(context))
    findings += [context.finding("ZM104", message, path, target) for path, message, target in block_problems]
    findings += deepspeed_rules.check(context)
    findings += memory_rules.check(context)
    findings.sort(key=lambda f: (f.start, f.end, f.code))
    return Analysis(text, kind, document, findings, effective, setup, plan, parameter_note)


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
        finding = Finding("ZM003", rule("ZM003").severity, decoded.problem, 0, 0)
        return Analysis(decoded.text, "binary", None, [finding])
    analysis = analyse(decoded.text, name, settings, forced, loader)
    if decoded.problem is not None and analysis.kind == "deepspeed":
        end = min(decoded.offset + 1, len(decoded.text))
        analysis.findings.insert(0, Finding("ZM003", rule("ZM003").severity, decoded.problem, decoded.offset, end))
    return analysis


# --- FSDP, Accelerate and TrainingArguments documents -------------------------------------------

def _nested_block(document: Document, data: object, block_path: tuple) -> tuple[ZeromemSettings, list[tuple]]:
    """A zeromem block at `block_path`, validated like the top-level one, problems re-rooted there."""
    container = data
    for step in block_path[:-1]:
        container = container.get(step) if isinstance(container, dict) else None
    if not isinstance(container, dict) or block_path[-1] not in container:
        return NO_SETTINGS, []
    block, problems = _block_settings(document, {"zeromem": container[block_path[-1]]})
    return block, [((*block_path, *path[1:]), message, target) for path, message, target in problems]


def _json_strictness(context: Context, kind: str) -> list[Finding]:
    """fsdp_config and TrainingArguments files are read with json.load: what hjson forgives fails there."""
    from zeromem_lsp.rules.syntax import RELAXATIONS

    findings = []
    for problem in context.document.problems:
        if problem.kind == "syntax":
            findings.append(context.finding("ZM001", problem.message, span=(problem.start, problem.end)))
        elif problem.kind in RELAXATIONS:
            reader = "Transformers" if kind == "fsdp" else "HfArgumentParser"
            findings.append(context.finding(
                "ZM001", f"{RELAXATIONS[problem.kind]}: {reader} reads this file with json.load, which fails here",
                span=(problem.start, problem.end)))
    return findings


def _rerooted(setup: TrainingSetup, root: tuple | None) -> TrainingSetup:
    """A DeepSpeed setup read from a dict at `root` in this document, its paths made document paths.

    `root` None: the config came from another file, so none of its paths is a position here."""

    def at(path):
        return None if path is None or root is None else (*root, *path)

    return replace(setup, stage_path=at(setup.stage_path), precision_path=at(setup.precision_path),
                   optimizer_path=at(setup.optimizer_path))


def _deepspeed_setup(accelerate, hf_setup, loader, missing: str) -> tuple[TrainingSetup | None, str]:
    """The DeepSpeed setup an Accelerate or TrainingArguments document uses: inline, or read through
    `loader` from the file it names; else why there is none."""
    if accelerate is not None and accelerate.deepspeed is not None:
        return accelerate.deepspeed, missing
    if accelerate is not None and accelerate.deepspeed_file:
        loaded = loader(accelerate.deepspeed_file) if loader is not None else None
        if loaded is None:
            return None, f"the DeepSpeed config {accelerate.deepspeed_file!r} (could not be read next to this file)"
        config = parse_document(loaded).to_python()  # Accelerate fills "stage": "auto" (HF_AUTO_STAGE)
        return _rerooted(read_training_setup(config, HF_AUTO_STAGE), None), missing
    if hf_setup is not None and hf_setup.deepspeed is not None:
        setup = read_training_setup(hf_setup.deepspeed, HF_AUTO_STAGE)  # via Accelerate's DeepSpeedPlugin
        return _rerooted(setup, hf_setup.deepspeed_path), missing
    if hf_setup is not None and hf_setup.unread:
        return None, "; ".join(f"the referenced {item}" for item in hf_setup.unread)
    return None, missing


def _analyse_fsdp_family(text, kind, document, settings, forced, loader) -> Analysis:
    from zeromem_lsp.configs.fsdp import validate_transformers_fsdp
    from zeromem_lsp.rules import fsdp as fsdp_rules

    data = document.to_python()
    data = data if isinstance(data, dict) else {}
    blank = read_training_setup({})
    issues: list = []
    deepspeed_issues: list = []
    block_paths: tuple[tuple, ...] = ()
    accelerate = hf_setup = fsdp_setup = None
    if kind == "accelerate":
        from zeromem_lsp.configs.accelerate import validate_accelerate

        issues, accelerate = validate_accelerate(data)
        block_paths = (("fsdp_config", "zeromem"), ("deepspeed_config", "zeromem"), ("zeromem",))
        fsdp_setup = accelerate.fsdp
    elif kind == "fsdp":
        issues, fsdp_setup = validate_transformers_fsdp(data, ())
        block_paths = (("zeromem",),)
    else:
        from zeromem_lsp.configs.hf_arguments import validate_hf_arguments

        issues, deepspeed_issues, hf_setup = validate_hf_arguments(data, loader)
        fsdp_setup = hf_setup.fsdp
        block_paths = ((hf_setup.block_path,) if hf_setup.block_path else ()) + (("zeromem",),)
    block, block_problems, block_path = NO_SETTINGS, [], ("zeromem",)
    for candidate in block_paths:
        block, block_problems = _nested_block(document, data, candidate)
        if block_problems or block != NO_SETTINGS:
            block_path = candidate
            break
    effective = forced.merged_over(block.merged_over(settings))
    effective, parameter_note, parameter_problem = resolve_parameters(effective, loader)
    if parameter_problem:
        block_problems.append(((*block_path, "parameters"), parameter_problem, "value"))
    setup, missing = None, "an FSDP or DeepSpeed setup in this file"
    if fsdp_setup is None:
        setup, missing = _deepspeed_setup(accelerate, hf_setup, loader, missing)
    plan = plan_fsdp_family(fsdp_setup, accelerate, setup, effective, block_path, "num_machines" in data, missing)
    context = Context(document, data, effective, blank, plan)
    if getattr(document, "flavour", "json") == "yaml":
        findings = [context.finding("ZM001", p.message, span=(p.start, p.end)) for p in document.syntax_errors]
    else:
        findings = _json_strictness(context, kind)
    findings += [context.finding("ZM104", message, path, target) for path, message, target in block_problems]
    findings += fsdp_rules.check_issues(context, issues)
    findings += deepspeed_rules.check_issues(context, deepspeed_issues)
    findings += memory_rules.check(context)
    findings.sort(key=lambda f: (f.start, f.end, f.code))
    return Analysis(text, kind, document, findings, effective, setup, plan, parameter_note)
