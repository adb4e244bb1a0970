"""Measure the bytes autograd saves for backward in real Hugging Face model code (CPU, random weights).

Run with a venv holding torch 2.13.0 (CPU) and transformers, outside the repository:

    /work/venvs/torch-hf/bin/python benchmarks/activations/measure.py            # all cases -> JSON
    /work/venvs/torch-hf/bin/python benchmarks/activations/measure.py --only llama --explain

Each case builds the model from a config dict (never downloaded) at 1 and at 2 layers (or the case's
`layers`), each in its own
forked process, runs `model(input_ids=ids, labels=ids)` in training mode inside
`torch.autograd.graph.saved_tensors_hooks` and sums the unique storages the hook sees (parameters
excluded). With gradient checkpointing (use_reentrant=False) the checkpointed layers' saved tensors
never reach the hook; what the checkpoint keeps alive instead are the layer's inputs, which are added by
wrapping each layer's checkpoint function. Results go to tests/data/activations/measured.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from saved_tensors import SavedTensors  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "activations" / "measured.json"

# Small but architecture-faithful shapes: GQA and MHA, head_dim != hidden/heads where the family allows it,
# tied and untied embeddings, MoE top-k. Dropout fields are set explicitly (0 unless a case turns it on).
BASE = {
    "llama": {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 48, "intermediate_size": 320, "vocab_size": 1000, "tie_word_embeddings": False,
              "attention_dropout": 0.0},
    "mistral": {"model_type": "mistral", "hidden_size": 128, "num_attention_heads": 8, "num_key_value_heads": 8,
                "intermediate_size": 256, "vocab_size": 800, "tie_word_embeddings": False,
                "attention_dropout": 0.0, "sliding_window": None},
    "qwen2": {"model_type": "qwen2", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
              "intermediate_size": 224, "vocab_size": 1500, "tie_word_embeddings": True, "attention_dropout": 0.0},
    "qwen3": {"model_type": "qwen3", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "intermediate_size": 256, "vocab_size": 1200, "tie_word_embeddings": True,
              "attention_dropout": 0.0},
    "gemma": {"model_type": "gemma", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
              "head_dim": 64, "intermediate_size": 256, "vocab_size": 1000, "attention_dropout": 0.0},
    "gemma2": {"model_type": "gemma2", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 48, "intermediate_size": 256, "vocab_size": 1000, "query_pre_attn_scalar": 48,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096,
               "attention_dropout": 0.0},
    "gemma3_text": {"model_type": "gemma3_text", "hidden_size": 128, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 256, "vocab_size": 1000,
                    "query_pre_attn_scalar": 64, "sliding_window": 4096, "attention_dropout": 0.0},
    "phi3": {"model_type": "phi3", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
             "intermediate_size": 256, "vocab_size": 1000, "tie_word_embeddings": False,
             "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "pad_token_id": 0},
    "gpt2": {"model_type": "gpt2", "n_embd": 128, "n_head": 4, "n_positions": 512, "vocab_size": 1000,
             "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 128, "num_attention_heads": 4, "intermediate_size": 512,
                 "vocab_size": 1000, "rotary_pct": 0.25, "tie_word_embeddings": False,
                 "attention_dropout": 0.0, "hidden_dropout": 0.0, "use_parallel_residual": True},
    "mixtral": {"model_type": "mixtral", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 192, "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 2,
                "tie_word_embeddings": False, "attention_dropout": 0.0, "sliding_window": None},
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 64, "intermediate_size": 256, "moe_intermediate_size": 96, "num_experts": 8,
                  "num_experts_per_tok": 2, "norm_topk_prob": False, "vocab_size": 1000,
                  "tie_word_embeddings": False, "attention_dropout": 0.0},
    # issue 29's families
    "smollm3": {"model_type": "smollm3", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 256, "vocab_size": 1000, "no_rope_layer_interval": 2, "attention_dropout": 0.0},
    "olmo2": {"model_type": "olmo2", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 256, "vocab_size": 1000, "tie_word_embeddings": False, "attention_dropout": 0.0},
    "olmo3": {"model_type": "olmo3", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 256, "vocab_size": 1000, "tie_word_embeddings": False, "attention_dropout": 0.0,
              "sliding_window": 4096},
    "granite": {"model_type": "granite", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 256, "vocab_size": 1000, "tie_word_embeddings": False, "attention_dropout": 0.0,
                "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
                "logits_scaling": 8.0},
    "starcoder2": {"model_type": "starcoder2", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 512, "vocab_size": 1000, "use_bias": True, "sliding_window": 4096,
                   "attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0},
    "cohere": {"model_type": "cohere", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 256, "vocab_size": 1000, "logit_scale": 0.0625, "use_qk_norm": False,
               "attention_dropout": 0.0},
    "cohere2": {"model_type": "cohere2", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 256, "vocab_size": 1000, "logit_scale": 0.0625, "sliding_window": 4096,
                "attention_dropout": 0.0},
    # issue 29's MoE families (real-shaped traits at small widths: MLA ranks, shared experts, grouped routing,
    # first_k_dense_replace, hybrid linear attention, interleaved MoE layers)
    "qwen2_moe": {"model_type": "qwen2_moe", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "intermediate_size": 256, "moe_intermediate_size": 96,
                  "shared_expert_intermediate_size": 192, "num_experts": 8, "num_experts_per_tok": 2,
                  "norm_topk_prob": False, "vocab_size": 1000, "tie_word_embeddings": False,
                  "attention_dropout": 0.0, "use_sliding_window": False},
    "olmoe": {"model_type": "olmoe", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 96, "num_experts": 8, "num_experts_per_tok": 2,
              "norm_topk_prob": False, "vocab_size": 1000, "tie_word_embeddings": False, "attention_dropout": 0.0},
    "deepseek_v3": {"model_type": "deepseek_v3", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "intermediate_size": 256, "moe_intermediate_size": 64,
                    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 4,
                    "topk_group": 2, "first_k_dense_replace": 1, "q_lora_rank": 64, "kv_lora_rank": 32,
                    "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 24, "norm_topk_prob": True,
                    "routed_scaling_factor": 2.5, "vocab_size": 1000, "tie_word_embeddings": False,
                    "attention_dropout": 0.0},
    "glm4_moe": {"model_type": "glm4_moe", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 48, "partial_rotary_factor": 0.5, "intermediate_size": 256,
                 "moe_intermediate_size": 64, "n_routed_experts": 8, "n_shared_experts": 1,
                 "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
                 "use_qk_norm": False, "attention_bias": True, "norm_topk_prob": True, "vocab_size": 1000,
                 "tie_word_embeddings": False, "attention_dropout": 0.0},
    "gpt_oss": {"model_type": "gpt_oss", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96, "num_local_experts": 4,
                "num_experts_per_tok": 2, "sliding_window": 4096, "vocab_size": 1000, "tie_word_embeddings": False,
                "attention_dropout": 0.0},
    "qwen3_next": {"model_type": "qwen3_next", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 256, "moe_intermediate_size": 64,
                   "shared_expert_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
                   "norm_topk_prob": True, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                   "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4,
                   "full_attention_interval": 2, "vocab_size": 1000, "tie_word_embeddings": False,
                   "attention_dropout": 0.0},
    "llama4_text": {"model_type": "llama4_text", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 64, "intermediate_size_mlp": 256,
                    "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                    "attention_chunk_size": 8192, "use_qk_norm": True, "vocab_size": 1000,
                    "tie_word_embeddings": False, "attention_dropout": 0.0},
    "phimoe": {"model_type": "phimoe", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2,
               "vocab_size": 1000, "tie_word_embeddings": False, "attention_bias": True, "sliding_window": None,
               "input_jitter_noise": 0.0, "attention_dropout": 0.0},
}
LAYER_FIELD = {"gpt2": "n_layer"}
DROPOUT = {  # the family's dropout fields, set to 0.1 in the dropout cases
    "gpt2": ("attn_pdrop", "resid_pdrop", "embd_pdrop"),
    "gpt_neox": ("attention_dropout", "hidden_dropout"),
    "phi3": ("attention_dropout", "resid_pdrop", "embd_pdrop"),
    "starcoder2": ("attention_dropout", "residual_dropout", "embedding_dropout"),
}
# (sequence, micro-batch, dtype, checkpointing, attention, dropout): every family runs each variant
VARIANTS = [
    (64, 2, "bfloat16", False, "sdpa", False),
    (128, 1, "float32", False, "sdpa", False),
    (32, 3, "bfloat16", False, "eager", False),
    (64, 2, "bfloat16", False, "eager", True),
    (96, 2, "bfloat16", True, "sdpa", False),
    (64, 1, "float32", True, "eager", True),
]
QWEN3_NEXT_80B = {"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 64,
                  "partial_rotary_factor": 0.25, "full_attention_interval": 4, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 32, "num_experts": 16, "num_experts_per_tok": 4,
                  "intermediate_size": 640}
# Extra shape variations beyond the base shapes
EXTRA = [
    ("llama", {"num_key_value_heads": 4, "head_dim": 32, "tie_word_embeddings": True}, (128, 2, "bfloat16", False, "sdpa", False)),
    ("qwen2", {"tie_word_embeddings": False, "num_key_value_heads": 6}, (64, 4, "bfloat16", False, "sdpa", False)),
    ("gpt_neox", {"use_parallel_residual": False, "rotary_pct": 1.0}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("gemma2", {"sliding_window": 32}, (96, 1, "bfloat16", False, "eager", False)),
    ("gemma3_text", {"sliding_window": 32}, (96, 1, "bfloat16", False, "sdpa", False)),
    ("mixtral", {"num_local_experts": 8, "num_experts_per_tok": 1}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("phi3", {"num_key_value_heads": 2}, (64, 2, "float32", False, "sdpa", False)),
    ("gpt2", {"n_inner": 256, "tie_word_embeddings": False}, (128, 1, "bfloat16", False, "sdpa", False)),
    ("llama", {"hidden_size": 256, "num_attention_heads": 8, "head_dim": 32, "intermediate_size": 688},
     (512, 1, "bfloat16", False, "eager", True)),
    ("qwen2", {"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 704},
     (1024, 1, "bfloat16", False, "sdpa", False)),
    ("qwen3_moe", {"norm_topk_prob": True, "mlp_only_layers": [1], "num_experts_per_tok": 3},
     (64, 2, "bfloat16", False, "sdpa", False)),
    ("smollm3", {"tie_word_embeddings": False, "no_rope_layer_interval": 3}, (64, 2, "bfloat16", False, "eager", False)),
    ("olmo3", {"sliding_window": 32}, (96, 1, "bfloat16", False, "sdpa", False)),
    ("olmo3", {"sliding_window": 32}, (96, 2, "bfloat16", True, "sdpa", False)),
    ("olmo2", {"num_key_value_heads": 4}, (64, 2, "float32", False, "eager", False)),
    ("starcoder2", {"use_bias": False, "sliding_window": 32}, (96, 1, "bfloat16", False, "sdpa", False)),
    ("cohere", {"use_qk_norm": True}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("cohere", {"use_qk_norm": True}, (32, 1, "float32", False, "eager", False)),
    ("cohere2", {"sliding_window": 32}, (96, 1, "bfloat16", False, "sdpa", False)),
    ("olmoe", {"norm_topk_prob": True, "num_experts_per_tok": 3}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("glm4_moe", {"use_qk_norm": True, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 0,
                  "norm_topk_prob": False}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("glm4_moe", {"n_shared_experts": 2, "num_experts_per_tok": 3}, (32, 1, "float32", False, "sdpa", False)),
    ("deepseek_v3", {"q_lora_rank": None, "first_k_dense_replace": 0, "norm_topk_prob": False, "n_group": 2,
                     "topk_group": 1, "n_shared_experts": 2}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("deepseek_v3", {"v_head_dim": 48}, (64, 2, "bfloat16", False, "sdpa", False)),
    ("llama4_text", {"interleave_moe_layer_step": 1, "num_experts_per_tok": 2, "use_qk_norm": False},
     (64, 2, "bfloat16", False, "sdpa", False)),
    ("llama4_text", {"attention_chunk_size": 32}, (96, 1, "bfloat16", False, "sdpa", False)),
    ("llama4_text", {"attention_chunk_size": 32}, (96, 2, "bfloat16", True, "sdpa", False)),
    ("gpt_oss", {"sliding_window": 32, "num_experts_per_tok": 1}, (96, 1, "bfloat16", False, "eager", False)),
    ("gpt_oss", {"sliding_window": 32}, (96, 2, "bfloat16", True, "eager", False)),
    # qwen3_next's gated delta-net (the torch fallbacks: chunk size 64, sequences that are and are not multiples of
    # it): as many key as value heads with wider values, dense layers beside sparse ones, and Qwen3-Next-80B-A3B
    # scaled down (16 q / 2 kv heads of 256 -> 8 / 1 of 64, 16 / 32 linear heads of 128 -> 2 / 4 of 32,
    # full_attention_interval 4, partial rotary 0.25) at 4 and 5 layers (3 delta-net layers, then the full one)
    ("qwen3_next", {"linear_num_value_heads": 2, "linear_value_head_dim": 48}, (100, 1, "float32", False, "sdpa", False)),
    ("qwen3_next", {"linear_num_value_heads": 2, "linear_value_head_dim": 48}, (200, 2, "bfloat16", False, "sdpa", False)),
    ("qwen3_next", {"mlp_only_layers": [1], "decoder_sparse_step": 1}, (64, 2, "bfloat16", False, "sdpa", False)),
    # fp32 at a multiple of the chunk size: no cast, so q, k keep the token-major layout (matmul copies them)
    ("qwen3_next", {"linear_num_value_heads": 2, "linear_value_head_dim": 48}, (128, 2, "float32", False, "sdpa", False)),
    ("qwen3_next", {}, (128, 2, "float32", False, "eager", False)),
    ("qwen3_next", QWEN3_NEXT_80B, (200, 1, "bfloat16", False, "sdpa", False), (4, 5)),
    ("qwen3_next", QWEN3_NEXT_80B, (130, 2, "bfloat16", True, "sdpa", False), (4, 5)),
    ("qwen3_next", QWEN3_NEXT_80B, (64, 1, "float32", True, "sdpa", False), (4, 5)),
]
# Sliding windows shorter than the sequence under sdpa (issue 29 follow-up: does each masked layer keep its own
# mask?), at 1, 2 and 3 layers so that at least two layers slide; b = 1 and 2, with and without checkpointing.
SHORT = [(96, batch, "bfloat16", checkpointing, "sdpa", False) for checkpointing in (False, True) for batch in (1, 2)]
QWEN_SHORT = {"use_sliding_window": True, "max_window_layers": 0, "sliding_window": 32}
EXTRA += [("mistral", {"sliding_window": 32}, variant, (1, 2, 3)) for variant in SHORT]
EXTRA += [("mistral", {"sliding_window": 32, "num_key_value_heads": 2}, SHORT[1], (1, 2, 3))]
EXTRA += [("qwen2", QWEN_SHORT, variant, (1, 2, 3)) for variant in SHORT]
EXTRA += [("qwen2", {**QWEN_SHORT, "max_window_layers": 1}, SHORT[1], (1, 2, 3))]  # a full layer, then two sliding
EXTRA += [("gemma3_text", {"sliding_window": 32}, variant, (1, 2, 3)) for variant in SHORT]
EXTRA += [("gemma2", {"sliding_window": 32}, variant, (1, 2, 3)) for variant in SHORT]
# the other families on the same sdpa mask path (two variants each)
EXTRA += [(family, {**changes, "sliding_window": 32}, variant, (1, 2, 3)) for family, changes in (
    ("qwen3", QWEN_SHORT), ("qwen3_moe", QWEN_SHORT), ("mixtral", {}), ("phi3", {})) for variant in SHORT[1:3]]


# qwen2_moe: normalised top-3, a narrower shared expert in fp32 under checkpointing, a window shorter than the sequence
EXTRA += [("qwen2_moe", {"norm_topk_prob": True, "num_experts_per_tok": 3}, (64, 2, "bfloat16", False, "sdpa", False)),
          ("qwen2_moe", {"shared_expert_intermediate_size": 64}, (96, 2, "float32", True, "sdpa", False)),
          ("qwen2_moe", QWEN_SHORT, SHORT[1], (1, 2, 3)),  # max_window_layers 0: no layer slides in qwen2_moe
          ("qwen2_moe", {**QWEN_SHORT, "max_window_layers": 3}, SHORT[1], (1, 2, 3))]  # layers 0 and 2 slide


def cases() -> list[dict]:
    out = []
    for family, base in BASE.items():
        variants = [(family, {}, variant) for variant in VARIANTS]
        variants += [extra for extra in EXTRA if extra[0] == family]
        for index, (_, changes, (seq, batch, dtype, checkpointing, attention, dropout), *counts) in enumerate(variants):
            config = {**base, **changes}
            if dropout:
                for field in DROPOUT.get(family, ("attention_dropout",)):
                    config[field] = 0.1
            if family in ("gemma2", "gpt_oss"):
                attention = "eager"  # Transformers 5.x has no sdpa path for Gemma 2 and gpt-oss (they load eager)
            case = {"id": f"{family}-{index}", "config": dict(sorted(config.items())), "sequence_length": seq,
                    "micro_batch": batch, "dtype": dtype, "gradient_checkpointing": checkpointing,
                    "attention": attention}
            if family == "llama4_text":  # layer 3 is unrotated (no_rope_layer_interval 4) and sparse
                counts = counts or [(1, 2, 4)]
            if family == "qwen3_next":  # a model of delta-net layers alone cannot count its cache's length, so
                counts = counts or [(2, 3)]  # 2 layers (delta-net, full attention), then a third (delta-net)
            if counts:  # measured at other layer counts than 1 and 2
                case["layers"] = list(counts[0])
            if family in ("gemma2", "gemma3_text"):  # one sliding and one full layer at 2 layers (2 sliding at 3)
                case["extra_fields"] = {str(layers): {"layer_types": [
                    "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]}
                    for layers in case.get("layers", (1, 2))}
            out.append(case)
    return out


def measure(case: dict, layers: int, explain: bool = False) -> int:
    """Saved-for-backward bytes of one forward + loss at `layers` layers (runs in a child process)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    fields = dict(case["config"])
    fields[LAYER_FIELD.get(fields["model_type"], "num_hidden_layers")] = layers
    fields.update(case.get("extra_fields", {}).get(str(layers), {}))
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    config._attn_implementation = case["attention"]
    dtype = getattr(torch, case["dtype"])
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.train()
    if case["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    saved = SavedTensors(model, explain)
    if case["gradient_checkpointing"]:
        saved.record_checkpoint_inputs(model)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, fields["vocab_size"], (case["micro_batch"], case["sequence_length"]), generator=generator)
    with saved.hooks():
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()  # proves the graph is complete
    if explain:
        print(f"--- {case['id']} layers={layers}", *saved.shapes, sep="\n  ")
    return saved.total


