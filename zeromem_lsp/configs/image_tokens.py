"""Image tokens per sample and what a vision-language model keeps for backward beside its language model (pure).

Image tokens (Transformers 5.24, transformers/models/<type>/; LLaMA-Factory hiyouga/LLaMA-Factory@ff6d4d12):
- qwen2_vl / qwen2_5_vl: the image processor's `smart_resize` (image_processing_qwen2_vl.py:63-89) rounds height
  and width to multiples of factor = patch_size · spatial_merge_size (28), within [min_pixels, max_pixels] (the
  class defaults 56·56 and 28·28·1280, image_processing_qwen2_vl.py:44-46); one token per factor² pixels (the
  merger joins spatial_merge_size² patches of patch_size², temporal_patch_size frames of a still image being one
  temporal patch). LLaMA-Factory first shrinks an image above `image_max_pixels` (default 768·768,
  src/llamafactory/hparams/model_args.py:305-306) to at most that many pixels, keeping its aspect
  (data/mm_plugin.py:218-235, `_preprocess_image`), and clamps the aspect to 180 past 200 (mm_plugin.py:2261-2275):
  the most tokens an image can then take is the largest `smart_resize` result over h·w ≤ image_max_pixels
  (`qwen_image_tokens`). Without LLaMA-Factory, the processor's max_pixels bounds it: max_pixels / factor² — the
  one in the preprocessor_config.json the run loads where one is read (configs/processor_config.py, `Processor`;
  Qwen2-VL-7B-Instruct's 12,845,056: 16,384 tokens), else the class default; and no image takes more tokens than the
  sequence holds (`VisionKept.at`).
  The peak assumes one image per sample at that bound (the figure says so). qwen3_vl: the same processor class
  (image_processing_auto.py maps qwen3_vl to Qwen2VLImageProcessor) and LLaMA-Factory's Qwen3VLPlugin the same
  bound, at factor 32 (16-pixel patches): 980 tokens, 684 under 768·768.
- gemma3: the processor resizes every image to vision_config.image_size (pan-and-scan off by default), and
  Gemma3MultiModalProjector average-pools the (image_size / patch_size)² patches to `mm_tokens_per_image` tokens
  (configuration_gemma3.py:207, default 256; modeling_gemma3.py:635-668).

What is kept (measured: benchmarks/vision_language/measure.py → tests/data/vision_language/measured.json, checked
by tests/unit/test_vision_language_activations.py), with b micro-batch, s sequence, w the dtype's bytes, N patches
and M = N / merge² tokens of an image, h / I / heads / d the tower's width, MLP width, heads and head width:
- always: the image-token mask of `inputs_embeds.masked_scatter` (b·s booleans), and M-RoPE's cos / sin, which
  are (b, s, d) per table (the text model's are (1, s, d): docs/memory-model.md), so 2·w·(b − 1)·s·d more.
- a frozen tower and projector (no parameter requiring grad, pixel values without grad) keep nothing, unless
  Transformers' `gradient_checkpointing_enable` ran: it calls `enable_input_require_grads`
  (modeling_utils.py:3189-3198, 2147-2177), whose hook makes every sub-model's input embeddings' output require
  grad, the tower's patch embedding among them; then, per image, the checkpointed blocks' inputs, the rotary tables,
  indices and cu_seqlens as below, and the merger's norm input and statistics and its GELU's input (frozen weights
  keep no linear input, no x̂). LLaMA-Factory enables checkpointing its own way (model_utils/checkpointing.py:100-154:
  no input-grad hook, frozen layers run without a checkpoint): there a frozen tower keeps nothing.
- a trained Qwen2.5-VL tower, per image: the Conv3d's input (w·N·C·T·P²), the window index and its reverse
  (int64 per token, 2·8·M), the rotary cos / sin computed once (2·4·N·d, fp32), per block 2 fp32 RMSNorms
  (4·N·h + 4·N each) and 11·w·N·h (the norms' x̂ and outputs, rotated q and k, the fused qkv whose view v is, the
  attention output, o's input), sdpa's fp32 log-sum-exp (4·heads·N), the gated MLP's 4·w·N·I; the merger's fp32
  RMSNorm (4·N·h + 4·N) and 4·w·N·h (x̂, output, GELU in and out).
- a trained Qwen2-VL tower: the same but LayerNorms (w·N·h input, 2·w·N statistics, w·N·h output each), no window
  index, the quick_gelu MLP's fc1 output, sigmoid product and fc2 input (3·w·N·I) (`TOWERS`).
- Gemma 3 (SigLIP tower without its pooling head, as published): with token_type_ids (what training
  passes) every layer gets an explicit (b, 1, s, s) mask with bidirectional image blocks
  (create_masks_for_vision_model, modeling_gemma3.py:876-880), so sdpa repeats k and v to every head and each layer
  keeps its copy of the mask (2·w·b·s·(q − kv)·d + w·b·s·s per layer, as a sliding layer the sequence outgrows);
  under checkpointing the layers' inputs hold one boolean mask per attention type (b·s·s each). A frozen tower with
  Transformers' input-grad hook keeps, per image, its checkpointed blocks' inputs (depth·w·N·h), post_layernorm's
  input and statistics, the average pool's input (w·N·h) and mm_soft_emb_norm's fp32 input and 1/rms, and once
  its fp32 1 + weight. Trained: the pixel values (w·N·C·P²), the position ids (int64 (1, N), once per batch), per
  block the text layer's terms at the tower's shape — two LayerNorms (input, statistics, output), q, k, v and the
  attention output (4·w·N·h, o's input a view of sdpa's output), sdpa's fp32 log-sum-exp, fc1's output and the
  GELU's output (2·w·N·I) — or under checkpointing each block's input; then as frozen, and mm_soft_emb_norm's fp32
  x̂ and the projection's input (F32 + w)·M·h.
- LLaVA (CLIP tower, one feature layer): (image_size / patch_size)² tokens per
  image (`vision_feature_select_strategy` "default" drops the CLS position, "full" keeps it); nothing beside the
  mask unless Transformers' input-grad hook runs under checkpointing: then, per image of P = N + 1 positions,
  pre_layrnorm's input and statistics, every layer's input (all layers run, whatever vision_feature_layer picks),
  the last layer's output under post_layernorm (its pooled CLS row's statistics) and the projector's GELU input
  (w·M·text hidden). The unused pooled branch is counted as the measurement sees it. Trained: the pixel values, the
  position ids (int64 (1, N + 1), once), pre_layrnorm as frozen, per block Gemma 3's terms but quick_gelu's three
  tensors of N·I (fc1's output, the sigmoid, their product), or each block's input under checkpointing, the last
  output and CLS statistics, the projector's GELU input and output (2·w·M·text hidden); and once the batch holds
  more than one image the feature layer sliced past CLS is a copy, linear_1's input (w·M·h per image).
- LLaVA-NeXT (CLIP tower, one feature layer, the default strategy): LLaVA's per crop, an image's crops being the
  base image and its pinpoint's grid (`anyres_tokens`, the most tokens an image can take: an image the shape of the
  pinpoint that gives the most; 2,928 tokens and 5 crops for llava-1.6's pinpoints); pack_image_features (permute,
  unpad, the image_newline concatenated per row, the base image in front) keeps nothing.
- Mistral 3 (Pixtral tower, one feature layer): `pixtral_grid` rows × columns tokens of patch_size · merge pixels
  (vision_config.image_size taken as the processor's longest_edge: Mistral-Small-3.1's preprocessor_config.json says
  1,540 as its config does; 55 × 55), N = merge² tokens patches. Every image's patches run as one sequence
  (modeling_pixtral.py:404-465) under one block-diagonal mask, w·(images in the batch · N)², kept once. Per image:
  ln_pre's fp32 input and 1/rms (and x̂ trained), the 2D rotary cos / sin in w (2·w·N·d), per block Qwen2.5-VL's
  terms but 4·w·N·h in attention (q, k rotated, v, the output), or its input under checkpointing; the projector's
  RMSNorm, trained also x̂ and the patch merger's unfolded input and output (w·M·h), the GELU's input (and output)
  at the text width (Mistral3MultiModalProjector, modeling_mistral3.py:70-128). Trained also the pixel values.
- a trained Qwen3-VL tower, per image: Qwen2-VL's terms but gelu_pytorch_tanh's 2·w·N·I (fc1's output, the
  GELU's output); the learned position grid resampled per image (Qwen3VLVisionModel.forward: pos_embed gathered at
  get_vision_interpolation_indices_and_weights' 4 bilinear taps per patch, scaled by their weights) keeps the int64
  indices and fp32 weights (48·N); each deepstack merger that runs (a `deepstack_visual_indexes` block within depth:
  Qwen3VLVisionPatchMerger with use_postshuffle_norm) its LayerNorm's statistics over M rows of h·merge² (2·w·M; its
  input is the next block's, or the merger's), its output, linear_fc1's output and the GELU's output (3·w·N·h). The
  language model adds the deepstack features to its first layers' hidden states at the image positions
  (Qwen3VLTextModel._deepstack_process): indexing by the image mask keeps that mask, already counted. A frozen
  Qwen3-VL tower keeps nothing, under checkpointing too: Transformers' input-grad hook never reaches it (`UNHOOKED`).
- Llama 4 (Llama4VisionModel, modeling_llama4.py:667-1139): `llama4_tiles` tiles of vision_config.image_size (the
  processor's max_patches, 16) and past one tile the global tile, each through the tower alone as N = (image_size /
  patch_size)² + 1 positions (the class token appended last), its N − 1 patches pixel-shuffled to M = (N − 1) ·
  pixel_shuffle_ratio² tokens. Once per batch the rotary table freqs_ci (complex64 (N, 1, d / 2), a buffer: saved by
  vision_apply_rotary_emb's complex product, or a checkpoint input). Per tile: layernorm_pre's and layernorm_post's
  inputs and statistics, per block SigLIP's terms (rotated q and k, v and sdpa's output; the GELU MLP) or its input
  under checkpointing, the vision adapter's two GELU inputs (w·M·projector_output_dim each); trained also the unfolded
  pixels (the patch linear's input), fc1's input (pixel_shuffle's contiguous copy, w·(N − 1)·h) and both GELU outputs
  (fc2's and linear_1's inputs).
- gradient checkpointing (every vision block is a GradientCheckpointingLayer): a trained tower keeps each block's
  input (w·N·h) and the blocks' cu_seqlens (int32: images + 1; Qwen2.5-VL's windowed blocks windows + 1, at most
  one window per token: the bound is counted), beside the conv input, indices, rotary tables and merger; a frozen
  tower's checkpoints keep nothing (nothing in them saves a tensor, so torch's non-reentrant frame is dropped).
  The language model's layers get no position ids (M-RoPE passes `text_position_ids` None unless packed): the
  text model's I64·s checkpoint input is not kept.
"""

