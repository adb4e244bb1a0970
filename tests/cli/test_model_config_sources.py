"""`--model-config` and `{"from_config": ...}` take a config.json, a model directory or a hub id found in the
local Hugging Face cache (HF_HUB_CACHE / HF_HOME), through `zeromem estimate` and `zeromem check`."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

GEMMA3_4B = Path(__file__).resolve().parents[1] / "data" / "models" / "gemma-3-4b-it" / "config.json"
GEMMA3_4B_PARAMETERS = 4_300_079_472  # Transformers 5.24.0 builds it whole: vision tower, projector, language model
REPO = "google/gemma-3-4b-it"


def hub_cache(root: Path) -> Path:
    """A Hugging Face hub cache holding google/gemma-3-4b-it's config.json at revision main, laid out as
    huggingface_hub writes it: the file is a symlink from the snapshot into blobs/."""
    snapshot = root / "models--google--gemma-3-4b-it" / "snapshots" / "4cf7f3e8"
    snapshot.mkdir(parents=True)
    blobs = root / "models--google--gemma-3-4b-it" / "blobs"
    blobs.mkdir()
    shutil.copy(GEMMA3_4B, blobs / "a1b2c3")
    (snapshot / "config.json").symlink_to(Path("..", "..", "blobs", "a1b2c3"))
    (root / "models--google--gemma-3-4b-it" / "refs").mkdir()
    (root / "models--google--gemma-3-4b-it" / "refs" / "main").write_text("4cf7f3e8")
    return root


def estimate_json(*args: str, cwd: Path | None = None) -> dict:
    done = run_zeromem("estimate", "-v", "-R", "8", "--format", "json", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_model_directory(tmp_path):
    shutil.copytree(GEMMA3_4B.parent, tmp_path / "gemma")
    data = estimate_json("--model-config", str(tmp_path / "gemma"))
    assert data["inputs"]["parameters"] == GEMMA3_4B_PARAMETERS


def test_a_hub_id_in_the_cache_named_by_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tmp_path / "cache")))
    data = estimate_json("--model-config", REPO, cwd=tmp_path)
    assert data["inputs"]["parameters"] == GEMMA3_4B_PARAMETERS
    [note] = [line for line in data["assumptions"] if "counted from" in line]
    assert "snapshots/4cf7f3e8/config.json" in note and "Transformers 5.24.0 defaults" in note


def test_a_hub_id_under_hf_home_through_the_real_entry_point(tmp_path):
    hub_cache(tmp_path / "hf" / "hub")
    environ = {key: value for key, value in os.environ.items()
               if key not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")}
    done = subprocess.run([sys.executable, "-m", "zeromem_lsp", "estimate", "-v", "--model-config", REPO, "-R", "8"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**environ, "HF_HOME": str(tmp_path / "hf")})
    assert done.returncode == 0, done.stderr
    assert f"({GEMMA3_4B_PARAMETERS:,})" in done.stdout


def test_a_model_not_found_is_exit_2_naming_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    done = run_zeromem("estimate", "-v", "--model-config", "org/absent", "-R", "8", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{tmp_path / 'org' / 'absent'} (file not found)" in done.stderr
    assert f"{tmp_path / 'cache' / 'models--org--absent'} (not in the Hugging Face cache)" in done.stderr


DS_CONFIG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
             "zero_optimization": {"stage": 2}}


def zero2_bytes(parameters: int, ranks: int = 8) -> int:
    return 2 * parameters + -(-14 * parameters // ranks)


def test_check_follows_a_hub_id_in_the_zeromem_block(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tmp_path / "cache")))
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({**DS_CONFIG, "zeromem": {"parameters": {"from_config": REPO}, "world_size": 8,
                                                           "gpu_memory": "10GB"}}))
    done = run_zeromem("check", "--format", "json", str(config))
    assert "Traceback" not in done.stderr
    [hit] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM101"]
    assert f"({zero2_bytes(GEMMA3_4B_PARAMETERS):,} B)" in hit["message"]


def test_check_of_a_missing_hub_id_is_zm104_naming_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({**DS_CONFIG, "zeromem": {"parameters": {"from_config": "org/absent"}}}))
    done = run_zeromem("check", "--format", "json", str(config))
    [hit] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert "models--org--absent (not in the Hugging Face cache)" in hit["message"]
    assert f"{tmp_path / 'org' / 'absent'} (file not found)" in hit["message"]


def test_project_settings_may_name_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tmp_path / "cache")))
    (tmp_path / "zeromem.toml").write_text(f'gpu-memory = "10GB"\nworld-size = 8\n'
                                           f'parameters = {{from_config = "{REPO}"}}\n')
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "ds_config.json"
    config.write_text(json.dumps(DS_CONFIG))
    done = run_zeromem("check", "--format", "json", str(config))
    [hit] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM101"]
    assert f"({zero2_bytes(GEMMA3_4B_PARAMETERS):,} B)" in hit["message"]


@pytest.mark.parametrize("name", ["gemma", "gemma/config.json"])
def test_from_config_takes_a_directory_or_its_file(tmp_path, name):
    shutil.copytree(GEMMA3_4B.parent, tmp_path / "gemma")
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({**DS_CONFIG, "zeromem": {"parameters": {"from_config": name}, "world_size": 8,
                                                           "gpu_memory": "10GB"}}))
    done = run_zeromem("check", "--format", "json", str(config))
    [hit] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM101"]
    assert f"({zero2_bytes(GEMMA3_4B_PARAMETERS):,} B)" in hit["message"]


def test_a_recipes_model_revision_is_read_from_the_cache_at_that_revision(tmp_path, monkeypatch):
    """Issue 26: `model_revision` (a branch, tag or commit hash) picks the snapshot, as huggingface_hub's
    try_to_load_from_cache does; a revision the cache lacks names the snapshot looked for and the refs there are."""
    repo = tmp_path / "hub" / "models--org--m"
    shapes = {"a" * 40: 2, "b" * 40: 4, "c" * 40: 8}  # layers per snapshot
    for commit, layers in shapes.items():
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text(json.dumps({
            "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
            "num_hidden_layers": layers, "vocab_size": 1000}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    (repo / "refs" / "v2").write_text("b" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    counts = {}
    for revision in (None, "v2", "c" * 40):
        text = "model_name_or_path: org/m\nuse_peft: false\n" + (f"model_revision: {revision}\n" if revision else "")
        (tmp_path / "r.yaml").write_text(text)
        done = run_zeromem("estimate", "--config", str(tmp_path / "r.yaml"), "-R", "1", "--format", "json")
        assert done.returncode == 0, done.stderr
        counts[revision] = json.loads(done.stdout)["inputs"]["parameters"]
    assert counts[None] < counts["v2"] < counts["c" * 40]
    (tmp_path / "r.yaml").write_text("model_name_or_path: org/m\nuse_peft: false\nmodel_revision: v9\n")
    done = run_zeromem("check", "--format", "json", "-q", str(tmp_path / "r.yaml"))
    (unread,) = [item for item in json.loads(done.stdout)["findings"] if item["code"] == "ZM108"]
    assert "no snapshot of revision v9; refs in the cache: main, v2" in unread["message"]
