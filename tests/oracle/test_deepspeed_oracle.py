"""Compare validate_deepspeed with DeepSpeed's own verdict.

Two optional suites:

* oracle: runs ``deepspeed.runtime.config.DeepSpeedConfig`` in-process on ~90 mutated configs
  and requires the same accept/reject verdict (skips when deepspeed is not importable; run it
  with an interpreter that has deepspeed, e.g. ``DS_ACCELERATOR=cpu /work/dsvenv/bin/python -m
  pytest tests/oracle``);
* corpus: checks every DeepSpeed JSON of ``../shared/corpus/real`` against the stored verdicts
  of DeepSpeed 0.19.8 (skips when the corpus is absent).

A config is "rejected" by us when we report at least one error-severity issue.  Some of our
errors come from ``deepspeed.initialize`` (engine) rather than ``DeepSpeedConfig``; those
mutations are marked ``ENGINE`` and compared against the documented engine behaviour instead.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from zeromem_lsp.configs.deepspeed import ENGINE_LEVEL_KINDS, validate_deepspeed

REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "real"

B = {"train_batch_size": 8}
Z3 = {"train_batch_size": 8, "zero_optimization": {"stage": 3}}


def _z(**zero):
    return {**B, "zero_optimization": zero}


# name -> config. Verdicts come from DeepSpeed itself at run time.
MUTATIONS: dict[str, dict] = {
    # typos / unknown keys in strict sections
    "zero typo": _z(stage=3, stage3_prefetch_bucket_sz=1),
    "zero typo persistence": _z(stage=3, stage3_param_persitance_threshold=100),
    "zero cpu_offload_params": _z(stage=3, cpu_offload_params=True),
    "offload_param typo": _z(stage=3, offload_param={"device": "cpu", "pin_memroy": True}),
    "offload_optimizer typo": _z(stage=2, offload_optimizer={"device": "cpu", "buffer_cnt": 4}),
    "leaf_module typo": _z(stage=3, leaf_module={"clases": ["a.B"]}),
    "fp16 typo": {**B, "fp16": {"enabled": True, "loss_scale_windw": 100}},
    "bf16 typo": {**B, "bf16": {"enable": True}},
    "bfloat16 typo": {**B, "bfloat16": {"enabled": True, "x": 1}},
    "hybrid typo": {**B, "hybrid_engine": {"enabled": True, "max_tokens": 5}},
    "compile typo": {**B, "compile": {"deep_compile": True}},
    "wq typo": {**B, "weight_quantization": {"q_type": "symmetric", "bits": 4}},
    "tensorboard typo": {**B, "tensorboard": {"enabled": True, "outputpath": "x"}},
    "timers typo": {**B, "timers": {"throughput": {"enable": True}}},
    "comms typo": {**B, "comms_logger": {"enabled": True, "prof": True}},
    "zenflow typo": _z(stage=2, zenflow={"topk": 0.1}),
    # aliases
    "alias bare ok": _z(stage=3, max_live_parameters=1, prefetch_bucket_size=5),
    "alias prefixed ok": _z(stage=3, stage3_max_live_parameters=1),
    "alias both": _z(stage=3, max_live_parameters=1, stage3_max_live_parameters=2),
    "alias both gather": _z(stage=3, gather_16bit_weights_on_model_save=True,
                            stage3_gather_16bit_weights_on_model_save=True),
    # enums / types / ranges
    "stage 4": _z(stage=4),
    "stage three": _z(stage="three"),
    "stage '3'": _z(stage="3"),
    "stage 3.0": _z(stage=3.0),
    "stage null": _z(stage=None),
    "device CPU": _z(stage=3, offload_param={"device": "CPU"}),
    "device gpu": _z(stage=3, offload_optimizer={"device": "gpu"}),
    "reduce_bucket_size 0": _z(reduce_bucket_size=0),
    "reduce_bucket_size 5e8": _z(reduce_bucket_size=5e8),
    "reduce_bucket_size 5.5": _z(reduce_bucket_size=5.5),
    "reduce_bucket_size 1e30": _z(reduce_bucket_size=1e30),
    "allgather_bucket_size 0": _z(allgather_bucket_size=0),
    "sub_group_size -1": _z(sub_group_size=-1),
    "overlap yes please": _z(overlap_comm="yes please"),
    "overlap 'yes'": _z(overlap_comm="yes"),
    "ratio 1.5": _z(stage=3, offload_optimizer={"device": "cpu", "ratio": 1.5}),
    "buffer_count -1": _z(stage=3, offload_param={"device": "nvme", "nvme_path": "/x", "buffer_count": -1}),
    "nvme_path int": _z(stage=3, offload_param={"device": "nvme", "nvme_path": 5}),
    "hybrid max_out_tokens 0": {**B, "hybrid_engine": {"max_out_tokens": 0}},
    "compile bad pass": {**B, "compile": {"passes": ["z2"]}},
    "wq q_type bad": {**B, "weight_quantization": {"q_type": "sym"}},
    "fp16 enabled 2": {**B, "fp16": {"enabled": 2}},
    "fp16 loss_scale -1": {**B, "fp16": {"loss_scale": -1}},
    "fp16 loss_scale true": {**B, "fp16": {"loss_scale": True}},
    "fp16 lsw 0 dynamic": {**B, "fp16": {"enabled": True, "loss_scale_window": 0}},
    "fp16 lsw 0 static": {**B, "fp16": {"enabled": True, "loss_scale": 128, "loss_scale_window": 0}},
    "fp16 min_loss_scale 0.5": {**B, "fp16": {"min_loss_scale": 0.5}},
    "zenflow topk 1.0": _z(stage=2, zenflow={"topk_ratio": 1.0}),
    "zenflow bad strategy": _z(stage=2, zenflow={"select_strategy": "often"}),
    "compute_grad_norm false s3": _z(stage=3, compute_grad_norm=False),
    "compute_grad_norm false s2": _z(stage=2, compute_grad_norm=False),
    # precision
    "fp16 and bf16": {**B, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    "fp16 and bfloat16": {**B, "fp16": {"enabled": True}, "bfloat16": {"enabled": True}},
    "bf16 wins over bfloat16": {**B, "bf16": {"enabled": False}, "bfloat16": {"enabled": True, "x": 1}},
    "bf16 null uses bfloat16": {**B, "bf16": None, "bfloat16": {"enabled": True, "x": 1}},
    "fp16 null": {**B, "fp16": None},
    "fp16 master at stage 0": {**B, "fp16": {"enabled": True, "fp16_master_weights_and_grads": True}},
    "bf16 states without master": {**_z(stage=2), "bf16": {"enabled": True, "bf16_optimizer_states": True}},
    # deprecated keys
    "cpu_offload alone": _z(stage=2, cpu_offload=True),
    "cpu_offload + offload_optimizer": _z(stage=2, cpu_offload=True, offload_optimizer={"device": "cpu"}),
    "cpu_offload false + offload_optimizer": _z(stage=2, cpu_offload=False, offload_optimizer={"device": "cpu"}),
    "cpu_offload_param + offload_param": _z(stage=3, cpu_offload_param=True, offload_param={"device": "cpu"}),
    "pin_memory + offload_param": _z(stage=3, cpu_offload_use_pin_memory=True, offload_param={"device": "cpu"}),
    "gather fp16 + 16bit": _z(stage=3, stage3_gather_fp16_weights_on_model_save=True,
                              gather_16bit_weights_on_model_save=False),
    "legacy zero true": {**B, "zero_optimization": True},
    "legacy zero true bad allgather": {**B, "zero_optimization": True, "allgather_size": -5},
    "zero null": {**B, "zero_optimization": None},
    # stages and offload
    "ratio 0.5 stage 2": _z(stage=2, offload_optimizer={"device": "cpu", "ratio": 0.5}),
    "ratio 0.5 stage 3": _z(stage=3, offload_optimizer={"device": "cpu", "ratio": 0.5}),
    "offload_param stage 1": _z(stage=1, offload_param={"device": "cpu"}),
    # removed features
    "mics": _z(stage=3, mics_shard_size=8),
    "loco": _z(stage=3, zeropp_loco_param={"err_beta": 0.8}),
    "sparse_attention": {**B, "sparse_attention": {"mode": "fixed"}},
    "curriculum": {**B, "curriculum_learning": {"enabled": False}},
    "amp": {**B, "amp": {"enabled": True}},
    "elasticity": {**B, "elasticity": {"enabled": False}},
    # batch triple (DeepSpeedConfig runs at world size 1)
    "batch 33/4/2": {"train_batch_size": 33, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
    "batch 8/4/2": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
    "batch 16/4/2 (ws 2)": {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
                            "gradient_accumulation_steps": 2},
    "batch 8/3": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 3},
    "batch 8/16": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 16},
    "batch 8 gas 3": {"train_batch_size": 8, "gradient_accumulation_steps": 3},
    "batch gas only": {"gradient_accumulation_steps": 2},
    "batch none": {"steps_per_print": 10},
    "batch micro 0": {"train_micro_batch_size_per_gpu": 0},
    "batch gas 0": {"train_batch_size": 8, "gradient_accumulation_steps": 0},
    "batch string": {"train_batch_size": "8"},
    "batch float ok": {"train_batch_size": 8.0, "train_micro_batch_size_per_gpu": 4},
    # top-level values DeepSpeedConfig checks
    "comm dtype int8": {**B, "communication_data_type": "int8"},
    "comm dtype FP16": {**B, "communication_data_type": "FP16"},
    "allreduce sum z3": {**Z3, "gradient_allreduce_op": "sum"},
    "allreduce avg": {**B, "gradient_allreduce_op": "avg"},
    "checkpoint tag bogus": {**B, "checkpoint": {"tag_validation": "bogus"}},
    "keep_in_fp32 str": {**B, "data_types": {"keep_in_fp32_modules": "x"}},
    "autocast dtype int4": {**B, "torch_autocast": {"dtype": "int4"}},
    # things DeepSpeed ignores: must not be errors
    "unknown top-level": {**B, "train_batch_sise": 8, "zeromem": {"gpu": "80GB"}},
    "auto in strict dropped": _z(stage="auto", bogus="auto", offload_param={"device": "auto"}),
    "offload_param null": _z(stage=3, offload_param=None),
    "leaf_module classes string": _z(stage=3, leaf_module={"classes": "a.B"}),

    # second batch, written without probing DeepSpeed first
    "offload_optimizer auto": _z(stage=2, offload_optimizer="auto"),
    "tensorboard auto": {**B, "tensorboard": "auto"},
    "fp16 auto": {**B, "fp16": "auto"},
    "comms_logger auto": {**B, "comms_logger": "auto"},
    "wandb null": {**B, "wandb": None},
    "cpu_offload_param false + offload_param": _z(stage=3, cpu_offload_param=False, offload_param={"device": "cpu"}),
    "gather fp16 alone": _z(stage=3, stage3_gather_fp16_weights_on_model_save=True),
    "leaf_module string": _z(stage=3, leaf_module="a.B"),
    "optimizer null": {**B, "optimizer": None},
    "optimizer type int": {**B, "optimizer": {"type": 5}},
    "optimizer params only": {**B, "optimizer": {"params": {"lr": 1}}},
    "scheduler list": {**B, "scheduler": []},
    "pipeline string": {**B, "pipeline": "x"},
    "allreduce null": {**B, "gradient_allreduce_op": None},
    "comm dtype int": {**B, "communication_data_type": 16},
    "parallel_write 1": {**B, "checkpoint": {"parallel_write": {"pipeline_stage": 1}}},
    "parallel_write yes": {**B, "checkpoint": {"parallel_write": {"pipeline_stage": "yes"}}},
    "grad_accum_dtype int4": {**B, "data_types": {"grad_accum_dtype": "int4"}},
    "timers throughput null": {**B, "timers": {"throughput": None}},
    "weight_quantization null": {**B, "weight_quantization": None},
    "hybrid_engine null": {**B, "hybrid_engine": None},
    "compile passes string": {**B, "compile": {"passes": "z1"}},
    "fp16 enabled/loss_scale auto": {**B, "fp16": {"enabled": "auto", "loss_scale": "auto"}},
    "bf16 on, fp16 auto": {**B, "bf16": {"enabled": True}, "fp16": {"enabled": "auto"}},
    "bfloat16 + bf16 null + fp16": {**B, "bfloat16": {"enabled": True}, "bf16": None, "fp16": {"enabled": True}},
    "stage true": _z(stage=True),
    "max_live '1e9' string": _z(stage=3, stage3_max_live_parameters="1e9"),
    "ratio + cpu_offload": _z(stage=3, cpu_offload=True, offload_optimizer={"device": "cpu", "ratio": 0.5}),
    "cpu_offload + offload_optimizer null": _z(stage=2, cpu_offload=True, offload_optimizer=None),
    "zenflow interval often": _z(stage=2, zenflow={"select_interval": "often"}),
    "zero auto": {**B, "zero_optimization": "auto"},
    "fp16 min_loss_scale 0 dynamic": {**B, "fp16": {"enabled": True, "min_loss_scale": 0}},
    "fp16 hysteresis 2.5": {**B, "fp16": {"hysteresis": 2.5}},
    "elastic_checkpoint s3": _z(stage=3, elastic_checkpoint=True),
    "batch 16/4": {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4},
    "batch negative gas": {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": -1},
    "batch micro auto only": {"train_micro_batch_size_per_gpu": "auto"},
    "mics removed with auto": _z(stage=3, mics_shard_size="auto"),
    "amp auto": {**B, "amp": {"enabled": "auto"}},
    "autocast modules not list": {**B, "torch_autocast": {"lower_precision_safe_modules": [1]}},
}


HF_FILL = {
    ("gradient_clipping",): 1.0,
    ("optimizer", "params", "lr"): 1e-4,
    ("optimizer", "params", "betas"): [0.9, 0.999],
    ("optimizer", "params", "eps"): 1e-8,
    ("optimizer", "params", "weight_decay"): 0.0,
    ("scheduler", "params", "warmup_min_lr"): 0.0,
    ("scheduler", "params", "warmup_max_lr"): 1e-4,
    ("scheduler", "params", "total_num_steps"): 1000,
    ("scheduler", "params", "warmup_num_steps"): 10,
    ("fp16", "enabled"): False,
    ("bf16", "enabled"): False,
    ("amp", "enabled"): False,
    ("amp", "opt_level"): "O1",
    ("zero_optimization", "reduce_bucket_size"): 1_000_000,
    ("zero_optimization", "stage3_prefetch_bucket_size"): 900_000,
    ("zero_optimization", "stage3_param_persistence_threshold"): 10_000,
}


def _hf_fill(config: dict) -> dict:
    """Replace "auto" the way HF Transformers would (world size 1), before DeepSpeed sees it."""
    config = copy.deepcopy(config)
    micro = config.get("train_micro_batch_size_per_gpu")
    gas = config.get("gradient_accumulation_steps")
    micro = 1 if micro == "auto" else micro
    gas = 1 if gas == "auto" else gas
    for key, value in (("train_micro_batch_size_per_gpu", micro), ("gradient_accumulation_steps", gas)):
        if config.get(key) == "auto":
            config[key] = value
    if config.get("train_batch_size") == "auto":
        config["train_batch_size"] = (micro or 1) * (gas or 1)
    for path, value in HF_FILL.items():
        node = config
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(path[-1]) == "auto":
            node[path[-1]] = value
    return config


def _ds_verdict(config: dict) -> tuple[str, str]:
    """DeepSpeed's verdict on the config as HF would hand it over ("auto" filled)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        DeepSpeedConfig(_hf_fill(config))
    except Exception as exc:  # noqa: BLE001 - any exception is a refusal
        return "reject", f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "accept", ""


