"""The model families zeromem models, each described once: its traits (`FAMILIES`) and its weights (`weights`).

Everything that differs between families is a field of `Family`, read off the Transformers modelling code
(modeling_<family>.py, configuration_<family>.py, 5.x); the config reader (model_config), the parameter count,
the step model's tensors, the optimizer's shapes, PEFT's module tree (memory/adapters) and the activation
models (memory/activations, memory/lora_activations) all look the traits up here instead of naming families.
docs/architecture.md, "Adding a model family", says how to add one.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import NamedTuple

from zeromem_lsp.configs.image_tokens import VisionKept

Key = tuple[str, float]  # a config key and its fallback value
# What a router keeps for backward besides the experts' dispatch: (count, rows, width) terms, rows in T (tokens),
# TE (tokens × experts), S (tokens × k visits), Th (tokens × hidden), TG / Tg (tokens × n_group / topk_group);
# width f32, i64, bool, w (the model dtype) or up (an fp32 copy of a 16-bit input; none in fp32)
Router = tuple[tuple[int, str, str], ...]
#: softmax (fp32) then top-k: the probabilities and the indices (mixtral, qwen3_moe, olmoe; llama4's sigmoid)
SOFTMAX_TOP_K: Router = ((1, "TE", "f32"), (1, "S", "i64"))
#: DeepseekV3TopkRouter: fp32 logits from an fp32 copy of the input, sigmoid, top-2 per group, the chosen groups'
#: indices, the masked_fill mask, top-k indices (gather's too)
GROUPED_SIGMOID: Router = ((1, "Th", "up"), (1, "TE", "f32"), (2, "TG", "i64"), (1, "Tg", "i64"), (1, "TE", "bool"),
                           (1, "S", "i64"))
#: phimoe's sparsemixer, twice (top-2 whatever k says): masked_fill's mask, the Gumbel max index, softmax, the chosen
#: index, PhimoeMultiplier's mask_for_one
#: GptOssTopKRouter: top-k of the logits (indices), then a softmax over the k values in the model dtype
TOP_K_SOFTMAX: Router = ((1, "S", "i64"), (1, "S", "w"))
#: Kept only for a gradient LoRA does not take: the router's fp32 copy of its input (its weight's; DeepseekV3TopkRouter),
#: the experts' biases' per-visit index (gpt_oss: `gate_up_proj_bias[expert_ids_g]`)
ROUTER_INPUT_FP32: Router = ((1, "Th", "up"),)
BIAS_INDEX: Router = ((1, "S", "i64"),)
SPARSEMIXER: Router = ((2, "TE", "bool"), (4, "T", "i64"), (2, "TE", "w"), (2, "T", "w"))
#: What one Qwen3-Next gated delta-net layer keeps for backward on Transformers' torch fallbacks (causal_conv1d_fn,
#: torch_chunk_gated_delta_rule: no flash-linear-attention / causal-conv1d), as (count, rows, width) terms like
#: Router's. Rows: conv = b × conv channels × (2s + kernel - 1) (the conv's input, its padded output kept by silu);
#: H value heads; Rs = b·s·H; Rsk, Rsv = Rs × key / value head width; RP, RPk, RPv, RPC = b·H × the sequence padded
#: to the chunk size (64) × 1, key, value width, chunk size; Rn = b·H × chunks; Rnkv = Rn × key × value width (the
#: recurrent state entering each chunk); CC = chunk²; qd = RPk when there is more than one chunk (the first chunk's
#: queries meet a zero state). In order: the conv; sigmoid(b) (w); exp(A_log), -exp (f32); softplus's input and
#: output, q/k L2 norms' 1/norm, the gated norm's 1/rms (Rs f32); q, k in fp32 before the L2 norm (Rsk); the gated
#: norm's fp32 input, fp32 gate, silu(gate) (Rsv f32), its normalized input and weighted output, out_proj's input
#: (Rsv w); beta, exp(cumulative decay) for k_beta, q and k (RP); value, new_values (the UT solve's), v_new (RPv);
#: key, k_beta, scaled q, k_cumdecay, decayed k (RPk); the pairwise decay, k_beta·kᵀ and q·kᵀ products, the UT
#: system, the intra-chunk attention (RPC); the chunk decay; the states; the triangular mask (bool); decayed q.
DELTA_CHUNK = 64  # torch_chunk_gated_delta_rule's chunk_size (the model passes none)
GATED_DELTA_NET: Router = ((1, "conv", "w"), (1, "Rs", "w"), (2, "H", "f32"), (5, "Rs", "f32"), (2, "Rsk", "f32"),
                           (3, "Rsv", "f32"), (3, "Rsv", "w"), (4, "RP", "f32"), (3, "RPv", "f32"), (5, "RPk", "f32"),
                           (5, "RPC", "f32"), (1, "Rn", "f32"), (1, "Rnkv", "f32"), (1, "CC", "bool"), (1, "qd", "f32"),
                           (4, "sRPk", "f32"), (1, "views", "f32"))  # sRPk: fp32 at a chunk multiple, matmul's
# copies of k_β, q, kᵀ twice; views: fp32 with as many key as value heads, what views of larger tensors keep whole
#: what GATED_DELTA_NET keeps only for β's and the decay's gradients (a first layer without in_proj_ba's adapter drops
#: it): v (v_β's other operand), k_β·kᵀ and q·kᵀ (the pairwise decay's other operands), the upper-triangle mask, with
#: a single chunk exp of its total decay (more chunks: the state update keeps it); fp32 at a chunk multiple, where
#: matmul copies its operands, k (k_β's), k_β and q (the decayed copies' other operands) too
DELTA_DECAY: Router = ((1, "RPv", "f32"), (2, "RPC", "f32"), (1, "CC", "bool"), (1, "R1", "f32"), (3, "sRPk", "f32"))


@dataclass(frozen=True)
class Moe:
    """A mixture-of-experts block (a router and stacked experts, transformers 5) and how the config states it."""

    experts: str  # the key of the expert count
    width: str  # the key of one expert's intermediate width
    per_token: int  # num_experts_per_tok's fallback
    stepped: bool  # decoder_sparse_step / mlp_only_layers choose the sparse layers (0 experts: all dense)
    normalize: str | bool  # the key saying whether top-k weights are renormalized (True: always, mixtral; False: never)
    fp32_weights: bool  # the routing weights the experts' output is scaled by are fp32 (else the model dtype)
    aliases: tuple[str, tuple[str, str], str]  # v4 names PEFT maps onto v5's parameters: router, fused pair, down
    shared: str | None = None  # the key of a shared expert's width (qwen2_moe: a gated MLP beside the experts)
    modules: tuple[str, ...] = ("mlp.experts", "mlp.experts.act_fn")  # parameterless modules of a sparse layer
    first_dense: str | None = None  # the key of the leading dense layers (deepseek_v3, glm4_moe: first_k_dense_replace)
    interleave: bool = False  # moe_layers, else every interleave_moe_layer_step-th layer is sparse (llama4_text)
    shared_times: str | None = None  # the shared experts' width is this count × the expert width (n_shared_experts)
    transposed: bool = False  # stacked experts stored (E, in, out) (gpt_oss, llama4_text), not (E, out, in)
    expert_bias: bool = False  # the experts carry (E, out) biases beside their weights (gpt_oss)
    router_bias: bool = False  # the router has a bias (gpt_oss)
    router_linear: bool = False  # the router is an nn.Linear subclass (phimoe, llama4_text: PEFT can adapt it)
    router: Router = SOFTMAX_TOP_K  # what routing keeps for backward (memory/activations)
    groups: tuple[tuple[str, int], tuple[str, int]] | None = None  # group-limited routing: n_group, topk_group
    # (key, fallback)
    normalized: bool = False  # `normalize`'s fallback (deepseek_v3, glm4_moe, qwen3_next: norm_topk_prob = True)
    expert_kept: int = 4  # S × width tensors an expert keeps: gate_up (2), act(gate), the product (gpt_oss's
    # clamped SwiGLU: + the clamped gate, sigmoid, glu, up + 1)
    every_expert: bool = False  # every expert runs on every token, weighted by its score (llama4_text: bmm), not
    # grouped_mm over the tokens sorted by expert
    gated_shared: bool = False  # sigmoid(shared_expert_gate(x)) scales the shared expert's output (qwen3_next)
    frozen: Router = ()  # what routing keeps only for the router's or the experts' biases' gradients (LoRA drops it;
    # memory/lora_activations)
    converted: bool = True  # PEFT maps v4 target names onto the fused experts (_convert_peft_config_moe: the model type
    # is in transformers' _MODEL_TO_CONVERSION_PATTERN); False: targets match modules as named (gpt_oss, llama4_text,
    # phimoe: an nn.Linear router is adapted as a linear, the stacked experts only through target_parameters)


@dataclass(frozen=True)
class Sliding:
    """How the config lays out sliding-window layers when it has no `layer_types`."""

    window: int | None = None  # the window when sliding_window is absent
    flag: str | None = None  # a flag that must be true for any layer to slide (qwen: use_sliding_window)
    global_every: tuple[str | None, int] | None = None  # every n-th layer is global (key, fallback)
    full_below: tuple[str, int] | None = None  # the first n layers are global (key, fallback)
    even_below: tuple[str, int] | None = None  # the even-indexed layers below n slide (key, fallback; qwen2_moe)
    window_key: str = "sliding_window"  # llama4_text: attention_chunk_size (its chunked layers count as sliding)
    kind: str = "sliding_attention"  # the layer type that slides (layer_types)
    batched_mask: bool = False  # checkpointing keeps a (b, 1, s, s) boolean mask (llama4 chunked), not (1, 1, s, s)


#: one decoder layer's weights in registration order (named_parameters'): (module path, role)
LLAMA_LAYER = (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"),
               ("self_attn.o_proj", "o"), ("self_attn.q_norm", "q_norm"), ("self_attn.k_norm", "k_norm"),
               ("mlp.gate_proj", "gate"), ("mlp.up_proj", "up"), ("mlp.down_proj", "down"), ("mlp.gate", "router"),
               ("mlp.experts.gate_up_proj", "experts_gate_up"), ("mlp.experts.down_proj", "experts_down"),
               ("input_layernorm", "norm"), ("post_attention_layernorm", "norm"))
# Qwen3-MoE (transformers 5.24): Qwen3MoeSparseMoeBlock registers its experts before its router (gate)
QWEN3_MOE_LAYER = LLAMA_LAYER[:9] + (LLAMA_LAYER[10], LLAMA_LAYER[11], LLAMA_LAYER[9]) + LLAMA_LAYER[12:]
GEMMA2_LAYER = LLAMA_LAYER + (("pre_feedforward_layernorm", "norm"), ("post_feedforward_layernorm", "norm"))
# OLMo-2 / OLMo-3: no input norm; RMSNorms over the whole q / k projections; norms after attention and after the MLP
OLMO2_LAYER = (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"),
               ("self_attn.o_proj", "o"), ("self_attn.q_norm", "q_norm_full"), ("self_attn.k_norm", "k_norm_full"),
               ("mlp.gate_proj", "gate"), ("mlp.up_proj", "up"), ("mlp.down_proj", "down"),
               ("post_attention_layernorm", "norm"), ("post_feedforward_layernorm", "norm"))
# OLMoE: OLMo-2's q/k norms (over hidden and kv_heads × hidden // heads) in a pre-norm layer of experts
OLMOE_LAYER = OLMO2_LAYER[:6] + (("mlp.gate", "router"), ("mlp.experts.gate_up_proj", "experts_gate_up"),
                                 ("mlp.experts.down_proj", "experts_down"), ("input_layernorm", "norm"),
                                 ("post_attention_layernorm", "norm"))
# Qwen2-MoE: a sparse layer's block holds the router, the experts, a shared expert (a gated MLP) and its gate
QWEN2_MOE_LAYER = LLAMA_LAYER[:4] + LLAMA_LAYER[6:12] + (
    ("mlp.shared_expert.gate_proj", "shared_gate"), ("mlp.shared_expert.up_proj", "shared_up"),
    ("mlp.shared_expert.down_proj", "shared_down"), ("mlp.shared_expert_gate", "shared_expert_gate"),
    ("input_layernorm", "norm"), ("post_attention_layernorm", "norm"))
# Cohere / Cohere2: one input norm (attention and MLP in parallel); Cohere's optional q/k norms are (heads, head_dim)
COHERE_LAYER = (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"),
                ("self_attn.o_proj", "o"), ("self_attn.q_norm", "q_norm_heads"), ("self_attn.k_norm", "k_norm_heads"),
                ("mlp.gate_proj", "gate"), ("mlp.up_proj", "up"), ("mlp.down_proj", "down"),
                ("input_layernorm", "norm"))
STARCODER2_LAYER = (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"),
                    ("self_attn.o_proj", "o"), ("mlp.c_fc", "fc_in"), ("mlp.c_proj", "fc_out"),
                    ("input_layernorm", "norm"), ("post_attention_layernorm", "norm"))
PHI3_LAYER = (("self_attn.o_proj", "o"), ("self_attn.qkv_proj", "qkv"), ("mlp.gate_up_proj", "gate_up"),
              ("mlp.down_proj", "down"), ("input_layernorm", "norm"), ("post_attention_layernorm", "norm"))
GPT2_LAYER = (("ln_1", "norm"), ("attn.c_attn", "qkv"), ("attn.c_proj", "o"), ("ln_2", "norm"), ("mlp.c_fc", "fc_in"),
              ("mlp.c_proj", "fc_out"))
NEOX_LAYER = (("input_layernorm", "norm"), ("post_attention_layernorm", "norm"), ("attention.query_key_value", "qkv"),
              ("attention.dense", "o"), ("mlp.dense_h_to_4h", "fc_in"), ("mlp.dense_4h_to_h", "fc_out"))
PHI_LAYER = (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"), ("self_attn.dense", "o"),
             ("self_attn.q_layernorm", "q_norm"), ("self_attn.k_layernorm", "k_norm"), ("mlp.fc1", "fc_in"),
             ("mlp.fc2", "fc_out"), ("input_layernorm", "norm"))
# DeepSeek-V3: multi-head latent attention (q through a q_lora_rank bottleneck unless q_lora_rank is null, k/v from
# one kv_lora_rank latent + a shared rotary key), then a dense MLP (the first first_k_dense_replace layers) or routed
# experts (registered before the router) + shared experts
DEEPSEEK_V3_LAYER = (("self_attn.q_proj", "q"), ("self_attn.q_a_proj", "q_a"), ("self_attn.q_a_layernorm", "q_a_norm"),
                     ("self_attn.q_b_proj", "q_b"), ("self_attn.kv_a_proj_with_mqa", "kv_a"),
                     ("self_attn.kv_a_layernorm", "kv_a_norm"), ("self_attn.kv_b_proj", "kv_b"),
                     ("self_attn.o_proj", "o"), ("mlp.gate_proj", "gate"), ("mlp.up_proj", "up"),
                     ("mlp.down_proj", "down"), ("mlp.experts.gate_up_proj", "experts_gate_up"),
                     ("mlp.experts.down_proj", "experts_down"), ("mlp.gate", "router"),
                     ("mlp.shared_experts.gate_proj", "shared_gate"), ("mlp.shared_experts.up_proj", "shared_up"),
                     ("mlp.shared_experts.down_proj", "shared_down"), ("input_layernorm", "norm"),
                     ("post_attention_layernorm", "norm"))
# GLM-4.5: llama's attention (optional per-head q/k norms), DeepSeek-V3's MLP / MoE block
GLM4_MOE_LAYER = LLAMA_LAYER[:6] + DEEPSEEK_V3_LAYER[8:]
# gpt-oss: per-head attention sinks (a bare parameter, registered first), a biased router and biased experts
GPT_OSS_LAYER = (("self_attn.sinks", "sinks"), ("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"),
                 ("self_attn.v_proj", "v"), ("self_attn.o_proj", "o"), ("mlp.router", "router"),
                 ("mlp.experts.gate_up_proj", "experts_gate_up"), ("mlp.experts.gate_up_proj_bias",
                                                                   "experts_gate_up_bias"),
                 ("mlp.experts.down_proj", "experts_down"), ("mlp.experts.down_proj_bias", "experts_down_bias"),
                 ("input_layernorm", "norm"), ("post_attention_layernorm", "norm"))
# Qwen3-Next: gated delta-net layers (linear_attn) and, every full_attention_interval-th, gated full attention
# (q_proj 2 × heads × head_dim: queries and an output gate); qwen2_moe's MoE block
QWEN3_NEXT_LAYER = (("linear_attn.dt_bias", "dt_bias"), ("linear_attn.A_log", "A_log"),
                    ("linear_attn.conv1d", "conv"), ("linear_attn.in_proj_qkvz", "in_qkvz"),
                    ("linear_attn.in_proj_ba", "in_ba"), ("linear_attn.norm", "linear_norm"),
                    ("linear_attn.out_proj", "linear_out")) + LLAMA_LAYER[:6] + QWEN2_MOE_LAYER[4:]
# Llama 4: experts (stored (E, in, out)), an nn.Linear router and a shared expert; dense layers (interleaved, of
# intermediate_size_mlp) between the MoE ones; its q/k L2 norm has no weight
LLAMA4_LAYER = LLAMA_LAYER[:4] + (
    ("feed_forward.gate_proj", "gate"), ("feed_forward.up_proj", "up"), ("feed_forward.down_proj", "down"),
    ("feed_forward.experts.gate_up_proj", "experts_gate_up"), ("feed_forward.experts.down_proj", "experts_down"),
    ("feed_forward.router", "router"), ("feed_forward.shared_expert.gate_proj", "shared_gate"),
    ("feed_forward.shared_expert.up_proj", "shared_up"), ("feed_forward.shared_expert.down_proj", "shared_down"),
    ("input_layernorm", "norm"), ("post_attention_layernorm", "norm"))
# Phi-3.5-MoE: mixtral's block (router, then experts) with LayerNorms (+ bias) and biased attention
PHIMOE_LAYER = LLAMA_LAYER[:4] + (("mlp.router", "router"), ("mlp.experts.gate_up_proj", "experts_gate_up"),
                                  ("mlp.experts.down_proj", "experts_down"), ("input_layernorm", "norm"),
                                  ("post_attention_layernorm", "norm"))
MLA_ROLES = frozenset({"q_a", "q_a_norm", "q_b"})  # present when q_lora_rank is set (else "q")
#: the gated delta-net's weights: on linear_attention layers (the others hold q/k/v/o and the q/k norms)
LINEAR_ATTENTION_ROLES = frozenset({"dt_bias", "A_log", "conv", "in_qkvz", "in_ba", "linear_norm", "linear_out"})
ATTENTION_ROLES = frozenset({"q", "k", "v", "o", "q_norm", "k_norm", "sinks"})
MLP_ROLES = frozenset({"gate", "up", "gate_up", "down", "fc_in", "fc_out"})
MOE_ROLES = frozenset({"router", "experts_gate_up", "experts_down", "shared_gate", "shared_up", "shared_down",
                       "shared_expert_gate", "experts_gate_up_bias", "experts_down_bias"})
#: q/k norms a config can leave out (`qk_norm`): per head (head_dim), over the whole projection, per (head, channel)
QK_NORM_ROLES = frozenset({"q_norm", "k_norm", "q_norm_full", "k_norm_full", "q_norm_heads", "k_norm_heads"})
KEYS = {"hidden": ("hidden_size",), "layers": ("num_hidden_layers",), "heads": ("num_attention_heads",),
        "intermediate": ("intermediate_size",)}
GPT2_KEYS = {"hidden": ("n_embd", "hidden_size"), "layers": ("n_layer", "num_hidden_layers"),
             "heads": ("n_head", "num_attention_heads"), "intermediate": ("n_inner",),
             "positions": ("n_positions", "max_position_embeddings")}


@dataclass(frozen=True)
class Family:
    """What one model_type's config and modelling code say, as the memory models read it."""

    name: str
    layer: tuple[tuple[str, str], ...] = LLAMA_LAYER  # a decoder layer's weights (roles a config leaves out skipped)
    prefix: str = "model.layers.{i}."  # a decoder layer's module path
    embedding: str = "model.embed_tokens"
    final_norm: str = "model.norm"
    head: str = "lm_head"
    positions: str | None = None  # a learned position embedding (gpt2: no rotary tables, position ids kept)
    outside_modules: tuple[str, ...] = ("model.rotary_emb",)  # modules without parameters outside the layers
    layer_modules: tuple[str, ...] = ("mlp.act_fn",)  # ... in each layer ("mlp.*": the dense-MLP layers only)
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()  # config keys of hidden / layers / heads / intermediate ...
    inner: int = 0  # the intermediate width's fallback, × hidden (gpt2's n_inner: null → 4 × n_embd)
    gqa: bool = True  # reads num_key_value_heads; q/k/v widths are heads × head_dim (else: hidden)
    head_dim_key: bool = True  # reads head_dim (else: hidden // heads)
    qkv_bias: bool | None = None  # q/k/v projection biases (None: attention_bias)
    o_bias: bool | None = None  # output projection bias (None: attention_bias)
    attention_bias: bool = False  # attention_bias's fallback
    mlp_bias: bool | None = None  # dense MLP biases (None: mlp_bias)
    head_bias: bool | str = False  # the untied LM head has a bias (phi; a key: as the config says, phimoe's lm_head_bias)
    bias_keys: tuple[str, str] = ("attention_bias", "mlp_bias")  # the keys of the attention and MLP biases
    qk_norm: bool | str = False  # q/k norms (a key: as the config says)
    norm: str = "rms"  # rms (Llama: weight · x.to(dtype)), rms1p (Gemma: fp32 (1 + weight)), layer (LayerNorm,
    # + bias), rms32 (OLMo-2: (weight · x in fp32).to(dtype)), centered (Cohere: mean-centred fp32 LayerNorm, no bias)
    tie: bool = False  # tie_word_embeddings' fallback
    embedding_scale: bool = False  # the embedding is scaled by sqrt(hidden), a 0-d tensor (gemma)
    qkv: str = "separate"  # separate q/k/v; "sliced" from one fused output (sdpa copies v, o_proj keeps a copy of
    # the head-major output); "views" of one Conv1D output (GPT-2: eager copies q, k, v, softmax in the model dtype)
    conv1d: bool = False  # the layers' projections are Conv1D (weights stored in × out)
    mlp_kept: int = 4  # T × I tensors the MLP keeps (gated: gate, act, up, product; gelu_new 5; gelu 2)
    moe: Moe | None = None
    sliding: Sliding | None = None  # None: no sliding-window layers
    softcaps: tuple[float | None, float | None] | None = None  # attention, final logit softcaps' fallbacks
    eager_only: bool = False  # Transformers has no sdpa path (gemma2)
    attention_dropout: Key = ("attention_dropout", 0.0)
    hidden_dropout: Key | None = None
    embedding_dropout: Key | None = None
    partial_rotary: float = 0.0  # the fallback of rotary_pct / partial_rotary_factor, the rotated fraction of each
    # head's channels (gpt_neox 0.25, glm4_moe 0.5); 0: all of them. The rotated q, k are concatenated head-major,
    # so under sdpa o_proj keeps a copy of the attention's output
    parallel_residual: bool = False  # reads use_parallel_residual (gpt_neox)
    rotary_per_type: bool = False  # one cos/sin pair per attention type (gemma3_text)
    softmax_fp32: bool = True  # eager's softmax runs in fp32, then casts back (gpt2, llama4_text: the model dtype)
    qk_norm_weightless: bool = False  # the q/k norm is an fp32 L2 norm without weight on rotated layers (llama4_text)
    no_rope: bool = False  # no_rope_layers / no_rope_layer_interval leave layers unrotated (llama4_text: no q/k
    # norm there; an fp32 temperature scale per position)
    rotary_halves: bool = False  # cos / sin hold head_dim / 2 channels (gpt_oss; llama4_text's complex64 table)
    rotary_fp32: bool = False  # the rotary cos/sin stay fp32 (q, k rotated in fp32, then cast back: olmo2)
    post_norms: bool = False  # no input norm; RMSNorms on the attention and MLP outputs before the residual adds
    # (olmo2)
    mla: bool = False  # multi-head latent attention (deepseek_v3): q_lora_rank, kv_lora_rank, qk_*_head_dim, v_head_dim
    gated_q: bool = False  # q_proj also yields a per-channel output gate (2 × heads × head_dim: qwen3_next)
    hybrid: bool = False  # layer_types lays out gated delta-net ("linear_attention") and full-attention layers
    activations: bool = True  # an activation model exists (phi and the families added in issue 29: counted only)
    lora_measured: bool = True  # the LoRA activation model is measured on it
    liger: bool = True  # liger-kernel has it (MODEL_TYPE_TO_APPLY_LIGER_FN), as axolotl and LLaMA-Factory

    def key(self, field: str) -> tuple[str, ...]:
        return dict(self.keys).get(field) or KEYS[field]

    @property
    def qk_norm_whole(self) -> bool:
        """The q/k norms normalize the whole projection (one row per token), not each head (OLMo-2)."""
        return any(role == "q_norm_full" for _, role in self.layer)

    @property
    def sinks(self) -> bool:
        """Attention sinks: a per-head logit joins the scores before the softmax (gpt_oss)."""
        return any(role == "sinks" for _, role in self.layer)

    @property
    def norms_per_layer(self) -> int:
        return sum(1 for _, role in self.layer if role == "norm")


