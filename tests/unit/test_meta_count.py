"""Any other architecture (configs/meta_count.py): counted by Transformers on the meta device in a subprocess, when
torch and Transformers are importable. CI has neither: a fake pair of modules stands in (they count what the config
declares), and one test runs only where the real Transformers is installed."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.analysis import analyse
from zeromem_lsp.configs import meta_count
from zeromem_lsp.project import file_loader

OTHER = {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
         "fake_parameters": 123_456_789}
RECIPE = "base_model: ./other\nsequence_len: 1024\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\n" \
         "learning_rate: 0.0001\nbf16: true\n"

FAKE_TORCH = '''
import contextlib
def device(name):
    assert name == "meta"
    return contextlib.nullcontext()
'''
FAKE_TRANSFORMERS = '''
__version__ = "0.0-fake"
import os
if os.environ.get("FAKE_TRANSFORMERS_CRASH"):
    raise SystemExit("boom")
class _Config(dict):
    pass
class AutoConfig:
    @staticmethod
    def for_model(model_type, **values):
        if model_type == "remote_only":
            raise ValueError("Unrecognized model identifier: remote_only")
        return _Config(values, model_type=model_type)
class _Parameter:
    def __init__(self, n):
        self.n = n
    def numel(self):
        return self.n
class _Model:
    def __init__(self, config):
        self.config = config
    def parameters(self):
        return iter([_Parameter(self.config["fake_parameters"] - 1), _Parameter(1)])
class FakeForCausalLM(_Model):
    pass
class AutoModelForCausalLM:
    @staticmethod
    def from_config(config, **kwargs):
        assert "trust_remote_code" not in kwargs
        return FakeForCausalLM(config)
AutoModel = AutoModelForCausalLM
'''


@pytest.fixture
def fake_transformers(tmp_path, monkeypatch):
    """torch and transformers importable (fakes), in this process's path and the child's."""
    root = tmp_path / "site"
    for name, text in (("torch", FAKE_TORCH), ("transformers", FAKE_TRANSFORMERS)):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("ZEROMEM_CACHE_DIR", str(tmp_path / "cache"))
    return root


def _recipe(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps(config))
    path = tmp_path / "recipe.yml"
    path.write_text(RECIPE)
    return path


def test_count_runs_the_child_and_keeps_the_result(fake_transformers, tmp_path):
    found = meta_count.count(OTHER)
    assert found == meta_count.MetaCount(123_456_789, "FakeForCausalLM", "0.0-fake")
    assert list((tmp_path / "cache" / "meta-counts").glob("*.json"))
    (fake_transformers / "transformers" / "__init__.py").write_text("raise SystemExit('not again')")
    assert meta_count.count(OTHER).total == 123_456_789  # kept: no child this time


def test_remote_code_is_never_run(fake_transformers):
    found = meta_count.count({**OTHER, "model_type": "remote_only"})
    assert found.total is None and "never runs remote code" in found.problem


def test_a_crashing_child_is_a_reason_not_a_traceback(fake_transformers, monkeypatch):
    monkeypatch.setenv("FAKE_TRANSFORMERS_CRASH", "1")
    found = meta_count.count(OTHER)
    assert found.total is None and "boom" in found.problem


def test_check_counts_another_family_and_says_the_peak_is_unknown(fake_transformers, tmp_path):
    path = _recipe(tmp_path, OTHER)
    done = run_zeromem("check", "--format", "json", "--gpu-memory", "80GiB", str(path))
    assert "Traceback" not in done.stderr
    findings = json.loads(done.stdout)["findings"]
    assert all(f["severity"] != "error" for f in findings), findings
    assert "ZM108" not in {f["code"] for f in findings}
    estimate = run_zeromem("estimate", "--config", str(path), "--format", "json", "-v")
    data = json.loads(estimate.stdout)
    assert data["inputs"]["parameters"] == 123_456_789
    assert any("peak is unknown for model_type 'deepseek_v3'" in item for item in data["peak_missing"]), data["peak_missing"]


def test_estimate_model_config_counts_another_family(fake_transformers, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(OTHER))
    done = run_zeromem("estimate", "--format", "json", "-R", "8", "--model-config", str(tmp_path / "config.json"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inputs"]["parameters"] == 123_456_789


def test_the_editor_never_starts_torch(fake_transformers, tmp_path):
    path = _recipe(tmp_path, OTHER)
    analysis = analyse(RECIPE, path.name, loader=file_loader(path))
    [finding] = [f for f in analysis.findings if f.code == "ZM108"]
    assert "count it with Transformers on the meta device (the editor does not start torch)" in finding.message
    assert not list((tmp_path / "cache").glob("meta-counts/*"))


def test_without_torch_the_refusal_names_the_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(meta_count, "available", lambda: False)
    path = _recipe(tmp_path, OTHER)
    done = run_zeromem("check", "--format", "json", str(path))
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "ZM108" and finding["severity"] == "information"
    assert "with torch and Transformers installed" in finding["message"]


def test_the_check_path_never_imports_torch_for_a_known_family():
    """find_spec locates; it does not import (tests/cli/test_import_isolation.py runs the CLI in a clean process)."""
    assert meta_count.available() in (True, False)
    assert "torch" not in sys.modules or "zeromem_lsp.configs.meta_count" not in sys.modules


@pytest.mark.skipif(not meta_count.available(), reason="torch and Transformers are not installed")
def test_the_real_transformers_counts_gpt2_as_zeromem_does(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROMEM_CACHE_DIR", str(tmp_path))
    config = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 128}
    from zeromem_lsp.configs.model_config import count_parameters

    assert meta_count.count(config).total == count_parameters(config).total