def _config_errors(config: dict, world_size: int | None = 1) -> list:
    """Our errors that DeepSpeedConfig itself raises (engine-level ones excluded)."""
    issues = validate_deepspeed(config, world_size=world_size)
    return [i for i in issues if i.severity == "error" and i.kind not in ENGINE_LEVEL_KINDS]


def _our_verdict(config: dict, world_size: int | None = 1) -> str:
    return "reject" if _config_errors(config, world_size) else "accept"


@pytest.fixture(scope="module")
def deepspeed_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    return pytest.importorskip("deepspeed.runtime.config")


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_matches_deepspeed(deepspeed_available, name):
    config = MUTATIONS[name]
    theirs, why = _ds_verdict(config)
    ours = _our_verdict(config, world_size=1)
    assert ours == theirs, f"{name}: DeepSpeed {theirs} ({why}); ours: {validate_deepspeed(config, world_size=1)}"


def test_mutation_agreement_rate(deepspeed_available, capsys):
    agree = sum(_ds_verdict(c)[0] == _our_verdict(c) for c in MUTATIONS.values())
    with capsys.disabled():
        print(f"\nDeepSpeed oracle agreement on mutations: {agree}/{len(MUTATIONS)}")
    assert agree == len(MUTATIONS)


# Engine-level refusals (deepspeed.initialize, not DeepSpeedConfig): DeepSpeedConfig accepts these.
ENGINE = {
    "onebitadam removed": ({**B, "optimizer": {"type": "OneBitAdam"}}, "unknown_optimizer"),
    "sgd with zero": ({**B, "zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD"}},
                      "incompatible_optimizer"),
    "max_grad_norm": ({**B, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}},
                      "unsupported_optimizer_param"),
}


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_engine_level_checks_are_beyond_deepspeedconfig(deepspeed_available, name):
    config, kind = ENGINE[name]
    assert _ds_verdict(config)[0] == "accept"
    assert kind in {i.kind for i in validate_deepspeed(config) if i.severity == "warning"}  # reported, not an error


