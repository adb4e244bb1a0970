"""Bytes autograd saves for backward in one micro-batch of a Hugging Face causal LM (pure, exact ints).

The model is read off the Transformers modelling code (5.x) op by op: every tensor an op keeps for its
backward is counted once, with the dtype it has there. It is checked against measurements of the real
code (benchmarks/activations/measure.py → tests/data/activations/measured.json, compared by
tests/unit/test_activations.py); docs/memory-model.md explains each term.

Families: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, mixtral, qwen3_moe, gpt2,
gpt_neox (ModelShape from configs/model_config.model_shape).

Notation: b micro-batch, s sequence length, T = b·s tokens, h hidden size, d head_dim, q / kv heads,
I intermediate size, V vocabulary, w the 16- or 32-bit width of the model's dtype (2 or 4 bytes).
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.model_config import MAX_COUNT, MAX_SIZE, ModelShape

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
ATTENTION = ("sdpa", "eager")
F32 = 4  # float32 statistics, softmax and logits
I64 = 8  # token ids, positions, routing indices
I32 = 4


class ActivationInputError(ValueError):
    """An input the activation model cannot use (named in the message)."""


class Activations(NamedTuple):
    """Saved-for-backward bytes of one forward + causal-LM loss for one micro-batch."""

    per_layer_bytes: int  # one decoder layer (the largest, if they differ)
    layers: int
    layer_bytes: int  # all layers without checkpointing
    embedding_bytes: int  # token ids, positions, embedding dropout, gemma's scale
    shared_bytes: int  # rotary cos/sin tables every layer reads
    final_norm_bytes: int  # final norm, whose output the LM head keeps
    logits_bytes: int  # the loss: fp32 log-softmax of b·s·V (+ softcapped logits), labels
    checkpointing: bool
    checkpoint_bytes: int  # with checkpointing: every layer's input (layers × b·s·h·w) + shared inputs, else 0
    recompute_bytes: int  # with checkpointing: one layer re-run during backward, else 0
    total: int  # everything saved at the end of forward (recompute not included)
    attention: str  # the implementation counted (Gemma 2 runs eager: Transformers has no sdpa path for it)


def _rms(rows: int, width: int, w: int, output_saved: bool, gemma: bool) -> int:
    """RMSNorm computed in fp32: keeps the fp32 input, 1/rms per row and the normalized tensor.

    Llama style `weight * x.to(dtype)` keeps x in the model dtype for the weight's gradient; Gemma style
    `(x * rsqrt) * (1 + weight.float())` keeps it in fp32 plus the fp32 (1 + weight). Its output is kept
    by the next linear when `output_saved` (not by a residual add)."""
    kept = F32 * rows * width + F32 * rows
    kept += (F32 * rows * width + F32 * width) if gemma else w * rows * width
    return kept + (w * rows * width if output_saved else 0)


def _layer_norm(tokens: int, width: int, w: int, input_kept: bool) -> int:
    """LayerNorm keeps its input (unless already counted), mean and 1/std per row, and its output
    (for the next linear)."""
    return (w * tokens * width if input_kept else 0) + 2 * w * tokens + w * tokens * width


def _attention(shape: ModelShape, b: int, s: int, w: int, impl: str, v_bytes: int) -> int:
    """The attention kernel and the output projection's input, from rotated q/k on.

    sdpa (CPU flash kernel, and what flash attention keeps on GPU): q, k, v, the output and the fp32
    log-sum-exp per row; k/v keep their kv heads (grouped-query attention is not expanded).
    eager: k/v repeated to all q heads, q·kᵀ softmax in fp32, the probabilities in the model dtype
    (the same tensor in fp32 unless dropout follows), tanh of softcapped scores, the dropout mask,
    and a contiguous copy of the output for o_proj."""
    tokens, q, kv, d = b * s, shape.heads, shape.kv_heads, shape.head_dim
    scores = b * q * s * s
    query = w * tokens * q * d
    if impl == "sdpa":
        kept = query + w * tokens * kv * d + v_bytes + query + F32 * b * q * s
        if shape.model_type in ("phi3", "gpt_neox"):  # v sliced from a fused qkv is copied by the kernel,
            # whose output then comes back head-major: the output projection keeps a copy of it too
            kept += query
        return kept
    if shape.model_type == "gpt2":  # q, k, v (views of c_attn's output) copied for the batched matmuls
        kept = 3 * query
    else:
        kept = query + query  # q, k repeated (k itself when kv == q)
        kept += query if kv < q else v_bytes
    dropout = shape.attention_dropout > 0
    if shape.model_type == "gpt2":  # softmax in the model dtype (no fp32 upcast), dropout's output
        kept += w * scores * (2 if dropout else 1)
    else:
        kept += F32 * scores
        if w != F32 or dropout:
            kept += w * scores
    if dropout:
        kept += w * scores  # the dropout mask, in the model dtype on CPU (see docs: CUDA keeps 1 byte)
    if shape.attention_softcap:
        kept += w * scores
    return kept + query


def _llama_like_layer(shape: ModelShape, b: int, s: int, w: int, impl: str, sparse: bool) -> int:
    tokens, h, q, kv, d = b * s, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
    gemma = shape.model_type.startswith("gemma")
    four_norms = shape.model_type in ("gemma2", "gemma3_text")
    kept = _rms(tokens, h, w, True, gemma)  # input_layernorm → q/k/v projections
    v_bytes = w * tokens * kv * d  # phi3's v, sliced from the fused qkv_proj, is kept as its own copy
    if shape.model_type in ("qwen3", "qwen3_moe", "gemma3_text"):  # per-head q/k norms before rotary
        kept += _rms(tokens * q, d, w, False, gemma) + _rms(tokens * kv, d, w, False, gemma)
    kept += _attention(shape, b, s, w, impl, v_bytes)
    if four_norms:  # post_attention_layernorm feeds the residual add; pre_feedforward_layernorm the MLP
        kept += _rms(tokens, h, w, False, gemma) + _rms(tokens, h, w, True, gemma)
        kept += _rms(tokens, h, w, False, gemma)  # post_feedforward_layernorm
    else:
        kept += _rms(tokens, h, w, True, gemma)
    if shape.hidden_dropout > 0:  # phi3 resid_attn_dropout, resid_mlp_dropout
        kept += 2 * w * tokens * h
    return kept + (_moe(shape, tokens, w) if sparse else 4 * w * tokens * shape.intermediate)


def _moe(shape: ModelShape, tokens: int, w: int) -> int:
    """Router and grouped experts (Transformers' grouped_mm path); S = tokens × k expert visits.

    Router: fp32 softmax over the experts, the top-k indices, and when the top-k weights are
    renormalized their quotient and sum. Experts: the gathered inputs, gate_up output, activation and
    product (4·I per visit, as a gated MLP), the down output, the routing weights it is scaled by (fp32
    in Mixtral, the model dtype in Qwen3-MoE), three int64 permutations, int32 group offsets."""
    experts, k, width, h = shape.experts, shape.experts_per_token, shape.expert_intermediate, shape.hidden
    pairs = tokens * k
    router = F32 * tokens * experts + I64 * pairs
    if shape.normalize_top_k:
        router += F32 * pairs + F32 * tokens
    weights = F32 if shape.model_type == "mixtral" else w
    expert = w * pairs * h + 4 * w * pairs * width + w * pairs * h + weights * pairs + 3 * I64 * pairs
    return router + expert + I32 * experts


def _gpt2_layer(shape: ModelShape, b: int, s: int, w: int, impl: str) -> int:
    tokens, h = b * s, shape.hidden
    kept = _layer_norm(tokens, h, w, True)  # ln_1 keeps the residual stream it reads
    kept += _attention(shape, b, s, w, impl, w * tokens * 3 * h)  # c_attn output: q, k, v are views
    kept += _layer_norm(tokens, h, w, True)
    kept += 5 * w * tokens * shape.intermediate  # gelu_new in Python: x, tanh, 0.5·x, 1 + tanh; c_proj input
    if shape.hidden_dropout > 0:
        kept += 2 * w * tokens * h
    return kept


def _gpt_neox_layer(shape: ModelShape, b: int, s: int, w: int, impl: str) -> int:
    tokens, h = b * s, shape.hidden
    kept = _layer_norm(tokens, h, w, True)
    kept += _layer_norm(tokens, h, w, not shape.parallel_residual)  # parallel: both norms read one input
    kept += _attention(shape, b, s, w, impl, w * tokens * h)  # v, sliced from the fused qkv, is copied
    kept += 2 * w * tokens * shape.intermediate  # gelu keeps its input; dense_4h_to_h its own
    if shape.hidden_dropout > 0:
        kept += 2 * w * tokens * h
    return kept


def _layer(shape: ModelShape, b: int, s: int, w: int, impl: str, sparse: bool) -> int:
    if shape.model_type == "gpt2":
        return _gpt2_layer(shape, b, s, w, impl)
    if shape.model_type == "gpt_neox":
        return _gpt_neox_layer(shape, b, s, w, impl)
    return _llama_like_layer(shape, b, s, w, impl, sparse)


def _layer_types(shape: ModelShape) -> int:
    """How many attention types (sliding, full) the layers use."""
    return (shape.sliding_layers > 0) + (shape.sliding_layers < shape.layers)


def _masked(shape: ModelShape, s: int, attention: str) -> bool:
    """sdpa gets an explicit mask (instead of is_causal) on sliding layers the sequence outgrows."""
    return attention == "sdpa" and shape.sliding_layers > 0 and s > shape.sliding_window


def _sliding_extra(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """With an explicit mask sdpa cannot use grouped-query kernels: k and v are repeated to all heads."""
    if not _masked(shape, s, attention):
        return 0
    return 2 * w * b * s * (shape.heads - shape.kv_heads) * shape.head_dim


def _shared(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """Rotary cos and sin, (1, 1, s, rotary width) each, computed once and read by every layer (Gemma 3:
    one pair per attention type); the (b, 1, s, s) sliding mask when sdpa keeps it."""
    kept = w * b * s * s if _masked(shape, s, attention) else 0
    if shape.model_type == "gpt2":
        return kept
    width = shape.rotary_dim if shape.model_type == "gpt_neox" else shape.head_dim
    tables = _layer_types(shape) if shape.model_type == "gemma3_text" else 1
    return kept + tables * 2 * w * s * width


def _embedding(shape: ModelShape, b: int, s: int, w: int) -> int:
    kept = I64 * b * s  # the embedding keeps the token ids
    if shape.model_type == "gpt2":
        kept += I64 * s  # wpe keeps the position ids
    if shape.model_type.startswith("gemma"):
        kept += w  # the sqrt(hidden) scale, a 0-d tensor
    if shape.embedding_dropout > 0:
        kept += w * b * s * shape.hidden
    return kept


def _final_norm(shape: ModelShape, b: int, s: int, w: int) -> int:
    tokens = b * s
    if shape.model_type in ("gpt2", "gpt_neox"):
        return _layer_norm(tokens, shape.hidden, w, True)
    return _rms(tokens, shape.hidden, w, True, shape.model_type.startswith("gemma"))


def _checkpoint_kept(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """What non-reentrant checkpointing keeps: each layer's input, plus the keyword inputs the layers
    share (position ids; for eager the (b, 1, s, s) additive mask, one per attention type)."""
    kept = shape.layers * w * b * s * shape.hidden
    if shape.model_type != "gpt2":  # gpt2's blocks take no position ids (wpe already keeps them)
        kept += I64 * s
    if attention == "eager":
        kept += _layer_types(shape) * w * b * s * s
    return kept


def _logits(shape: ModelShape, b: int, s: int, w: int) -> int:
    """ForCausalLMLoss: logits.float() → log-softmax kept in fp32, shifted labels, a 0-d weight.

    The labels are padded by one and shifted: a view of the b·(s+1) padding when b = 1, a b·s copy else."""
    tokens = b * s
    kept = F32 * tokens * shape.vocab + I64 * (s + 1 if b == 1 else tokens) + F32
    if shape.final_softcap:
        kept += w * tokens * shape.vocab  # tanh(logits / cap) keeps its output
    return kept


def estimate_activations(shape: ModelShape, sequence_length: int, micro_batch: int, dtype: str = "bf16",
                         checkpointing: bool = False, attention: str = "sdpa") -> Activations:
    """Saved-for-backward bytes of one micro-batch; raises ActivationInputError naming a bad input."""
    for name, value, most in (("sequence_length", sequence_length, MAX_SIZE), ("micro_batch", micro_batch, MAX_COUNT)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise ActivationInputError(f"{name} must be an integer between 1 and {most:,}, got {value!r}")
    if dtype not in DTYPE_BYTES:
        raise ActivationInputError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    if attention not in ATTENTION:
        raise ActivationInputError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    w, b, s = DTYPE_BYTES[dtype], micro_batch, sequence_length
    if shape.model_type == "gemma2":
        attention = "eager"
    dense = shape.layers - shape.sparse_layers
    sizes = ([_layer(shape, b, s, w, attention, True)] if shape.sparse_layers else []) + (
        [_layer(shape, b, s, w, attention, False)] if dense else [])
    extra = _sliding_extra(shape, b, s, w, attention)
    layer_bytes = (shape.sparse_layers * sizes[0] if shape.sparse_layers else 0) + (dense * sizes[-1] if dense else 0)
    layer_bytes += shape.sliding_layers * extra
    per_layer = max(sizes) + (extra if shape.sliding_layers else 0)
    embedding, shared = _embedding(shape, b, s, w), _shared(shape, b, s, w, attention)
    final_norm, logits = _final_norm(shape, b, s, w), _logits(shape, b, s, w)
    checkpoint = _checkpoint_kept(shape, b, s, w, attention) if checkpointing else 0
    total = embedding + shared + final_norm + logits + (checkpoint if checkpointing else layer_bytes)
    return Activations(per_layer_bytes=per_layer, layers=shape.layers, layer_bytes=layer_bytes,
                       embedding_bytes=embedding, shared_bytes=shared, final_norm_bytes=final_norm,
                       logits_bytes=logits, checkpointing=checkpointing, checkpoint_bytes=checkpoint,
                       recompute_bytes=per_layer if checkpointing else 0, total=total, attention=attention)