QWEN_SLIDING = Sliding(flag="use_sliding_window", full_below=("max_window_layers", 28))
#: Qwen2MoeConfig.__post_init__: layer i slides when (i + 1) % 2 and i < max_window_layers (the opposite of qwen2's)
QWEN2_MOE_SLIDING = Sliding(flag="use_sliding_window", even_below=("max_window_layers", 28))
FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("llama"),
    Family("mistral", qkv_bias=False, o_bias=False, sliding=Sliding(window=4096)),
    Family("qwen2", qkv_bias=True, o_bias=False, sliding=QWEN_SLIDING),
    Family("qwen3", qk_norm=True, sliding=QWEN_SLIDING),
    Family("gemma", norm="rms1p", tie=True, embedding_scale=True),
    Family("gemma2", GEMMA2_LAYER, norm="rms1p", tie=True, embedding_scale=True, eager_only=True,
           sliding=Sliding(window=4096, global_every=(None, 2)), softcaps=(50.0, 30.0)),
    Family("gemma3_text", GEMMA2_LAYER, qk_norm=True, norm="rms1p", tie=True, embedding_scale=True,
           sliding=Sliding(window=4096, global_every=("sliding_window_pattern", 6)), softcaps=(None, None),
           rotary_per_type=True),
    Family("phi3", PHI3_LAYER, qkv_bias=False, o_bias=False, qkv="sliced", sliding=Sliding(),
           hidden_dropout=("resid_pdrop", 0.0),
           layer_modules=("mlp.activation_fn", "resid_attn_dropout", "resid_mlp_dropout")),
    Family("mixtral", qkv_bias=False, o_bias=False, sliding=Sliding(),
           moe=Moe("num_local_experts", "intermediate_size", 2, False, True, True, ("gate", ("w1", "w3"), "w2"))),
    Family("qwen3_moe", QWEN3_MOE_LAYER, qk_norm=True, sliding=QWEN_SLIDING,
           moe=Moe("num_experts", "moe_intermediate_size", 8, True, "norm_topk_prob", False,
                   ("gate", ("gate_proj", "up_proj"), "down_proj"))),
    Family("gpt2", GPT2_LAYER, "transformer.h.{i}.", "transformer.wte", "transformer.ln_f", positions="transformer.wpe",
           outside_modules=("transformer.drop",), layer_modules=("attn.attn_dropout", "attn.resid_dropout", "mlp.act",
                                                                  "mlp.dropout"),
           keys=tuple(GPT2_KEYS.items()), gqa=False, head_dim_key=False, qkv_bias=True, o_bias=True, mlp_bias=True,
           norm="layer", tie=True, qkv="views", conv1d=True, inner=4, mlp_kept=5, attention_dropout=("attn_pdrop", 0.1),
           hidden_dropout=("resid_pdrop", 0.1), embedding_dropout=("embd_pdrop", 0.1), liger=False, softmax_fp32=False),
    Family("gpt_neox", NEOX_LAYER, "gpt_neox.layers.{i}.", "gpt_neox.embed_in", "gpt_neox.final_layer_norm",
           outside_modules=("gpt_neox.emb_dropout", "gpt_neox.rotary_emb"),
           layer_modules=("post_attention_dropout", "post_mlp_dropout", "mlp.act"), gqa=False, head_dim_key=False,
           attention_bias=True, mlp_bias=True, norm="layer", qkv="sliced", mlp_kept=2,
           hidden_dropout=("hidden_dropout", 0.0), embedding_dropout=("hidden_dropout", 0.0), partial_rotary=0.25,
           parallel_residual=True, liger=False),
    Family("phi", PHI_LAYER, final_norm="model.final_layernorm", head_dim_key=False, qkv_bias=True, o_bias=True,
           mlp_bias=True, head_bias=True, qk_norm="qk_layernorm", norm="layer", activations=False,
           lora_measured=False, liger=False),
    # Issue 29: counted exactly (parameters against Transformers on the meta device, tests/data/model_families); the
    # activation model measured exact on olmo2, olmo3, granite, smollm3, starcoder2, cohere, cohere2 and the MoE
    # families (tests/data/activations); activations=False where not measured yet (the peak is unknown
    # for them, never guessed).
    Family("olmo2", OLMO2_LAYER, qk_norm=True, norm="rms32", post_norms=True, rotary_fp32=True),
    Family("olmo3", OLMO2_LAYER, qk_norm=True, norm="rms32", post_norms=True, rotary_fp32=True, rotary_per_type=True, sliding=Sliding(window=4096, global_every=(None, 4))),
    Family("olmoe", OLMOE_LAYER, head_dim_key=False, qk_norm=True,  # llama's RMSNorm
           moe=Moe("num_experts", "intermediate_size", 8, False, "norm_topk_prob", False,
                   ("gate", ("gate_proj", "up_proj"), "down_proj")), liger=False),
    Family("qwen2_moe", QWEN2_MOE_LAYER, bias_keys=("qkv_bias", "mlp_bias"), attention_bias=True, o_bias=False,
           mlp_bias=False, sliding=QWEN2_MOE_SLIDING, liger=False,
           moe=Moe("num_experts", "moe_intermediate_size", 4, True, "norm_topk_prob", False,
                   ("gate", ("gate_proj", "up_proj"), "down_proj"), shared="shared_expert_intermediate_size",
                   modules=("mlp.experts", "mlp.experts.act_fn", "mlp.shared_expert.act_fn"), gated_shared=True)),
    Family("granite"),  # llama's weights; multipliers scale the stream
    Family("smollm3", tie=True),  # llama's weights; every 4th layer unrotated
    Family("starcoder2", STARCODER2_LAYER, layer_modules=("mlp.act",), bias_keys=("use_bias", "use_bias"),
           attention_bias=True, norm="layer", tie=True, sliding=Sliding(), hidden_dropout=("residual_dropout", 0.0),
           embedding_dropout=("embedding_dropout", 0.0), mlp_kept=2, liger=False),
    Family("cohere", COHERE_LAYER, qk_norm="use_qk_norm", norm="centered", tie=True, parallel_residual=True,
           liger=False),
    Family("cohere2", COHERE_LAYER, norm="centered", tie=True, parallel_residual=True,
           sliding=Sliding(window=4096, global_every=("sliding_window_pattern", 4)),
           liger=False),
    # Issue 29, the MoE families: counted exactly (every parameter's name and shape, tests/data/model_families);
    # activations measured (docs/model-families.md; qwen3_next: its delta-net on the torch fallback). Moe.aliases: PEFT's
    # _MOE_TARGET_MODULE_MAPPING (deepseek_v3, glm4_moe, qwen3_next map to qwen2_moe's, transformers
    # conversion_mapping._MODEL_TO_CONVERSION_PATTERN); gpt_oss, llama4_text and phimoe have no conversion in PEFT
    # (Moe.converted: configs/lora_modules matches their targets as modules, as PEFT does).
    Family("deepseek_v3", DEEPSEEK_V3_LAYER, mla=True, liger=False,
           moe=Moe("n_routed_experts", "moe_intermediate_size", 8, False, "norm_topk_prob", True,
                   ("gate", ("gate_proj", "up_proj"), "down_proj"), shared="n_shared_experts",
                   modules=("mlp.experts", "mlp.experts.act_fn", "mlp.shared_experts.act_fn"),
                   first_dense="first_k_dense_replace", shared_times="n_shared_experts", router=GROUPED_SIGMOID,
                   groups=(("n_group", 8), ("topk_group", 4)), normalized=True, frozen=ROUTER_INPUT_FP32)),
    Family("glm4_moe", GLM4_MOE_LAYER, qk_norm="use_qk_norm", o_bias=False, partial_rotary=0.5,
           liger=False,
           moe=Moe("n_routed_experts", "moe_intermediate_size", 8, False, "norm_topk_prob", True,
                   ("gate", ("gate_proj", "up_proj"), "down_proj"), shared="n_shared_experts",
                   modules=("mlp.experts", "mlp.experts.act_fn", "mlp.shared_experts.act_fn"),
                   first_dense="first_k_dense_replace", shared_times="n_shared_experts", router=GROUPED_SIGMOID,
                   groups=(("n_group", 1), ("topk_group", 1)), normalized=True, frozen=ROUTER_INPUT_FP32)),
    Family("gpt_oss", GPT_OSS_LAYER, attention_bias=True, liger=False, norm="rms32",
           eager_only=True, rotary_halves=True, layer_modules=(), sliding=Sliding(window=128, global_every=(None, 2)),
           moe=Moe("num_local_experts", "intermediate_size", 4, False, False, False,
                   ("router", ("gate_up_proj", "gate_up_proj"), "down_proj"), modules=("mlp.experts",),
                   transposed=True, expert_bias=True, router_bias=True, router=TOP_K_SOFTMAX, expert_kept=7,
                   frozen=BIAS_INDEX, converted=False)),
    Family("qwen3_next", QWEN3_NEXT_LAYER, qk_norm=True, gated_q=True, hybrid=True, norm="rms1p",
           partial_rotary=0.25, liger=False,
           moe=Moe("num_experts", "moe_intermediate_size", 10, True, "norm_topk_prob", False,
                   ("gate", ("gate_proj", "up_proj"), "down_proj"), shared="shared_expert_intermediate_size",
                   modules=("mlp.experts", "mlp.experts.act_fn", "mlp.shared_expert.act_fn"), gated_shared=True)),
    Family("llama4_text", LLAMA4_LAYER, keys=(("intermediate", ("intermediate_size_mlp",)),),
           layer_modules=(), liger=False, qk_norm="use_qk_norm", qk_norm_weightless=True,
           rotary_fp32=True, rotary_halves=True, no_rope=True, softmax_fp32=False,
           sliding=Sliding(global_every=("no_rope_layer_interval", 4), window_key="attention_chunk_size",
                           kind="chunked_attention", batched_mask=True),
           moe=Moe("num_local_experts", "intermediate_size", 1, False, False, False,
                   ("router", ("gate_up_proj", "gate_up_proj"), "down_proj"), shared="intermediate_size",
                   modules=("feed_forward.experts", "feed_forward.experts.act_fn",
                            "feed_forward.shared_expert.activation_fn"),
                   interleave=True, transposed=True, router_linear=True, every_expert=True, converted=False)),
    Family("phimoe", PHIMOE_LAYER, norm="layer", head_bias="lm_head_bias",
           liger=False, sliding=Sliding(),
           moe=Moe("num_local_experts", "intermediate_size", 2, False, False, False,
                   ("router", ("gate_up_proj", "gate_up_proj"), "down_proj"), modules=("mlp.experts", "mlp.experts.act_fn"),
                   router_linear=True, router=SPARSEMIXER, converted=False)),
)}


