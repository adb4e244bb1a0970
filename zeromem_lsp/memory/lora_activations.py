"""Saved-for-backward bytes with LoRA adapters on a frozen base: the full fine-tuning model
(zeromem_lsp/activations.py) minus what frozen weights no longer keep, plus what the adapters keep.

Read off autograd and PEFT's lora.Linear.forward (peft/tuners/lora/layer.py): `result = base_layer(x)`, then
per adapter `x = self._cast_input_dtype(x, lora_A.weight.dtype)` and `lora_B(lora_A(dropout(x)))`.
- A frozen linear keeps no input (its weight needs no gradient); a frozen norm weight keeps no normalized
  copy of its input; a frozen embedding keeps no token ids; ops whose inputs need no gradient keep nothing,
  so the first layer (fed by the frozen embedding) keeps less than the others.
- Each adapter keeps its own input for A's gradient: a fresh copy when the adapter dtype differs from the
  model's (PEFT's fp32 default: one copy per adapted module, even when they read the same tensor), else
  the shared input itself, once. B keeps A's output (T·r in the adapter dtype).
- QLoRA: see `activation_dtype`.
Checked against PEFT on CPU (benchmarks/adapters/activations.py → tests/data/adapters/lora_activations.json).
Families measured: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, gpt2, gpt_neox; sdpa and
eager, with and without (non-reentrant) gradient checkpointing, lora_dropout 0.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.memory.activations import DTYPE_BYTES, F32, I64, ActivationInputError, estimate_activations
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.memory.adapters import AdapterCount

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2", "gpt_neox")
LAYER_NORM = ("gpt2", "gpt_neox")  # LayerNorm keeps its input and statistics whatever needs a gradient
# which tensor each adapted module reads: the attention input, the attention output, the MLP input, the product
SOURCES = {"q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "qkv_proj": "attn_in",
           "o_proj": "attn_out", "gate_proj": "mlp_in", "up_proj": "mlp_in", "gate_up_proj": "mlp_in",
           "down_proj": "down_in", "fc_in": "mlp_in"}
# GPT-2 / GPT-NeoX module names by the role they play
ROLES = {"attn.c_attn": "qkv_proj", "attn.c_proj": "o_proj", "mlp.c_fc": "fc_in", "mlp.c_proj": "down_proj",
         "attention.query_key_value": "qkv_proj", "attention.dense": "o_proj", "mlp.dense_h_to_4h": "fc_in",
         "mlp.dense_4h_to_h": "down_proj"}
# phi3's fused projections stand for their parts
PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def activation_dtype(dtype: str, quantized: bool, kbit_upcast: bool) -> str:
    """The dtype the forward runs in. With a bitsandbytes base (4- or 8-bit), a quantized linear keeps no input
    (bitsandbytes/autograd/_functions.py, MatMul4Bit.forward keeps only the packed weight), so QLoRA keeps what
    LoRA keeps; but prepare_model_for_kbit_training upcasts the embeddings, norms and head to fp32 and the
    hidden states follow them: the whole forward then keeps fp32 tensors (measured, 4-bit and 8-bit)."""
    return "fp32" if quantized and kbit_upcast else dtype


class LoraActivations(NamedTuple):
    per_layer_bytes: int  # a layer whose input needs a gradient (every layer after the first adapted one)
    first_layer_bytes: int  # the first adapted layer (its input, from the frozen embedding, needs none)
    layer_bytes: int  # all layers
    outside_bytes: int  # embedding, rotary tables, final norm, loss
    checkpointing: bool
    checkpoint_bytes: int  # with checkpointing: every layer's input and the shared inputs, as without adapters
    recompute_bytes: int  # with checkpointing: the largest layer re-run during backward
    total: int  # everything saved at the end of forward (recompute not included)


def _gemma(shape: ModelShape) -> bool:
    return shape.model_type.startswith("gemma")


def _four_norms(shape: ModelShape) -> bool:
    """Gemma 2 / 3: post-attention and post-feedforward norms feed the residual, pre-feedforward the MLP."""
    return shape.model_type in ("gemma2", "gemma3_text")


def _qk_norms(shape: ModelShape) -> bool:
    return shape.model_type in ("qwen3", "gemma3_text")


def _frozen_savings(shape: ModelShape, tokens: int, w: int, attention: str) -> int:
    """What a layer of the full fine-tuning model keeps only for its own weights' gradients."""
    h, qd, kvd = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    normalized = F32 if _gemma(shape) else w  # the normalized input the norm weight's gradient reads
    saved = 0 if shape.model_type in LAYER_NORM else (4 if _four_norms(shape) else 2) * normalized * tokens * h
    saved += 2 * w * tokens * h  # the outputs of the two norms that feed linears, kept by those linears
    if _qk_norms(shape):
        saved += normalized * tokens * (qd + kvd)
    if attention == "eager" or shape.model_type in ("phi3", "gpt_neox"):
        saved += w * tokens * qd  # o_proj's copy of the attention output
    return saved + w * tokens * shape.intermediate  # down_proj's input


