"""The issue record every config reader reports: a namespaced kind, a key path and a message.

Which rule (and so which severity) an issue is, is decided by `rules.kinds`, not here.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

from zeromem_lsp.rules.kinds import rule_for_kind


class ConfigIssue(NamedTuple):
    """One problem a reader found in a config."""

    kind: str  # the reader's own kind name, e.g. "unknown_key"
    path: tuple[Union[str, int], ...]  # key path, e.g. ("zero_optimization", "stage")
    target: str  # "key" (highlight the key) or "value" (highlight the value)
    message: str
    replacement: Optional[str] = None  # suggested key name for a quick fix
    reader: str = "deepspeed"  # namespace of `kind`: "deepspeed" | "fsdp" | "accelerate"

    @property
    def key(self) -> str:
        """The namespaced kind, e.g. "deepspeed.unknown_key" (the key of `rules.kinds.KIND_RULES`)."""
        return f"{self.reader}.{self.kind}"

    @property
    def severity(self) -> str:
        """"error": the loader refuses the config at launch; "warning": it starts anyway."""
        return rule_for_kind(self.key).severity
