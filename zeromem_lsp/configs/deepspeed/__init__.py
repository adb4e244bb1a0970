"""DeepSpeed's config loader, mirrored: models, catalog, pre-check and `validate_deepspeed`.

`from zeromem_lsp.configs.deepspeed import validate_deepspeed, field_doc, section_keys` keeps working;
the names load `validation` on first use, so importing a light module here (`enums`, `issue`) stays light.
"""

from typing import Any

_PUBLIC = frozenset({
    "ConfigIssue", "FieldDoc", "ISSUE_KINDS", "ENGINE_LEVEL_KINDS", "KNOWN_TOP_LEVEL_KEYS", "HF_AUTO_FILLED_PATHS",
    "DEPRECATED_KEYS", "STRICT_SECTIONS", "STRICT_SECTION_NAMES", "validate_deepspeed", "field_doc", "section_keys",
})


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        from . import validation

        return getattr(validation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
