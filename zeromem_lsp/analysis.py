"""`analyse(text, name, settings)`: the single entry both front ends call.

Stages: syntax → structure (duplicates, strictness) → loader validity → memory. A broken document
still gets every stage that makes sense for the part that parsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from zeromem_lsp.configs.detect import detect_kind
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup, read_training_setup
from zeromem_lsp.document import Document, parse_document
from zeromem_lsp.document.decoding import decode_config
from zeromem_lsp.findings import Finding
from zeromem_lsp.plan import MemoryPlan, Unplanned, build_plan
from zeromem_lsp.rules import deepspeed as deepspeed_rules
from zeromem_lsp.rules import memory as memory_rules
from zeromem_lsp.rules import syntax as syntax_rules
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule

MAX_DOCUMENT_CHARS = 16 * 2**20
NO_SETTINGS = ZeromemSettings()


@dataclass
class Analysis:
    text: str
    kind: str | None
    document: Document | None
    findings: list[Finding] = field(default_factory=list)
    settings: ZeromemSettings = NO_SETTINGS
    setup: TrainingSetup | None = None
    plan: MemoryPlan | Unplanned | None = None


def _block_settings(context_document: Document, data: object) -> tuple[ZeromemSettings, list[tuple]]:
    """The file's own `zeromem` block, and its validation errors as (path, message)."""
    if not isinstance(data, dict) or "zeromem" not in data:
        return NO_SETTINGS, []
    block = data["zeromem"]
    if not isinstance(block, dict):
        return NO_SETTINGS, [(("zeromem",), "the zeromem block must be an object")]
    try:
        return ZeromemSettings.model_validate(block), []
    except ValidationError as error:
        problems = []
        for item in error.errors():
            path = ("zeromem", *item["loc"])
            message = item["msg"].removeprefix("Value error, ")
            if item["type"] == "extra_forbidden":
                message = f"unknown zeromem setting {item['loc'][-1]!r}; known: {', '.join(ZeromemSettings.model_fields)}"
            else:
                message = f"zeromem.{'.'.join(map(str, item['loc']))}: {message}"
            problems.append((path, message, "key" if item["type"] == "extra_forbidden" else "value"))
        valid = {k: v for k, v in block.items() if k not in {p[0][1] for p in problems if len(p[0]) > 1}}
        try:
            return ZeromemSettings.model_validate(valid), problems
        except ValidationError:
            return NO_SETTINGS, problems


def analyse(
    text: str,
    name: str | None = None,
    settings: ZeromemSettings = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
) -> Analysis:
    """Findings for one document.

    `settings`: project and editor defaults (below the file's own zeromem block);
    `forced`: command-line values (above it).
    """
    if len(text) > MAX_DOCUMENT_CHARS:
        finding = Finding("ZM002", rule("ZM002").severity,
                          f"document not analysed: {len(text):,} characters exceeds the {MAX_DOCUMENT_CHARS:,} limit", 0, 0)
        return Analysis(text, "oversized", None, [finding])
    document = parse_document(text)
    root = document.root
    keys = {m.key for m in root.members} if root is not None and root.kind == "object" else None
    kind = detect_kind(keys, name)
    if kind != "deepspeed":
        return Analysis(text, kind, document)
    data = document.to_python()
    block, block_problems = _block_settings(document, data)
    effective = forced.merged_over(block.merged_over(settings))
    setup = read_training_setup(data)
    plan = build_plan(setup, effective)
    context = Context(document, data, effective, setup, plan)
    findings = list(syntax_rules.check(context))
    findings += [context.finding("ZM104", message, path, target) for path, message, target in block_problems]
    findings += deepspeed_rules.check(context)
    findings += memory_rules.check(context)
    findings.sort(key=lambda f: (f.start, f.end, f.code))
    return Analysis(text, kind, document, findings, effective, setup, plan)


def analyse_bytes(
    data: bytes,
    name: str | None = None,
    settings: ZeromemSettings = NO_SETTINGS,
    forced: ZeromemSettings = NO_SETTINGS,
) -> Analysis:
    """`analyse` for file contents: an encoding DeepSpeed cannot read is a ZM003 finding."""
    decoded = decode_config(data)
    if decoded.binary:
        finding = Finding("ZM003", rule("ZM003").severity, decoded.problem, 0, 0)
        return Analysis(decoded.text, "binary", None, [finding])
    analysis = analyse(decoded.text, name, settings, forced)
    if decoded.problem is not None and analysis.kind == "deepspeed":
        end = min(decoded.offset + 1, len(decoded.text))
        analysis.findings.insert(0, Finding("ZM003", rule("ZM003").severity, decoded.problem, decoded.offset, end))
    return analysis
