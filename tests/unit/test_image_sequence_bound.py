"""No image takes more tokens than the sequence it is part of (configs/image_tokens.py `VisionKept.at`): Qwen's and
Pixtral's images have any token count up to their bound, Llama 4's whole tiles; once bounded by the whole sequence, a
rank's share of it (context parallelism) bounds it no further; a fixed-size image (Gemma 3) is left as it is."""

import json
from pathlib import Path

from zeromem_lsp.configs.image_tokens import ImageSettings, Processor
from zeromem_lsp.configs.model_config import model_shape

DATA = Path(__file__).resolve().parents[1] / "data"
CONFIGS = DATA / "model_families" / "configs"


def _vision(name: str, processor: Processor | None = None):
    config = json.loads((CONFIGS / name).read_text())
    vision = model_shape(config, ImageSettings(processor=processor)).vision
    assert vision is not None
    return vision


def test_llama4_keeps_the_whole_tiles_that_fit():
    vision = _vision("Llama-4-Scout-17B-16E-Instruct.json")
    assert (vision.images, vision.tokens) == (17, 144)  # 16 tiles and the global one
    assert vision.at(4096).images == 17 and vision.said(4096) == vision.settings
    assert vision.at(1000).images == 1000 // 144
    assert "at sequence length 1,000, at most 6 × 144" in vision.said(1000)
    assert vision.kept(1, 1000, 2, False) < vision.kept(1, 4096, 2, False)
    assert vision.at(100).images == 1  # an image needs one tile at least


def test_qwen_is_bounded_once_by_the_whole_sequence():
    published = Processor({"max_pixels": 12845056, "min_pixels": 3136, "patch_size": 14, "merge_size": 2}, "here")
    vision = _vision("Qwen2-VL-7B-Instruct.json", published)
    assert vision.tokens == 16384 and vision.tower.patches == 16384 * 4
    whole = vision.at(8192)
    assert (whole.tokens, whole.tower.patches) == (8192, 8192 * 4)
    assert whole.at(2048).tokens == 8192  # a rank's 2,048 of the 8,192 (context parallelism 4): the image is whole
    assert vision.kept(1, 8192, 2, True) == whole.kept(1, 8192, 2, True) < vision.at(16384).kept(1, 8192, 2, True)


def test_a_processor_whose_grid_is_not_the_towers_is_not_modelled():
    import pytest

    from zeromem_lsp.configs.model_config import ImageTokensUnmodelled

    config = json.loads((CONFIGS / "Qwen2-VL-7B-Instruct.json").read_text())
    with pytest.raises(ImageTokensUnmodelled, match="patch_size 16 · merge_size 2 is not the vision tower's"):
        model_shape(config, ImageSettings(processor=Processor({"patch_size": 16, "merge_size": 2}, "here")))
