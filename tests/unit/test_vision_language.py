"""Vision-language models counted whole (issue 29): vision tower, projector and language model, each part named.

tests/data/model_families/counts.json is written by benchmarks/model_families/count.py from Transformers 5.24: each
composite config built by AutoModelForImageTextToText on the meta device (every named_parameters() name and shape,
the total). Checked here without torch: zeromem's total, each part's parameters (names, shapes, order) and the
language model as the rest."""

import json
from math import prod
from pathlib import Path

import pytest

from zeromem_lsp.configs.model_config import (ImageTokensUnmodelled, UnknownFamily, count_parameters, model_shape,
                                              weights_shape)
from zeromem_lsp.configs.freeze_keys import axolotl_frozen, parameters_of, trained
from zeromem_lsp.configs.vision import VISION_LANGUAGE, named_parameters, vision_parts

DATA = Path(__file__).resolve().parents[1] / "data" / "model_families"
RECORD = json.loads((DATA / "counts.json").read_text(encoding="utf-8"))
NAMES = sorted(name for name, found in RECORD["models"].items() if found["model_type"] in VISION_LANGUAGE)


def config(name: str) -> dict:
    return json.loads((DATA / "configs" / f"{name}.json").read_text(encoding="utf-8"))


def test_every_vision_language_type_has_a_real_shaped_config():
    real = {RECORD["models"][name]["model_type"] for name in NAMES if not name.startswith("tiny-")}
    assert real == set(VISION_LANGUAGE)
    assert {RECORD["models"][name]["class"] for name in NAMES} >= {
        "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
        "Gemma3ForConditionalGeneration", "LlavaForConditionalGeneration", "LlavaNextForConditionalGeneration",
        "Mistral3ForConditionalGeneration", "Llama4ForConditionalGeneration"}


@pytest.mark.parametrize("name", NAMES)
def test_the_whole_count_is_transformers(name):
    found = RECORD["models"][name]
    counted = count_parameters(config(name))
    assert (counted.total, counted.model_type) == (found["parameters"], found["model_type"])
    assert counted.total == sum(count for _, count in counted.parts)


def _language(recorded: list, vision: set[str]) -> int:
    return sum(prod(shape) for key, shape in recorded if key not in vision)


@pytest.mark.parametrize("name", NAMES)
def test_each_part_is_its_named_parameters(name):
    """The vision tower's and the projector's parameters, name and shape in registration order, are exactly the
    record's outside the language model; the language_model part is the rest (embeddings, layers, norm, an untied
    head: named_parameters lists a tied head once)."""
    found, recorded = config(name), RECORD["models"][name]["named_parameters"]
    counted = count_parameters(found)
    parts = vision_parts(found, weights_shape(found).hidden)
    mine = [[key, list(shape)] for part in parts for key, shape in named_parameters(part)]
    outside = [item for item in recorded if ".language_model." not in f".{item[0]}" and item[0] != "lm_head.weight"]
    assert mine == outside
    named = dict(counted.parts)
    for part in parts:
        assert named[part.name] == sum(prod(shape) for _, shape in named_parameters(part)), part.name
    assert named["language_model"] == _language(recorded, {key for key, _ in mine})


def test_the_parts_are_the_split_a_freeze_key_names():
    """Qwen2-VL: the ViT blocks are the vision tower, the merger the projector (LLaMA-Factory's split: projector
    visual.merger, vision tower visual.patch_embed / visual.blocks); Gemma-3 4B's SigLIP tower is 0.42B."""
    qwen = dict(count_parameters(config("Qwen2-VL-7B-Instruct")).parts)
    assert list(qwen) == ["vision_tower", "multi_modal_projector", "language_model"]
    merger = [key for key, _ in RECORD["models"]["Qwen2-VL-7B-Instruct"]["named_parameters"] if ".merger." in key]
    assert qwen["multi_modal_projector"] == sum(
        prod(shape) for key, shape in RECORD["models"]["Qwen2-VL-7B-Instruct"]["named_parameters"] if key in merger)
    gemma = dict(count_parameters(config("gemma-3-4b-it")).parts)
    assert (gemma["vision_tower"], gemma["language_model"]) == (416_866_032, 3_880_263_168)
    assert list(dict(count_parameters(config("llava-v1.6-mistral-7b-hf")).parts))[0] == "image_newline"


