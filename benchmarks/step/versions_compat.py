"""Version differences the benchmarks bridge (pure Python: tests read it)."""

from __future__ import annotations

import re


def dtype_keyword(transformers_version: str) -> str:
    """The from_config / from_pretrained keyword for the weights' dtype: `dtype` from Transformers 4.56 (which
    deprecated `torch_dtype`), `torch_dtype` before."""
    major, minor = (int(part) for part in re.findall(r"\d+", transformers_version)[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