def _norm_bytes(shape: ModelShape, rows: int, width: int, w: int = 2) -> int:
    """A frozen norm on a gradient-carrying input. RMSNorm: fp32 input and 1/rms (gemma: + fp32 (1 + weight));
    LayerNorm: its input, mean and 1/std in the model dtype."""
    if shape.model_type in LAYER_NORM:
        return w * rows * width + 2 * w * rows
    return F32 * rows * width + F32 * rows + (F32 * width if _gemma(shape) else 0)


def _role(path: str) -> str:
    """The role of an adapted module: its own name, or for GPT-2 / GPT-NeoX the llama-style name of its role."""
    return ROLES.get(".".join(path.rsplit(".", 2)[-2:]), path.rsplit(".", 1)[-1])


def _names(adapted: dict[str, int]) -> set[str]:
    names = set(adapted)
    for fused, parts in PARTS.items():
        if fused in adapted:
            names |= set(parts)
    return names


def _adapter_bytes(shape: ModelShape, adapted: dict[str, int], tokens: int, w: int, a: int, attention: str,
                   cast_each: bool = False) -> int:
    """What the adapters of one layer keep: their inputs (a copy each when cast, else the input once)
    and A's output. `cast_each`: a copy each even in the compute dtype (FSDP1 mixed precision)."""
    widths = {"attn_in": shape.hidden, "attn_out": shape.heads * shape.head_dim, "mlp_in": shape.hidden,
              "down_in": shape.intermediate}
    kept = sum(a * tokens * rank for rank in adapted.values())
    if a != w or cast_each:
        return kept + sum(a * tokens * widths[SOURCES[name]] for name in adapted)
    sources = {SOURCES[name] for name in adapted}
    if attention == "sdpa" and shape.model_type not in ("phi3", "gpt_neox"):
        sources.discard("attn_out")  # the attention kernel keeps its output already
    return kept + sum(w * tokens * widths[source] for source in sources)