# ----------------------------------------------------------------------------- corpus

# Rejections our dict-level validator cannot see, with the reason.
CORPUS_EXCLUDED: dict[str, str] = {}


def _corpus_files() -> list[str]:
    verdicts = CORPUS / "DEEPSPEED_VERDICTS.json"
    if not verdicts.exists():
        return []
    return sorted(json.loads(verdicts.read_text())["files"])


@pytest.fixture(scope="module")
def corpus():
    verdicts = CORPUS / "DEEPSPEED_VERDICTS.json"
    if not verdicts.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    hjson = pytest.importorskip("hjson")
    return hjson, json.loads(verdicts.read_text())["files"]


def _contains_auto(value) -> bool:
    if isinstance(value, dict):
        return any(_contains_auto(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_auto(v) for v in value)
    return value == "auto"


@pytest.mark.parametrize("name", _corpus_files() or ["<no corpus>"])
def test_corpus_matches_deepspeed(corpus, name):
    hjson, verdicts = corpus
    if name in CORPUS_EXCLUDED:
        pytest.skip(CORPUS_EXCLUDED[name])
    config = hjson.loads((CORPUS / name).read_text(), object_pairs_hook=dict)
    expected = verdicts[name]["via_hf" if _contains_auto(config) else "deepspeed"]
    errors = _config_errors(config)
    if expected == "accept":
        assert not errors, f"{name}: DeepSpeed accepts, we report {errors}"
    else:
        assert errors, f"{name}: DeepSpeed rejects ({verdicts[name]}), we report no error"


def test_corpus_agreement_rate(corpus, capsys):
    hjson, verdicts = corpus
    agree = total = 0
    for name, verdict in verdicts.items():
        if name in CORPUS_EXCLUDED:
            continue
        config = hjson.loads((CORPUS / name).read_text(), object_pairs_hook=dict)
        expected = verdict["via_hf" if _contains_auto(config) else "deepspeed"]
        total += 1
        agree += _our_verdict(config) == expected
    with capsys.disabled():
        print(f"\nCorpus agreement with DeepSpeed 0.19.8 verdicts: {agree}/{total}")
    assert agree == total