def test_published_sizes():
    """Model cards: Qwen2-VL-7B 8.29B, Qwen2.5-VL-7B 8.29B, Qwen3-VL-8B 8.77B, Gemma-3 4B 4.3B / 12B 12.2B,
    llava-1.5-7b 7.06B, llava-v1.6-mistral-7b 7.57B, Llama-4-Scout 109B (108.6B). Mistral-Small-3.1-24B's card says
    24.0B; Transformers 5.24 builds 23.34B from its config.json, which has no top-level tie_word_embeddings, so
    Mistral3Config's default (true) ties the 671M-parameter head to the embedding."""
    totals = {name: RECORD["models"][name]["parameters"] for name in NAMES}
    assert round(totals["Qwen2-VL-7B-Instruct"] / 1e7) == 829 and totals["Qwen2.5-VL-7B-Instruct"] == 8_292_166_656
    assert round(totals["Qwen3-VL-8B-Instruct"] / 1e7) == 877
    assert (round(totals["gemma-3-4b-it"] / 1e8), round(totals["gemma-3-12b-it"] / 1e8)) == (43, 122)
    assert (round(totals["llava-1.5-7b-hf"] / 1e7), round(totals["llava-v1.6-mistral-7b-hf"] / 1e7)) == (706, 757)
    assert round(totals["Llama-4-Scout-17B-16E-Instruct"] / 1e9) == 109
    mistral = config("Mistral-Small-3.1-24B-Instruct-2503")
    assert RECORD["models"]["Mistral-Small-3.1-24B-Instruct-2503"]["tied"] is True
    untied = count_parameters({**mistral, "tie_word_embeddings": False}).total
    assert untied - totals["Mistral-Small-3.1-24B-Instruct-2503"] == 131072 * 5120 and round(untied / 1e8) == 240


def test_vision_fields_are_read_through_attribute_map_aliases_and_defaults():
    """Qwen2VLVisionConfig.attribute_map: num_hidden_layers sets depth, num_attention_heads num_heads; an absent
    key takes the class default (tiny-qwen2-vl-defaults-vision leaves mlp_ratio, patch sizes and channels out)."""
    base = config("Qwen2-VL-7B-Instruct")
    aliased = {**base, "vision_config": {**{k: v for k, v in base["vision_config"].items() if k != "depth"},
                                         "num_hidden_layers": 16}}
    block = sum(prod(shape) for key, shape in RECORD["models"]["Qwen2-VL-7B-Instruct"]["named_parameters"]
                if key.startswith("model.visual.blocks.0."))
    assert count_parameters(base).total - count_parameters(aliased).total == 16 * block
    assert "tiny-qwen2-vl-defaults-vision" in NAMES  # its count is Transformers' (test_the_whole_count_is_transformers)


def test_a_composite_without_vision_config_builds_the_specs_default_tower():
    """LlavaConfig with no vision_config: CLIP with the spec's init_kwargs (1024 wide, 24 layers, 336 px / 14) —
    the llava-1.5 tower."""
    llava = config("llava-1.5-7b-hf")
    bare = {key: value for key, value in llava.items() if key != "vision_config"}
    assert count_parameters(bare).total == RECORD["models"]["llava-1.5-7b-hf"]["parameters"]


def test_an_unknown_vision_tower_is_refused_by_name():
    """Refused as an unknown family: where torch and Transformers are installed, the meta-device count takes it."""
    llava = config("llava-1.5-7b-hf")
    with pytest.raises(UnknownFamily, match="vision tower of model_type 'dinov2'"):
        count_parameters({**llava, "vision_config": {**llava["vision_config"], "model_type": "dinov2"}})


# their image tokens' activations: test_vision_language_activations.py; the tiny variants' towers are not as measured
# (a SigLIP pooling head on Gemma 3, a SigLIP tower and a list of feature layers on LLaVA)
MEASURED_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
AS_MEASURED = ("gemma-3-4b-it", "gemma-3-12b-it", "llava-1.5-7b-hf", "llava-v1.6-mistral-7b-hf",
               "Mistral-Small-3.1-24B-Instruct-2503", "Llama-4-Scout-17B-16E-Instruct")


@pytest.mark.parametrize("name", [name for name in NAMES if RECORD["models"][name]["model_type"] not in MEASURED_TYPES
                                  and name not in AS_MEASURED])
def test_the_peak_is_unknown_for_the_image_tokens(name):
    with pytest.raises(ImageTokensUnmodelled, match=f"the peak is unknown for model_type "
                                                   f"'{RECORD['models'][name]['model_type']}'.*image tokens"):
        model_shape(config(name))