def _first_layer_savings(shape: ModelShape, adapted: dict[str, int], b: int, s: int, w: int, a: int,
                         attention: str, cast_each: bool = False) -> int:
    """The first adapted layer's input (from the frozen embedding) needs no gradient: its input norm keeps
    nothing, and each op keeps only what the gradient of an input that needs one reads."""
    tokens = b * s
    qd, kvd, I = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    names = _names(adapted)
    gq, gk, gv = ("q_proj" in names), ("k_proj" in names), ("v_proj" in names)
    saved = _norm_bytes(shape, tokens, shape.hidden, w)
    if _qk_norms(shape):  # q_norm / k_norm keep their input and 1/rms only for adapted q / k
        for grad, heads in ((gq, shape.heads), (gk, shape.kv_heads)):
            if not grad:
                saved += _norm_bytes(shape, tokens * heads, shape.head_dim)
    if attention == "sdpa":
        if not (gq or gk or gv):  # the kernel keeps q, k, v, its output and the log-sum-exp only for a gradient
            v = 3 * shape.hidden if shape.model_type == "gpt2" else kvd  # gpt2's v is a view of c_attn's output
            saved += w * tokens * (2 * qd + kvd + v) + F32 * tokens * shape.heads
            if "o_proj" in adapted and a == w and not cast_each and shape.model_type not in ("phi3", "gpt_neox"):
                saved -= w * tokens * qd  # the o_proj adapter keeps the attention output itself
    else:
        saved += _eager_savings(shape, b, s, w, gq, gk, gv)
    attention_adapted = bool({"q_proj", "k_proj", "v_proj", "o_proj"} & names)
    if shape.model_type in LAYER_NORM:
        return saved + _layer_norm_mlp_savings(shape, names, attention_adapted, tokens, w)
    if not attention_adapted:
        # the norms up to the MLP read no gradient-carrying input either
        saved += (2 if _four_norms(shape) else 1) * _norm_bytes(shape, tokens, shape.hidden)
        gate, up = "gate_proj" in names, "up_proj" in names
        # silu keeps its input and the product keeps up's output only for gate's gradient; silu's output only for up's
        saved += w * tokens * I * (3 - 2 * gate - up)
        if _four_norms(shape) and not {"gate_proj", "up_proj", "down_proj"} & names:
            saved += _norm_bytes(shape, tokens, shape.hidden)  # post_feedforward_layernorm
    return saved


def _layer_norm_mlp_savings(shape: ModelShape, names: set[str], attention_adapted: bool, tokens: int, w: int) -> int:
    """GPT-2 / GPT-NeoX first layer, MLP side: its input needs a gradient only after attention adapters (or,
    with NeoX's parallel residual, never: both branches read the layer input); the activation after the first
    linear keeps its input only when that linear is adapted or its input needs a gradient."""
    parallel = shape.model_type == "gpt_neox" and shape.parallel_residual
    if parallel:  # the second norm reads the layer input: it keeps only its statistics normally, now nothing
        saved, grad_in = 2 * w * tokens, False
    else:
        saved, grad_in = (0, True) if attention_adapted else (_norm_bytes(shape, tokens, shape.hidden, w), False)
    if not grad_in and "fc_in" not in names:
        # gpt2's gelu_new keeps x, tanh, 0.5·x and 1 + tanh; NeoX's gelu its input
        saved += (4 if shape.model_type == "gpt2" else 1) * w * tokens * shape.intermediate
    return saved