from __future__ import annotations

import math
from typing import NamedTuple

F32, I64, I32 = 4, 8, 4

#: vision model_type -> the processor's (min_pixels, max_pixels) class defaults
QWEN_PIXELS = {"qwen2_vl_vision": (56 * 56, 28 * 28 * 1280), "qwen2_5_vl_vision": (56 * 56, 28 * 28 * 1280),
               "qwen3_vl_vision": (56 * 56, 28 * 28 * 1280)}  # qwen3_vl: Qwen2VLImageProcessor (image_processing_auto)
#: towers Transformers' input-grad hook never reaches: Qwen3VLVisionModel names no input embedding layer
#: (`_input_embed_layer`), so PreTrainedModel.get_input_embeddings raises NotImplementedError and
#: enable_input_require_grads passes it by (modeling_utils.py:2160-2167): frozen, it keeps nothing under checkpointing
UNHOOKED = frozenset({"qwen3_vl_vision"})
#: vision model_type -> taps per patch of its learned position grid's interpolation (Qwen3VLVisionModel: bilinear)
QWEN_TAPS = {"qwen3_vl_vision": 4}
#: LLaMA-Factory's image_max_pixels / image_min_pixels defaults (model_args.py:305-311)
LLAMAFACTORY_PIXELS = (768 * 768, 32 * 32)


