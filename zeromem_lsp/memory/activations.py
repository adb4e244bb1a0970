"""Bytes autograd saves for backward in one micro-batch of a Hugging Face causal LM (pure, exact ints).

The model is read off the Transformers modelling code (5.x) op by op: every tensor an op keeps for its backward is
counted once, with the dtype it has there (docs/memory-model.md explains each term). It is checked against the real
code's measurements (benchmarks/activations/measure.py → tests/data/activations/measured.json, test_activations.py).

Families: configs/families.FAMILIES with `activations`; a vision-language model's image tokens: configs/image_tokens.py.

Notation: b micro-batch, s sequence length, T = b·s tokens, h hidden size, d head_dim, q / kv heads,
I intermediate size, V vocabulary, w the 16- or 32-bit width of the model's dtype (2 or 4 bytes).
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.families import of
from zeromem_lsp.configs.model_config import MAX_COUNT, MAX_SIZE, ModelShape
from zeromem_lsp.configs.transformers_paths import NEWEST_PATH, TransformersPath
from zeromem_lsp.memory.precision import DTYPE_BYTES

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


def _rms(rows: int, width: int, w: int, output_saved: bool, norm: str) -> int:
    """RMSNorm computed in fp32 (Llama, Gemma `1 + weight`, OLMo-2 `rms32` styles: docs/memory-model.md's table);
    its output is kept by the next linear when `output_saved` (not by a residual add)."""
    kept = F32 * rows * width + F32 * rows
    if norm == "rms1p":
        kept += F32 * rows * width + F32 * width
    else:
        kept += (F32 if norm == "rms32" else w) * rows * width
    return kept + (w * rows * width if output_saved else 0)


def _centered(rows: int, width: int, w: int, output_saved: bool, weight: int) -> int:
    """Cohere's LayerNorm in fp32 without bias: `(x - mean).pow(2)` and `(x - mean) * rsqrt` keep two fp32 copies
    of x - mean, 1/std per row, `weight.float() * x̂` keeps x̂ in fp32 and (in 16-bit models) the fp32 copy of the
    `weight` elements; the output as in `_rms`."""
    kept = 3 * F32 * rows * width + F32 * rows + (F32 * weight if w != F32 else 0)
    return kept + (w * rows * width if output_saved else 0)


def _layer_norm(tokens: int, width: int, w: int, input_kept: bool) -> int:
    """LayerNorm keeps its input (unless already counted), mean and 1/std per row, and its output
    (for the next linear)."""
    return (w * tokens * width if input_kept else 0) + 2 * w * tokens + w * tokens * width


def _attention(shape: ModelShape, b: int, s: int, w: int, impl: str, v_bytes: int) -> int:
    """The attention kernel (sdpa or eager) and the output projection's input, from rotated q/k on:
    docs/memory-model.md's table."""
    tokens, q, kv, d = b * s, shape.heads, shape.kv_heads, shape.head_dim
    scores, qkv = b * q * s * s, of(shape).qkv
    query = w * tokens * q * d
    if impl == "sdpa":  # v sliced from a fused qkv is copied by the kernel, whose output then comes back
        # head-major: the output projection keeps a copy of it too
        return query + w * tokens * kv * d + v_bytes + query + F32 * b * q * s + (query if qkv == "sliced" else 0)
    if qkv == "views":  # q, k, v (views of c_attn's output) copied for the batched matmuls
        kept = 3 * query
    else:
        kept = query + query  # q, k repeated (k itself when kv == q)
        kept += query if kv < q else v_bytes
    dropout = shape.attention_dropout > 0
    if qkv == "views":  # GPT-2's softmax in the model dtype (no fp32 upcast), dropout's output
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


def _layer(shape: ModelShape, b: int, s: int, w: int, impl: str, sparse: bool) -> int:
    """One decoder layer: its norms (LayerNorm, centred, RMSNorm with or without post-norms and q/k norms), the
    attention and the MLP (`Family.mlp_kept` T × I tensors) or the MoE block; docs/memory-model.md's table."""
    family, tokens, h = of(shape), b * s, shape.hidden
    q, kv, d = shape.heads, shape.kv_heads, shape.head_dim
    norm = family.norm
    width = 3 * h if family.qkv == "views" else kv * d if family.gqa else h  # gpt2's v is a view of c_attn's output
    if norm == "layer":
        kept = _layer_norm(tokens, h, w, True) + _layer_norm(tokens, h, w, not shape.parallel_residual)
    elif norm == "centered":  # one norm feeding attention and the MLP in parallel; q/k norms per (head, channel)
        kept = _centered(tokens, h, w, True, h)
        if shape.qk_norm:
            kept += _centered(tokens * q, d, w, False, q * d) + _centered(tokens * kv, d, w, False, kv * d)
    else:
        # post-norms: q/k/v keep the layer input, gate/up the MLP input; the norms' outputs go to residual adds
        kept = 2 * w * tokens * h + 2 * _rms(tokens, h, w, False, norm) if family.post_norms else _rms(
            tokens, h, w, True, norm)
        if shape.qk_norm and family.qk_norm_whole:  # one row per token over the whole projection
            kept += _rms(tokens, q * d, w, False, norm) + _rms(tokens, kv * d, w, False, norm)
        elif shape.qk_norm:
            kept += _rms(tokens * q, d, w, False, norm) + _rms(tokens * kv, d, w, False, norm)
        if family.norms_per_layer == 4:
            kept += 2 * _rms(tokens, h, w, False, norm)
        if not family.post_norms:
            kept += _rms(tokens, h, w, True, norm)
    kept += _attention(shape, b, s, w, impl, w * tokens * width)
    if shape.hidden_dropout > 0:  # resid dropouts after attention and MLP
        kept += 2 * w * tokens * h
    return kept + (_moe(shape, tokens, w) if sparse else family.mlp_kept * w * tokens * shape.intermediate)


def _moe(shape: ModelShape, tokens: int, w: int) -> int:
    """Router and grouped experts (Transformers' grouped_mm path; S = tokens × k expert visits): the router's fp32
    softmax and top-k, the experts' tensors, three int64 permutations, int32 group offsets (docs/memory-model.md)."""
    experts, k, width, h = shape.experts, shape.experts_per_token, shape.expert_intermediate, shape.hidden
    pairs = tokens * k
    router = F32 * tokens * experts + I64 * pairs
    if shape.normalize_top_k:
        router += F32 * pairs + F32 * tokens
    moe = of(shape).moe
    weights = F32 if moe and moe.fp32_weights else w
    expert = w * pairs * h + 4 * w * pairs * width + w * pairs * h + weights * pairs + 3 * I64 * pairs
    return router + expert + I32 * experts


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
    # and each masked layer keeps its own copy of the (b, 1, s, s) mask (measured with a window shorter than the
    # sequence on every family with an sdpa sliding path: mistral, qwen2, qwen3, gemma3_text, phi3, mixtral, qwen3_moe,
    # olmo3, starcoder2, cohere2; gemma2 runs eager)
    return 2 * w * b * s * (shape.heads - shape.kv_heads) * shape.head_dim + w * b * s * s


def _shared(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """Rotary cos and sin, (1, 1, s, rotary width) each, computed once and read by every layer (Gemma 3:
    one pair per attention type). (A sliding mask is each layer's own: `_sliding_extra`.)"""
    family = of(shape)
    if family.positions:  # learned positions: no rotary tables
        return 0
    width = shape.rotary_dim if family.partial_rotary else shape.head_dim
    return (F32 if family.rotary_fp32 else w) * (_layer_types(shape) if family.rotary_per_type else 1) * 2 * s * width


def _embedding(shape: ModelShape, b: int, s: int, w: int) -> int:
    family = of(shape)
    kept = I64 * b * s  # the embedding keeps the token ids
    kept += I64 * s if family.positions else 0  # wpe keeps the position ids
    kept += w if family.embedding_scale else 0  # the sqrt(hidden) scale, a 0-d tensor
    if shape.embedding_dropout > 0:
        kept += w * b * s * shape.hidden
    return kept


def _final_norm(shape: ModelShape, b: int, s: int, w: int) -> int:
    norm = of(shape).norm
    if norm == "layer":
        return _layer_norm(b * s, shape.hidden, w, True)
    if norm == "centered":
        return _centered(b * s, shape.hidden, w, True, shape.hidden)
    return _rms(b * s, shape.hidden, w, True, norm)


def _checkpoint_kept(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """What non-reentrant checkpointing keeps: each layer's input, plus the keyword inputs the layers
    share (position ids; for eager the (b, 1, s, s) additive mask, one per attention type)."""
    kept = shape.layers * w * b * s * shape.hidden
    if not of(shape).positions:  # gpt2's blocks take no position ids (wpe already keeps them)
        kept += I64 * s
    if attention == "eager":
        kept += _layer_types(shape) * w * b * s * s
    if _masked(shape, s, attention):
        kept += s * s  # the layers' boolean (1, 1, s, s) sliding mask (measured at b = 1 and 2)
    return kept


def _logits(shape: ModelShape, b: int, s: int, w: int) -> int:
    """ForCausalLMLoss: the fp32 log-softmax, the shifted labels (a view of the b·(s+1) padding when b = 1, a b·s
    copy else), a 0-d weight."""
    tokens = b * s
    kept = F32 * tokens * shape.vocab + I64 * (s + 1 if b == 1 else tokens) + F32
    if shape.final_softcap:
        kept += w * tokens * shape.vocab  # tanh(logits / cap) keeps its output
    return kept


def estimate_activations(shape: ModelShape, sequence_length: int, micro_batch: int, dtype: str = "bf16",
                         checkpointing: bool = False, attention: str = "sdpa",
                         transformers: TransformersPath = NEWEST_PATH) -> Activations:
    """Saved-for-backward bytes of one micro-batch; raises ActivationInputError naming a bad input. transformers:
    what the release keeps in sdpa's layers (k and v repeated, o_proj's copy: configs/transformers_paths.py)."""
    for name, value, most in (("sequence_length", sequence_length, MAX_SIZE), ("micro_batch", micro_batch, MAX_COUNT)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise ActivationInputError(f"{name} must be an integer between 1 and {most:,}, got {value!r}")
    if dtype not in DTYPE_BYTES:
        raise ActivationInputError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    if attention not in ATTENTION:
        raise ActivationInputError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    w, b, s = DTYPE_BYTES[dtype], micro_batch, sequence_length
    if of(shape).eager_only:
        attention = "eager"
    dense = shape.layers - shape.sparse_layers
    repeated, copied = transformers.sdpa_layer(shape, b * s, w) if attention == "sdpa" else (0, 0)
    sizes = ([_layer(shape, b, s, w, attention, True) + repeated + copied] if shape.sparse_layers else []) + (
        [_layer(shape, b, s, w, attention, False) + repeated + copied] if dense else [])
    extra = _sliding_extra(shape, b, s, w, attention) - (repeated if _masked(shape, s, attention) else 0)  # (has them)
    layer_bytes = (shape.sparse_layers * sizes[0] if shape.sparse_layers else 0) + (dense * sizes[-1] if dense else 0)
    layer_bytes += shape.sliding_layers * extra
    per_layer = max(sizes) + (extra if shape.sliding_layers else 0)
    embedding, shared = _embedding(shape, b, s, w), _shared(shape, b, s, w, attention)
    embedding += shape.vision.kept(b, s, w, checkpointing) if shape.vision else 0  # configs/image_tokens.py
    final_norm, logits = _final_norm(shape, b, s, w), _logits(shape, b, s, w)
    checkpoint = _checkpoint_kept(shape, b, s, w, attention) if checkpointing else 0
    total = embedding + shared + final_norm + logits + (checkpoint if checkpointing else layer_bytes)
    return Activations(per_layer_bytes=per_layer, layers=shape.layers, layer_bytes=layer_bytes,
                       embedding_bytes=embedding, shared_bytes=shared, final_norm_bytes=final_norm,
                       logits_bytes=logits, checkpointing=checkpointing, checkpoint_bytes=checkpoint,
                       recompute_bytes=per_layer if checkpointing else 0, total=total, attention=attention)