def _eager_savings(shape: ModelShape, b: int, s: int, w: int, gq: bool, gk: bool, gv: bool) -> int:
    """Eager attention without a gradient on every one of q, k, v: q·kᵀ keeps q only for k's gradient and k
    for q's; the fp32 softmax, a softcap's tanh and the repeated v are kept only when the scores need a
    gradient; the probabilities in the model dtype only for v's."""
    if shape.attention_dropout > 0:
        raise ActivationInputError("the LoRA activation model is measured without attention dropout")
    query = w * b * s * shape.heads * shape.head_dim
    scores = b * shape.heads * s * s
    if shape.model_type == "gpt2":  # c_attn adapts q, k and v together: all of them need a gradient or none
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
                              checkpointing: bool = False, cast_each: bool = False) -> LoraActivations:
    """Saved bytes of one micro-batch with LoRA; raises ActivationInputError.

    cast_each: every adapter keeps its own copy of its input even when it computes in the model's dtype. Under FSDP1
    mixed precision PEFT's `_cast_input_dtype` reads lora_A's fp32 original parameter outside its unit and casts the
    input to fp32, and autocast (Accelerate's bf16 forward; without it the bf16 unit refuses the fp32 input) casts
    that back to a bf16 copy, the one kept for A's gradient (measured: lora-fsdp1-*-mixed)
    With (non-reentrant) checkpointing each layer keeps its input whether or not it needs a gradient, as in
    full fine-tuning; only the parts outside the layers change, and the re-run layer is a LoRA layer."""
    if shape.model_type not in FAMILIES:
        raise ActivationInputError(
            f"no LoRA activation model for {shape.model_type!r}; measured: {', '.join(FAMILIES)}")
    if adapter_dtype not in DTYPE_BYTES:
        raise ActivationInputError(f"adapter_dtype must be one of {', '.join(DTYPE_BYTES)}, got {adapter_dtype!r}")
    full = estimate_activations(shape, sequence_length, micro_batch, dtype, checkpointing, attention)
    tokens, w, a = sequence_length * micro_batch, DTYPE_BYTES[dtype], DTYPE_BYTES[adapter_dtype]
    if (any(t.weight.kind != "head" for t in count.saved)
            or any(t.weight.kind not in ("linear", "conv1d") or t.layers is None for t in count.targets)):
        raise ActivationInputError("the LoRA activation model covers adapters on the layers' linear projections "
                                   "(and the LM head in modules_to_save) only")
    by_layer: dict[int, dict[str, int]] = {}
    for target in count.targets:
        for index in target.layers:
            by_layer.setdefault(index, {})[_role(target.weight.path)] = target.rank
    base = full.per_layer_bytes - _frozen_savings(shape, tokens, w, attention)
    start = min(by_layer)  # layers before the first adapter see no gradient-carrying input: they keep nothing
    # Layers that keep different amounts (sliding windows the sequence outgrows): what differs is attention's
    # own saved tensors, which LoRA leaves as they are, so the difference is carried over whole. Derived, not
    # measured (the measurements' sequences fit the windows); only when every layer carries a gradient.
    uneven = full.layer_bytes - full.per_layer_bytes * shape.layers
    if uneven and start != 0:
        raise ActivationInputError("the LoRA activation model covers layers that keep different amounts (sliding "
                                   "windows the sequence outgrows) only when the first layer has adapters")
    sizes = [0 if i < start else base + _adapter_bytes(shape, by_layer.get(i, {}), tokens, w, a, attention, cast_each)
             for i in range(shape.layers)]
    sizes[start] -= _first_layer_savings(shape, by_layer[start], micro_batch, sequence_length, w, a, attention,
                                         cast_each)
    gemma = _gemma(shape)
    # frozen embedding: no token ids (nor gemma's scale); frozen final norm and head: no normalized copy (RMSNorm),
    # no input for the head
    normalized = 0 if shape.model_type in LAYER_NORM else (F32 if gemma else w) * tokens * shape.hidden
    positions = I64 * sequence_length if shape.model_type == "gpt2" else 0  # the frozen wpe keeps no position ids
    outside = (full.embedding_bytes + full.shared_bytes + full.final_norm_bytes + full.logits_bytes
               - I64 * tokens - positions - (w if gemma else 0) - normalized - w * tokens * shape.hidden)
    if count.saved:  # a trained head (modules_to_save copy) keeps its input for its weight's gradient
        outside += w * tokens * shape.hidden  # (measured: lora-llama-h512-v8k-qv-r8-foreach-mts)
    if checkpointing:  # the checkpoints keep the layers' inputs (rotary tables included) whatever needs a gradient
        return LoraActivations(max(sizes), sizes[start], sum(sizes) + uneven, outside, True, full.checkpoint_bytes,
                               max(sizes), outside + full.checkpoint_bytes)
    if start == shape.layers - 1 and not {"q_proj", "k_proj"} & _names(by_layer[start]):
        outside -= full.shared_bytes  # rotary tables are kept by q·cos only when q or k carries a gradient
    middle = max(sizes[start + 1:], default=sizes[start])
    return LoraActivations(middle, sizes[start], sum(sizes) + uneven, outside, False, 0, 0, sum(sizes) + uneven + outside)
