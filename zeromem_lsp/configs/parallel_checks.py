"""What a recipe's tool refuses about context parallelism before any GPU is used (issue 30), each at its key.

axolotl (src/axolotl/utils/schemas/validation.py `check_context_parallel_size`, `check_grpo_liger_sequence_parallel`;
enums.py `ATTN_IMPLS_USING_FLASH_LIB`, `LEGACY_ATTN_FLAG_TO_IMPL`): `context_parallel_size` (or the deprecated
`sequence_parallel_degree`) above 1 needs a flash-attention implementation (unless its GLM DSA kernels run), a micro-batch
of 1 with sample packing (ring-flash-attn), and no Liger loss under GRPO.
"""

from __future__ import annotations

from typing import Any

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.configs.workload import read_flag

FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", "kernels-community/flash-attn2",
                         "kernels-community/flash-attn3")


def _issue(path: tuple[str, ...], message: str) -> ConfigIssue:
    return ConfigIssue("invalid_value", path, "value", message, None, "recipe")


def axolotl_context_parallel(data: dict[str, Any]) -> list[ConfigIssue]:
    key = "context_parallel_size" if data.get("context_parallel_size") else "sequence_parallel_degree"
    degree = data.get(key)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree <= 1:
        return []
    out = []
    implementation = data.get("attn_implementation")
    flash = implementation in FLASH_IMPLEMENTATIONS or (implementation is None and read_flag(data.get("flash_attention")))
    if not flash and not read_flag(data.get("use_glm_dsa_kernels")):
        out.append(_issue((key,), f"{key} {degree} needs flash attention (attn_implementation: flash_attention_2 or "
                          "flash_attention_3): axolotl's ring attention runs on the flash-attention library"))
    micro = data.get("micro_batch_size")
    if read_flag(data.get("sample_packing")) and isinstance(micro, int) and not isinstance(micro, bool) and micro > 1:
        out.append(_issue(("micro_batch_size",), f"with {key} {degree} and sample_packing, axolotl needs "
                          f"micro_batch_size 1 (ring-flash-attn's packed sequences), got {micro}"))
    trl = data.get("trl")
    if data.get("rl") == "grpo" and isinstance(trl, dict) and read_flag(trl.get("use_liger_loss")):
        out.append(_issue(("trl", "use_liger_loss"), f"axolotl refuses GRPO with Liger's loss under {key} {degree}"))
    return out


__all__ = ["axolotl_context_parallel"]
