"""Where each input of the peak comes from, per config kind, and the buffers it implies (hand arithmetic)."""

import json

from zeromem_lsp.analysis import analyse
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.project import file_loader
from tests.cli.test_estimate_peak import llama0_parameters, write_config

ROOT = 2 * 1000 * 128 + 128  # llama-0's embedding, untied head and final norm: FSDP's root unit
LAYER = 128 * 4 * 48 + 2 * 128 * 2 * 48 + 4 * 48 * 128 + 3 * 128 * 320 + 2 * 128  # llama-0 decoder layer, by hand


def _analyse(tmp_path, text: str, name: str = "ds_config.json", settings=ZeromemSettings()):
    path = tmp_path / name
    path.write_text(text)
    return analyse(text, name, settings, loader=file_loader(path))


def _inputs(analysis) -> dict:
    return analysis.plan.peak.inputs  # keyed by field name (the zeromem setting of the same name)


def _block(tmp_path, **extra) -> dict:
    return {"parameters": {"from_config": str(write_config(tmp_path, "llama-0"))}, "world_size": 8, **extra}


def test_micro_batch_derived_from_the_triple(tmp_path):
    text = json.dumps({"train_batch_size": 64, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 1},
                       "zeromem": _block(tmp_path, sequence_length=64)})
    micro = _inputs(_analyse(tmp_path, text))["micro_batch"]
    assert micro.value == 4 and "64 / (2 × 8)" in micro.note


def test_the_config_value_wins_over_the_setting(tmp_path):
    text = json.dumps({"train_micro_batch_size_per_gpu": 4, "zeromem": _block(tmp_path, micro_batch=2)})
    micro = _inputs(_analyse(tmp_path, text))["micro_batch"]
    assert (micro.value, micro.path) == (4, ("train_micro_batch_size_per_gpu",))


def test_editor_settings_fill_what_the_config_does_not_say(tmp_path):
    text = json.dumps({"train_micro_batch_size_per_gpu": 4, "zeromem": _block(tmp_path)})
    inputs = _inputs(_analyse(tmp_path, text, settings=ZeromemSettings(sequence_length=128, attention="eager")))
    assert inputs["sequence_length"].value == 128 and "project or editor settings" in inputs["sequence_length"].note
    assert inputs["attention"].value == "eager"


def test_auto_buckets_are_filled_from_the_hidden_size(tmp_path):
    text = json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto"},
        "zeromem": _block(tmp_path, sequence_length=32)})
    parts = {part.name: part.elements for part in _analyse(tmp_path, text).plan.peak.buffers["zero3"].parts}
    assert parts["reduce_bucket_size"] == 128 * 128
    assert parts["stage3_prefetch_bucket_size"] == 14_745  # int(0.9 × 16,384 = 14,745.6)


def test_training_arguments(tmp_path):
    args = {"output_dir": "out", "max_length": 256, "gradient_checkpointing": True,
            "deepspeed": {"zero_optimization": {"stage": 2}, "zeromem": _block(tmp_path)}}
    inputs = _inputs(_analyse(tmp_path, json.dumps(args), "training_args.json"))
    assert (inputs["sequence_length"].value, inputs["sequence_length"].path) == (256, ("max_length",))
    assert inputs["gradient_checkpointing"].value is True
    assert inputs["micro_batch"].value == 8 and "default" in inputs["micro_batch"].note  # TrainingArguments' 8
    args["deepspeed"]["zeromem"]["micro_batch"] = 3  # a declared value replaces the library default
    assert _inputs(_analyse(tmp_path, json.dumps(args), "training_args.json"))["micro_batch"].value == 3


def _accelerate(tmp_path, top: str, fsdp: str):
    """An Accelerate FSDP (FULL_SHARD, 8 processes) YAML with the zeromem block in fsdp_config, analysed."""
    block = _block(tmp_path, sequence_length=64, micro_batch=2)
    yaml = (f"distributed_type: FSDP\nnum_processes: 8\n{top}fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
            f"{fsdp}  zeromem:\n" + "".join(f"    {key}: {json.dumps(value)}\n" for key, value in block.items()))
    return _analyse(tmp_path, yaml, "accelerate.yaml")


