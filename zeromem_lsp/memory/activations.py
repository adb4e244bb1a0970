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

from zeromem_lsp.configs.families import DELTA_CHUNK, GATED_DELTA_NET, Moe, Router, of
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
    offloaded_bytes: int = 0  # checkpointed layer inputs moved to host memory (memory/step.py `kept_on_device`), not counted


def _rms(rows: int, width: int, w: int, output_saved: bool, norm: str) -> int:
    """RMSNorm computed in fp32 (Llama, Gemma `1 + weight`, OLMo-2 `rms32` styles: docs/memory-model.md's table);
    its output is kept by the next linear when `output_saved` (not by a residual add)."""
    kept = F32 * rows * width + F32 * rows + (F32 if norm in ("rms1p", "rms32") else w) * rows * width
    return kept + (F32 * width if norm == "rms1p" else 0) + (w * rows * width if output_saved else 0)


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
    query, dv, family = w * tokens * q * d, shape.v_head_dim or d, of(shape)
    out = w * tokens * q * dv  # MLA: values and output v_head_dim wide; its v a view of kv_b_proj's output
    stored_v = w * tokens * kv * (d - shape.qk_rope_dim + dv) if family.mla else v_bytes
    if impl == "sdpa" and dv != d:  # torch's math kernel (CPU flash needs one width): fp32 q·scale, k, probabilities
        return F32 * (2 * tokens * q * d + scores) + (F32 * tokens * kv * dv if w != F32 else stored_v) + out
    if impl == "sdpa":  # v sliced from a fused qkv is copied by the kernel, whose output then comes back
        # head-major (so after partial rotary's and MLA's concatenated q): the output projection keeps a copy of it
        return query + w * tokens * kv * d + stored_v + out + F32 * b * q * s + (
            out if qkv == "sliced" or family.partial_rotary or family.mla else 0)
    # gpt2's q, k, v (views of c_attn's output) copied for the batched matmuls; else q, k repeated (k itself when
    # kv == q), v repeated
    kept = 3 * query if qkv == "views" else 2 * query + (query if kv < q else v_bytes)
    dropout = shape.attention_dropout > 0
    if not family.softmax_fp32:  # GPT-2's, Llama 4's softmax in the model dtype (no fp32 upcast), dropout's output
        kept += w * scores * (2 if dropout else 1)
    elif family.sinks:  # gpt-oss: max's index, the softmax over s + 1 columns in the model dtype, dropout's output
        kept += I64 * b * q * s + w * (scores + b * q * s) + (w * scores if dropout else 0)
    else:  # the fp32 softmax, cast back
        kept += F32 * scores + (w * scores if w != F32 or dropout else 0)
    if dropout:
        kept += w * scores  # the dropout mask, in the model dtype on CPU (see docs: CUDA keeps 1 byte)
    if shape.attention_softcap:
        kept += w * scores
    return kept + out


