"""A composite's image tokens are bounded by the preprocessor_config.json its run loads (configs/processor_config.py),
found beside config.json — here the vendored Hugging Face cache (tests/data/hf_cache: the published processor
configs, tests/data/hf_cache/SOURCES.md) — and by the sequence they are part of; a processor config not found keeps
the class defaults with the figure approximate; one that sets what is not modelled leaves the peak unknown.

The Hub cases (fetched with config.json, a missing one remembered) are in tests/unit/test_hub_fetch.py."""

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem, run_zeromem_subprocess
from zeromem_lsp.configs.image_tokens import qwen_image_tokens

DATA = Path(__file__).resolve().parents[1] / "data"
CACHE = DATA / "hf_cache"
AXOLOTL_QWEN2_VL = DATA / "vision_language" / "axolotl_qwen2vl_lora_7b.yaml"  # sequence_len 8192
LLAMAFACTORY_QWEN25_VL = DATA / "vision_language" / "qwen2vl_lora_sft.yaml"  # image_max_pixels 262144
GEMMA_RECIPE = DATA / "recipes" / "axolotl" / "examples" / "gemma3" / "gemma-3-4b-qlora.yml"


@pytest.fixture
def vendored(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(CACHE))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _copy_without_processor(tmp_path: Path, repo: str, edit: str | None = None) -> Path:
    """The vendored cache's `repo` alone in a cache of its own: its preprocessor_config.json removed (edit None) or
    replaced by `edit`."""
    folder = "models--" + repo.replace("/", "--")
    shutil.copytree(CACHE / folder, tmp_path / "hub" / folder)
    for found in (tmp_path / "hub" / folder).glob("snapshots/*/preprocessor_config.json"):
        found.chmod(0o644)
        found.unlink() if edit is None else found.write_text(edit)
    return tmp_path / "hub"