@pytest.mark.parametrize("name", AS_MEASURED)
def test_gemma3_and_llava_get_a_shape_with_their_tower_trained(name):
    shape = model_shape(config(name))
    assert shape.vision is not None and shape.vision.trained
    # LLaVA: per crop; Mistral 3: a 1,540-pixel square image, 55 × 55 tokens of 28 × 28 pixels; Llama 4: per tile,
    # 24 × 24 patches shuffled to 12 × 12
    assert shape.vision.tokens == {"gemma3": 256, "mistral3": 55 * 55, "llama4": 144}.get(
        RECORD["models"][name]["model_type"], 576)
    # llava-1.6: the 672 × 672 pinpoint's 1 + 2·2 crops; Llama 4: 16 tiles and the global one
    assert shape.vision.images == (5 if "v1.6" in name else 17 if "Llama-4" in name else 1)


@pytest.mark.parametrize("name", [name for name in NAMES if RECORD["models"][name]["model_type"] in MEASURED_TYPES])
def test_qwen_vl_gets_a_shape_with_its_image_tokens(name):
    shape = model_shape(config(name))
    assert shape.vision is not None and shape.vision.trained  # the model as given trains its tower
    # the processor's default max_pixels 28·28·1280, one token per (patch_size · spatial_merge_size)²: 28² for
    # Qwen2-VL / Qwen2.5-VL, 32² for Qwen3-VL (its 16-pixel patches: an image of 896 × 1,120 pixels, 28 × 35 tokens)
    assert shape.vision.tokens == {"qwen3_vl": 28 * 35}.get(RECORD["models"][name]["model_type"], 1280)


# --- LLaMA-Factory's freeze keys (configs/freeze_keys.py) ---

COMBINATIONS = [{"freeze_vision_tower": v, "freeze_multi_modal_projector": p, "freeze_language_model": lang}
                for v in (True, False) for p in (True, False) for lang in (True, False)]


@pytest.mark.parametrize("name", NAMES)
def test_the_freeze_keys_split_the_config_as_they_split_transformers_names(name):
    """Every combination of the three keys: what zeromem freezes from the config (vision rows by name, the language
    model as one entry) equals what LLaMA-Factory's substring rule freezes over Transformers' own parameter names."""
    model_type = RECORD["models"][name]["model_type"]
    recorded = [(key, prod(shape)) for key, shape in RECORD["models"][name]["named_parameters"]]
    ours = parameters_of(config(name))
    for keys in COMBINATIONS:
        assert trained(model_type, keys, ours) == trained(model_type, keys, recorded), keys


def test_the_freeze_keys_defaults_train_the_language_model_alone():
    """FinetuningArguments: freeze_vision_tower and freeze_multi_modal_projector default true, freeze_language_model
    false. Qwen3-VL's deepstack mergers are vision-tower keys in COMPOSITE_MODELS, not projector ones."""
    found = trained("qwen2_vl", {}, parameters_of(config("Qwen2-VL-7B-Instruct")))
    language = dict(count_parameters(config("Qwen2-VL-7B-Instruct")).parts)["language_model"]
    assert (found.trained, found.frozen_parts) == (language, ("vision", "projector"))
    assert all(not written for _, _, written in found.keys)
    qwen3 = parameters_of(config("Qwen3-VL-8B-Instruct"))
    projector_only = trained("qwen3_vl", {"freeze_multi_modal_projector": False}, qwen3)
    merger = sum(count for key, count in qwen3 if key.startswith("model.visual.merger."))
    assert projector_only.trained == dict(count_parameters(config("Qwen3-VL-8B-Instruct")).parts)[
        "language_model"] + merger
    newline = trained("llava_next", {"freeze_language_model": True}, parameters_of(config("llava-v1.6-mistral-7b-hf")))
    assert newline.trained == 4096  # model.image_newline: under no key, never frozen by them


@pytest.mark.parametrize("name", NAMES)
def test_axolotls_freeze_mm_modules_freezes_tower_and_projector(name):
    """utils/freeze.py freezes a parameter with a name component among _MM_MODULE_PREFIXES: over Transformers' own
    names that is exactly zeromem's vision tower and projector parts (and never the language model)."""
    recorded = [(key, prod(shape)) for key, shape in RECORD["models"][name]["named_parameters"]]
    parts = dict(count_parameters(config(name)).parts)
    assert axolotl_frozen(recorded) == axolotl_frozen(parameters_of(config(name))) == \
        parts["vision_tower"] + parts["multi_modal_projector"]
