"""The adapters' own dtype (PEFT's autocast_adapter_dtype, issue 31 item 4): fp32 over a bf16 base by default (PEFT
0.12 on), the base weights' dtype with `autocast_adapter_dtype=False` and in every PEFT before 0.12 (LoraLayer.
update_layer moved them with `self.to(weight.device, dtype=weight.dtype)`, peft v0.10.0 tuners/lora/layer.py). The
published Answer.AI FSDP runs (tests/data/gpu_published) were made with such a PEFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs.layers import Resolved
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.memory.adapter_plan import Adapter, adapter_inputs, lora_peak
from zeromem_lsp.resolved.adapter_settings import adapter_from_settings
from zeromem_lsp.provenance import Origin

ROOT = Path(__file__).resolve().parents[2]
LLAMA3_PATH = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
LLAMA3 = json.loads(LLAMA3_PATH.read_text())
#: PEFT's print_trainable_parameters for Llama-3-8B, r=16 on all-linear: 16 x (in + out) per linear, 32 layers
#: (q, o 4096+4096; k, v 4096+1024; gate, up, down 4096+14336)
ADAPTERS = 41_943_040


def test_the_hand_count_is_peft_s():
    assert 32 * 16 * (2 * 8192 + 2 * 5120 + 3 * 18432) == ADAPTERS


@pytest.mark.parametrize("family, version", [("torch", None), ("fsdp", 1), ("fsdp", 2)])
def test_base_dtype_adapters_halve_their_bytes_gradients_and_adam_state(family, version):
    fp32 = Adapter(16)
    base = fp32._replace(autocast=False)
    before, was = adapter_inputs(LLAMA3, fp32, family, "bf16", "adamw", 1, fsdp_version=version)
    after, now = adapter_inputs(LLAMA3, base, family, "bf16", "adamw", 1, fsdp_version=version)
    assert before.parameter_bytes - after.parameter_bytes == ADAPTERS * (4 - 2)
    assert before.gradient_bytes - after.gradient_bytes == ADAPTERS * (4 - 2)
    assert before.optimizer_bytes - after.optimizer_bytes == ADAPTERS * (8 - 4)  # zeros_like(param): m and v
    assert (lora_peak(was, "bf16").adapter_dtype, lora_peak(now, "bf16").adapter_dtype) == ("fp32", "bf16")
    assert "base's dtype" in base.describe() and "base's dtype" not in fp32.describe()


def test_an_fp32_base_keeps_fp32_adapters_either_way():
    found = [adapter_inputs(LLAMA3, Adapter(16, autocast=autocast), "torch", "fp32", "adamw", 1)[0]
             for autocast in (True, False)]
    assert len({(f.parameter_bytes, f.gradient_bytes, f.optimizer_bytes) for f in found}) == 1


def test_deepspeed_recasts_whatever_peft_left():
    fp32 = Adapter(16)
    before, was = adapter_inputs(LLAMA3, fp32, "deepspeed", "bf16", "adamw", 1)
    after, now = adapter_inputs(LLAMA3, fp32._replace(autocast=False), "deepspeed", "bf16", "adamw", 1)
    assert (before.parameter_bytes, before.gradient_bytes, before.optimizer_bytes) == \
        (after.parameter_bytes, after.gradient_bytes, after.optimizer_bytes)
    assert lora_peak(was, "bf16").adapter_dtype == lora_peak(now, "bf16").adapter_dtype == "bf16"


def test_the_setting_reaches_the_adapter_with_its_origin():
    origins = {"lora_rank": Origin("--lora-rank"), "autocast_adapter_dtype": Origin("zeromem.autocast_adapter_dtype")}
    settings = ZeromemSettings(lora_rank=8, autocast_adapter_dtype=False)
    adapter = adapter_from_settings(Resolved(settings, origins).settings, origins)
    assert adapter is not None and adapter.autocast is False
    assert adapter.origin("autocast") == origins["autocast_adapter_dtype"]
    assert Adapter(8).autocast is True


ESTIMATE = ("estimate", "--format", "json", "--model-config", str(LLAMA3_PATH), "-R", "1", "--engine", "torch",
            "--precision", "bf16", "--lora-rank", "16", "--lora-targets", "all-linear", "--sequence-length", "2048",
            "--micro-batch", "1", "--gradient-checkpointing")


def test_estimate_no_autocast_lowers_the_state_and_every_phase():
    default, fp32, base = (json.loads(run_zeromem(*ESTIMATE, *flag).stdout) for flag in (
        (), ("--autocast-adapter-dtype",), ("--no-autocast-adapter-dtype",)))
    assert default["inputs"] == fp32["inputs"] and default["peak"] == fp32["peak"]
    saved = ADAPTERS * ((4 - 2) + (4 - 2) + (8 - 4))
    total = sum(default["inputs"][key] - base["inputs"][key]
                for key in ("parameter_bytes", "gradient_bytes", "optimizer_bytes"))
    assert total == saved
    assert any("base's dtype" in line for line in base["assumptions"])
    for phase, value in default["phases"]["ddp"]["phases"].items():
        assert base["phases"]["ddp"]["phases"][phase] < value, phase


def test_the_flag_needs_a_lora_rank():
    result = run_zeromem("estimate", "--parameters", "7B", "-R", "1", "--no-autocast-adapter-dtype")
    assert result.returncode == 2 and "--lora-rank" in result.stderr


AXOLOTL = ("base_model: org/model\nadapter: lora\nlora_r: 16\nlora_alpha: 32\nlora_target_linear: true\n"
           "sequence_len: 2048\nmicro_batch_size: 1\nbf16: true\n")


def test_axolotl_s_peft_autocast_adapter_dtype_reaches_the_plan(tmp_path):
    """axolotl passes the key to get_peft_model (src/axolotl/loaders/adapter.py: model_kwargs
    ["autocast_adapter_dtype"]); absent, PEFT's default (fp32 adapters)."""
    runs = {}
    for name, extra in (("absent", ""), ("off", "peft_autocast_adapter_dtype: false\n"),
                        ("on", "peft_autocast_adapter_dtype: true\n")):
        recipe = tmp_path / f"{name}.yml"
        recipe.write_text(AXOLOTL + extra)
        result = run_zeromem("estimate", "--config", str(recipe), "--model-config", str(LLAMA3_PATH), "-R", "1",
                             "--format", "json")
        assert result.returncode == 0, result.stderr
        runs[name] = json.loads(result.stdout)["inputs"]
    assert runs["absent"] == runs["on"]
    assert runs["absent"]["gradient_bytes"] - runs["off"]["gradient_bytes"] == ADAPTERS * (4 - 2)
    assert runs["absent"]["optimizer_bytes"] - runs["off"]["optimizer_bytes"] == ADAPTERS * (8 - 4)