def _estimate(*args: str) -> dict:
    done = run_zeromem("estimate", "--format", "json", *args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def _images(data: dict) -> str:
    return next(line for line in data["assumptions"] if line.startswith("images: "))


def test_axolotls_qwen2_vl_recipe_takes_the_published_max_pixels_capped_by_its_sequence(vendored, tmp_path,
                                                                                         monkeypatch):
    """`zeromem estimate --config` (the real entry point, a subprocess) on axolotl's Qwen2-VL LoRA example: the
    processor it loads (AutoProcessor) publishes max_pixels 12,845,056, 16,384 tokens of 28² pixels, which the
    8,192-token sequence bounds to 8,192; without the processor config the class default (1,280 tokens) was assumed:
    that figure is lower, and marked approximate, naming the file."""
    done = run_zeromem_subprocess("estimate", "--format", "json", "-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    found = json.loads(done.stdout)
    said = _images(found)
    assert said.startswith("images: the image processor's max_pixels 12,845,056 (preprocessor_config.json in the "
                           "Hugging Face cache: ")
    assert f"at most {12_845_056 // 28 ** 2:,} image tokens per image" in said
    assert "at sequence length 8,192, at most 8,192 (the image tokens are part of the sequence)" in said
    assert found["approximate"] is False and found["ignored"] == []
    monkeypatch.setenv("HF_HUB_CACHE", str(_copy_without_processor(tmp_path, "Qwen/Qwen2-VL-7B-Instruct")))
    defaults = _estimate("-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    assert "the image processor's default max_pixels 1,003,520: at most 1,280 image tokens" in _images(defaults)
    assert defaults["approximate"] is True
    [ignored] = defaults["ignored"]
    assert ignored["key"] == "preprocessor_config.json (not found)" and "class's defaults" in ignored["why"]
    assert "preprocessor_config.json" in ignored["why"] and "HF_HUB_OFFLINE" not in ignored["why"]
    assert found["activations"]["bytes"] > defaults["activations"]["bytes"]  # 8,192 image tokens, not 1,280
    assert found["peak"]["ddp"] > defaults["peak"]["ddp"]


def test_the_sequence_bounds_the_image_tokens(vendored):
    """Qwen3-VL-8B's published size.longest_edge 16,777,216 is 16,384 tokens of 32² pixels (16-pixel patches merged
    2 × 2): at a 32,768-token sequence all of them; at 4,096, at most 4,096 — and a smaller figure — as the images
    are part of the sequence."""
    step = ("--model-config", "Qwen/Qwen3-VL-8B-Instruct", "--micro-batch", "1", "-R", "8")
    long = _estimate(*step, "--sequence-length", "32768")
    said = _images(long)
    assert "the image processor's size.longest_edge 16,777,216 (preprocessor_config.json in the Hugging Face" in said
    assert f"at most {16_777_216 // 32 ** 2:,} image tokens per image" in said and "at sequence length" not in said
    short = _estimate(*step, "--sequence-length", "4096")
    assert "at sequence length 4,096, at most 4,096 (the image tokens are part of the sequence)" in _images(short)
    shorter = _estimate(*step, "--sequence-length", "2048")
    assert "at sequence length 2,048, at most 2,048" in _images(shorter)
    longer = _estimate(*step, "--sequence-length", "65536")
    assert "at sequence length" not in _images(longer)
    kept = {length: data["activations"]["embedding_bytes"] for length, data in ((2048, shorter), (4096, short),
                                                                                   (32768, long), (65536, longer))}
    # past 16,384 tokens the image no longer grows: 32,768 more text tokens add less than 2,048 more image tokens
    assert kept[65536] - kept[32768] < kept[4096] - kept[2048]


def test_llamafactorys_image_max_pixels_still_shrinks_first(vendored):
    """LLaMA-Factory's image_max_pixels (262,144) bounds an image below the processor's max_pixels (12,845,056): the
    tokens are what smart_resize gives within both, the processor's bound said beside it."""
    data = _estimate("-R", "8", "--config", str(LLAMAFACTORY_QWEN25_VL))
    said = " ".join(_images(data).split())
    tokens = qwen_image_tokens(28, (3136, 12_845_056), 262_144)
    assert f"images: LLaMA-Factory image_max_pixels = 262,144 pixels: at most {tokens:,} image tokens per image" in said
    assert "within the image processor's max_pixels 12,845,056 (preprocessor_config.json in the Hugging Face" in said
    assert not any(item["key"].startswith("preprocessor_config.json") for item in data["ignored"])


def test_gemma3s_processor_config_is_read_and_pan_and_scan_leaves_the_peak_unknown(vendored, tmp_path, monkeypatch):
    """google/gemma-3-4b-it's published processor config leaves pan-and-scan off (said, from the file); set on, its
    extra crops are not modelled: `check` gives the model state and says why the peak is unknown (ZM103
    information), never an error."""
    found = _estimate("--config", str(GEMMA_RECIPE))
    assert "do_pan_and_scan off (preprocessor_config.json in the Hugging Face cache: " in _images(found)
    text = next(CACHE.glob("models--google--gemma-3-4b-it/snapshots/*/preprocessor_config.json")).read_text()
    monkeypatch.setenv("HF_HUB_CACHE", str(_copy_without_processor(
        tmp_path, "google/gemma-3-4b-it", text.replace('"do_pan_and_scan": null', '"do_pan_and_scan": true'))))
    done = run_zeromem("check", "--format", "json", "--world-size", "1", "--gpu-memory", "24GiB", str(GEMMA_RECIPE))
    assert done.returncode == 0, done.stdout
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "ZM103" and finding["severity"] == "information"
    assert "sets do_pan_and_scan true: Gemma 3's pan-and-scan crops" in finding["message"]


@pytest.mark.parametrize("text, why", [("{not json", "is not a JSON object"),
                                       ('{"max_pixels": "large"}', "max_pixels must be a positive integer"),
                                       ('{"do_resize": false}', "sets do_resize false"),
                                       ('{"do_resize": 0}', "sets do_resize 0"),  # `if do_resize:` reads it off
                                       # smart_resize scales a 100 x 100 image up to 1,008² = 1,016,064 pixels (1,296
                                       # tokens, not max_pixels' 1,275); min above max: at least 25,510
                                       ('{"min_pixels": 1000000, "max_pixels": 1000000}', "min_pixels 1,000,000 is "
                                        "not far enough below max_pixels 1,000,000"),
                                       ('{"min_pixels": 20000000, "max_pixels": 1000000}', "may take more than"),
                                       ('{"size": {"shortest_edge": 1000000, "longest_edge": 1000000}}',
                                        "size.shortest_edge 1,000,000 is not far enough below size.longest_edge")])
def test_a_processor_config_that_cannot_be_modelled_leaves_the_peak_unknown(vendored, tmp_path, monkeypatch, text,
                                                                            why):
    monkeypatch.setenv("HF_HUB_CACHE", str(_copy_without_processor(tmp_path, "Qwen/Qwen2-VL-7B-Instruct", text)))
    data = _estimate("-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    assert data["peak"] is None and any(why in line for line in data["peak_missing"]), data["peak_missing"]


def test_a_model_folder_and_a_config_named_alone(tmp_path):
    """`--model-config` a folder: its preprocessor_config.json; a config file of another name alone: none goes with
    it, the class defaults assumed and the figure approximate (the note says to name the folder or hub id)."""
    folder = tmp_path / "qwen2-vl"
    folder.mkdir()
    shutil.copy(next(CACHE.glob("models--Qwen--Qwen2-VL-7B-Instruct/snapshots/*/config.json")), folder)
    shutil.copy(DATA / "models" / "Qwen2-VL-7B-Instruct" / "preprocessor_config.json", folder)
    step = ("--sequence-length", "32768", "--micro-batch", "1", "-R", "8")
    beside = _estimate("--model-config", str(folder), *step)
    assert f"max_pixels 12,845,056 (preprocessor_config.json beside the model's config.json: {folder}" in _images(
        beside)
    assert beside["approximate"] is False
    alone = tmp_path / "qwen2-vl.json"
    shutil.copy(folder / "config.json", alone)
    named = _estimate("--model-config", str(alone), *step)
    assert named["approximate"] is True and "1,280 image tokens" in _images(named)
    assert "a config file named alone" in named["ignored"][0]["why"]
    assert named["peak"]["zero3"] < beside["peak"]["zero3"]


def test_a_null_size_is_the_class_default_and_said_so(vendored, tmp_path, monkeypatch):
    """`"size": null` (and do_resize null) leave Qwen2VLImageProcessor its class size (its __init__ takes None as
    absent): a figure at the default max_pixels 1,003,520 (1,280 tokens), said to be the default the file leaves, not a
    value read from it."""
    monkeypatch.setenv("HF_HUB_CACHE", str(_copy_without_processor(tmp_path, "Qwen/Qwen2-VL-7B-Instruct",
                                                                    '{"size": null, "do_resize": null}')))
    data = _estimate("-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    said = " ".join(_images(data).split())
    assert data["peak"] is not None, data["peak_missing"]
    assert "the image processor's default max_pixels 1,003,520 (preprocessor_config.json in the Hugging Face" in said
    assert "sets none): at most 1,280 image tokens per image" in said