#: LlavaNextConfig's image_grid_pinpoints default, (height, width) (configuration_llava_next.py:86-90)
LLAVA_NEXT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]


def anyres_tokens(pinpoints: list[list[int]], size: int, per_side: int, base: int) -> tuple[int, int, tuple[int, int]]:
    """LLaVA-NeXT's most tokens per image (LlavaNextProcessor._get_number_of_features, modeling_llava_next.py:47-112,
    242-312), with the crops the tower then runs (the base image and the grid's) and the pinpoint (height, width):
    an image the shape of a pinpoint is resized to it whole (select_best_resolution: the most effective pixels, then
    the least waste), so nothing is unpadded — `base` tokens for the base image, (rows·per_side)·(columns·per_side)
    for the grid of rows × columns crops of `size`, one newline per grid row (rows·per_side); any other image is
    unpadded to fewer."""
    found = [(base + rows * columns * per_side * per_side + rows * per_side, 1 + rows * columns, (height, width))
             for height, width in pinpoints for rows, columns in [(height // size, width // size)]]
    return max(found)


def pixtral_grid(step: int, longest: int, recipe_max: int | None = None) -> tuple[int, int]:
    """Mistral 3's most image tokens as (rows, columns) of step = patch_size · spatial_merge_size pixels
    (PixtralProcessor, processing_pixtral.py:88-129; image_processing_pixtral.py:29-86: an image past `longest` a side
    is scaled down to it, then each side rounded up to a step): over every image within recipe_max pixels
    (LLaMA-Factory's image_max_pixels) and `longest` a side, the one with the most rows · columns; without recipe_max
    a longest × longest one."""
    if recipe_max is None or recipe_max >= longest * longest:
        return -(-longest // step), -(-longest // step)
    return max(((-(-h // step), -(-min(recipe_max // h, longest) // step)) for h in range(1, min(
        longest, math.isqrt(recipe_max)) + 1)), key=lambda grid: grid[0] * grid[1])


#: Llama4ImageProcessor's max_patches class default: the most tiles an image is cut into (image_processing_llama4.py:
#: 305; Llama-4-Scout's preprocessor_config.json says the same)
LLAMA4_MAX_TILES = 16


def llama4_tiles(tile: int, max_tiles: int = LLAMA4_MAX_TILES, recipe_max: int | None = None) -> int:
    """Llama 4's most tiles per image: Llama4ImageProcessor._preprocess pads an image to the canvas get_best_fit picks
    (image_processing_llama4.py:180-270: the least upscale of at least 1, else the least downscale, the least area
    among ties) among every rows × columns grid of `tile`-pixel tiles, at most max_tiles of them
    (find_supported_resolutions), and cuts it into those tiles. An image one pixel high and max_tiles · tile wide
    takes the 1 × max_tiles canvas, so with no recipe_max (LLaMA-Factory's image_max_pixels) or one that holds it,
    max_tiles; below, the most over every image within recipe_max pixels."""
    if recipe_max is None or recipe_max >= max_tiles * tile:
        return max_tiles
    grids = [(rows, n // rows) for n in range(1, max_tiles + 1) for rows in range(1, n + 1) if n % rows == 0]

    def picked(height: int, width: int) -> int:
        scales = [min(rows * tile / height, columns * tile / width) for rows, columns in grids]
        up = [scale for scale in scales if scale >= 1]
        chosen = min(up) if up else max(scales)
        return min(rows * columns for (rows, columns), scale in zip(grids, scales) if scale == chosen)

    return max(picked(height, recipe_max // height) for height in range(1, recipe_max + 1))


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """image_processing_qwen2_vl.py:63-89, as data in, data out (the aspect check aside)."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        return max(factor, math.floor(height / beta / factor) * factor), max(factor, math.floor(
            width / beta / factor) * factor)
    if h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        return math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen_image_tokens(factor: int, processor: tuple[int, int], recipe_max: int | None = None) -> int:
    """The most tokens one image takes: over every h ≤ w with h·w ≤ recipe_max (the largest w per h, which never
    takes fewer tokens), the processor's smart_resize; without recipe_max (or one beyond max_pixels, which
    smart_resize then bounds), max_pixels / factor²."""
    low, high = processor
    if recipe_max is None or recipe_max >= high:
        return high // (factor * factor)
    best = 0
    for h in range(1, math.isqrt(recipe_max) + 1):
        w = min(recipe_max // h, 200 * h)
        rows, columns = smart_resize(h, w, factor, low, high)
        best = max(best, rows * columns // (factor * factor))
    return best


class Tower(NamedTuple):
    """One image's tower geometry: what `VisionKept` multiplies out."""

    kind: str  # the vision model_type (TOWERS)
    patches: int  # N
    merge: int  # spatial_merge_size (Gemma 3: the pooling kernel, N / tokens = merge²)
    hidden: int
    intermediate: int
    heads: int
    depth: int
    patch_inputs: int  # C·T·P² values per patch
    projector: int = 0  # LLaVA: the projector's GELU width (the text hidden size); Llama 4: projector_output_dim
    taps: int = 0  # Qwen3-VL: the learned position grid's interpolation taps per patch (bilinear: 4)
    deepstack: int = 0  # Qwen3-VL: the deepstack mergers that run (deepstack_visual_indexes within depth)


#: vision model_type -> (norm: "rms" | "layer", a trained block's attention tensors of N·h and MLP tensors of N·I
#: kept, whether the window index is kept)
TOWERS = {"qwen2_5_vl_vision": ("rms", 7, 4, True), "qwen2_vl_vision": ("layer", 7, 3, False),
          "qwen3_vl_vision": ("layer", 7, 2, False),
          "siglip_vision_model": ("layer", 4, 2, False), "clip_vision_model": ("layer", 4, 3, False),
          "pixtral": ("rms", 4, 4, False), "llama4_vision_model": ("layer", 4, 2, False)}
#: towers whose N positions hold a class token beside the N − 1 patches (no pixels of its own)
CLS_TOWERS = frozenset({"clip_vision_model", "llama4_vision_model"})


class Processor(NamedTuple):
    """The image processor config the run loads (preprocessor_config.json, configs/processor_config.py): its values
    and where they were read, or (values None) why none was — the processor class's defaults then, the figure
    approximate; `broken`: found but not a JSON object (the peak unknown)."""

    values: dict | None = None
    where: str = ""  # the file read, and which place held it
    missing: str = ""  # why none was read
    broken: bool = False

    def said(self, what: str) -> str:
        """`what` (a value and its key) with where it came from."""
        return f"{what} ({PROCESSOR_NAME} {self.where})" if self.values is not None else what


PROCESSOR_NAME = "preprocessor_config.json"


class ImageSettings(NamedTuple):
    """How a recipe runs the image tokens: the tower and projector trained or frozen, checkpointing through
    Transformers (its input-grad hook) or not, a recipe's pixel bound (value, where from; None: the processor's),
    the image processor config read (None: not looked for, its class defaults assumed)."""

    trained: bool = True
    input_grads: bool = True
    pixels: tuple[int, str] | None = None
    processor: Processor | None = None


def _norm(kind: str, rows: int, width: int, w: int, trained: bool) -> int:
    """A norm's input copy and statistics, and when its weight trains x̂ / the output the next (trained) linear keeps
    (memory/activations.py's `_rms` and `_layer_norm` terms)."""
    if kind == "rms":
        return F32 * rows * width + F32 * rows + (2 * w * rows * width if trained else 0)
    return w * rows * width + 2 * w * rows + (w * rows * width if trained else 0)


def tower_bytes(tower: Tower, w: int, checkpointing: bool, trained: bool = True, tokens: int = 0) -> int:
    """What one image's tower and projector keep for backward, trained or (its input requiring grad) frozen."""
    norm, attention, mlp, windows = TOWERS[tower.kind]
    n, h, d = tower.patches, tower.hidden, tower.hidden // tower.heads
    tokens = tokens or n // (tower.merge * tower.merge)
    block = 2 * _norm(norm, n, h, w, True) + attention * w * n * h + F32 * tower.heads * n + mlp * w * n * \
        tower.intermediate
    blocks = tower.depth * (w * n * h if checkpointing else block)  # checkpointed: each block's input
    cls = tower.kind in CLS_TOWERS  # the CLS position has no pixels
    pixels = w * (n - cls) * tower.patch_inputs if trained else 0  # Llama 4: the unfolded patches, linear's input
    if tower.kind == "llama4_vision_model":  # Llama4VisionModel.forward: layernorm_pre's and layernorm_post's inputs
        # and statistics, the blocks; Llama4VisionPixelShuffleMLP: trained, fc1's input (pixel_shuffle's copy of the
        # N − 1 patches); its two GELUs' inputs at the projector width (and, trained, their outputs: fc2's input and
        # Llama4MultiModalProjector.linear_1's); dropout at projector_dropout 0 keeps nothing
        return pixels + 2 * _norm(norm, n, h, w, False) + blocks + trained * w * (n - 1) * h + 2 * (1 + trained) * \
            w * tokens * tower.projector
    if cls:  # pre_layrnorm's input and statistics, the blocks, the last output under post_layernorm (its CLS row's
        # statistics), the projector's GELU input (and, trained, its output)
        return pixels + _norm(norm, n, h, w, False) + blocks + w * n * h + 2 * w + (1 + trained) * w * tokens * \
            tower.projector
    if tower.kind == "siglip_vision_model":  # the blocks, post_layernorm, the average pool's input,
        # mm_soft_emb_norm's fp32 input and 1/rms (Gemma3MultiModalProjector), trained its fp32 x̂ and the projection's
        # input
        return pixels + blocks + _norm(norm, n, h, w, False) + w * n * h + F32 * tokens * h + F32 * tokens + \
            trained * (F32 + w) * tokens * h
    if tower.kind == "pixtral":  # ln_pre (x̂ when trained), the 2D rotary cos / sin, the blocks, the projector's
        # RMSNorm (trained: x̂ and the patch merger's unfolded input), the merger's output, the GELU's input (and output)
        return pixels + _norm(norm, n, h, w, False) + trained * w * n * h + 2 * w * n * d + blocks + _norm(
            norm, n, h, w, trained) + trained * w * tokens * h + (1 + trained) * w * tokens * tower.projector
    fixed = pixels + (2 * I64 * tokens if windows else 0) + 2 * F32 * n * d
    # Qwen3-VL: pos_embed's bilinear taps, trained (the embedding's int64 indices, the fp32 weights it is scaled by:
    # get_vision_interpolation_indices_and_weights, Qwen3VLVisionModel.forward); per deepstack merger its LayerNorm's
    # statistics over M rows of h·merge² (its input is the next block's, or the merger's) and its GELU's input
    # (trained also the norm's output and the GELU's output: Qwen3VLVisionPatchMerger with use_postshuffle_norm)
    fixed += trained * (I64 + F32) * tower.taps * n + tower.deepstack * (2 * w * tokens + (1 + 2 * trained) * w * n * h)
    merger = _norm(norm, n, h, w, trained) + (2 if trained else 1) * w * n * h  # GELU's input (and output)
    if checkpointing:  # one cu_seqlens entry per image, and (windows) at most one per token (the batch's first: kept)
        return fixed + merger + blocks + I32 * (1 + (tokens if windows else 0))
    return fixed + merger + blocks


class Masks(NamedTuple):
    """Gemma 3's language model under images: the layers' shape its bidirectional image masks act on."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    sliding_layers: int
    sliding_window: int


def _image_masks(masks: Masks, b: int, s: int, w: int, checkpointing: bool) -> int:
    """Every layer gets an explicit (b, 1, s, s) mask (token_type_ids: create_masks_for_vision_model), so sdpa
    repeats k and v and each layer keeps its copy of the mask (memory/activations.py `_sliding_extra`, already counted
    for sliding layers the sequence outgrows); under checkpointing the layers' inputs hold one boolean mask per
    attention type (the text model's one (s, s) sliding mask aside)."""
    already = masks.sliding_layers if s > masks.sliding_window else 0
    if checkpointing:
        types = (masks.sliding_layers > 0) + (masks.sliding_layers < masks.layers)
        return types * b * s * s - (s * s if already else 0)
    return (masks.layers - already) * (2 * w * b * s * (masks.heads - masks.kv_heads) * masks.head_dim + w * b * s * s)


#: vision model_type -> how a sequence of s tokens bounds one image (its tokens are part of the sequence): "tokens"
#: (an image of any token count up to its bound exists: Qwen's smart_resize grids, Pixtral's rows × columns),
#: "tiles" (whole tiles of `tokens` each: Llama 4). Gemma 3, LLaVA and LLaVA-NeXT images keep their fixed size.
SEQUENCE_BOUND = {"qwen2_vl_vision": "tokens", "qwen2_5_vl_vision": "tokens", "qwen3_vl_vision": "tokens",
                  "pixtral": "tokens", "llama4_vision_model": "tiles"}


class VisionKept(NamedTuple):
    """What a vision-language model keeps beside its language model (ModelShape.vision)."""

    tower: Tower  # one image's
    trained: bool  # the tower and projector (else both frozen)
    input_grads: bool  # checkpointing through Transformers' gradient_checkpointing_enable (enable_input_require_grads)
    images: int  # per sample
    tokens: int  # per image
    rotary_width: int  # M-RoPE's table width (the text head_dim; 0: no M-RoPE)
    settings: str  # where the image settings came from
    masks: Masks | None = None  # Gemma 3's bidirectional image masks
    approximate: str = ""  # why the bound is only the processor class's (no preprocessor_config.json read)
    within: int = 0  # the sequence the image was already bounded by (`at`; 0: none yet)

    def at(self, s: int) -> "VisionKept":
        """One image within a sequence of s tokens: at most s tokens (SEQUENCE_BOUND "tokens": an image of fewer
        patches), or the whole tiles that fit, at least one (an upper bound: Llama 4's counts are 1 and tiles + 1);
        once bounded, a shorter s (one rank's share under context parallelism) bounds it no further."""
        bound, s = SEQUENCE_BOUND.get(self.tower.kind), self.within or s
        if bound == "tokens" and self.tokens > s:
            merge = self.tower.merge
            return self._replace(tokens=s, tower=self.tower._replace(patches=s * merge * merge), within=s)
        if bound == "tiles" and self.images * self.tokens > s:
            return self._replace(images=max(1, s // self.tokens), within=s)
        return self._replace(within=s)

    def said(self, s: int | None = None) -> str:
        """`settings`, and how a sequence of s tokens bounds the image when it does."""
        bounded = self.at(s) if s else self
        part = "(the image tokens are part of the sequence)"
        if bounded.tokens < self.tokens:
            return f"{self.settings}; at sequence length {s:,}, at most {bounded.tokens:,} {part}"
        if bounded.images < self.images:
            return f"{self.settings}; at sequence length {s:,}, at most {bounded.images} × {self.tokens:,} {part}"
        return self.settings

    def kept(self, b: int, s: int, w: int, checkpointing: bool) -> int:
        if not self.within:  # bounded by this sequence first
            return self.at(s).kept(b, s, w, checkpointing)
        rows = b * s + 2 * w * (b - 1) * s * self.rotary_width
        if self.rotary_width and checkpointing:  # M-RoPE: the layers get no position ids
            rows -= I64 * s
        if self.masks is not None:
            rows += _image_masks(self.masks, b, s, w, checkpointing)
        hooked = self.input_grads and self.tower.kind not in UNHOOKED
        if not self.trained and not (checkpointing and hooked):  # a frozen tower under no-grad inputs
            return rows
        tower, images = self.tower, b * self.images
        first = I32 * (2 if TOWERS[tower.kind][3] else 1) if checkpointing else 0  # cu_seqlens' leading 0s
        if tower.kind in ("siglip_vision_model", "clip_vision_model"):  # a trained tower's position ids (1, N), once;
            # Gemma 3's mm_soft_emb_norm's fp32 1 + weight; a trained LLaVA projector's input, sliced past CLS, is a
            # copy once the batch holds more than one image
            first = I64 * tower.patches * self.trained + F32 * tower.hidden * (tower.kind == "siglip_vision_model")
            first += self.trained * (images > 1) * (self.tokens < tower.patches) * images * w * self.tokens * \
                tower.hidden * (tower.kind == "clip_vision_model")
        if tower.kind == "pixtral":  # the block-diagonal attention mask over every image's patches in the batch
            first = w * (images * tower.patches) ** 2
        if tower.kind == "llama4_vision_model":  # Llama4VisionRotaryEmbedding.freqs_ci, complex64 (N, 1, d / 2): the
            # buffer every block's rotation (vision_apply_rotary_emb) saves, or a checkpoint input; once
            first = 8 * tower.patches * (tower.hidden // tower.heads // 2)
        return rows + first + images * tower_bytes(tower, w, checkpointing, self.trained, self.tokens)
