"""Whether PEFT's prepare_model_for_kbit_training ran on a quantized base (issue 31 item 2): each tool's path as the
recipe readers take it, the `kbit_prepare` setting, and the bytes it moves (docs/adapters.md, "k-bit preparation")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs.layers import Resolved
from zeromem_lsp.configs.recipes import read_recipe
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.memory.adapter_plan import Adapter, adapter_inputs, lora_peak
from zeromem_lsp.resolved.adapter_settings import adapter_from_settings
from zeromem_lsp.provenance import Origin

ROOT = Path(__file__).resolve().parents[2]
LLAMA3_PATH = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
LLAMA3 = json.loads(LLAMA3_PATH.read_text())
#: Llama-3-8B's parameters no bitsandbytes linear holds: embed_tokens and lm_head 128,256 x 4,096 each, 65 RMSNorm
#: weights of 4,096 (two per layer and the final one); no biases.
UNQUANTIZED = 2 * 128_256 * 4_096 + 65 * 4_096
UPCAST = UNQUANTIZED * (4 - 2)  # fp32 instead of bf16

AXOLOTL = {"base_model": "org/model", "load_in_4bit": True, "adapter": "qlora", "lora_r": 8, "lora_alpha": 16,
           "lora_target_linear": True, "sequence_len": 512, "micro_batch_size": 1, "bf16": True}


def _kbit(tool: str, data: dict, folders: tuple[str, ...] = ()):
    _, setup = read_recipe(tool, data, folders)
    assert setup.adapter is not None
    return setup.adapter.kbit_prepare


def test_the_hand_count_is_peft_s():
    assert UNQUANTIZED == 1_050_939_392  # docs/adapters.md: the frozen non-quantized parameters of Llama-3-8B


def test_axolotl_under_fsdp_with_qlora_skips_the_preparation():
    found = _kbit("axolotl", {**AXOLOTL, "fsdp": ["full_shard", "auto_wrap"],
                              "fsdp_config": {"fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}})
    assert found.value is False
    assert "is_qlora_and_fsdp_enabled" in found.note and "_prepare_model_for_quantization" in found.note
    assert _kbit("axolotl", {**AXOLOTL, "fsdp_config": {"fsdp_version": 2}}).value is False  # fsdp_config alone


def test_axolotl_without_fsdp_casts_the_norms_embeddings_and_head_back():
    for data in (AXOLOTL, {**AXOLOTL, "adapter": "lora", "load_in_4bit": False, "load_in_8bit": True}):
        found = _kbit("axolotl", data)
        assert found.value is False and "_configure_embedding_dtypes" in found.note


def test_axolotl_under_deepspeed_and_without_quantization_reads_nothing():
    assert _kbit("axolotl", {**AXOLOTL, "deepspeed": "deepspeed_configs/zero2.json"}) is None  # DeepSpeed recasts
    assert _kbit("axolotl", {**AXOLOTL, "adapter": "lora", "load_in_4bit": False}) is None


@pytest.mark.parametrize("extra, named", [({}, "off"), ({"upcast_layernorm": True}, "true, not modelled")])
def test_llamafactory_never_prepares(extra, named):
    found = _kbit("llamafactory", {"model_name_or_path": "org/model", "stage": "sft", "finetuning_type": "lora",
                                   "quantization_bit": 4, "bf16": True, **extra})
    assert found.value is False and "prepare_model_for_training" in found.note and named in found.note


TRL = {"model_name_or_path": "org/model", "use_peft": True, "load_in_4bit": True, "lora_r": 16, "bf16": True,
       "dtype": "bfloat16"}


@pytest.mark.parametrize("extra, folders, prepared, where", [
    ({}, (), False, "trl/trainer/sft_trainer.py"),
    ({"rpo_alpha": 1.0}, (), False, "trl/trainer/dpo_trainer.py"),
    ({"beta": 0.1}, ("recipes", "zephyr", "dpo"), False, "trl/trainer/dpo_trainer.py"),
    ({"beta": 0.1}, ("recipes", "zephyr", "orpo"), True, "trl/experimental/orpo/orpo_trainer.py"),
    ({"cpo_alpha": 1.0}, (), True, "trl/experimental/cpo/cpo_trainer.py"),
])
def test_trl_prepares_for_orpo_and_cpo_only(extra, folders, prepared, where):
    found = _kbit("trl", {**TRL, **extra}, folders)
    assert found.value is prepared and where in found.note


def test_the_setting_reaches_the_adapter_with_its_origin():
    origins = {"lora_rank": Origin("--lora-rank"), "kbit_prepare": Origin("zeromem.kbit_prepare")}
    settings = ZeromemSettings(lora_rank=8, quantization="nf4", kbit_prepare=False)
    adapter = adapter_from_settings(Resolved(settings, origins).settings, origins)
    assert adapter is not None and adapter.kbit_prepare is False
    assert adapter.origin("kbit_prepare") == origins["kbit_prepare"]
    assert Adapter(8).kbit_prepare is True  # plain configs: as before


@pytest.mark.parametrize("family, version", [("torch", None), ("fsdp", 1), ("fsdp", 2)])
def test_p_drops_by_the_upcast_bytes_and_the_forward_stays_bf16(family, version):
    prepared = Adapter(16, quantization="nf4", double_quant=True)
    plain = prepared._replace(kbit_prepare=False)
    before, was = adapter_inputs(LLAMA3, prepared, family, "bf16", "adamw", 1, fsdp_version=version)
    after, now = adapter_inputs(LLAMA3, plain, family, "bf16", "adamw", 1, fsdp_version=version)
    assert before.parameter_bytes - after.parameter_bytes == UPCAST == 2_101_878_784
    assert (before.gradient_bytes, before.optimizer_bytes) == (after.gradient_bytes, after.optimizer_bytes)
    assert before.parameter_bytes == 7_972_191_104  # docs/adapters.md's worked example
    assert (lora_peak(was, "bf16").activation_dtype, lora_peak(now, "bf16").activation_dtype) == ("fp32", "bf16")
    assert "no prepare_model_for_kbit_training" in now.parameter_terms[1].label


def test_deepspeed_recasts_whatever_ran():
    prepared = Adapter(16, quantization="nf4")
    before, was = adapter_inputs(LLAMA3, prepared, "deepspeed", "bf16", "adamw", 1)
    after, now = adapter_inputs(LLAMA3, prepared._replace(kbit_prepare=False), "deepspeed", "bf16", "adamw", 1)
    assert before.parameter_bytes == after.parameter_bytes
    assert lora_peak(was, "bf16") == lora_peak(now, "bf16")


ESTIMATE = ("estimate", "--format", "json", "--model-config", str(LLAMA3_PATH), "-R", "1", "--engine", "torch",
            "--precision", "bf16", "--lora-rank", "16", "--lora-targets", "all-linear", "--quantization", "nf4",
            "--double-quant", "--sequence-length", "4096", "--micro-batch", "1", "--gradient-checkpointing")


def test_estimate_no_kbit_prepare_lowers_p_and_the_peak():
    runs = [json.loads(run_zeromem(*ESTIMATE, *flag).stdout) for flag in ((), ("--kbit-prepare",),
                                                                         ("--no-kbit-prepare",))]
    default, prepared, plain = runs
    assert default["inputs"] == prepared["inputs"] and default["peak"] == prepared["peak"]
    assert "kbit_prepare" not in default["peak_inputs"]
    assert prepared["peak_inputs"]["kbit_prepare"] == {"value": True, "from": "--kbit-prepare"}
    assert plain["peak_inputs"]["kbit_prepare"] == {"value": False, "from": "--no-kbit-prepare"}
    assert prepared["inputs"]["parameter_bytes"] - plain["inputs"]["parameter_bytes"] == UPCAST
    phases = prepared["phases"]["ddp"]["phases"], plain["phases"]["ddp"]["phases"]
    assert phases[0]["optimizer"] - phases[1]["optimizer"] == UPCAST  # no activations at the optimizer step
    # forward and backward lose the upcast and the fp32 activations: bf16 hidden states through the whole forward
    reserve = prepared["phases"]["ddp"]["reserved_bytes"]  # cuBLAS workspaces + CUDA context (one GPU)
    assert (prepared["peak"]["ddp"] - reserve, plain["peak"]["ddp"] - reserve) == (16_830_643_084, 13_652_925_324)
    assert plain["activations"]["lora"]["activation_dtype"] == "bf16"