class ModelShape(NamedTuple):
    """What a config.json says about a model's activations; defaults are the Transformers config defaults."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (gpt2: n_inner, else 4 × n_embd)
    vocab: int
    tied: bool
    attention_dropout: float = 0.0  # probability on the attention weights (eager keeps its mask)
    hidden_dropout: float = 0.0  # residual / hidden-state dropout after attention and MLP
    embedding_dropout: float = 0.0
    experts: int = 0  # MoE: experts per sparse layer (0: dense)
    experts_per_token: int = 0
    expert_intermediate: int = 0
    sparse_layers: int = 0  # layers whose MLP is the MoE block
    normalize_top_k: bool = False  # MoE: top-k routing weights renormalized to sum 1 (mixtral always)
    attention_softcap: bool = False  # gemma2: tanh softcapping of the attention scores
    final_softcap: bool = False  # gemma2 / gemma3: tanh softcapping of the logits
    rotary_dim: int = 0  # gpt_neox: rotated channels per head (partial rotary)
    parallel_residual: bool = False  # gpt_neox: attention and MLP read the same input
    sliding_window: int = 0  # tokens a sliding-attention layer sees (0: no sliding layers)
    sliding_layers: int = 0  # layers with sliding-window attention
    positions: int = 0  # gpt2: learned position embeddings (n_positions rows)
    qkv_bias: bool = False  # q/k/v projections with biases (qwen2; attention_bias where the family reads it)
    o_bias: bool = False  # the output projection with a bias (attention_bias where the family reads it)
    mlp_bias: bool = False  # the dense MLP's projections with biases (mlp_bias)
    qk_norm: bool = False  # per-head q/k norms (qwen3, gemma3_text; phi's qk_layernorm)
    sparse_step: int = 1  # MoE: every n-th layer is sparse (decoder_sparse_step) ...
    dense_only: tuple[int, ...] = ()  # ... but for these (mlp_only_layers)
    shared_intermediate: int = 0  # MoE: the shared expert's width (0: none)
    q_lora_rank: int = 0  # MLA (deepseek_v3): the query bottleneck (0: a plain q_proj)
    kv_lora_rank: int = 0  # MLA: the key/value latent (head_dim is qk_nope_head_dim + qk_rope_head_dim)
    qk_rope_dim: int = 0  # MLA: the rotary channels of a key, shared by the heads
    v_head_dim: int = 0  # MLA: a value head's width
    head_bias: bool = False  # the LM head has a bias (phi; phimoe's lm_head_bias)
    nope_layers: int = 0  # layers without rotary (llama4_text's no_rope_layers)
    routing_groups: tuple[int, int] = (0, 0)  # MoE: n_group, topk_group of group-limited routing (deepseek_v3)
    linear_layers: tuple[int, ...] = ()  # qwen3_next: the gated delta-net layers (the rest: full attention)
    linear_heads: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # key heads, value heads, key / value head
    # widths, the causal conv's kernel (linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
    # linear_value_head_dim, linear_conv_kernel_dim)
    head_shards: int = 1  # an untied LM head's rows over this many ranks (tensor parallel: configs/parallel_shape)
    vision: VisionKept | None = None  # a vision-language model: its image tokens' mask, M-RoPE and tower (trained)


class Weight(NamedTuple):
    """One weight of the model (with its bias), as PEFT and bitsandbytes see it.

    `path` is the module name with `{i}` for the decoder-layer index; `layers` the indices holding it (None:
    outside the layers). `experts` > 0 marks a stacked (E, out, in) MoE parameter (not an nn.Linear). `role`:
    embedding, positions, q, k, v, qkv, o, q_norm, k_norm, norm, gate, up, gate_up, down, fc_in, fc_out, router,
    experts_gate_up, experts_down, final_norm, head."""

    path: str
    in_features: int
    out_features: int
    layers: tuple[int, ...] | None
    kind: str = "linear"  # linear, conv1d (gpt2), embedding, head, router, experts, norm (in_features 1)
    bias: bool = False
    experts: int = 0
    role: str = ""
    stored: tuple[int, ...] = ()  # the weight's shape where it is none of the layouts below (a conv kernel, a bare
    # vector, experts stored (E, in, out) or their (E, out) biases)

    @property
    def instances(self) -> int:
        return 1 if self.layers is None else len(self.layers)

    @property
    def elements(self) -> int:
        """Weight elements of one instance (no bias)."""
        if self.stored:
            return prod(self.stored)
        return max(self.experts, 1) * self.in_features * self.out_features

    @property
    def parameters(self) -> int:
        """Parameters of one instance, bias included."""
        return self.elements + (self.out_features if self.bias else 0)

    def shapes(self) -> list[tuple[int, ...]]:
        """The parameters' shapes as torch stores them: nn.Linear (out, in), Conv1D and nn.Embedding (in, out),
        stacked experts (E, out, in), a norm's weight (out,) (Cohere's q/k norms: (heads, head_dim)); the bias
        (out,) after its weight; `stored`, where set, is the weight's shape."""
        if self.stored:
            return [self.stored] + [(self.out_features,)] * self.bias
        if self.kind == "norm":
            weight: tuple[int, ...] = (self.out_features,) if self.in_features == 1 else (self.in_features,
                                                                                           self.out_features)
        elif self.kind in ("conv1d", "embedding"):
            weight = (self.in_features, self.out_features)
        else:
            weight = (self.experts,) * (self.experts > 0) + (self.out_features, self.in_features)
        return [weight] + [(self.out_features,)] * self.bias


