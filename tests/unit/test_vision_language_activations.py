"""Image tokens' activations of Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Gemma 3 / LLaVA / LLaVA-NeXT / Mistral 3 / Llama 4
(issue 29):
configs/image_tokens.py against the CPU measurements of the real Transformers 5.24 code
(benchmarks/vision_language/measure.py → tests/data/vision_language/measured.json): the language model at T tokens
with the image tokens among them, the vision tower and projector frozen (LLaMA-Factory's defaults) or trained, with
and without checkpointing."""

import json
import math
from pathlib import Path

import pytest

from zeromem_lsp.configs.freeze_keys import recipe_vision
from zeromem_lsp.configs.image_tokens import (LLAVA_NEXT_PINPOINTS, ImageSettings, anyres_tokens, llama4_tiles,
                                              pixtral_grid, qwen_image_tokens, smart_resize)
from zeromem_lsp.configs.model_config import UnsupportedModel, model_shape
from zeromem_lsp.configs.vision import MEASURED
from zeromem_lsp.memory.activations import estimate_activations

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "vision_language" / "measured.json").read_text(
    encoding="utf-8"))
DTYPES = {"bfloat16": "bf16", "float32": "fp32"}


def shape_of(case: dict, layers: int):
    """The case's shape, its one image per row the measured grid (t, h, w) and its tower trained or frozen."""
    text = {**case["text_config"], "num_hidden_layers": layers}
    if case["model_type"] == "gemma3":  # one sliding and one full layer at 2 layers, as measured
        text["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    shape = model_shape({"model_type": case["model_type"], "vision_config": case["vision_config"], **case["tokens"],
                         "text_config": text}, ImageSettings(case["vision_trained"], case["input_grads"]))
    if case["model_type"] == "mistral3":  # the measured image (multiples of 28 pixels), not the bound
        height, width = case["image_size"]
        patches = (height // case["vision_config"]["patch_size"]) * (width // case["vision_config"]["patch_size"])
        vision = shape.vision
        return shape._replace(vision=vision._replace(tower=vision.tower._replace(patches=patches),
                                                     tokens=patches // 4))
    if case["model_type"] == "llama4":  # the measured canvas of rows × columns tiles and its global tile, not the
        # processor's 16-tile bound
        rows, columns = case["tiles"]
        return shape._replace(vision=shape.vision._replace(images=rows * columns + (rows * columns > 1)))
    if "grid" not in case:  # Gemma 3, LLaVA (-NeXT): the tokens per image are the config's
        return shape
    t, h, w = case["grid"]
    merge = case["vision_config"]["spatial_merge_size"]
    vision = shape.vision
    return shape._replace(vision=vision._replace(tower=vision.tower._replace(patches=t * h * w),
                                                 trained=case["vision_trained"], input_grads=case["input_grads"],
                                                 tokens=t * h * w // merge ** 2))


@pytest.mark.parametrize("case", RECORD["cases"], ids=lambda case: case["id"])
@pytest.mark.parametrize("layers", (1, 2))
def test_the_estimate_is_within_two_percent_of_the_measurement(case, layers):
    found = estimate_activations(shape_of(case, layers), case["sequence_length"], case["micro_batch"],
                                 DTYPES[case["dtype"]], case["gradient_checkpointing"], case["attention"]).total
    measured = case["saved_bytes"][str(layers)]
    assert abs(found - measured) <= 0.02 * measured, (found, measured)


def test_the_cases_cover_frozen_and_trained_towers_and_checkpointing():
    cases = RECORD["cases"]
    assert {case["model_type"] for case in cases} == set(MEASURED)
    for family, states in MEASURED.items():
        found = {(case["vision_trained"], case["gradient_checkpointing"], case["input_grads"]) for case in cases
                 if case["model_type"] == family}
        assert found >= {(trained, checkpointing, True) for trained in states for checkpointing in (True, False)}
        assert (False, True, False) in found  # LLaMA-Factory's checkpointing: no input-grad hook
    assert {case["micro_batch"] for case in cases} >= {1, 2} and {case["dtype"] for case in cases} == set(DTYPES)


def test_a_trained_tower_keeps_more_than_a_frozen_one():
    case = next(case for case in RECORD["cases"] if case["vision_trained"] and not case["gradient_checkpointing"])
    assert case["model_type"] != "gemma3"
    frozen = next(other for other in RECORD["cases"] if other["id"].split("-")[0] == case["id"].split("-")[0] and
                  not other["vision_trained"] and other["micro_batch"] == case["micro_batch"] and
                  other["dtype"] == case["dtype"] and not other["gradient_checkpointing"])
    assert case["saved_bytes"]["1"] > frozen["saved_bytes"]["1"]  # the measurement itself


def brute_force(max_pixels: int, factor: int, low: int, high: int) -> int:
    """Every image shape within max_pixels (h ≤ w, the aspect within 200), through smart_resize."""
    best = 0
    for h in range(1, math.isqrt(max_pixels) + 1):
        for w in range(h, min(max_pixels // h, 200 * h) + 1):
            rows, columns = smart_resize(h, w, factor, low, high)
            best = max(best, rows * columns // factor ** 2)
    return best


@pytest.mark.parametrize("factor", (28, 32))  # Qwen2-VL / Qwen2.5-VL's 14-pixel patches, Qwen3-VL's 16, merged 2 × 2
@pytest.mark.parametrize("pixels", (64 * 64, 150 * 150))
def test_the_most_image_tokens_under_a_pixel_budget(pixels, factor):
    assert qwen_image_tokens(factor, (56 * 56, 28 * 28 * 1280), pixels) == brute_force(pixels, factor, 56 * 56,
                                                                                      28 * 28 * 1280)


def test_without_a_recipe_budget_the_processor_bounds_an_image():
    assert qwen_image_tokens(28, (56 * 56, 28 * 28 * 1280)) == 1280
    assert qwen_image_tokens(28, (56 * 56, 28 * 28 * 1280), 10 ** 8) == 1280  # smart_resize's own max_pixels


def test_llamafactory_defaults_freeze_the_tower_and_bound_the_image():
    case = RECORD["cases"][0]
    config = {"model_type": case["model_type"], "vision_config": case["vision_config"],
              "text_config": case["text_config"]}
    full, _ = recipe_vision(config, {"finetuning_type": "full"}, "llamafactory")
    assert not full.vision.trained and not full.vision.input_grads and "768·768" in full.vision.settings
    assert full.vision.tokens == qwen_image_tokens(28, (56 * 56, 28 * 28 * 1280), 768 * 768)
    trained, _ = recipe_vision(config, {"finetuning_type": "full", "freeze_vision_tower": False,
                                "freeze_multi_modal_projector": False, "image_max_pixels": 448 * 448}, "llamafactory")
    assert trained.vision.trained and trained.vision.tokens < full.vision.tokens
    mixed, why = recipe_vision(config, {"finetuning_type": "full", "freeze_vision_tower": False}, "llamafactory")
    assert mixed is None and "not measured" in why


def test_axolotl_keeps_the_processor_bound_and_checkpoints_through_transformers():
    case = RECORD["cases"][0]
    config = {"model_type": case["model_type"], "vision_config": case["vision_config"],
              "text_config": case["text_config"]}
    lora, _ = recipe_vision(config, {"adapter": "lora"}, "axolotl")
    assert not lora.vision.trained and lora.vision.input_grads  # Transformers' enable_input_require_grads hook
    assert lora.vision.tokens == qwen_image_tokens(28, (56 * 56, 28 * 28 * 1280))
    frozen, _ = recipe_vision(config, {"freeze_mm_modules": True}, "axolotl")
    full, _ = recipe_vision(config, {}, "axolotl")
    assert not frozen.vision.trained and full.vision.trained
    b, s = 2, 4096  # a frozen tower keeps nothing without checkpointing, its blocks' inputs with it
    assert frozen.vision.kept(b, s, 2, False) < frozen.vision.kept(b, s, 2, True) < full.vision.kept(b, s, 2, True)
    assert full.vision.kept(b, s, 2, True) < full.vision.kept(b, s, 2, False)


def test_gemma3_and_llava_keep_more_with_their_tower_trained():
    """LLaMA-Factory's freeze keys set off train the SigLIP / CLIP tower and projector: a peak (measured both ways),
    above the frozen tower's by at least the trained blocks' inputs."""
    for family in ("gemma3", "llava"):
        case = next(case for case in RECORD["cases"] if case["model_type"] == family)
        config = {"model_type": family, "vision_config": case["vision_config"], "text_config": case["text_config"],
                  **case["tokens"]}
        frozen, _ = recipe_vision(config, {"finetuning_type": "full"}, "llamafactory")
        trained, why = recipe_vision(config, {"finetuning_type": "full", "freeze_vision_tower": False,
                                              "freeze_multi_modal_projector": False}, "llamafactory")
        assert why is None and trained.vision.trained and not frozen.vision.trained
        tower = trained.vision.tower
        for checkpointing in (False, True):
            gained = trained.vision.kept(2, 512, 2, checkpointing) - frozen.vision.kept(2, 512, 2, checkpointing)
            assert gained >= 2 * tower.depth * 2 * tower.patches * tower.hidden
        assert model_shape(config).vision.trained  # the model as given trains its tower


def test_llava_takes_its_patches_as_tokens_and_keeps_cls_only_under_the_full_strategy():
    llava = next(case for case in RECORD["cases"] if case["model_type"] == "llava")
    config = {"model_type": "llava", "vision_config": llava["vision_config"], "text_config": llava["text_config"],
              **llava["tokens"]}
    patches = (llava["vision_config"]["image_size"] // llava["vision_config"]["patch_size"]) ** 2
    shape, _ = recipe_vision(config, {"finetuning_type": "full"}, "llamafactory")
    assert shape.vision.tokens == patches
    full, _ = recipe_vision({**config, "vision_feature_select_strategy": "full"}, {"finetuning_type": "full"},
                            "llamafactory")
    assert full.vision.tokens == patches + 1


def processor_tokens(height: int, width: int, pinpoints: list, size: int, per_side: int) -> int:
    """LlavaNextProcessor._get_number_of_features (default strategy) with image_processing_utils'
    select_best_resolution, written out from Transformers 5.24's text."""
    best, effective_best, wasted_best = None, 0, float("inf")
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        if effective > effective_best or (effective == effective_best and pin_w * pin_h - effective < wasted_best):
            best, effective_best, wasted_best = (pin_h, pin_w), effective, pin_w * pin_h - effective
    rows, columns = per_side * (best[0] // size), per_side * (best[1] // size)
    if width / height > columns / rows:
        rows -= (rows - int(round(height * (columns / width), 7))) // 2 * 2
    else:
        columns -= (columns - int(round(width * (rows / height), 7))) // 2 * 2
    return rows * columns + rows + per_side * per_side


def test_llava_next_takes_the_most_tokens_an_image_can():
    """Over every image from 16 to 1,100 pixels a side (steps of 12), llava-1.6's pinpoints give at most what
    anyres_tokens says (an image of the 672 × 672 pinpoint: 576 + 48·48 + 48 = 2,928), and that image reaches it."""
    size, per_side = 336, 24
    found = max(processor_tokens(h, w, LLAVA_NEXT_PINPOINTS, size, per_side) for h in range(16, 1100, 12)
                for w in range(16, 1100, 12))
    most, crops, pinpoint = anyres_tokens(LLAVA_NEXT_PINPOINTS, size, per_side, per_side * per_side)
    assert found <= most == processor_tokens(*pinpoint, LLAVA_NEXT_PINPOINTS, size, per_side)
    assert (most, crops) == (2928, 5)


def test_llava_next_runs_its_crops_through_the_tower():
    case = next(case for case in RECORD["cases"] if case["model_type"] == "llava_next")
    config = {"model_type": "llava_next", "vision_config": case["vision_config"], "text_config": case["text_config"],
              **case["tokens"]}
    shape, _ = recipe_vision(config, {"finetuning_type": "full"}, "llamafactory")
    assert shape.vision.images == 5 and "88" in shape.vision.settings  # the measured 112 × 112 image: 1 + 2·2 crops
    listed, why = recipe_vision({**config, "vision_feature_layer": [-2, -1]}, {"finetuning_type": "full"},
                                "llamafactory")
    assert listed is None and "one feature layer" in why


def pixtral_tokens(height: int, width: int, longest: int, step: int) -> int:
    """PixtralProcessor's image tokens (rows · columns, the breaks aside) after image_processing_pixtral's
    get_resize_output_image_size, written out from Transformers 5.24's text."""
    ratio = max(height / longest, width / longest)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return ((height - 1) // step + 1) * ((width - 1) // step + 1)


@pytest.mark.parametrize("budget", (300 * 300, 768 * 768, None))
def test_mistral3_takes_the_most_tokens_an_image_can(budget):
    """Every image within the budget (and up to 2,000 pixels a side, steps of 7) takes at most pixtral_grid's
    rows × columns, and an image reaches it; Mistral-Small-3.1's 1,540-pixel edge alone gives 55 × 55."""
    longest, step = 1540, 28
    rows, columns = pixtral_grid(step, longest, budget)
    found = max(pixtral_tokens(h, w, longest, step) for h in range(7, 2000, 7) for w in range(7, 2000, 7)
                if budget is None or h * w <= budget)
    assert found <= rows * columns and (budget is not None or (rows, columns) == (55, 55))
    assert budget is None or any(pixtral_tokens(h, w, longest, step) == rows * columns for h in range(1, 800)
                                 for w in [min(budget // h, longest)] if w >= 1)


@pytest.mark.parametrize("pinpoints", ([[336]], [[336, "672"]], "672x672", [[20, 672]]))
def test_a_malformed_pinpoint_list_is_named_not_a_traceback(pinpoints):
    """(a side below the tower's image_size, 56 here, would give no grid row)"""
    case = next(case for case in RECORD["cases"] if case["model_type"] == "llava_next")
    config = {"model_type": "llava_next", "vision_config": case["vision_config"], "text_config": case["text_config"],
              **case["tokens"], "image_grid_pinpoints": pinpoints}
    with pytest.raises(UnsupportedModel, match="config.json image_grid_pinpoints must be a list of"):
        model_shape(config)


def measured(case_id: str) -> dict:
    return next(case for case in RECORD["cases"] if case["id"] == case_id)


def test_a_frozen_qwen3_vl_tower_keeps_nothing_even_under_transformers_checkpointing():
    """Qwen3VLVisionModel names no input embeddings, so enable_input_require_grads hooks nothing in it: its frozen
    blocks run on inputs without grad and their checkpoints keep nothing — measured the same as LLaMA-Factory's
    checkpointing (no hook at all), where a frozen Qwen2-VL tower keeps its blocks' inputs and more."""
    for family, keeps in (("qwen3_vl", False), ("qwen2_vl", True)):
        hooked, plain = measured(f"{family}-7"), measured(f"{family}-9")  # the same case but input_grads
        assert hooked["input_grads"] and not plain["input_grads"]
        assert (hooked["saved_bytes"] != plain["saved_bytes"]) is keeps
        shapes = [shape_of(case, 1).vision for case in (hooked, plain)]
        assert (shapes[0].kept(2, 96, 2, True) != shapes[1].kept(2, 96, 2, True)) is keeps


def test_each_qwen3_vl_deepstack_merger_keeps_its_norm_statistics_and_three_tensors():
    """A trained tower with one deepstack merger against the same without (b = 2 images, measured): per image the
    LayerNorm's statistics over M rows of h·merge² (w each: mean, rstd), its output, linear_fc1's output and the
    GELU's output (w·N·h each); its input is the next block's, already kept."""
    stacked, bare = measured("qwen3_vl-4"), measured("qwen3_vl-10")
    assert stacked["vision_config"]["deepstack_visual_indexes"] == [0] and not bare["vision_config"][
        "deepstack_visual_indexes"]
    t, h, w = stacked["grid"]
    patches, width, dtype = t * h * w, stacked["vision_config"]["hidden_size"], 2
    per_image = 2 * dtype * patches // 4 + 3 * dtype * patches * width
    for layers in ("1", "2"):
        assert stacked["saved_bytes"][layers] - bare["saved_bytes"][layers] == 2 * per_image
def llama4_processor_tiles(height: int, width: int, tile: int, max_patches: int) -> int:
    """Llama4ImageProcessor._preprocess's tiles for one image (find_supported_resolutions, get_best_fit, the tiles
    of the canvas), written out from Transformers 5.24's text."""
    canvases = []
    for chunks in range(max_patches, 0, -1):
        canvases += [(tile * factor, tile * (chunks // factor)) for factor in range(1, chunks + 1)
                     if chunks % factor == 0]
    scales = [min(canvas_w / width, canvas_h / height) for canvas_h, canvas_w in canvases]
    upscaling = [scale for scale in scales if scale >= 1]
    selected = min(upscaling) if upscaling else max(scale for scale in scales if scale < 1)
    chosen = [canvas for canvas, scale in zip(canvases, scales) if scale == selected]
    canvas_h, canvas_w = min(chosen, key=lambda canvas: canvas[0] * canvas[1])
    return (canvas_h // tile) * (canvas_w // tile)


@pytest.mark.parametrize("budget", (30, 100, 250, 420, 448, None))
def test_llama4_takes_the_most_tiles_an_image_can(budget):
    """Every image within the budget (without one, up to 6,000 pixels a side) is cut into at most llama4_tiles'
    tiles, and an image reaches it (2, 4, 9, 15 tiles of 28 pixels under 30 to 420 pixels); from max_patches · tile
    pixels on (and without a budget) the processor's max_patches, 16: a 1 × 16 canvas for an image one pixel high,
    which the default image_max_pixels 768·768 allows."""
    tile = 28
    most = llama4_tiles(tile, 16, budget)
    shapes = [(h, w) for h in range(1, 6000, 37) for w in range(1, 6000, 37) if budget is None or h * w <= budget]
    if budget is not None:  # every image within it
        shapes += [(h, w) for h in range(1, budget + 1) for w in range(1, budget // h + 1)]
    found = max(llama4_processor_tiles(h, w, tile, 16) for h, w in shapes)
    assert found == most and (most == 16 or budget is not None and budget < 16 * tile)
    assert llama4_tiles(336) == llama4_tiles(336, 16, 768 * 768) == 16 == llama4_processor_tiles(1, 5377, 336, 16)


def test_llama4_runs_every_tile_and_the_global_one_through_the_tower():
    """Llama-4-Scout (vision_config 336 px / 14, pixel_shuffle_ratio 0.5): 576 patches per tile shuffled to 144
    tokens; the processor's 16 tiles and the global tile, 2,448 image tokens per image; the config as given trains its
    tower, LLaMA-Factory's defaults freeze it (its image_max_pixels still allows 16 tiles); one tile takes no global."""
    config = json.loads((Path(__file__).resolve().parents[1] / "data" / "model_families" / "configs" /
                         "Llama-4-Scout-17B-16E-Instruct.json").read_text(encoding="utf-8"))
    vision = model_shape(config).vision
    assert (vision.images, vision.tokens, vision.tower.patches, vision.trained) == (17, 144, 577, True)
    assert "17 × 144 = 2,448 image tokens per image" in vision.settings
    frozen, _ = recipe_vision(config, {"finetuning_type": "full"}, "llamafactory")
    assert not frozen.vision.trained and frozen.vision.images == 17 and "768·768" in frozen.vision.settings
    one, _ = recipe_vision(config, {"finetuning_type": "full", "image_max_pixels": 300}, "llamafactory")
    assert one.vision.images == 1 and "at most 1 tile of 336 pixels, 1 × 144 = 144" in one.vision.settings
    # a frozen tower keeps nothing without checkpointing; with Transformers' input-grad hook at least its blocks'
    # inputs
    assert frozen.vision.kept(1, 4096, 2, False) == 4096  # the image-token mask alone
    assert frozen.vision._replace(input_grads=True).kept(1, 4096, 2, True) > 17 * 34 * 2 * 577 * 1408
