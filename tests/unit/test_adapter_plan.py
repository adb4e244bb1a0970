"""memory/adapter_plan: the plain Adapter input, the engine per plan family, and the activation dtypes per engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs.layers import Resolved
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.memory.adapter_plan import Adapter, adapter_inputs, engine_for, lora_peak
from zeromem_lsp.resolved.adapter_settings import adapter_from_settings
from zeromem_lsp.provenance import Origin

LLAMA3 = json.loads((Path(__file__).resolve().parents[2] / "tests/data/models/Meta-Llama-3-8B/config.json").read_text())


def test_no_rank_no_adapter():
    assert adapter_from_settings(ZeromemSettings(quantization="nf4"), {}) is None


def test_settings_make_an_adapter_with_origins():
    settings = ZeromemSettings(lora_rank=8, lora_targets="q_proj,v_proj", quantization="nf4", double_quant=True)
    origins = {"lora_rank": Origin("--lora-rank"), "lora_targets": Origin("zeromem.lora_targets", ("zeromem", "lora_targets"))}
    adapter = adapter_from_settings(Resolved(settings, origins).settings, origins)
    assert adapter == Adapter(8, ("q_proj", "v_proj"), quantization="nf4", double_quant=True,
                              origins=(("rank", origins["lora_rank"]), ("targets", origins["lora_targets"])))
    assert adapter.origin("targets").path == ("zeromem", "lora_targets")
    assert Adapter(8).targets == "all-linear" and Adapter(8).quantization == "none"  # PEFT / no BitsAndBytesConfig


@pytest.mark.parametrize("family, version, engine", [("deepspeed", None, "deepspeed"), ("fsdp", 1, "fsdp1"),
                                                     ("fsdp", 2, "fsdp2"), ("torch", None, "peft")])
def test_engine_per_family(family, version, engine):
    assert engine_for(family, version) == engine


@pytest.mark.parametrize("family, quantization, adapter_dtype, forward", [
    ("deepspeed", "none", "bf16", "bf16"),  # DeepSpeed recasts the adapters
    ("deepspeed", "nf4", "bf16", "bf16"),  # ... and undoes the k-bit upcast
    ("torch", "none", "fp32", "bf16"),  # PEFT's autocast_adapter_dtype
    ("torch", "nf4", "fp32", "fp32"),  # prepare_model_for_kbit_training: the forward runs in fp32
])
def test_activation_dtypes_per_engine(family, quantization, adapter_dtype, forward):
    _, breakdown = adapter_inputs(LLAMA3, Adapter(16, quantization=quantization), family, "bf16", "adamw", 8)
    peak = lora_peak(breakdown, "bf16")
    assert (peak.adapter_dtype, peak.activation_dtype) == (adapter_dtype, forward)
    assert peak.adapters.trainable == breakdown.trainable == 41_943_040  # docs/adapters.md: r 16 all-linear


def test_fp32_gradients_double_g_only():
    plain, _ = adapter_inputs(LLAMA3, Adapter(16), "deepspeed", "bf16", "adamw", 8)
    fp32, _ = adapter_inputs(LLAMA3, Adapter(16), "deepspeed", "bf16", "adamw", 8, fp32_gradients=True)
    assert fp32.gradient_bytes == 2 * plain.gradient_bytes
    assert (fp32.parameter_bytes, fp32.optimizer_bytes) == (plain.parameter_bytes, plain.optimizer_bytes)
