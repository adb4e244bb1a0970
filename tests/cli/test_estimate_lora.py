"""`zeromem estimate` with a LoRA / QLoRA adapter, through `cli.main` in-process.

Expected figures come from PEFT's own counts (tests/data/adapters/peft_counts_full_size.json, measured on the meta
device), the activations measured with PEFT on CPU (tests/data/adapters/lora_activations.json), bitsandbytes'
storage rules as docs/adapters.md states them, and arithmetic on the parts the output shows — never from the
implementation's own functions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

ROOT = Path(__file__).resolve().parents[2]
LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
PEFT = {case["id"]: case for case in
        json.loads((ROOT / "tests/data/adapters/peft_counts_full_size.json").read_text())["cases"]}
ACTIVATIONS = {case["id"]: case for case in
               json.loads((ROOT / "tests/data/adapters/lora_activations.json").read_text())["cases"]}
# Llama-3-8B's linear weights per layer, (out, in), from its published config: q, k, v, o, gate, up, down
H, KV, I, V, LAYERS = 4096, 1024, 14336, 128256, 32
LINEARS = [(H, H), (KV, H), (KV, H), (H, H), (I, H), (I, H), (H, I)]


def estimate_json(*args: str) -> dict:
    done = run_zeromem("estimate", "-v", "--format", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rebuilt(terms: list[dict]) -> int:
    """A sum of shown terms, each count × bytes each when it has one."""
    for term in terms:
        if term["bytes_each"] is not None:
            assert term["bytes"] == term["parameters"] * term["bytes_each"], term
    return sum(term["bytes"] for term in terms)


def test_llama3_q_v_rank_16_trainable_count_is_pefts():
    data = estimate_json("--model-config", str(LLAMA3), "--lora-rank", "16", "--lora-targets", "q_proj,v_proj",
                         "-R", "8")
    inputs, measured = data["inputs"], PEFT["llama3-8b-qv-r16"]["measured"]
    by_hand = LAYERS * 16 * ((H + H) + (H + KV))  # r·(in + out) on q and v in every layer
    assert inputs["trainable_parameters"] == measured["trainable"] == by_hand == 6_815_744
    assert inputs["parameters"] == measured["all"]
    adapter = inputs["adapter"]
    assert adapter["frozen_parameters"] + adapter["trainable_parameters"] == inputs["parameters"]
    # DeepSpeed (the calculator's default engine): everything recast to bf16, fp32 master + Adam m, v for the trained
    p, g, o = (rebuilt(adapter[f"{name}_terms"]) for name in ("parameter", "gradient", "optimizer"))
    assert (p, g, o) == (inputs["parameter_bytes"], inputs["gradient_bytes"], inputs["optimizer_bytes"])
    assert p == 2 * inputs["parameters"] and g == 2 * by_hand and o == 12 * by_hand
    r = 8
    assert data["zero1"] == p + g + math.ceil(o / r)
    assert data["zero2"] == p + math.ceil((g + o) / r)
    assert data["zero3"] == math.ceil((p + g + o) / r)


def test_zero2_keeps_frozen_parameters_whole_zero3_partitions_them():
    """ZeRO-1/2 shard only what is trained: the frozen bytes stay on every rank whatever R is; ZeRO-3 divides them."""
    figures = {}
    for ranks in (8, 64):
        data = estimate_json("--model-config", str(LLAMA3), "--lora-rank", "16", "-R", str(ranks))
        frozen = data["inputs"]["adapter"]["parameter_terms"][0]
        assert frozen["label"].startswith("frozen") and frozen["parameters"] == data["inputs"]["adapter"]["frozen_parameters"]
        figures[ranks] = data
        assert data["zero2"] > frozen["bytes"]  # the whole frozen base on each rank
        assert data["zero3"] < frozen["bytes"] / ranks + data["inputs"]["parameter_bytes"] / ranks  # all of P shared
    assert figures[8]["zero2"] - figures[64]["zero2"] < figures[8]["inputs"]["gradient_bytes"] + \
        figures[8]["inputs"]["optimizer_bytes"]  # only G + O shrink with more ranks
    assert figures[8]["zero3"] > 7 * figures[64]["zero3"]
    full = estimate_json("--model-config", str(LLAMA3), "-R", "8")
    assert full["inputs"]["trainable_parameters"] == full["inputs"]["parameters"]
    trained = figures[8]["inputs"]["trainable_parameters"]
    assert figures[8]["inputs"]["gradient_bytes"] + figures[8]["inputs"]["optimizer_bytes"] == trained * (2 + 12)
    assert full["inputs"]["gradient_bytes"] + full["inputs"]["optimizer_bytes"] == full["inputs"]["parameters"] * 14


def nf4_double_quant_bytes(out: int, inp: int) -> int:
    """docs/adapters.md: (n + 1) // 2 packed + 64 B code + ⌈n/64⌉ uint8 absmax + 4 B offset
    + 4·⌈⌈n/64⌉/256⌉ nested absmax + 1024 B nested code."""
    n = out * inp
    blocks = -(-n // 64)
    return (n + 1) // 2 + 64 + blocks + 4 + 4 * -(-blocks // 256) + 1024


@pytest.mark.parametrize("engine, float_bytes", [("deepspeed", 2), ("torch", 4)])
def test_qlora_nf4_double_quant_frozen_bytes(engine, float_bytes):
    """NF4 + double quantization: the linear weights as bitsandbytes stores them; embeddings, head and norms 16-bit
    (DeepSpeed's recast) or fp32 (prepare_model_for_kbit_training's upcast, PEFT with torch)."""
    data = estimate_json("--model-config", str(LLAMA3), "--lora-rank", "16", "--quantization", "nf4",
                         "--double-quant", "--engine", engine, "-R", "8")
    adapter = data["inputs"]["adapter"]
    quantized, floats, trained = adapter["parameter_terms"]
    assert quantized["bytes"] == LAYERS * sum(nf4_double_quant_bytes(out, inp) for out, inp in LINEARS)
    assert quantized["parameters"] == LAYERS * sum(out * inp for out, inp in LINEARS)
    assert floats["parameters"] == 2 * V * H + (2 * LAYERS + 1) * H  # embeddings, head, norms
    assert floats["bytes_each"] == float_bytes
    frozen = quantized["bytes"] + floats["bytes"]
    assert frozen == (5_702_540_160 if engine == "deepspeed" else 7_804_418_944)  # docs/adapters.md's example
    assert data["inputs"]["parameter_bytes"] == frozen + trained["bytes"]
    assert trained["parameters"] == adapter["trainable_parameters"] == 41_943_040


def llama_config(tmp_path: Path, case_id: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**ACTIVATIONS[case_id]["config"], "num_hidden_layers": 2}))
    return path


@pytest.mark.parametrize("case_id, extra", [("llama-0", ()), ("llama-33", ("--quantization", "nf4", "--double-quant"))])
def test_peak_uses_lora_activations_measured_with_peft(tmp_path, case_id, extra):
    case = ACTIVATIONS[case_id]
    lora = case["lora"]
    targets = lora["target_modules"] if isinstance(lora["target_modules"], str) else ",".join(lora["target_modules"])
    data = estimate_json("--model-config", str(llama_config(tmp_path, case_id)), "--lora-rank", str(lora["r"]),
                         "--lora-targets", targets, *extra, "--engine", "torch", "-R", "1",
                         "--sequence-length", str(case["sequence_length"]), "--micro-batch", str(case["micro_batch"]))
    activations = data["activations"]
    assert activations["bytes"] == activations["lora"]["total"] == case["saved_bytes"]["2"]
    if not extra:  # QLoRA's k-bit preparation runs the forward in fp32: more than bf16 full fine-tuning
        assert activations["lora"]["total"] < activations["full_fine_tuning_bytes"]
    stage = data["phases"]["ddp"]  # one rank: the adapter's P and O whole, no gradient yet at the loss's backward
    parts = stage["parts"]
    assert stage["peak_phase"] == "backward" and stage["moment"] == "the loss's backward" and "gradients" not in parts
    assert parts["activations"] == case["saved_bytes"]["2"]  # what PEFT saved, measured
    assert "measured as whole steps with PEFT" in activations["lora"]["step"]
    step = activations["lora"]["step"]
    assert "not measured whole, under offload" in step and "ZeRO-0 at 1 and 2 ranks, ZeRO-1, ZeRO-2 and ZeRO-3" in step
    assert "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and mixed precision" in step
    tokens, vocab = case["sequence_length"] * case["micro_batch"], case["config"]["vocab_size"]
    assert parts["log-softmax gradients"] == 2 * 4 * tokens * vocab  # the full step's two fp32 T×V gradients
    assert parts["parameters"] == data["inputs"]["parameter_bytes"]
    assert parts["optimizer states"] == data["inputs"]["optimizer_bytes"]
    assert data["peak"]["ddp"] == sum(parts.values()) + stage["reserved_bytes"] == \
        stage["phases"]["backward"] + stage["reserved_bytes"]


def test_text_output_shows_trainable_and_the_terms():
    done = run_zeromem("estimate", "-v", "--model-config", str(LLAMA3), "--lora-rank", "16", "--lora-targets",
                       "q_proj,v_proj", "-R", "8")
    assert done.returncode == 0, done.stderr
    assert "6,815,744 trainable" in done.stdout and "of 8,037,076,992 parameters" in done.stdout
    assert "P = frozen (bf16) 8,030,261,248 × 2 B + trainable (bf16, DeepSpeed's recast) 6,815,744 × 2 B" in done.stdout


@pytest.mark.parametrize("args, wanted", [
    (("--lora-rank", "0"), "--lora-rank: expected a whole number >= 1"),
    (("--lora-rank", "-3"), "--lora-rank: expected a whole number >= 1"),
    (("--lora-rank", "10000000000"), "--lora-rank: 10,000,000,000 is absurd"),
    (("--lora-rank", "5000", "--lora-targets", "q_proj"), "exceeds the smaller side"),
    (("--lora-rank", "8", "--lora-targets", "c_attn,query_key_value"), "LoRA targets c_attn, query_key_value match no "
     "module of this llama model; its linear layers are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
    (("--lora-rank", "8", "--lora-targets", ","), "--lora-targets: expected non-empty module names"),
    (("--quantization", "nf4"), "--quantization describes a LoRA run: give --lora-rank R too"),
])
def test_bad_adapter_options_exit_2(args, wanted):
    done = run_zeromem("estimate", "-v", "--model-config", str(LLAMA3), "-R", "8", *args)
    assert done.returncode == 2 and wanted in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_lora_without_a_model_shape_names_what_is_missing():
    done = run_zeromem("estimate", "-v", "--parameters", "8B", "--lora-rank", "16", "-R", "8")
    assert done.returncode == 2
    assert "--lora-rank needs the model's shape: give --model-config PATH" in done.stderr


def write_ds_config(tmp_path: Path, block: dict) -> Path:
    path = tmp_path / "ds_config.json"
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
              "zeromem": {"world_size": 8, "parameters": {"from_config": str(LLAMA3)}, **block}}
    path.write_text(json.dumps(config, indent=2))
    return path


def test_config_block_and_flags_give_the_same_plan(tmp_path):
    block = write_ds_config(tmp_path, {"lora_rank": 16, "lora_targets": ["q_proj", "v_proj"]})
    from_block = estimate_json("--config", str(block))
    flags = write_ds_config(tmp_path, {})
    from_flags = estimate_json("--config", str(flags), "--lora-rank", "16", "--lora-targets", "q_proj,v_proj")
    calculator = estimate_json("--model-config", str(LLAMA3), "--lora-rank", "16", "--lora-targets",
                               "q_proj,v_proj", "-R", "8")
    for data in (from_block, from_flags):
        assert data["inputs"]["trainable_parameters"] == PEFT["llama3-8b-qv-r16"]["measured"]["trainable"]
        assert data["zero2"] == calculator["zero2"]
        assert data["stage"] == "zero2"


@pytest.mark.parametrize("block, key, wanted", [
    ({"lora_rank": 16, "lora_targets": ["c_attn"]}, "lora_targets", "its linear layers are q_proj"),
    ({"lora_rank": 0}, "lora_rank", "greater than or equal to 1"),
    ({"lora_rank": 10**10}, "lora_rank", "less than or equal to"),
    ({"lora_rank": 16, "quantization": "nf3"}, "quantization", "'nf4'"),
])
def test_bad_adapter_settings_are_zm104_on_their_key(tmp_path, block, key, wanted):
    path = write_ds_config(tmp_path, block)
    done = run_zeromem("check", "--format", "json", str(path))
    assert done.returncode == 1
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert len(found) == 1 and wanted in found[0]["message"], done.stdout
    line = next(i for i, text in enumerate(path.read_text().splitlines()) if f'"{key}"' in text)
    assert found[0]["range"]["start"]["line"] == line  # on the key's value, 0-based


def test_lora_setting_without_from_config_is_zm104(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
                                "zeromem": {"world_size": 8, "parameters": "8B", "lora_rank": 16}}, indent=2))
    done = run_zeromem("check", str(path))
    assert "ZM104" in done.stdout and "a LoRA adapter needs the model's shape" in done.stdout, done.stdout


@pytest.mark.parametrize("version, engine", [(1, "fsdp1"), (2, "fsdp2")])
def test_fsdp_config_with_an_adapter(tmp_path, version, engine):
    """FSDP keeps PEFT's fp32 adapters and Adam state in their dtype, no master copy; FULL_SHARD divides all of P.
    The text form (no peak known) is checked too: it once failed on FSDP's stages."""
    path = tmp_path / "accelerate.yaml"
    path.write_text(f"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: {version}\n"
                    f"  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\nmixed_precision: bf16\nnum_machines: 1\n"
                    f"num_processes: 8\nzeromem:\n  parameters:\n    from_config: {LLAMA3}\n  lora_rank: 16\n"
                    f"  lora_targets: q_proj,v_proj\n  precision: bf16\n")
    data = estimate_json("--config", str(path))
    adapter, inputs = data["inputs"]["adapter"], data["inputs"]
    trained = inputs["trainable_parameters"]
    assert adapter["engine"] == engine and trained == PEFT["llama3-8b-qv-r16"]["measured"]["trainable"]
    assert inputs["parameter_bytes"] == 2 * adapter["frozen_parameters"] + 4 * trained
    assert (inputs["gradient_bytes"], inputs["optimizer_bytes"]) == (4 * trained, 8 * trained)
    p, g, o = inputs["parameter_bytes"], inputs["gradient_bytes"], inputs["optimizer_bytes"]
    assert data["zero3"] == math.ceil((p + g + o) / 8)  # FULL_SHARD (the default strategy)
    done = run_zeromem("estimate", "-v", "--config", str(path))
    assert done.returncode == 0 and "FULL_SHARD" in done.stdout and "Traceback" not in done.stderr, done.stderr


def test_config_with_targets_from_the_flag_names_the_flag(tmp_path):
    path = write_ds_config(tmp_path, {})
    done = run_zeromem("estimate", "-v", "--config", str(path), "--lora-rank", "16", "--lora-targets", "foo")
    assert done.returncode == 2
    assert "ZM104 error: --lora-targets: LoRA targets foo match no module of this llama model" in done.stderr