def delta_terms(shape: ModelShape, b: int, s: int, w: int, terms: Router = GATED_DELTA_NET) -> int:
    """A gated delta-net mixer on Transformers' torch fallbacks (families.GATED_DELTA_NET; fp32's layouts: docs), or
    its `terms` ((count, rows, width) as there)."""
    (k_heads, v_heads, dk, dv, kernel), chunk, rows = shape.linear_heads, DELTA_CHUNK, b * shape.linear_heads[1]
    n, conv = -(-s // chunk), 2 * k_heads * dk + v_heads * dv
    # fp32 at a chunk multiple: q, k stay token-major (matmul copies k_beta, q, kᵀ twice; grouped heads with b > 1:
    padded, strided = n * chunk, w == F32 and s % chunk == 0 and (b > 1 or n > 1)  # each later chunk's decayed q)
    grouped = strided and b > 1 and k_heads != v_heads
    size = {"conv": b * conv * (2 * s + kernel - 1), "H": v_heads, "Rs": rows * s, "Rsk": rows * s * dk,
            "Rsv": rows * s * dv, "RP": rows * padded, "RPk": rows * padded * dk, "RPv": rows * padded * dv,
            "RPC": rows * padded * chunk, "Rn": rows * n, "R1": rows if n == 1 else 0,
            "sRPk": rows * padded * dk if strided else 0, "Rnkv": rows * n * dk * dv, "CC": chunk * chunk,
            "qd": rows * (padded - chunk * grouped) * dk if n > 1 else 0,  # fp32, Hk = Hv: q, k views of the conv's
            "views": b * conv * s - 2 * rows * s * dk + b * s * 2 * (k_heads * dk + v_heads * dv) - rows * s * dv if (
                w == F32 and k_heads == v_heads) else 0}  # output, the gate one of in_proj_qkvz's
    return sum(count * size[row] * {"w": w, "f32": F32, "bool": 1}[width] for count, row, width in terms)


def _layer(shape: ModelShape, b: int, s: int, w: int, impl: str, sparse: bool, linear: bool = False) -> int:
    """One decoder layer: its norms (LayerNorm, centred, RMSNorm with or without post-norms and q/k norms), the
    attention (`linear`: a gated delta-net) and the MLP (`Family.mlp_kept` T × I tensors) or the MoE block; docs."""
    family, tokens, h = of(shape), b * s, shape.hidden
    q, kv, d = shape.heads, shape.kv_heads, shape.head_dim
    norm = family.norm
    # gpt2's v is a view of c_attn's output; MLA's values are v_head_dim wide
    width = 3 * h if family.qkv == "views" else kv * (shape.v_head_dim or d) if family.gqa else h
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
        if shape.qk_norm and family.qk_norm_weightless:  # fp32 x and 1/rms per head row (unrotated layers: none)
            kept += F32 * tokens * (q + kv) * (d + 1)
        elif shape.qk_norm and family.qk_norm_whole:  # one row per token over the whole projection
            kept += _rms(tokens, q * d, w, False, norm) + _rms(tokens, kv * d, w, False, norm)
        elif shape.qk_norm and not linear:
            kept += _rms(tokens * q, d, w, False, norm) + _rms(tokens * kv, d, w, False, norm)
        # MLA: the latents' norms, whose outputs q_b_proj and kv_b_proj keep (fp32: kv_a's input a view, rope and all)
        kept += sum(_rms(tokens, rank, w, True, norm) for rank in (shape.q_lora_rank, shape.kv_lora_rank) if rank) + (
            F32 * tokens * shape.qk_rope_dim if w == F32 else 0)
        if family.norms_per_layer == 4:
            kept += 2 * _rms(tokens, h, w, False, norm)
        if not family.post_norms:
            kept += _rms(tokens, h, w, True, norm)
    # qwen3_next's output gate: sigmoid's output, the gated product (fp32: the q norm's input is q_proj's whole output)
    kept += delta_terms(shape, b, s, w) if linear else _attention(shape, b, s, w, impl, w * tokens * width) + (
        2 * w + (F32 if w == F32 else 0)) * tokens * q * d * family.gated_q
    if shape.hidden_dropout > 0:  # resid dropouts after attention and MLP
        kept += 2 * w * tokens * h
    return kept + (_moe(shape, family.moe, tokens, w) if sparse and family.moe else family.mlp_kept * w * tokens * (
        shape.intermediate))


def _moe(shape: ModelShape, moe: Moe, tokens: int, w: int) -> int:
    """Router (`Moe.router`'s terms), experts (grouped_mm: S = tokens × k visits, their tensors, three int64
    permutations, int32 group offsets; `every_expert`: bmm over every token, unsorted), shared experts (docs)."""
    experts, k, h = shape.experts, shape.experts_per_token, shape.hidden
    rows = {"T": tokens, "TE": tokens * experts, "S": tokens * k, "Th": tokens * h,
            "TG": tokens * shape.routing_groups[0], "Tg": tokens * shape.routing_groups[1]}
    widths = {"f32": F32, "i64": I64, "bool": 1, "w": w, "up": F32 if w != F32 else 0}
    kept = sum(count * rows[row] * widths[width] for count, row, width in moe.router)
    kept += F32 * (tokens * k + tokens) if shape.normalize_top_k else 0
    visits = tokens * experts if moe.every_expert else tokens * k
    kept += ((2 * h + moe.expert_kept * shape.expert_intermediate) * w + (F32 if moe.fp32_weights else w)) * visits
    return kept + (0 if moe.every_expert else (3 + moe.expert_bias) * I64 * visits + I32 * experts) + 4 * w * (
        tokens * shape.shared_intermediate) + w * (tokens + tokens * h) * moe.gated_shared  # sigmoid, shared output


def _layer_types(shape: ModelShape) -> int:
    """How many attention types (sliding, full) the layers use."""
    return (shape.sliding_layers > 0) + (shape.sliding_layers < shape.layers)


def _masked(shape: ModelShape, s: int, attention: str) -> bool:
    """sdpa gets an explicit mask (instead of is_causal) on sliding layers the sequence outgrows."""
    return attention == "sdpa" and shape.sliding_layers > 0 and s > shape.sliding_window


def _sliding_extra(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """With an explicit mask sdpa cannot use grouped-query kernels: k and v are repeated to all heads."""
    # and each masked layer keeps its own copy of the (b, 1, s, s) mask (measured with a window shorter than the
    # sequence on every family with an sdpa sliding path: mistral, qwen2, qwen3, gemma3_text, phi3, mixtral, qwen3_moe,
    # olmo3, starcoder2, cohere2; gemma2 runs eager)
    return 2 * w * b * s * (shape.heads - shape.kv_heads) * shape.head_dim + w * b * s * s if _masked(
        shape, s, attention) else 0


def _shared(shape: ModelShape, b: int, s: int, w: int, attention: str) -> int:
    """Rotary cos and sin, (1, 1, s, rotary width) each, computed once and read by every layer (Gemma 3:
    one pair per attention type). (A sliding mask is each layer's own: `_sliding_extra`.)"""
    family = of(shape)
    if family.positions:  # learned positions: no rotary tables
        return 0
    width = shape.rotary_dim if family.partial_rotary else shape.qk_rope_dim or shape.head_dim // (
        2 if family.rotary_halves else 1)
    return (F32 if family.rotary_fp32 else w) * (_layer_types(shape) if family.rotary_per_type else 1) * 2 * s * width


def _embedding(shape: ModelShape, b: int, s: int, w: int) -> int:
    family = of(shape)  # the token ids; gpt2's wpe keeps the position ids; gemma's sqrt(hidden) scale, a 0-d tensor
    return I64 * b * s + (I64 * s if family.positions else 0) + (w if family.embedding_scale else 0) + (
        w * b * s * shape.hidden if shape.embedding_dropout > 0 else 0)


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
    rule = of(shape).sliding  # gpt2's blocks take no position ids (wpe already keeps them)
    kept = shape.layers * w * b * s * shape.hidden + (0 if of(shape).positions else I64 * s)
    if attention == "eager":
        kept += _layer_types(shape) * w * b * s * s
    if _masked(shape, s, attention):  # the layers' boolean (1, 1, s, s) sliding mask (measured at b = 1 and 2)
        kept += s * s * (b if rule and rule.batched_mask else 1)  # (llama4's chunked mask: b rows)
    return kept


def _logits(shape: ModelShape, b: int, s: int, w: int) -> int:
    """ForCausalLMLoss: the fp32 log-softmax, the shifted labels (a view of the b·(s+1) padding when b = 1, a b·s
    copy else), a 0-d weight."""
    tokens = b * s  # (gemma2's final softcapping: tanh(logits / cap) keeps its output)
    return F32 * tokens * shape.vocab + I64 * (s + 1 if b == 1 else tokens) + F32 + (
        w * tokens * shape.vocab if shape.final_softcap else 0)


def estimate_activations(shape: ModelShape, sequence_length: int, micro_batch: int, dtype: str = "bf16",
                         checkpointing: bool = False, attention: str = "sdpa",
                         transformers: TransformersPath = NEWEST_PATH) -> Activations:
    """Saved-for-backward bytes of one micro-batch; raises ActivationInputError naming a bad input. transformers:
    what the release keeps in sdpa's layers (k and v repeated, o_proj's copy: configs/transformers_paths.py)."""
    for name, value, most in (("sequence_length", sequence_length, MAX_SIZE), ("micro_batch", micro_batch, MAX_COUNT)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise ActivationInputError(f"{name} must be an integer between 1 and {most:,}, got {value!r}")
    for name, choice, allowed in (("dtype", dtype, tuple(DTYPE_BYTES)), ("attention", attention, ATTENTION)):
        if choice not in allowed:
            raise ActivationInputError(f"{name} must be one of {', '.join(allowed)}, got {choice!r}")
    w, b, s = DTYPE_BYTES[dtype], micro_batch, sequence_length
    attention = "eager" if of(shape).eager_only else attention
    dense = shape.layers - shape.sparse_layers
    repeated, copied = transformers.sdpa_layer(shape, b * s, w) if attention == "sdpa" else (0, 0)
    sizes = ([_layer(shape, b, s, w, attention, True) + repeated + copied] if shape.sparse_layers else []) + (
        [_layer(shape, b, s, w, attention, False) + repeated + copied] if dense else [])
    extra = _sliding_extra(shape, b, s, w, attention) - (repeated if _masked(shape, s, attention) else 0)  # (has them)
    layer_bytes = (shape.sparse_layers * sizes[0] if shape.sparse_layers else 0) + (dense * sizes[-1] if dense else 0)
    layer_bytes += shape.sliding_layers * extra
    mixer = _layer(shape, b, s, w, attention, False, True) - _layer(shape, b, s, w, attention, False) - repeated - (
        copied) if shape.linear_layers else 0  # a gated delta-net layer's mixer instead of attention (qwen3_next)
    layer_bytes += len(shape.linear_layers) * mixer
    layer_bytes += shape.nope_layers * (F32 * s - (F32 * b * s * (shape.heads + shape.kv_heads) * (  # unrotated
        shape.head_dim + 1) if shape.qk_norm else 0))  # layers (llama4_text): no q/k norm, a temperature scale
    per_layer = max(sizes) + (extra if shape.sliding_layers else 0) + max(mixer, 0)
    embedding, shared = _embedding(shape, b, s, w), _shared(shape, b, s, w, attention)
    embedding += shape.vision.kept(b, s, w, checkpointing) if shape.vision else 0  # configs/image_tokens.py
    final_norm, logits = _final_norm(shape, b, s, w), _logits(shape, b, s, w)
    checkpoint = _checkpoint_kept(shape, b, s, w, attention) if checkpointing else 0
    total = embedding + shared + final_norm + logits + (checkpoint if checkpointing else layer_bytes)
    return Activations(per_layer_bytes=per_layer, layers=shape.layers, layer_bytes=layer_bytes,
                       embedding_bytes=embedding, shared_bytes=shared, final_norm_bytes=final_norm,
                       logits_bytes=logits, checkpointing=checkpointing, checkpoint_bytes=checkpoint,
                       recompute_bytes=per_layer if checkpointing else 0, total=total, attention=attention)