def of(shape: ModelShape) -> Family:
    """The family of a shape's model_type."""
    return FAMILIES[shape.model_type]


def sparse_indices(shape: ModelShape) -> tuple[int, ...]:
    """The MoE layers (Qwen3MoeDecoderLayer: i not in mlp_only_layers and (i + 1) % step == 0; mixtral: all;
    deepseek_v3 / glm4_moe: i >= first_k_dense_replace; llama4_text: i in moe_layers, all read into dense_only)."""
    if not shape.sparse_layers:
        return ()
    dense_only = set(shape.dense_only)
    return tuple(i for i in range(shape.layers) if i not in dense_only and (i + 1) % shape.sparse_step == 0)


def weights(shape: ModelShape) -> tuple[Weight, ...]:
    """Every weight of the model, in named_parameters' order: embeddings, each layer's (`Family.layer`, the roles
    the config has), the final norm, the head (listed when tied too: `shape.tied` says whether it is its own)."""
    f = FAMILIES[shape.model_type]
    h, d, every = shape.hidden, shape.head_dim, tuple(range(shape.layers))
    q, kv = (shape.heads * d, shape.kv_heads * d) if f.gqa else (h, h)
    sparse = sparse_indices(shape)
    dense = every if not sparse else tuple(sorted(set(every) - set(sparse)))
    linear_layers = tuple(i for i in shape.linear_layers if i < shape.layers)
    attention = tuple(i for i in every if i not in set(linear_layers))
    linear, width, e, m = "conv1d" if f.conv1d else "linear", shape.expert_intermediate, shape.experts, f.moe
    o_in = shape.heads * shape.v_head_dim if f.mla else q
    nope = d - shape.qk_rope_dim  # MLA: a query / key head's channels without rotary
    k_heads, v_heads, k_dim, v_dim, kernel = shape.linear_heads
    router = "linear" if m and m.router_linear else "router"
    dims: dict[str, tuple[int, int, str, bool]] = {  # role: in, out, kind, bias
        "q": (h, 2 * q if f.gated_q else q, linear, shape.qkv_bias), "k": (h, kv, linear, shape.qkv_bias),
        "v": (h, kv, linear, shape.qkv_bias),
        "qkv": (h, q + 2 * kv, linear, shape.qkv_bias), "o": (o_in, h, linear, shape.o_bias),
        "q_norm": (1, d, "norm", f.norm == "layer"), "k_norm": (1, d, "norm", f.norm == "layer"),
        "q_norm_full": (1, q, "norm", False), "k_norm_full": (1, kv, "norm", False),
        "q_norm_heads": (shape.heads, d, "norm", False), "k_norm_heads": (shape.kv_heads, d, "norm", False),
        "norm": (1, h, "norm", f.norm == "layer"), "gate": (h, shape.intermediate, linear, shape.mlp_bias),
        "up": (h, shape.intermediate, linear, shape.mlp_bias), "gate_up": (h, 2 * shape.intermediate, linear,
                                                                           shape.mlp_bias),
        "down": (shape.intermediate, h, linear, shape.mlp_bias),
        "fc_in": (h, shape.intermediate, linear, shape.mlp_bias),
        "fc_out": (shape.intermediate, h, linear, shape.mlp_bias),
        "router": (h, e, router, bool(m and m.router_bias)),
        "experts_gate_up": (h, 2 * width, "experts", False), "experts_down": (width, h, "experts", False),
        "shared_gate": (h, shape.shared_intermediate, linear, False), "shared_up": (h, shape.shared_intermediate,
                                                                                    linear, False),
        "shared_down": (shape.shared_intermediate, h, linear, False), "shared_expert_gate": (h, 1, linear, False),
        # MLA (DeepseekV3Attention): q_a and kv_a biased as attention_bias, q_b and kv_b never
        "q_a": (h, shape.q_lora_rank, linear, shape.qkv_bias), "q_a_norm": (1, shape.q_lora_rank, "norm", False),
        "q_b": (shape.q_lora_rank, q, linear, False),
        "kv_a": (h, shape.kv_lora_rank + shape.qk_rope_dim, linear, shape.qkv_bias),
        "kv_a_norm": (1, shape.kv_lora_rank, "norm", False),
        "kv_b": (shape.kv_lora_rank, shape.heads * (nope + shape.v_head_dim), linear, False),
        # Qwen3NextGatedDeltaNet: the conv runs over q, k and v (groups = channels, no bias)
        "in_qkvz": (h, 2 * k_heads * k_dim + 2 * v_heads * v_dim, linear, False),
        "in_ba": (h, 2 * v_heads, linear, False), "linear_norm": (1, v_dim, "norm", False),
        "linear_out": (v_heads * v_dim, h, linear, False)}
    # bare parameters (no module of their own): module_tree names them by path alone, as it does stacked experts
    stored: dict[str, tuple[int, int, tuple[int, ...]]] = {  # role: in, out, shape
        "sinks": (1, shape.heads, (shape.heads,)), "dt_bias": (1, v_heads, (v_heads,)),
        "A_log": (1, v_heads, (v_heads,)), "experts_gate_up_bias": (1, 2 * width, (e, 2 * width)),
        "experts_down_bias": (1, h, (e, h))}
    conv_channels = 2 * k_heads * k_dim + v_heads * v_dim
    found = [Weight(f.embedding, shape.vocab, h, None, "embedding", role="embedding")]
    if f.positions:
        found.append(Weight(f.positions, shape.positions, h, None, "embedding", role="positions"))
    for path, role in f.layer:
        layers = sparse if role in MOE_ROLES else dense if role in MLP_ROLES else every
        if f.hybrid and role in ATTENTION_ROLES:
            layers = attention
        elif role in LINEAR_ATTENTION_ROLES:
            layers = linear_layers
        if f.mla and (role in MLA_ROLES) is not (shape.q_lora_rank > 0) and role in MLA_ROLES | {"q"}:
            continue  # q_proj or q_a_proj / q_a_layernorm / q_b_proj, as q_lora_rank says
        if role in ("experts_gate_up_bias", "experts_down_bias") and not (m and m.expert_bias):
            continue
        if not layers or (not shape.qk_norm and role in QK_NORM_ROLES):
            continue
        if role in stored:
            fan_in, fan_out, kept = stored[role]
            found.append(Weight(f.prefix + path, fan_in, fan_out, layers, "experts", False, e * (role not in (
                "sinks", "dt_bias", "A_log")), role, kept))
        elif role == "conv":  # nn.Conv1d, depthwise: (channels, 1, kernel)
            found.append(Weight(f.prefix + path, kernel, conv_channels, layers, "conv", False, 0, role,
                                (conv_channels, 1, kernel)))
        else:
            fan_in, fan_out, kind, bias = dims[role]
            transposed = kind == "experts" and m is not None and m.transposed
            found.append(Weight(f.prefix + path, fan_in, fan_out, layers, kind, bias, e * (kind == "experts"), role,
                                (e, fan_in, fan_out) if transposed else ()))
    return tuple(found + [Weight(f.final_norm, 1, h, None, "norm", f.norm == "layer", role="final_norm"),
                          Weight(f.head, h, shape.vocab // shape.head_shards, None, "head",
                                 f.head_bias is True or shape.head_bias, role="head")])