def _child(arguments) -> int | str:
    case, layers, explain = arguments
    try:
        return measure(case, layers, explain)
    except Exception as error:  # reported per case, the other cases still run
        return f"{case['id']}: {type(error).__name__}: {error}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="only case ids starting with this")
    parser.add_argument("--explain", action="store_true", help="print every saved tensor, write nothing")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--merge", action="store_true", help="replace only the selected cases in --out")
    args = parser.parse_args(argv)
    import torch
    import transformers
    import warnings
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    selected = [case for case in cases() if not args.only or case["id"].startswith(args.only)]
    jobs = [(case, layers, args.explain) for case in selected for layers in case.get("layers", (1, 2))]
    # One forked process per measurement: memory is never handed back between models.
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        results = []
        for result in pool.imap(_child, jobs, chunksize=1):
            results.append(result)
            print(f"{len(results)}/{len(jobs)} {result}", file=sys.stderr, flush=True)
    if args.explain:
        return 0
    failed = [result for result in results if isinstance(result, str)]
    if failed:
        print(*failed, sep="\n", file=sys.stderr)
        return 1
    pending = iter(results)
    for case in selected:
        case["saved_bytes"] = {str(layers): next(pending) for layers in case.get("layers", (1, 2))}
    if args.merge:
        fresh = {case["id"]: case for case in selected}
        kept = {case["id"]: case for case in json.loads(args.out.read_text())["cases"]}
        selected = [fresh.get(case["id"], kept.get(case["id"])) for case in cases()]
        selected = [case for case in selected if case is not None]
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu",
              "method": "saved_tensors_hooks, unique storages, parameters excluded; checkpoint inputs added",
              "cases": selected}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(selected)} cases -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