def test_accelerate_fsdp_checkpointing_and_gathered_layers(tmp_path):
    analysis = _accelerate(tmp_path, "", "  fsdp_activation_checkpointing: true\n")
    inputs = _inputs(analysis)
    assert inputs["gradient_checkpointing"].value is True
    assert inputs["gradient_checkpointing"].path == ("fsdp_config", "fsdp_activation_checkpointing")
    # a layer's backward: the root unit (embeddings, final norm, head) and two fp32 layers (the one computing
    # and the prefetched one) gathered, the checkpointed layer recomputed
    held = dict(analysis.plan.peak.stage_peak("zero3").held.parts)
    assert held["gathered parameters"] == 4 * (ROOT + 2 * LAYER) and "recomputed layer" in held
    assert "gathered parameters" not in dict(analysis.plan.peak.stage_peak("ddp").held.parts)  # NO_SHARD


def test_fsdp_config_checkpointing_reaches_the_step(tmp_path):
    """backward_prefetch is not an input of the phase model (measured with FSDP's default, BACKWARD_PRE)."""
    text = json.dumps({"sharding_strategy": "FULL_SHARD", "activation_checkpointing": True,
                       "backward_prefetch": "NO_PREFETCH",
                       "zeromem": _block(tmp_path, sequence_length=64, micro_batch=1, precision="bf16")})
    analysis = _analyse(tmp_path, text, "fsdp_config.json")
    assert _inputs(analysis)["gradient_checkpointing"].path == ("activation_checkpointing",)
    held = analysis.plan.peak.stage_peak("zero3").held
    assert held.moment == "the bottom layer's backward" and "recomputed layer" in dict(held.parts)
    assert dict(held.parts)["gathered parameters"] == 2 * (ROOT + 2 * LAYER)  # bf16 shards, no mixed precision


def test_mixed_precision_is_the_activation_dtype(tmp_path):
    analysis = _accelerate(tmp_path, "mixed_precision: bf16\n", "")
    assert _inputs(analysis)["dtype"].value == "bf16"
    assert analysis.plan.inputs.per_parameter.precision == "fp32"  # FSDP keeps the loaded fp32 shards
    forward = dict(analysis.plan.peak.stage_peak("zero3").phases["forward"].parts)
    assert forward["gathered parameters"] == 2 * ROOT  # in bf16: the root (FSDP1, accelerate launch's default)
    assert _inputs(analysis)["fsdp_version"].value == 1 and _inputs(analysis)["fsdp_version"].path is None
    assert forward["parameters"] == 4 * -(-llama0_parameters() // 8)  # fp32 shards
    from tests.cli.test_estimate_peak import CASES
    assert analysis.plan.peak.activations.total == CASES["llama-0"]["saved_bytes"]["2"]  # measured in bf16


def test_deepspeed_alias_spelling_of_zero3_sizes(tmp_path):
    text = json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "prefetch_bucket_size": 1234, "max_live_parameters": 99},
        "zeromem": _block(tmp_path, sequence_length=32)})
    parts = {part.name: part.bytes for part in _analyse(tmp_path, text).plan.peak.buffers["zero3"].parts}
    assert parts["stage3_prefetch_bucket_size"] == 4 * 1234 and parts["stage3_max_live_parameters"] == 4 * 99  # fp32


def _versioned(tmp_path, written: str, setting: int | None):
    block = {**_block(tmp_path, sequence_length=64, micro_batch=2), **({"fsdp_version": setting} if setting else {})}
    yaml = ("distributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\nfsdp_config:\n"
            f"{written}  zeromem:\n" + "".join(f"    {key}: {json.dumps(value)}\n" for key, value in block.items()))
    return _analyse(tmp_path, yaml, "accelerate.yaml")


def test_the_fsdp_version_written_in_the_yaml_runs_and_the_setting_fills_only_the_default(tmp_path):
    """FSDP2 keeps one layer's all-gather output alive at the loss (prefetched); FSDP1 does not (step._fsdp)."""
    written = _versioned(tmp_path, "  fsdp_version: 2\n", None)
    version = _inputs(written)["fsdp_version"]
    assert (version.value, version.path) == (2, ("fsdp_config", "fsdp_version"))
    forward = dict(written.plan.peak.stage_peak("zero3").phases["forward"].parts)
    assert forward["gathered parameters"] == 2 * (ROOT + LAYER)  # the root, and FSDP2's layer ahead
    filled = _inputs(_versioned(tmp_path, "", 2))["fsdp_version"]
    assert (filled.value, filled.path) == (2, ("fsdp_config", "zeromem", "fsdp_version"))
    kept = _inputs(_versioned(tmp_path, "  fsdp_version: 1\n", 2))["fsdp_version"]  # what the config says runs
    assert (kept.value, kept.path) == (1, ("fsdp_config", "fsdp_version"))
