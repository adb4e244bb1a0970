"""What a rule sees: the positioned document, its plain data, settings, setup and memory plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup
from zeromem_lsp.configs.workload import Workload
from zeromem_lsp.document import Document, Member, Node
from zeromem_lsp.findings import Finding, Fix
from zeromem_lsp.memory.plan import MemoryPlan, Unplanned
from zeromem_lsp.provenance import Origin, Path
from zeromem_lsp.rules.registry import Rule


@dataclass
class Context:
    document: Document
    data: object
    settings: ZeromemSettings
    setup: TrainingSetup
    plan: MemoryPlan | Unplanned
    workload: Workload = field(default_factory=Workload)  # the config's batch, sequence and buffer values
    origins: dict[str, Origin] = field(default_factory=dict)  # setting name -> the layer that supplied it
    planned_setup: TrainingSetup | None = None  # the DeepSpeed setup planned, also from another file (a recipe's)
    model_unread: bool = False  # a recipe names a model that could not be read (its own finding says where)

    def span(self, path: Path | None, target: str = "value") -> tuple[int, int]:
        """Range of the value (or key) at path; the nearest existing ancestor's key when absent."""
        document = self.document
        if path is not None:
            for depth in range(len(path), 0, -1):
                found = document.find(path[:depth])
                if isinstance(found, Member):
                    if target == "value" and depth == len(path) and found.value is not None:
                        return found.value.start, found.value.end
                    return found.key_start, found.key_end
                if isinstance(found, Node):
                    return found.start, found.end
        root = document.root
        if root is None:
            return 0, min(1, len(document.text))
        return root.start, min(root.start + 1, root.end)

    def exists(self, path: Path) -> bool:
        return self.document.find(path) is not None

    def finding(
        self,
        rule: Rule,
        message: str,
        path: Path | None = None,
        target: str = "value",
        fixes: tuple[Fix, ...] = (),
        span: tuple[int, int] | None = None,
        lesser: bool = False,
    ) -> Finding:
        start, end = span if span is not None else self.span(path, target)
        return rule.at(message, start, end, fixes, lesser=lesser)
