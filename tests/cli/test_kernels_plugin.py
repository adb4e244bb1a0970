"""axolotl's kernels plugin pins an MoE model's experts to eager when `experts_implementation` is unset
(integrations/kernels/args.py `check_experts_implementation`): the activation model is measured on grouped_mm, so
the figure says it does not model that, at `plugins`, for MoE models only, through `zeromem estimate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

DATA = Path(__file__).resolve().parents[1] / "data"
MOE = DATA / "recipes/axolotl/examples/expert_parallel/qwen3_30ba3b_ep_fft_4gpu.yaml"
DENSE = DATA / "recipes/axolotl/examples/llama-3/fft-8b.yaml"
PLUGIN = "axolotl.integrations.kernels.KernelsPlugin"


@pytest.fixture(autouse=True)
def hub_cache(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache"))


def recipe(tmp_path: Path, source: Path, extra: str) -> Path:
    lines = [line for line in source.read_text(encoding="utf-8").splitlines()
             if not line.startswith(("experts_implementation", "expert_parallel_size", "plugins", "  - axolotl."))]
    path = tmp_path / source.name
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return path


def ignored(path: Path) -> list[dict]:
    done = run_zeromem("estimate", "--config", str(path), "--offline", "--format", "json", "--world-size", "4")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["ignored"]


def test_the_kernels_plugin_without_a_kernel_makes_moe_experts_eager(tmp_path):
    found = ignored(recipe(tmp_path, MOE, f"plugins:\n  - {PLUGIN}\n"))
    assert [item["key"] for item in found if "eager" in item["why"]] == ["plugins"], found
    # the measured path asked for, or a kernel of the plugin's: nothing pinned to eager
    for extra in ("experts_implementation: grouped_mm\n", "use_scattermoe: true\n"):
        found = ignored(recipe(tmp_path, MOE, f"plugins:\n  - {PLUGIN}\n{extra}"))
        assert not [item for item in found if item["key"] == "plugins"], found
    assert not [item for item in ignored(recipe(tmp_path, MOE, "")) if item["key"] == "plugins"]


def test_a_dense_model_is_not_affected(tmp_path):
    found = ignored(recipe(tmp_path, DENSE, f"plugins:\n  - {PLUGIN}\n"))
    assert not [item for item in found if item["key"] == "plugins"], found
