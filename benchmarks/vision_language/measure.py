"""Measure what a vision-language model keeps for backward: the language model at T tokens (image tokens among
them), the vision tower and projector trained or frozen (CPU, random weights, Transformers 5.24).

    OMP_NUM_THREADS=1 /work/venv-fam/bin/python benchmarks/vision_language/measure.py   # all cases -> JSON
    /work/venv-fam/bin/python benchmarks/vision_language/measure.py --only qwen2_5_vl-0 --explain

Each case builds `AutoModelForImageTextToText` from a config dict (nothing downloaded) at 1 and 2 language layers
and its `vision_depth` vision blocks, each in its own forked process; the vision tower and projector are frozen
(`requires_grad_(False)`, what LLaMA-Factory's freeze_vision_tower / freeze_multi_modal_projector do) or trained.
With checkpointing, Transformers' `gradient_checkpointing_enable` also calls `enable_input_require_grads`, which
makes every sub-model's input embeddings' output require grad, the vision tower's patch embedding among them: a
frozen tower then keeps its checkpointed blocks' inputs and its merger's norm and activation inputs. `input_grads`
false enables checkpointing on the language model only (what LLaMA-Factory's own enabler amounts to: frozen layers
run without a checkpoint, no input-grad hook). Checkpoint inputs are recorded only for layers where an input or a
parameter requires grad (`record_checkpoint_inputs(only_with_grad=True)`): elsewhere the checkpoint saves nothing and
torch drops its frame (every recorded case measured the same both ways), and the inputs torch packs into that frame
are not counted (a frozen Qwen3-VL tower's blocks, which the input-grad hook does not reach: their inputs are freed
after the forward, checked with weak references; every other case measured the same). The sample holds one image
per row of `grid` patches (t, h, w), its image tokens (h·w / merge²) inside the sequence; `model(input_ids,
pixel_values, image_grid_thw, mm_token_type_ids, labels)` runs in training mode inside the same saved-tensor hooks as benchmarks/activations (saved_tensors.py), then backward. Gemma 3 / LLaVA: one image
of image_size per row; LLaVA-NeXT: one 112 × 112 image (a grid pinpoint: 5 crops, 88 tokens) with image_sizes;
Mistral 3: one 56 × 84 image (24 patches, 2 × 3 tokens and a break per row) with image_sizes; Qwen3-VL: Qwen's
inputs at 16-pixel patches, a deepstack merger after every block but the last; Llama 4: one image of a 1 × 2 canvas
(its two tiles and the global one, 3 × 16 tokens) or of one tile, Transformers 5.24's broken return patched
(`measure`). Results go to
tests/data/vision_language/measured.json, checked by tests/unit/test_vision_language_activations.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from activations import measure as base  # noqa: E402
from saved_tensors import SavedTensors  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "vision_language" / "measured.json"
TEXT = {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 224,
        "vocab_size": 1500, "attention_dropout": 0.0, "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}}
VISION = {
    "qwen2_5_vl": {"hidden_size": 64, "intermediate_size": 160, "num_heads": 4, "out_hidden_size": 96,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 56,
                   "fullatt_block_indexes": [1], "in_channels": 3},
    "qwen2_vl": {"embed_dim": 64, "mlp_ratio": 4, "num_heads": 4, "hidden_size": 96, "patch_size": 14,
                 "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3},
}
# Gemma 3: the language model gemma3_text (one sliding and one full layer at 2 layers), a SigLIP tower without the
# pooling head (as the published configs), 4 tokens per image; the tower and projector frozen
GEMMA3_TEXT = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
               "intermediate_size": 256, "vocab_size": 1000, "query_pre_attn_scalar": 64, "sliding_window": 4096,
               "attention_dropout": 0.0}
GEMMA3_TOKENS = {"mm_tokens_per_image": 4, "image_token_index": 990, "boi_token_index": 991, "eoi_token_index": 992}
# (sequence, micro-batch, dtype, checkpointing, input_grads)
GEMMA3 = [(64, 1, "bfloat16", False, True), (64, 2, "bfloat16", False, True), (96, 1, "float32", False, True),
          (96, 2, "bfloat16", True, True), (96, 1, "float32", True, True), (96, 2, "bfloat16", True, False),
          (96, 2, "bfloat16", False, True, 40)]
# the tower and projector trained (sequence, micro-batch, dtype, checkpointing): Gemma 3's and LLaVA's
TRAINED = [(64, 1, "bfloat16", False), (64, 2, "bfloat16", False), (96, 1, "float32", False),
           (96, 2, "bfloat16", True), (96, 1, "float32", True)]
# LLaVA: a llama language model, a CLIP tower (all its layers run; vision_feature_layer -2 is the feature), the
# tower and projector frozen, the variants Gemma 3's first six
LLAVA_TEXT = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 48, "intermediate_size": 320, "vocab_size": 1000, "attention_dropout": 0.0,
              "tie_word_embeddings": False}
LLAVA_TOKENS = {"image_token_index": 990, "vision_feature_layer": -2, "vision_feature_select_strategy": "default"}
NEXT_PINPOINTS = [[56, 112], [112, 56], [112, 112]]
# Llama 4: benchmarks/activations' llama4_text (layer 1 dense, layer 2 MoE of 4 experts), a Llama4VisionModel of
# 112-pixel tiles (64 patches + CLS, 16 tokens after the pixel shuffle), its MLPs 4 × hidden as the shuffle needs
LLAMA4_TEXT = {"model_type": "llama4_text", "pad_token_id": 0, "hidden_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 64, "intermediate_size_mlp": 256,
               "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
               "attention_chunk_size": 8192, "use_qk_norm": True, "vocab_size": 1000, "tie_word_embeddings": False,
               "attention_dropout": 0.0}
LLAMA4_VISION = {"model_type": "llama4_vision_model", "hidden_size": 64, "intermediate_size": 256,
                 "num_attention_heads": 4, "num_hidden_layers": 2, "image_size": 112, "patch_size": 14,
                 "pixel_shuffle_ratio": 0.5, "projector_input_dim": 96, "projector_output_dim": 96,
                 "vision_output_dim": 96, "attention_dropout": 0.0, "projector_dropout": 0.0}
LLAMA4_TOKENS = {"image_token_index": 990, "boi_token_index": 991, "eoi_token_index": 992}
TOKENS = {"image_token_id": 1400, "video_token_id": 1401, "vision_start_token_id": 1402, "vision_end_token_id": 1403}
# (sequence, micro-batch, dtype, checkpointing, trained tower, vision depth, image grid (t, h, w))
VARIANTS = [
    (64, 1, "bfloat16", False, False, 2, (1, 8, 12)),
    (64, 2, "bfloat16", False, False, 2, (1, 8, 12)),
    (128, 1, "float32", False, False, 2, (1, 16, 12)),
    (64, 1, "bfloat16", False, True, 2, (1, 8, 12)),
    (64, 2, "bfloat16", False, True, 2, (1, 8, 12)),
    (128, 1, "float32", False, True, 3, (1, 16, 12)),
    (96, 1, "bfloat16", True, True, 2, (1, 8, 12)),
    (96, 2, "bfloat16", True, False, 2, (1, 8, 12)),
    (96, 1, "float32", True, False, 3, (1, 8, 12)),
    (96, 2, "bfloat16", True, False, 2, (1, 8, 12), False),
]

# Qwen3-VL: a qwen3 language model (q/k norms, head_dim given: Qwen3VLTextConfig's default is 128) with interleaved
# M-RoPE; a tower of 16-pixel patches with a learned 8 × 8 position grid (interpolated per image), LayerNorm blocks
# with a gelu_pytorch_tanh MLP, the merger and a deepstack merger after every block but the last (the published
# [8, 16, 24] of 27 never name the last): at 3 blocks two deepstack features, so at 1 language layer one is added
QWEN3_VL_TEXT = {**TEXT, "head_dim": 16, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3],
                                                              "mrope_interleaved": True, "rope_theta": 10000.0}}
QWEN3_VL_VISION = {"hidden_size": 64, "intermediate_size": 160, "num_heads": 4, "out_hidden_size": 96,
                   "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
                   "num_position_embeddings": 64}
# VARIANTS, and one without deepstack (input_grads, None: deepstack_visual_indexes [])
QWEN3_VL_VARIANTS = VARIANTS + [(64, 2, "bfloat16", False, True, 2, (1, 8, 12), True, None)]


def cases() -> list[dict]:
    out = []
    for family, vision in VISION.items():
        for index, (seq, batch, dtype, checkpointing, trained, depth, grid, *grads) in enumerate(VARIANTS):
            out.append({"id": f"{family}-{index}", "model_type": family, "text_config": dict(TEXT),
                        "vision_config": {**vision, "depth": depth}, "tokens": TOKENS, "sequence_length": seq,
                        "micro_batch": batch, "dtype": dtype, "gradient_checkpointing": checkpointing,
                        "vision_trained": trained, "grid": list(grid), "attention": "sdpa",
                        "input_grads": grads[0] if grads else True})
    for index, (seq, batch, dtype, checkpointing, trained, depth, grid, *grads) in enumerate(QWEN3_VL_VARIANTS):
        deepstack = list(range(depth - 1)) if grads[1:] != [None] else []  # never the last block, as published
        out.append({"id": f"qwen3_vl-{index}", "model_type": "qwen3_vl", "text_config": dict(QWEN3_VL_TEXT),
                    "vision_config": {**QWEN3_VL_VISION, "depth": depth, "deepstack_visual_indexes": deepstack},
                    "tokens": TOKENS, "sequence_length": seq, "micro_batch": batch, "dtype": dtype,
                    "gradient_checkpointing": checkpointing, "vision_trained": trained, "grid": list(grid),
                    "attention": "sdpa", "input_grads": grads[0] if grads else True})
    gemma = {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4, "num_hidden_layers": 2,
             "image_size": 56, "patch_size": 14, "attention_dropout": 0.0, "vision_use_head": False}
    for index, (seq, batch, dtype, checkpointing, grads, *window) in enumerate(GEMMA3):
        text = {**GEMMA3_TEXT, "sliding_window": window[0]} if window else dict(GEMMA3_TEXT)
        out.append({"id": f"gemma3-{index}", "model_type": "gemma3", "text_config": text,
                    "vision_config": gemma, "tokens": GEMMA3_TOKENS, "sequence_length": seq, "micro_batch": batch,
                    "dtype": dtype, "gradient_checkpointing": checkpointing, "vision_trained": False,
                    "attention": "sdpa", "input_grads": grads})
    for index, (seq, batch, dtype, checkpointing) in enumerate(TRAINED):
        out.append({"id": f"gemma3-trained-{index}", "model_type": "gemma3", "text_config": dict(GEMMA3_TEXT),
                    "vision_config": gemma, "tokens": GEMMA3_TOKENS, "sequence_length": seq, "micro_batch": batch,
                    "dtype": dtype, "gradient_checkpointing": checkpointing, "vision_trained": True,
                    "attention": "sdpa", "input_grads": True})
    clip = {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
            "num_hidden_layers": 3, "image_size": 56, "patch_size": 14, "projection_dim": 64}
    for index, (seq, batch, dtype, checkpointing, grads) in enumerate(GEMMA3[:6]):
        out.append({"id": f"llava-{index}", "model_type": "llava", "text_config": dict(LLAVA_TEXT),
                    "vision_config": clip, "tokens": LLAVA_TOKENS, "sequence_length": seq, "micro_batch": batch,
                    "dtype": dtype, "gradient_checkpointing": checkpointing, "vision_trained": False,
                    "attention": "sdpa", "input_grads": grads})
    for index, (seq, batch, dtype, checkpointing) in enumerate(TRAINED):
        out.append({"id": f"llava-trained-{index}", "model_type": "llava", "text_config": dict(LLAVA_TEXT),
                    "vision_config": clip, "tokens": LLAVA_TOKENS, "sequence_length": seq, "micro_batch": batch,
                    "dtype": dtype, "gradient_checkpointing": checkpointing, "vision_trained": True,
                    "attention": "sdpa", "input_grads": True})
    # LLaVA-NeXT: LLaVA's CLIP tower, three pinpoints; each image 112 × 112 (the 2 × 2 grid, no unpadding):
    # 1 + 4 crops, 88 tokens (4·4 base, 8·8 grid, 8 newlines)
    nexts = [(seq + 64, batch, dtype, checkpointing, False, grads) for seq, batch, dtype, checkpointing, grads
             in GEMMA3[:6]] + [(seq + 64, batch, dtype, checkpointing, True, True) for seq, batch, dtype,
                               checkpointing in TRAINED]
    for index, (seq, batch, dtype, checkpointing, trained, grads) in enumerate(nexts):
        out.append({"id": f"llava_next-{index}", "model_type": "llava_next", "text_config": dict(LLAVA_TEXT),
                    "vision_config": clip, "tokens": {**LLAVA_TOKENS, "image_grid_pinpoints": NEXT_PINPOINTS},
                    "image_size": [112, 112], "sequence_length": seq, "micro_batch": batch, "dtype": dtype,
                    "gradient_checkpointing": checkpointing, "vision_trained": trained, "attention": "sdpa",
                    "input_grads": grads})
    pixtral = {"model_type": "pixtral", "hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
               "num_hidden_layers": 2, "image_size": 112, "patch_size": 14, "attention_dropout": 0.0}
    mistral = {**LLAVA_TEXT, "model_type": "mistral", "sliding_window": None}
    for index, (seq, batch, dtype, checkpointing, trained, grads) in enumerate(nexts):
        out.append({"id": f"mistral3-{index}", "model_type": "mistral3", "text_config": mistral,
                    "vision_config": pixtral, "tokens": {"image_token_index": 990, "spatial_merge_size": 2},
                    "image_size": [56, 84], "sequence_length": seq - 64, "micro_batch": batch, "dtype": dtype,
                    "gradient_checkpointing": checkpointing, "vision_trained": trained, "attention": "sdpa",
                    "input_grads": grads})
    for index, (seq, batch, dtype, checkpointing, trained, grads) in enumerate(nexts):
        out.append({"id": f"llama4-{index}", "model_type": "llama4", "text_config": dict(LLAMA4_TEXT),
                    "vision_config": LLAMA4_VISION, "tokens": LLAMA4_TOKENS, "tiles": [1, 2],
                    "sequence_length": seq, "micro_batch": batch, "dtype": dtype,
                    "gradient_checkpointing": checkpointing, "vision_trained": trained, "attention": "sdpa",
                    "input_grads": grads})
    out.append({**out[-5], "id": "llama4-11", "tiles": [1, 1], "micro_batch": 2})  # one tile: no global tile
    return out


def _llama4_inputs(case: dict, ids, generator, dtype):
    """One image per row, a canvas of `tiles` (rows, columns) tiles of image_size: its tiles and, past one tile, the
    global tile (Llama4ImageProcessor), each tile's (image_size / patch_size)² · pixel_shuffle_ratio² tokens
    (Llama4Processor._prompt_split_image: the separators and image start / end plain tokens here)."""
    import torch

    vision, (rows, columns) = case["vision_config"], case["tiles"]
    chunks = rows * columns + (rows * columns > 1)
    per_chunk = int((vision["image_size"] // vision["patch_size"]) ** 2 * vision["pixel_shuffle_ratio"] ** 2)
    ids[:, 5:5 + chunks * per_chunk] = case["tokens"]["image_token_index"]
    size = vision["image_size"]
    return {"pixel_values": torch.randn(ids.shape[0] * chunks, 3, size, size, generator=generator).to(dtype)}


def _mistral3_inputs(case: dict, ids, generator, dtype):
    """One image per row of `image_size` (multiples of patch_size · spatial_merge_size), its rows × columns tokens
    and one [IMG_BREAK] / [IMG_END] per row (PixtralProcessor: rows · (columns + 1) positions, the breaks plain
    tokens here)."""
    import torch

    (height, width), step = case["image_size"], case["vision_config"]["patch_size"] * 2
    rows, columns = height // step, width // step
    for row in range(rows):
        start = 5 + row * (columns + 1)
        ids[:, start:start + columns] = case["tokens"]["image_token_index"]
    pixels = torch.randn(ids.shape[0], 3, height, width, generator=generator).to(dtype)
    return {"pixel_values": pixels, "image_sizes": torch.tensor([[height, width]] * ids.shape[0])}


def _llava_inputs(case: dict, ids, generator, dtype):
    """One image per row: its (image_size / patch_size)² tokens (the default strategy drops CLS)."""
    import torch

    vision = case["vision_config"]
    per_image = (vision["image_size"] // vision["patch_size"]) ** 2
    ids[:, 5:5 + per_image] = case["tokens"]["image_token_index"]
    size = vision["image_size"]
    return {"pixel_values": torch.randn(ids.shape[0], 3, size, size, generator=generator).to(dtype)}


def _llava_next_inputs(case: dict, ids, generator, dtype):
    """One image per row of `image_size`, its crops (the base image and the best pinpoint's grid) and its tokens
    (LlavaNextProcessor._get_number_of_features: base, unpadded grid, a newline per grid row)."""
    import torch

    vision, (height, width) = case["vision_config"], case["image_size"]
    size, per_side = vision["image_size"], vision["image_size"] // vision["patch_size"]
    rows, columns = height // size, width // size  # the image is a pinpoint: no unpadding
    per_image = per_side * per_side * (1 + rows * columns) + rows * per_side
    ids[:, 5:5 + per_image] = case["tokens"]["image_token_index"]
    pixels = torch.randn(ids.shape[0], 1 + rows * columns, 3, size, size, generator=generator).to(dtype)
    return {"pixel_values": pixels, "image_sizes": torch.tensor([[height, width]] * ids.shape[0])}


def _gemma3_inputs(case: dict, ids, generator, dtype):
    """One image per row: its mm_tokens_per_image tokens between boi and eoi; token_type_ids mark them (what
    Gemma 3's processor returns, needed in training for the bidirectional image mask)."""
    import torch

    tokens, per_image = case["tokens"], case["tokens"]["mm_tokens_per_image"]
    for row in range(ids.shape[0]):
        ids[row, 5] = tokens["boi_token_index"]
        ids[row, 6:6 + per_image] = tokens["image_token_index"]
        ids[row, 6 + per_image] = tokens["eoi_token_index"]
    size = case["vision_config"]["image_size"]
    pixels = torch.randn(ids.shape[0], 3, size, size, generator=generator).to(dtype)
    return {"pixel_values": pixels, "token_type_ids": (ids == tokens["image_token_index"]).long()}


def _qwen_inputs(case: dict, ids, generator, dtype):
    """One image per row of `grid` patches, its h·w / merge² tokens between vision_start and vision_end."""
    import torch

    b, (t, h, w), tokens = ids.shape[0], case["grid"], case["tokens"]
    vision = case["vision_config"]
    patch, per_image = vision["patch_size"], t * h * w // vision["spatial_merge_size"] ** 2
    for row in range(b):
        ids[row, 5] = tokens["vision_start_token_id"]
        ids[row, 6:6 + per_image] = tokens["image_token_id"]
        ids[row, 6 + per_image] = tokens["vision_end_token_id"]
    pixels = torch.randn(b * t * h * w, vision["in_channels"] * vision["temporal_patch_size"] * patch * patch,
                         generator=generator).to(dtype)
    return {"pixel_values": pixels, "image_grid_thw": torch.tensor([[t, h, w]] * b),
            "mm_token_type_ids": (ids == tokens["image_token_id"]).long()}


def measure(case: dict, layers: int, explain: bool = False) -> int:
    """Saved-for-backward bytes at `layers` language layers (runs in a child process)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    torch.manual_seed(0)
    gemma = case["model_type"] == "gemma3"
    text = {**case["text_config"], "num_hidden_layers": layers}
    if gemma:  # one sliding and one full layer at 2 layers
        text["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    config = AutoConfig.for_model(case["model_type"], text_config=text, vision_config=case["vision_config"],
                                  **case["tokens"])
    for sub in (config, config.text_config, config.vision_config):
        sub._attn_implementation = case["attention"]
    dtype = getattr(torch, case["dtype"])
    model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.train()
    inner = model if case["model_type"] == "llama4" else model.model  # Llama 4's parts are the model's own
    if not case["vision_trained"]:
        for name in {"llama4": ("vision_model", "multi_modal_projector")}.get(case["model_type"], (
                ("visual",) if case["model_type"].startswith("qwen") else ("vision_tower", "multi_modal_projector"))):
            getattr(inner, name).requires_grad_(False)
    if case["gradient_checkpointing"]:  # input_grads false: LLaMA-Factory's way, no checkpoint on a frozen tower and
        # no enable_input_require_grads on it (model_utils/checkpointing.py:100-154)
        (model if case["input_grads"] else inner.language_model).gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    saved = SavedTensors(model, explain)
    if case["gradient_checkpointing"]:
        saved.record_checkpoint_inputs(model, only_with_grad=True)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 900, (case["micro_batch"], case["sequence_length"]), generator=generator)
    inputs = {"gemma3": _gemma3_inputs, "llava": _llava_inputs, "llava_next": _llava_next_inputs,
              "mistral3": _mistral3_inputs, "llama4": _llama4_inputs}.get(case["model_type"], _qwen_inputs)(
        case, ids, generator, dtype)
    if case["model_type"] == "llama4":  # 5.24's Llama4ForConditionalGeneration.forward (modeling_llama4.py:1311-1319)
        # reads image_outputs off the language model's MoeCausalLMOutputWithPast, which has none, after the loss is
        # computed; give that output the attribute (nothing saved for backward changes)
        inner.language_model.register_forward_hook(lambda module, args, output: object.__setattr__(
            output, "image_outputs", None))
    with saved.hooks():
        loss = model(input_ids=ids, labels=ids, **inputs).loss
    loss.backward()
    if explain:
        print(f"--- {case['id']} layers={layers}", *saved.shapes, sep="\n  ")
    return saved.total


def main(argv: list[str] | None = None) -> int:
    """benchmarks/activations/measure.py's runner (forked processes, --only / --explain / --out / --merge, the
    record) over these cases."""
    base.cases, base.measure, base.OUT = cases, measure, OUT
    return base.main(argv)


if __name__ == "__main__":
    sys.exit(main())
