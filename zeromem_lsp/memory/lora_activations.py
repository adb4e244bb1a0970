"""Saved-for-backward bytes with LoRA adapters on a frozen base: the full fine-tuning model
(zeromem_lsp/activations.py) minus what frozen weights no longer keep, plus what the adapters keep.

Read off autograd and PEFT's lora.Linear.forward (peft/tuners/lora/layer.py); each rule, and the families measured
against PEFT on CPU (benchmarks/adapters/activations.py → tests/data/adapters/lora_activations.json), lora_dropout's
mask (`native_dropout`: 1 B per element on a GPU, the input's dtype on CPU): docs/adapters.md.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.memory.precision import DTYPE_BYTES
from zeromem_lsp.memory.activations import (F32, I64, ActivationInputError, Activations, delta_terms,
                                            estimate_activations)
from zeromem_lsp.configs.families import DELTA_DECAY, FAMILIES as KNOWN, of
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.configs.transformers_paths import NEWEST_PATH, TransformersPath
from zeromem_lsp.memory.adapters import AdapterCount

FAMILIES = tuple(name for name, family in KNOWN.items() if family.activations and family.lora_measured)
# which tensor each adapted module reads (by its role, configs/families.Weight): the attention input, the
# attention output, the MLP input, the product
SOURCES = {"q": "attn_in", "k": "attn_in", "v": "attn_in", "qkv": "attn_in", "o": "attn_out", "gate": "mlp_in",
           "up": "mlp_in", "gate_up": "mlp_in", "fc_in": "mlp_in", "down": "down_in", "fc_out": "down_in",
           "shared_gate": "mlp_in", "shared_up": "mlp_in", "shared_down": "shared_in",  # (a shared expert's)
           "q_a": "attn_in", "kv_a": "attn_in", "q_b": "q_latent", "kv_b": "kv_latent",  # MLA's latent norms' outputs
           "in_qkvz": "attn_in", "in_ba": "attn_in", "linear_out": "linear_out"}  # a gated delta-net's (qwen3_next)
# fused projections stand for their parts
PARTS = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}
# the projections that give q, k or v a gradient (MLA: q_a / q_b the queries, kv_a / kv_b keys and values)
QUERY, KEY, VALUE = {"q", "q_a", "q_b"}, {"k", "kv_a", "kv_b"}, {"v", "kv_a", "kv_b"}
ATTENTION = QUERY | KEY | VALUE | {"o", "in_qkvz", "in_ba", "linear_out"}


def activation_dtype(dtype: str, quantized: bool, kbit_upcast: bool) -> str:
    """The dtype the forward runs in: fp32 through a quantized base after prepare_model_for_kbit_training's upcast
    (a quantized linear itself keeps no input: MatMul4Bit.forward; measured, 4-bit and 8-bit: docs/adapters.md)."""
    return "fp32" if quantized and kbit_upcast else dtype


class LoraActivations(NamedTuple):
    per_layer_bytes: int  # a layer whose input needs a gradient (every layer after the first adapted one)
    first_layer_bytes: int  # the first adapted layer (its input, from a frozen embedding, needs none; else as any)
    layer_bytes: int  # all layers
    outside_bytes: int  # embedding, rotary tables, final norm, loss
    checkpointing: bool
    checkpoint_bytes: int  # with checkpointing: every layer's input and the shared inputs, as without adapters
    recompute_bytes: int  # with checkpointing: the largest layer re-run during backward
    total: int  # everything saved at the end of forward (recompute not included)


def _o_copy(shape: ModelShape, attention: str) -> bool:
    """o_proj keeps a copy of the attention output of its own: eager, or an sdpa output that comes back head-major
    (a fused qkv's, partial rotary's concatenated q: memory/activations `_attention`)."""
    family = of(shape)
    return attention == "eager" or family.qkv == "sliced" or bool(family.partial_rotary) or family.mla


def _frozen_savings(shape: ModelShape, tokens: int, w: int, attention: str, linear: bool = False) -> int:
    """What a layer of the full fine-tuning model keeps only for its own weights' gradients, the MLP aside. `linear`:
    a gated delta-net layer (no q/k norms, no o_proj): exp(A_log) and the softplus output A multiplies (fp32, Hv and
    T·Hv), the gated norm's normalized copy and out_proj's input (w·T·Hv·dv each; Qwen3NextGatedDeltaNet.forward)."""
    family, h = of(shape), shape.hidden
    qd, kvd = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    od = shape.heads * (shape.v_head_dim or shape.head_dim)  # o_proj's input
    normalized = _normalized(shape, w)  # the normalized input the norm weight's gradient reads
    saved = 0 if family.norm == "layer" else family.norms_per_layer * normalized * tokens * h
    # the two tensors that feed linears (attention's and the MLP's or router's inputs), kept by those linears: one
    # when a single norm feeds both (a parallel residual with one norm)
    saved += min(2, family.norms_per_layer) * w * tokens * h
    if linear:
        v_heads, dv = shape.linear_heads[1], shape.linear_heads[3]
        return saved + F32 * v_heads * (1 + tokens) + 2 * w * tokens * v_heads * dv
    if shape.qk_norm and not family.qk_norm_weightless:
        saved += normalized * tokens * (qd + kvd)
    # MLA's latent norms: their normalized copies and their outputs, q_b_proj's and kv_b_proj's inputs
    saved += 2 * normalized * tokens * (shape.q_lora_rank + shape.kv_lora_rank)
    return saved + (w * tokens * od if _o_copy(shape, attention) else 0)  # o_proj's copy of the attention output


def _mlp_savings(shape: ModelShape, tokens: int, w: int, sparse: bool) -> int:
    """What a dense MLP keeps only for its weights' gradients (down_proj's input), or a MoE block with frozen
    router and experts (`Moe.frozen`'s terms): the experts' gathered input and down's input per visit, the gathered
    biases' index, the shared expert's down input (integrations/moe.py `grouped_mm_experts_forward`: grouped_mm
    keeps an operand only for the other's gradient)."""
    moe = of(shape).moe
    if not (sparse and moe):
        return w * tokens * shape.intermediate
    visits = tokens * (shape.experts if moe.every_expert else shape.experts_per_token)
    rows = {"T": tokens, "Th": tokens * shape.hidden, "S": visits}
    widths = {"f32": F32, "i64": I64, "w": w, "up": F32 if w != F32 else 0}
    kept = sum(count * rows[row] * widths[width] for count, row, width in moe.frozen)
    return kept + w * visits * (shape.hidden + shape.expert_intermediate) + w * tokens * shape.shared_intermediate


def _kind_bytes(shape: ModelShape, full: Activations, sparse: bool, s: int, b: int, dtype: str, attention: str,
                transformers: TransformersPath) -> int:
    """What full fine-tuning keeps in the largest layer whose MLP is the MoE block (`sparse`) or a dense MLP."""
    if shape.sparse_layers in (0, shape.layers):
        return full.per_layer_bytes
    alike = shape._replace(sparse_layers=shape.layers if sparse else 0, linear_layers=())
    return estimate_activations(alike, s, b, dtype, False, attention, transformers).per_layer_bytes


def _normalized(shape: ModelShape, w: int) -> int:
    """Bytes per element of the normalized tensor a norm weight's gradient reads: fp32 where the weight multiplies
    in fp32 (Gemma's 1 + weight, OLMo-2's weight · x̂ before the cast, Cohere's centred norm), else the model dtype."""
    return F32 if of(shape).norm in ("rms1p", "rms32", "centered") else w


def _norm_bytes(shape: ModelShape, rows: int, width: int, w: int = 2, weight: int | None = None) -> int:
    """A frozen norm on a gradient-carrying input. RMSNorm: fp32 input and 1/rms (gemma: + fp32 (1 + weight));
    LayerNorm: its input, mean and 1/std in the model dtype; Cohere's centred fp32 norm: two fp32 copies of x - mean,
    1/std and (16-bit models) the fp32 copy of its `weight` elements (default: `width`)."""
    norm = of(shape).norm
    if norm == "layer":
        return w * rows * width + 2 * w * rows
    if norm == "centered":
        return 2 * F32 * rows * width + F32 * rows + (F32 * (width if weight is None else weight) if w != F32 else 0)
    return F32 * rows * width + F32 * rows + (F32 * width if norm == "rms1p" else 0)


def _names(adapted: dict[str, int]) -> set[str]:
    names = set(adapted)
    for fused, parts in PARTS.items():
        if fused in adapted:
            names |= set(parts)
    return names


def _widths(shape: ModelShape) -> dict[str, int]:
    """The width of each tensor an adapter reads (by SOURCES)."""
    return {"attn_in": shape.hidden, "attn_out": shape.heads * (shape.v_head_dim or shape.head_dim),
            "mlp_in": shape.hidden, "down_in": shape.intermediate, "shared_in": shape.shared_intermediate,
            "q_latent": shape.q_lora_rank, "kv_latent": shape.kv_lora_rank,
            "linear_out": shape.linear_heads[1] * shape.linear_heads[3]}


def _adapter_bytes(shape: ModelShape, adapted: dict[str, int], tokens: int, w: int, a: int, attention: str,
                   cast_each: bool = False, dropout: bool = False) -> int:
    """What the adapters of one layer keep: their inputs (a copy each when cast or dropped out, else the input
    once) and A's output. `cast_each`: a copy each even in the compute dtype (FSDP1 mixed precision)."""
    widths = _widths(shape)
    kept = sum(a * tokens * rank for rank in adapted.values())
    if a != w or cast_each or dropout:
        return kept + sum(a * tokens * widths[SOURCES[name]] for name in adapted)
    sources = {SOURCES[name] for name in adapted}
    if not _o_copy(shape, attention):
        sources.discard("attn_out")  # the attention kernel keeps its output already
    return kept + sum(w * tokens * widths[source] for source in sources)


def _expert_bytes(shape: ModelShape, adapted: dict[str, int], tokens: int, w: int, a: int) -> int:
    """Routed experts adapted through target_parameters (PEFT's ParamWrapper): every forward folds the adapter into a
    new weight W + scaling·B·A the size of the whole stack (`_LoraFactorsProxy`'s baddbmm, in W's dtype), which
    grouped_mm keeps for its input's gradient while keeping its own input again for that weight's (the gathered input
    w·S·h for gate_up, the product w·S·I for down); baddbmm keeps the factors cast to W's dtype (copies when the
    adapters are in another). Measured: docs/adapters.md."""
    dims = {"experts_gate_up": (shape.hidden, 2 * shape.expert_intermediate),
            "experts_down": (shape.expert_intermediate, shape.hidden)}
    visits, e = tokens * shape.experts_per_token, shape.experts
    return sum(w * (e * dims[role][0] * dims[role][1] + visits * dims[role][0])
               + (w * e * rank * sum(dims[role]) if a != w else 0) for role, rank in adapted.items())


def _dropout_masks(shape: ModelShape, adapted: dict[str, int], tokens: int, mask_bytes: int, first: bool) -> int:
    """The dropout masks one layer's adapters keep: one per adapter whose input carries a gradient. In the first
    adapted layer the layer's input carries none: the attention output does after q / k / v adapters, the MLP's input
    after any attention adapter (not with a parallel residual: it reads the layer's input), down's input after that
    or after gate / up adapters."""
    widths, names = _widths(shape), _names(adapted)
    graded = {"attn_in", "attn_out", "mlp_in", "down_in", "shared_in", "q_latent", "kv_latent", "linear_out"}
    if first:
        attention = bool(ATTENTION & names)
        mlp = attention and not shape.parallel_residual
        graded = ({"attn_out"} if (QUERY | KEY | VALUE) & names else set()) | ({"mlp_in"} if mlp else set()) | (
            {"down_in", "shared_in"} if mlp or {"gate", "up", "fc_in"} & names else set()) | (
            {"q_latent"} if "q_a" in names else set()) | ({"kv_latent"} if "kv_a" in names else set()) | (
            {"linear_out"} if "in_qkvz" in names else set())
    return sum(mask_bytes * tokens * widths[SOURCES[name]] for name in adapted if SOURCES[name] in graded)


def _first_layer_savings(shape: ModelShape, adapted: dict[str, int], b: int, s: int, w: int, a: int,
                         attention: str, cast_each: bool = False, linear: bool = False) -> int:
    """The first adapted layer's input (from the frozen embedding) needs no gradient: its input norm keeps
    nothing, and each op keeps only what the gradient of an input that needs one reads."""
    family, tokens = of(shape), b * s
    qd, kvd, I = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    names = _names(adapted)
    if linear:
        return _first_delta_savings(shape, names, b, s, w)
    gq, gk, gv = bool(QUERY & names), bool(KEY & names), bool(VALUE & names)
    saved = 0 if family.post_norms else _norm_bytes(shape, tokens, shape.hidden, w)  # post-norms: no input norm
    for rank, role in ((shape.q_lora_rank, "q_a"), (shape.kv_lora_rank, "kv_a")):  # MLA's latent norms keep their
        saved += _norm_bytes(shape, tokens, rank) if rank and role not in names else 0  # input for an adapted a
    if shape.qk_norm:  # q_norm / k_norm keep their input and 1/rms only for adapted q / k
        for grad, heads in ((gq, shape.heads), (gk, shape.kv_heads)):
            if not grad:  # one row per token over the whole projection (OLMo-2), else one per head
                rows, width = (tokens, heads * shape.head_dim) if family.qk_norm_whole else (
                    tokens * heads, shape.head_dim)
                saved += _norm_bytes(shape, rows, width, w, heads * shape.head_dim)
    if family.mla and attention == "sdpa" and shape.v_head_dim != shape.head_dim:  # torch's math kernel
        if gq != gk or gk != gv:
            raise ActivationInputError("the LoRA activation model of MLA is measured with adapters giving q, k and v "
                                       "all or none a gradient in the first adapted layer")
        if not gq:  # its fp32 q·scale, k, probabilities and v
            saved += F32 * (2 * tokens * shape.heads * shape.head_dim + b * shape.heads * s * s) + (
                F32 * tokens * shape.kv_heads * shape.v_head_dim)
    elif attention == "sdpa":
        if not (gq or gk or gv):  # the kernel keeps q, k, v, its output and the log-sum-exp only for a gradient
            v = 3 * shape.hidden if family.qkv == "views" else kvd  # gpt2's v is a view of c_attn's output
            saved += w * tokens * (2 * qd + kvd + v) + F32 * tokens * shape.heads
            if "o" in adapted and a == w and not cast_each and not _o_copy(shape, attention):
                saved -= w * tokens * qd  # the o_proj adapter keeps the attention output itself
    else:
        saved += _eager_savings(shape, b, s, w, gq, gk, gv)
    attention_adapted = bool(ATTENTION & names)
    if family.norm == "layer":
        return saved + _layer_norm_mlp_savings(shape, names, attention_adapted, tokens, w)
    if not attention_adapted and not shape.parallel_residual:
        # the norms up to the MLP read no gradient-carrying input either
        four = family.norms_per_layer == 4
        saved += (2 if four else 1) * _norm_bytes(shape, tokens, shape.hidden)
        if four and not {"gate", "up", "down"} & names:
            saved += _norm_bytes(shape, tokens, shape.hidden)  # post_feedforward_layernorm
    if not attention_adapted or shape.parallel_residual:  # the MLP's input carries no gradient (a parallel
        # residual's MLP reads the layer's normalized input, whatever attention's adapters)
        gate, up = "gate" in names, "up" in names
        # silu keeps its input and the product keeps up's output only for gate's gradient; silu's output only for up's
        saved += w * tokens * I * (3 - 2 * gate - up)
    return saved


def _first_delta_savings(shape: ModelShape, names: set[str], b: int, s: int, w: int) -> int:
    """A gated delta-net as the first adapted layer (qwen3_next's layer 0): its input norm keeps nothing; without
    in_proj_ba's adapter β and the decay carry no gradient: sigmoid's output (w·T·Hv), softplus's fp32 input and
    -exp(A_log) go, and what the delta rule keeps only for them (families.DELTA_DECAY; measured: docs/adapters.md)."""
    if "in_qkvz" not in names:
        raise ActivationInputError("the LoRA activation model of a gated delta-net layer is measured with in_proj_qkvz "
                                   "adapted in the first adapted layer")
    saved = _norm_bytes(shape, b * s, shape.hidden, w)
    if "in_ba" in names:
        return saved
    rows = b * s * shape.linear_heads[1]
    return saved + (w + F32) * rows + F32 * shape.linear_heads[1] + delta_terms(shape, b, s, w, DELTA_DECAY)


def _layer_norm_mlp_savings(shape: ModelShape, names: set[str], attention_adapted: bool, tokens: int, w: int) -> int:
    """GPT-2 / GPT-NeoX first layer, MLP side: its input needs a gradient only after attention adapters (or,
    with NeoX's parallel residual, never: both branches read the layer input); the activation after the first
    linear keeps its input only when that linear is adapted or its input needs a gradient."""
    if shape.parallel_residual:  # the second norm reads the layer input: it keeps only its statistics, now nothing
        saved, grad_in = 2 * w * tokens, False
    else:
        saved, grad_in = (0, True) if attention_adapted else (_norm_bytes(shape, tokens, shape.hidden, w), False)
    if not grad_in and "fc_in" not in names:
        # the activation's own tensors (the second linear's input aside): gpt2's gelu_new x, tanh, 0.5·x and
        # 1 + tanh; NeoX's gelu its input
        saved += (of(shape).mlp_kept - 1) * w * tokens * shape.intermediate
    return saved


def _eager_savings(shape: ModelShape, b: int, s: int, w: int, gq: bool, gk: bool, gv: bool) -> int:
    """Eager attention without a gradient on every one of q, k, v: q·kᵀ keeps q only for k's gradient and k
    for q's; the fp32 softmax, a softcap's tanh and the repeated v are kept only when the scores need a
    gradient; the probabilities in the model dtype only for v's."""
    if shape.attention_dropout > 0:
        raise ActivationInputError("the LoRA activation model is measured without attention dropout")
    query = w * b * s * shape.heads * shape.head_dim
    scores = b * shape.heads * s * s
    if of(shape).qkv == "views":  # c_attn adapts q, k, v together: all or none need a gradient
        return 0 if gq else 3 * query + w * scores
    v_kept = query if shape.kv_heads < shape.heads else w * b * s * shape.kv_heads * shape.head_dim
    saved = (0 if gk else query) + (0 if gq else query)
    if not (gq or gk):
        saved += v_kept + F32 * scores + (w * scores if shape.attention_softcap else 0)
    if not gv and w != F32:
        saved += w * scores
    return saved


def estimate_lora_activations(shape: ModelShape, count: AdapterCount, sequence_length: int, micro_batch: int,
                              dtype: str = "bf16", adapter_dtype: str = "fp32", attention: str = "sdpa",
                              checkpointing: bool = False, cast_each: bool = False, dropout: bool = False,
                              mask_bytes: int = 1, transformers: TransformersPath = NEWEST_PATH) -> LoraActivations:
    """Saved bytes of one micro-batch with LoRA; raises ActivationInputError. dropout: lora_dropout > 0 (a mask of
    `mask_bytes` per element where the input carries a gradient). cast_each: every adapter keeps its own copy of its
    input, as under FSDP1 mixed precision (docs/adapters.md; measured: lora-fsdp1-*-mixed). With (non-reentrant)
    checkpointing each layer keeps its input as in full fine-tuning; the re-run layer is a LoRA layer. transformers:
    the running release's sdpa terms, without o_proj's copy (configs/transformers_paths.py)."""
    if shape.model_type not in FAMILIES:
        raise ActivationInputError(
            f"no LoRA activation model for {shape.model_type!r}; measured: {', '.join(FAMILIES)}")
    if adapter_dtype not in DTYPE_BYTES:
        raise ActivationInputError(f"adapter_dtype must be one of {', '.join(DTYPE_BYTES)}, got {adapter_dtype!r}")
    full = estimate_activations(shape, sequence_length, micro_batch, dtype, checkpointing, attention, transformers)
    tokens, w, a = sequence_length * micro_batch, DTYPE_BYTES[dtype], DTYPE_BYTES[adapter_dtype]
    if (any(t.weight.role not in ("head", "embedding") for t in count.saved)
            or any(t.weight.kind not in ("linear", "conv1d", "experts") or t.layers is None for t in count.targets)):
        raise ActivationInputError("the LoRA activation model covers adapters on the layers' linear projections "
                                   "and routed experts (and the input embedding and LM head in modules_to_save) only")
    # a trained input embedding (its modules_to_save copy) keeps the token ids, and every layer's input carries a
    # gradient: no layer keeps less as the first adapted one (measured: docs/adapters.md)
    embedding = any(t.weight.role == "embedding" for t in count.saved)
    by_layer: dict[int, dict[str, int]] = {}
    experts: dict[int, dict[str, int]] = {}  # routed experts adapted through target_parameters
    for target in count.targets:
        for index in target.layers or ():
            (experts if target.weight.kind == "experts" else by_layer).setdefault(index, {})[
                target.weight.role] = target.rank
    family, common = of(shape), _frozen_savings(shape, tokens, w, attention)
    roles = {role for adapted in by_layer.values() for role in adapted}
    if roles - set(SOURCES):
        raise ActivationInputError("the LoRA activation model covers adapters on attention's and the dense MLP's "
                                   f"projections, not on {', '.join(sorted(roles - set(SOURCES)))}")
    if experts and family.moe and (family.moe.transposed or family.moe.every_expert):
        raise ActivationInputError("the LoRA activation model of adapted routed experts is measured on grouped_mm's "
                                   "(experts, out, in) stacks, not on this family's")
    start = 0 if embedding else min(by_layer.keys() | experts.keys())  # layers before the first adapter keep nothing
    if family.moe and not embedding and not ATTENTION & _names(by_layer.get(start, {})):
        raise ActivationInputError("the LoRA activation model of a MoE family needs adapters on attention in the "
                                   "first adapted layer (measured so)")
    # each kind of layer (MoE and dense) as full fine-tuning keeps it with attention, less what its frozen weights no
    # longer keep; a delta-net layer (qwen3_next) its mixer's bytes beyond attention's, less its own frozen terms
    plain = estimate_activations(shape._replace(linear_layers=()), sequence_length, micro_batch, dtype, False,
                                 attention, transformers) if shape.linear_layers else full
    kinds = [(count, _kind_bytes(shape, plain, sparse, sequence_length, micro_batch, dtype, attention, transformers),
              common + _mlp_savings(shape, tokens, w, sparse))
             for count, sparse in ((shape.sparse_layers, True), (shape.layers - shape.sparse_layers, False)) if count]
    base = max(kept - saved for _, kept, saved in kinds)
    mixer = (full.layer_bytes - plain.layer_bytes) // len(shape.linear_layers) - _frozen_savings(
        shape, tokens, w, attention, True) + common if shape.linear_layers else 0
    # Layers that keep different amounts (MoE and dense layers, sliding windows the sequence outgrows): what differs
    # is attention's own saved tensors, which LoRA leaves as they are, or the MLP's, counted per kind; carried over
    # whole. Derived, not measured for windows (the measurements' sequences fit them); only when every layer carries
    # a gradient.
    uneven = plain.layer_bytes - sum(count * saved for count, _, saved in kinds) - base * shape.layers
    if uneven and start != 0:
        raise ActivationInputError("the LoRA activation model covers layers that keep different amounts (MoE and "
                                   "dense layers, sliding windows the sequence outgrows) only when the first layer "
                                   "has adapters")
    sizes = [0 if i < start else base + mixer * (i in shape.linear_layers) + _adapter_bytes(
        shape, by_layer.get(i, {}), tokens, w, a, attention, cast_each, dropout)
             + _expert_bytes(shape, experts.get(i, {}), tokens, w, a)
             + (_dropout_masks(shape, by_layer.get(i, {}), tokens, mask_bytes, i == start and not embedding)
                if dropout else 0)
             for i in range(shape.layers)]
    sizes[start] -= 0 if embedding else _first_layer_savings(shape, by_layer.get(start, {}), micro_batch,
                                                             sequence_length, w, a, attention, cast_each,
                                                             start in shape.linear_layers)
    # frozen embedding: no token ids (nor gemma's scale); frozen final norm and head: no normalized copy (RMSNorm),
    # no input for the head
    normalized = 0 if family.norm == "layer" else _normalized(shape, w) * tokens * shape.hidden
    positions = I64 * sequence_length if family.positions else 0  # the frozen wpe keeps no position ids
    ids = 0 if embedding else I64 * tokens + (w if family.embedding_scale else 0)
    outside = (full.embedding_bytes + full.shared_bytes + full.final_norm_bytes + full.logits_bytes - ids - positions
               - normalized - w * tokens * shape.hidden)
    if any(t.weight.role == "head" for t in count.saved):  # a trained head keeps its input for its weight's gradient
        outside += w * tokens * shape.hidden  # (measured: lora-llama-h512-v8k-qv-r8-foreach-mts)
    if checkpointing:  # the checkpoints keep the layers' inputs (rotary tables included) whatever needs a gradient
        return LoraActivations(max(sizes), sizes[start], sum(sizes) + uneven, outside, True, full.checkpoint_bytes,
                               max(sizes), outside + full.checkpoint_bytes)
    if start == shape.layers - 1 and not embedding and not (QUERY | {"kv_a"}) & _names(by_layer.get(start, {})):
        outside -= full.shared_bytes  # rotary tables are kept by q·cos only when q or k carries a gradient
    middle = max(sizes[start + 1:], default=sizes[start])
    return LoraActivations(middle, sizes[start], sum(sizes) + uneven, outside, False, 0, 0,
                           sum(sizes) + uneven + outside)
