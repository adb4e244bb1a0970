"""LLaMA-Factory's vision-language recipes (tests/data/vision_language, verbatim) with their model in a local
Hugging Face cache: the whole model counted, the parts the freeze keys freeze said, a peak for Qwen2-VL / Qwen2.5-VL /
Qwen3-VL (and the other measured composites) with the image settings it assumed — no error finding, no
traceback."""

import shutil
from pathlib import Path

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs.image_tokens import qwen_image_tokens

DATA = Path(__file__).resolve().parents[1] / "data"
RECIPES = DATA / "vision_language"
QWEN25_VL = DATA / "model_families" / "configs" / "Qwen2.5-VL-7B-Instruct.json"
QWEN3_VL = DATA / "model_families" / "configs" / "Qwen3-VL-8B-Instruct.json"


def cache(root: Path, repo_id: str, config: Path) -> Path:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "snapshots" / "c0ffee").mkdir(parents=True)
    shutil.copy(config, repo / "snapshots" / "c0ffee" / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c0ffee")
    return root


def test_check_on_the_qwen2_vl_lora_recipe_counts_whole_and_gives_a_peak_with_its_image_settings(tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache(tmp_path / "hub", "Qwen/Qwen2.5-VL-7B-Instruct", QWEN25_VL)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipe = str(RECIPES / "qwen2vl_lora_sft.yaml")
    done = run_zeromem("check", "--world-size", "8", "--gpu-memory", "80GiB", recipe)
    assert done.returncode == 0 and "Traceback" not in done.stderr + done.stdout
    assert "peak is unknown" not in done.stdout and "ZM103" not in done.stdout
    tight = run_zeromem("check", "--world-size", "8", "--gpu-memory", "16GiB", recipe)  # model state 15.7 GiB
    assert "ZM1" in tight.stdout and "peak is unknown" not in tight.stdout
    shown = run_zeromem("estimate", "-v", "--world-size", "8", "--config", recipe)
    assert shown.returncode == 0 and "8,292,166,656 frozen" in shown.stdout  # the whole model, under LoRA
    assert "parts: LLaMA-Factory's freeze keys keep LoRA off the vision tower and projector" in shown.stdout
    said = " ".join(shown.stdout.split())
    assert "images: LLaMA-Factory image_max_pixels = 262,144 pixels: at most" in said
    assert "1 image per sample; vision tower and projector frozen" in said
    assert "not modelled: image_max_pixels" not in said


def test_qwen3_vl_gets_a_peak_with_its_image_settings(tmp_path, monkeypatch):
    """The LoRA recipe on Qwen3-VL: the image tokens bounded by image_max_pixels at Qwen3-VL's 32-pixel factor
    (patch_size 16 · spatial_merge_size 2), fewer than Qwen2.5-VL's 28-pixel ones take; the tower frozen."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache(tmp_path / "hub", "Qwen/Qwen3-VL-4B-Instruct", QWEN3_VL)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = (RECIPES / "qwen2vl_lora_sft.yaml").read_text()
    recipe = tmp_path / "qwen3vl_lora_sft.yaml"
    recipe.write_text(text.replace("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-4B-Instruct"))
    done = run_zeromem("check", "--world-size", "8", "--gpu-memory", "80GiB", str(recipe))
    assert done.returncode == 0 and "Traceback" not in done.stderr + done.stdout
    assert "peak is unknown" not in done.stdout and "ZM103" not in done.stdout
    shown = run_zeromem("estimate", "-v", "--world-size", "8", "--config", str(recipe))
    said = " ".join(shown.stdout.split())
    assert shown.returncode == 0 and "images: LLaMA-Factory image_max_pixels = 262,144 pixels: at most" in said
    tokens = int(said.split("262,144 pixels: at most ")[1].split()[0].replace(",", ""))
    assert tokens == qwen_image_tokens(32, (56 * 56, 28 * 28 * 1280), 262144) < qwen_image_tokens(
        28, (56 * 56, 28 * 28 * 1280), 262144)
    assert "1 image per sample; vision tower and projector frozen" in said


def test_a_full_fine_tune_says_what_its_freeze_keys_freeze(tmp_path, monkeypatch):
    """qwen3vl_full_sft.yaml's keys (vision tower and projector frozen) on Qwen2.5-VL-7B: 7,615,616,512 trained
    (the language model), 676,550,144 frozen (the ViT and its merger) — said, not yet in the model state."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache(tmp_path / "hub", "Qwen/Qwen2.5-VL-7B-Instruct", QWEN25_VL)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text = (RECIPES / "qwen3vl_full_sft.yaml").read_text().replace("Qwen/Qwen3-VL-4B-Instruct",
                                                                    "Qwen/Qwen2.5-VL-7B-Instruct")
    recipe = tmp_path / "qwen25vl_full_sft.yaml"
    recipe.write_text(text.replace("deepspeed: examples/deepspeed/ds_z3_config.json\n", ""))
    shown = run_zeromem("estimate", "-v", "--world-size", "8", "--config", str(recipe))
    assert shown.returncode == 0
    assert ("parts: LLaMA-Factory's freeze keys freeze the vision tower and projector: 7,615,616,512 parameters "
            "trained, 676,550,144 frozen") in shown.stdout


def test_axolotls_gemma3_recipe_with_freeze_mm_modules_says_what_it_freezes(tmp_path, monkeypatch):
    """axolotl's gemma-3-4b-qlora.yml (tests/data/recipes) with `freeze_mm_modules: true` on the published composite:
    the SigLIP tower and projector (419,816,304) frozen, said beside the model state."""
    gemma = DATA / "models" / "gemma-3-4b-it" / "config.json"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache(tmp_path / "hub", "google/gemma-3-4b-it", gemma)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = DATA / "recipes" / "axolotl" / "examples" / "gemma3" / "gemma-3-4b-qlora.yml"
    recipe = tmp_path / "gemma.yml"
    recipe.write_text(source.read_text() + "freeze_mm_modules: true\n")
    shown = run_zeromem("estimate", "-v", "--config", str(recipe))
    assert shown.returncode == 0
    assert ("parts: axolotl's freeze_mm_modules freezes the vision tower and projector: 3,880,263,168 parameters "
            "trainable, 419,816,304 frozen") in shown.stdout
    plain = run_zeromem("estimate", "-v", "--config", str(source))
    assert "parts:" not in plain.stdout  # the key's default (off): nothing said
    for found in (shown, plain):  # QLoRA: the tower frozen either way, its image tokens measured
        said = " ".join(found.stdout.split())
        assert "images: Gemma 3's mm_tokens_per_image 256 per image" in said and "peak is unknown" not in said


def test_lora_by_flags_freezes_the_tower_and_gives_gemma3_a_peak():
    """`estimate --model-config` with LoRA options: the base, its vision tower included, is frozen, so Gemma 3's
    measured frozen-tower image tokens give a peak; without an adapter the model as given trains its tower, measured
    too: a peak, larger."""
    gemma = str(DATA / "models" / "gemma-3-4b-it" / "config.json")
    step = ("--world-size", "2", "--sequence-length", "2048", "--micro-batch", "1", "--precision", "bf16")
    lora = run_zeromem("estimate", "-v", "--model-config", gemma, "--lora-rank", "8", *step)
    said = " ".join(lora.stdout.split())
    assert lora.returncode == 0 and "peak is unknown" not in said + lora.stderr
    assert "images: Gemma 3's mm_tokens_per_image 256 per image" in said and "projector frozen" in said
    whole = run_zeromem("estimate", "-v", "--model-config", gemma, *step)
    said_whole = " ".join(whole.stdout.split())
    assert whole.returncode == 0 and "peak is unknown" not in said_whole + whole.stderr
    assert "images: Gemma 3's mm_tokens_per_image 256 per image" in said_whole
    assert "projector frozen" not in said_whole


def test_llama4_scout_gets_a_peak_with_its_tiles():
    """The published-shaped Llama-4-Scout composite (tests/data/model_families/configs): a peak, its image settings
    said (the processor's 16 tiles and the global one, 144 tokens each), no ZM103."""
    scout = DATA / "model_families" / "configs" / "Llama-4-Scout-17B-16E-Instruct.json"
    shown = run_zeromem("estimate", "-v", "--model-config", str(scout), "--sequence-length", "4096",
                        "--micro-batch", "1", "--gradient-checkpointing", "--world-size", "8")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr + shown.stdout
    said = " ".join(shown.stdout.split())
    assert "has the lowest peak" in said and "peak is unknown" not in said
    assert ("images: the image processor's default max_patches 16: at most 16 tiles of 336 pixels and the global "
            "tile, 17 × 144 = 2,448 image tokens per image, 1 image per sample") in said
