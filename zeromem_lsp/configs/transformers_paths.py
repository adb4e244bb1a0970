"""What the running Transformers release keeps alive that another does not: one row per range of releases, chosen
from the version that runs (pure). Read from each release's code, measured on CPU whole steps (benchmarks/step/
transformers_versions.py → tests/data/step/transformers_versions.json; docs/memory-model.md, "Versions").

The causal-LM loss:
- before 4.46 (read in 4.44.2 and 4.45.2, measured 4.44.2): `LlamaForCausalLM.forward` (Qwen2's, ...) upcasts
  the head's output itself (`logits = logits.float()`: the compute-dtype logits freed as the name is rebound, the
  output holding fp32 ones), then `logits[..., :-1, :].contiguous()` and `CrossEntropyLoss` over b·(s-1) rows.
- 4.46 to 4.48 (read in 4.46.3, 4.47.1, 4.48.3, measured 4.46.3): the model's forward keeps the head's output and
  calls `self.loss_function`; loss/loss_utils.py `ForCausalLMLoss` makes `logits.float()` and the shifted
  contiguous copy, then `fixed_cross_entropy` over b·(s-1) rows.
- 4.49 and later (read in 4.49.0, 4.50.3, 4.51.3, 4.57.3, 5.24.0; measured 4.51.3, 4.57.3, 5.24.0):
  `ForCausalLMLoss` shifts the labels instead (`nn.functional.pad(labels, (0, 1), value=ignore_index)`): the fp32
  upcast and the cross-entropy over all b·s rows, no copy of the logits.
With one sequence per micro-batch the shifted slice is contiguous already (`.contiguous()` returns it): no copy.

Attention (sdpa) with grouped-query heads: before 4.54 (read in 4.44.2-4.53.3; measured 4.44.2, 4.46.3, 4.51.3)
the key and value are repeated to every query head before `scaled_dot_product_attention`, which keeps them
(integrations/sdpa_attention.py `sdpa_attention_forward`, `repeat_kv`; models/llama/modeling_llama.py
`LlamaSdpaAttention.forward` before 4.48); from 4.54 `use_gqa_in_sdpa` passes `enable_gqa=True` when no mask is
given (torch 2.5 or later) and the kv heads are kept as they are.

From 4.48 to 4.55 (read in 4.48.3-4.55.4; gone in 4.56.2) `sdpa_attention_forward` makes the query `.contiguous()`
first: the kernel's output then comes back head-major and `attn_output.transpose(1, 2).contiguous()` copies it, the
copy o_proj keeps for its weight's gradient beside the output sdpa keeps (one b·s·h tensor per layer; a frozen
o_proj keeps none: LoRA steps do not have it). Measured in 4.51.3 on the CPU and on an H200
(tests/data/gpu/h200_versions_compile_long.json).

Not modelled (measured): Qwen2 (and the families that copied its rotary class) before 4.45 cache cos / sin of
max_position_embeddings rows in every layer (`_set_cos_sin_cache`), in the dtype the model is built in (2 layers ×
2 × 32768 × 64 × 2 bytes = 16 MiB at bf16).
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.families import ModelShape, of
from zeromem_lsp.configs.versions import release
from zeromem_lsp.provenance import Given

F32 = 4


class TransformersPath(NamedTuple):
    """One range of releases: the first release of it; whether the model's forward upcasts the logits itself;
    whether the logits are shifted (a contiguous fp32 copy of b·(s-1) rows, the cross-entropy over those rows);
    whether sdpa gets k and v repeated to every query head; whether o_proj keeps a copy of sdpa's output; where."""

    since: str
    model_upcast: bool
    shifted: bool
    repeat_kv: bool
    output_copy: bool
    source: str

    def forward(self, c: int, tokens: int, vocab: int, micro_batch: int) -> tuple[tuple[str, int], ...]:
        """Beside the activations when the log-softmax is made, as (memory/parts.py P value, bytes): the logits
        (fp32 when the model upcast them or runs in fp32), the loss's fp32 upcast (none then), the shifted copy
        (with more than one sequence)."""
        upcast = self.model_upcast or c == F32
        found: tuple[tuple[str, int], ...] = (("logits", (F32 if upcast else c) * tokens * vocab),
                                              ("fp32 logits copy", 0 if upcast else F32 * tokens * vocab))
        if self.shifted:
            found += (("shifted fp32 logits copy", F32 * (tokens - micro_batch) * vocab if micro_batch > 1 else 0),)
        return found

    def sdpa_layer(self, shape: ModelShape, tokens: int, w: int) -> tuple[int, int]:
        """What an sdpa layer keeps beyond the newest release's (memory/activations.py): k and v repeated to every
        query head; o_proj's copy of the output (not for a fused qkv sliced apart: its output is copied anyway)."""
        repeated = 2 * w * tokens * (shape.heads - shape.kv_heads) * shape.head_dim if self.repeat_kv else 0
        copied = w * tokens * shape.heads * shape.head_dim if self.output_copy and of(shape).qkv != "sliced" else 0
        return repeated, copied

    def rows(self, tokens: int, micro_batch: int) -> int:
        """The rows the cross-entropy runs over (its log-softmax kept, its two fp32 gradients in backward)."""
        return tokens - micro_batch if self.shifted else tokens


#: The ranges, oldest first (module docstring; docs/memory-model.md "Versions").
PATHS = (
    TransformersPath("0", True, True, True, False, "models/llama/modeling_llama.py LlamaForCausalLM.forward (4.44.2, "
                     "4.45.2): logits.float(), logits[..., :-1, :].contiguous(), CrossEntropyLoss; "
                     "LlamaSdpaAttention.forward: repeat_kv"),
    TransformersPath("4.46", False, True, True, False, "loss/loss_utils.py ForCausalLMLoss (4.46.3, 4.47.1): "
                     "logits.float(), logits[..., :-1, :].contiguous(), fixed_cross_entropy; repeat_kv"),
    TransformersPath("4.48", False, True, True, True, "ForCausalLMLoss (4.48.3) as 4.46; integrations/"
                     "sdpa_attention.py sdpa_attention_forward: repeat_kv, query.contiguous()"),
    TransformersPath("4.49", False, False, True, True, "ForCausalLMLoss (4.49.0-4.53.3): logits.float(), the labels "
                     "padded and shifted; sdpa_attention_forward: repeat_kv, query.contiguous()"),
    TransformersPath("4.54", False, False, False, True, "sdpa_attention_forward (4.54.1, 4.55.4): use_gqa_in_sdpa "
                     "(enable_gqa), query.contiguous()"),
    TransformersPath("4.56", False, False, False, False, "ForCausalLMLoss, sdpa_attention_forward (4.56.2-5.24.0)"),
)
NEWEST_PATH = PATHS[-1]


def version_of(given: Given | None) -> str | None:
    """The version a Given holds (PeakInputs.transformers_version), None when none is given."""
    return str(given.value) if given is not None else None


def transformers_path(version: str | None) -> TransformersPath:
    """The row of a Transformers `version` (None: the newest followed)."""
    if version is None:
        return NEWEST_PATH
    found = release(version)
    return [row for row in PATHS if release(row.since) <= found][-1]


__all__ = ["NEWEST_PATH", "PATHS", "TransformersPath", "transformers_path", "version_of"]
