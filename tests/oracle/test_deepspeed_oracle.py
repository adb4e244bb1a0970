"""Compare validate_deepspeed with DeepSpeed's own verdict.

Two optional suites:

* oracle: runs ``deepspeed.runtime.config.DeepSpeedConfig`` in-process on ~440 mutated configs
  and requires the same accept/reject verdict (skips when deepspeed is not importable; run it
  with an interpreter that has deepspeed, e.g. ``DS_ACCELERATOR=cpu /path/to/venv/bin/python -m
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

from zeromem_lsp.configs.deepspeed.validation import ENGINE_LEVEL_KINDS, validate_deepspeed

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

# Third batch: type/range edges of every section, nulls, empty sections, wrong-typed top-level
# values and HF-template variants (verdicts from DeepSpeed at run time, like the rest).
MORE_MUTATIONS: dict[str, dict] = {
    # zero_optimization field edges
    "zero stage -1": _z(stage=-1),
    "zero stage 2.5": _z(stage=2.5),
    "zero stage false": _z(stage=False),
    "zero contiguous_gradients string": _z(stage=2, contiguous_gradients="true"),
    "zero contiguous_gradients 1": _z(stage=2, contiguous_gradients=1),
    "zero contiguous_gradients null": _z(stage=2, contiguous_gradients=None),
    "zero overlap_comm null": _z(stage=2, overlap_comm=None),
    "zero overlap_comm 0": _z(stage=2, overlap_comm=0),
    "zero reduce_scatter 'false'": _z(stage=2, reduce_scatter="false"),
    "zero reduce_bucket_size -1": _z(stage=2, reduce_bucket_size=-1),
    "zero reduce_bucket_size string": _z(stage=2, reduce_bucket_size="5e8"),
    "zero reduce_bucket_size null": _z(stage=2, reduce_bucket_size=None),
    "zero reduce_bucket_size true": _z(stage=2, reduce_bucket_size=True),
    "zero allgather_bucket_size -1": _z(stage=2, allgather_bucket_size=-1),
    "zero allgather_bucket_size 2e8 float": _z(stage=2, allgather_bucket_size=2e8),
    "zero allgather_bucket_size str int": _z(stage=2, allgather_bucket_size="200000000"),
    "zero allgather_partitions null": _z(stage=2, allgather_partitions=None),
    "zero sub_group_size 0": _z(stage=3, sub_group_size=0),
    "zero sub_group_size 1e9": _z(stage=3, sub_group_size=1e9),
    "zero prefetch -1": _z(stage=3, stage3_prefetch_bucket_size=-1),
    "zero prefetch 0": _z(stage=3, stage3_prefetch_bucket_size=0),
    "zero prefetch 0.5": _z(stage=3, stage3_prefetch_bucket_size=0.5),
    "zero persistence -1": _z(stage=3, stage3_param_persistence_threshold=-1),
    "zero persistence 1e5": _z(stage=3, stage3_param_persistence_threshold=1e5),
    "zero max_live 0": _z(stage=3, stage3_max_live_parameters=0),
    "zero max_live -5": _z(stage=3, stage3_max_live_parameters=-5),
    "zero max_reuse null": _z(stage=3, stage3_max_reuse_distance=None),
    "zero model_persistence -1": _z(stage=3, model_persistence_threshold=-1),
    "zero hpz 0": _z(stage=3, zero_hpz_partition_size=0),
    "zero hpz -1": _z(stage=3, zero_hpz_partition_size=-1),
    "zero hpz 8": _z(stage=3, zero_hpz_partition_size=8),
    "zero quantized_weights string": _z(stage=3, zero_quantized_weights="yes"),
    "zero quantized_gradients true": _z(stage=3, zero_quantized_gradients=True),
    "zero round_robin 1": _z(stage=2, round_robin_gradients=1),
    "zero gather16 'true'": _z(stage=3, stage3_gather_16bit_weights_on_model_save="true"),
    "zero legacy_stage1 true": _z(stage=1, legacy_stage1=True),
    "zero ignore_unused null": _z(stage=2, ignore_unused_parameters=None),
    "zero module_granularity -1": _z(stage=3, stage3_module_granularity_threshold=-1),
    "zero load_from_fp32 'no'": _z(stage=2, load_from_fp32_weights="no"),
    "zero empty": {**B, "zero_optimization": {}},
    "zero string": {**B, "zero_optimization": "3"},
    "zero number": {**B, "zero_optimization": 3},
    "zero false": {**B, "zero_optimization": False},
    "zero list": {**B, "zero_optimization": [{"stage": 2}]},
    "zero elastic_checkpoint 1": _z(stage=2, elastic_checkpoint=1),
    "zero leaf_module null": _z(stage=3, leaf_module=None),
    "zero leaf_module classes int list": _z(stage=3, leaf_module={"classes": [1]}),
    "zero leaf_module names ok": _z(stage=3, leaf_module={"names": ["a"], "name_suffixes": ["b"]}),
    "zero zenflow null": _z(stage=2, zenflow=None),
    "zero zenflow empty": _z(stage=2, zenflow={}),
    # offload
    "offload_param device CPU s3": _z(stage=3, offload_param={"device": "Cpu"}),
    "offload_optimizer device NVME": _z(stage=3, offload_optimizer={"device": "NVME", "nvme_path": "/x"}),
    "offload_param device gpu": _z(stage=3, offload_param={"device": "gpu"}),
    "offload_param device none": _z(stage=3, offload_param={"device": "none"}),
    "offload_param device null": _z(stage=3, offload_param={"device": None}),
    "offload_param empty": _z(stage=3, offload_param={}),
    "offload_optimizer empty": _z(stage=2, offload_optimizer={}),
    "offload_param nvme no path": _z(stage=3, offload_param={"device": "nvme"}),
    "offload_optimizer nvme no path": _z(stage=3, offload_optimizer={"device": "nvme"}),
    "offload_param pin_memory string": _z(stage=3, offload_param={"device": "cpu", "pin_memory": "true"}),
    "offload_optimizer pin_memory 1": _z(stage=2, offload_optimizer={"device": "cpu", "pin_memory": 1}),
    "offload_param buffer_count 0": _z(stage=3, offload_param={"device": "cpu", "buffer_count": 0}),
    "offload_param buffer_size 0": _z(stage=3, offload_param={"device": "cpu", "buffer_size": 0}),
    "offload_param buffer_size float": _z(stage=3, offload_param={"device": "cpu", "buffer_size": 1e8}),
    "offload_param max_in_cpu -1": _z(stage=3, offload_param={"device": "cpu", "max_in_cpu": -1}),
    "offload_optimizer ratio 0": _z(stage=3, offload_optimizer={"device": "cpu", "ratio": 0}),
    "offload_optimizer ratio -0.1": _z(stage=3, offload_optimizer={"device": "cpu", "ratio": -0.1}),
    "offload_optimizer ratio string": _z(stage=3, offload_optimizer={"device": "cpu", "ratio": "0.5"}),
    "offload_optimizer buffer_count -1": _z(stage=3, offload_optimizer={"device": "cpu", "buffer_count": -1}),
    "offload_optimizer fast_init str": _z(stage=2, offload_optimizer={"device": "cpu", "fast_init": "no"}),
    "offload_optimizer cores 1.5": _z(stage=2, offload_optimizer={"device": "cpu", "cpucadam_cores_perc": 1.5}),
    "offload_optimizer cores -0.1": _z(stage=2, offload_optimizer={"device": "cpu", "cpucadam_cores_perc": -0.1}),
    "offload_optimizer string": _z(stage=2, offload_optimizer="cpu"),
    "offload_param list": _z(stage=3, offload_param=["cpu"]),
    "offload_optimizer stage 0": _z(stage=0, offload_optimizer={"device": "cpu"}),
    "offload_optimizer nvme_path null": _z(stage=3, offload_optimizer={"device": "cpu", "nvme_path": None}),
    "offload_param pipeline_read": _z(stage=3, offload_param={"device": "cpu", "pipeline_read": True}),
    # fp16 / bf16
    "fp16 enabled 'true'": {**B, "fp16": {"enabled": "true"}},
    "fp16 enabled null": {**B, "fp16": {"enabled": None}},
    "fp16 enabled 1": {**B, "fp16": {"enabled": 1}},
    "fp16 loss_scale string": {**B, "fp16": {"enabled": True, "loss_scale": "0"}},
    "fp16 loss_scale 0.5": {**B, "fp16": {"enabled": True, "loss_scale": 0.5}},
    "fp16 initial_scale_power 16.0": {**B, "fp16": {"enabled": True, "initial_scale_power": 16.0}},
    "fp16 initial_scale_power 16.5": {**B, "fp16": {"enabled": True, "initial_scale_power": 16.5}},
    "fp16 initial_scale_power -1": {**B, "fp16": {"enabled": True, "initial_scale_power": -1}},
    "fp16 initial_scale_power string": {**B, "fp16": {"enabled": True, "initial_scale_power": "16"}},
    "fp16 loss_scale_window -1": {**B, "fp16": {"enabled": True, "loss_scale_window": -1}},
    "fp16 loss_scale_window 1.5": {**B, "fp16": {"enabled": True, "loss_scale_window": 1.5}},
    "fp16 hysteresis 0": {**B, "fp16": {"enabled": True, "hysteresis": 0}},
    "fp16 hysteresis -1": {**B, "fp16": {"enabled": True, "hysteresis": -1}},
    "fp16 min_loss_scale -1": {**B, "fp16": {"enabled": True, "min_loss_scale": -1}},
    "fp16 consecutive_hysteresis str": {**B, "fp16": {"enabled": True, "consecutive_hysteresis": "x"}},
    "fp16 auto_cast 1": {**B, "fp16": {"enabled": True, "auto_cast": 1}},
    "fp16 empty": {**B, "fp16": {}},
    "fp16 string": {**B, "fp16": "true"},
    "fp16 true": {**B, "fp16": True},
    "fp16 list": {**B, "fp16": [True]},
    "bf16 enabled 'yes'": {**B, "bf16": {"enabled": "yes"}},
    "bf16 enabled null": {**B, "bf16": {"enabled": None}},
    "bf16 empty": {**B, "bf16": {}},
    "bf16 true": {**B, "bf16": True},
    "bf16 immediate_grad_update str": {**B, "bf16": {"enabled": True, "immediate_grad_update": "x"}},
    "bf16 loss_scale": {**B, "bf16": {"enabled": True, "loss_scale": 0}},
    "fp16 enabled false + bf16 enabled": {**B, "fp16": {"enabled": False}, "bf16": {"enabled": True}},
    "bf16 master s2": {**_z(stage=2), "bf16": {"enabled": True, "bf16_master_weights_and_grads": True}},
    # hybrid engine / compile / wq
    "hybrid enabled str": {**B, "hybrid_engine": {"enabled": "yes"}},
    "hybrid max_out_tokens -1": {**B, "hybrid_engine": {"enabled": True, "max_out_tokens": -1}},
    "hybrid inference_tp_size 0": {**B, "hybrid_engine": {"enabled": True, "inference_tp_size": 0}},
    "hybrid tp_gather_partition_size 0": {**B, "hybrid_engine": {"tp_gather_partition_size": 0}},
    "hybrid empty": {**B, "hybrid_engine": {}},
    "hybrid list": {**B, "hybrid_engine": []},
    "hybrid pin_parameters null": {**B, "hybrid_engine": {"pin_parameters": None}},
    "compile enabled str": {**B, "compile": {"enabled": "true"}},
    "compile backend int": {**B, "compile": {"backend": 5}},
    "compile kwargs list": {**B, "compile": {"kwargs": [1]}},
    "compile empty": {**B, "compile": {}},
    "compile true": {**B, "compile": True},
    "compile deepcompile ok": {**B, "compile": {"deepcompile": True}},
    "wq empty": {**B, "weight_quantization": {}},
    "wq post_init_quant str": {**B, "weight_quantization": {"post_init_quant": "x"}},
    "wq quantized_initialization ok": {**B, "weight_quantization": {"quantized_initialization": {"num_bits": 8}}},
    "wq string": {**B, "weight_quantization": "int8"},
    # monitors / logger / timers
    "tensorboard enabled str": {**B, "tensorboard": {"enabled": "yes"}},
    "tensorboard output_path int": {**B, "tensorboard": {"enabled": True, "output_path": 5}},
    "tensorboard empty": {**B, "tensorboard": {}},
    "tensorboard null": {**B, "tensorboard": None},
    "tensorboard true": {**B, "tensorboard": True},
    "wandb typo": {**B, "wandb": {"enabled": True, "projekt": "x"}},
    "wandb project null": {**B, "wandb": {"enabled": True, "project": None}},
    "wandb string": {**B, "wandb": "on"},
    "csv_monitor typo": {**B, "csv_monitor": {"enabled": True, "outputpath": "x"}},
    "csv_monitor job_name int": {**B, "csv_monitor": {"enabled": True, "job_name": 1}},
    "comet typo": {**B, "comet": {"enabled": True, "projekt": "x"}},
    "comet samples_log_interval str": {**B, "comet": {"enabled": True, "samples_log_interval": "x"}},
    "comms_logger verbose str": {**B, "comms_logger": {"enabled": True, "verbose": "x"}},
    "comms_logger debug ok": {**B, "comms_logger": {"enabled": True, "debug": True, "prof_all": False}},
    "comms_logger prof_ops str": {**B, "comms_logger": {"enabled": True, "prof_ops": "all_reduce"}},
    "comms_logger null": {**B, "comms_logger": None},
    "timers empty": {**B, "timers": {}},
    "timers throughput enabled str": {**B, "timers": {"throughput": {"enabled": "x"}}},
    "timers throughput synchronized ok": {**B, "timers": {"throughput": {"enabled": True, "synchronized": False}}},
    "timers string": {**B, "timers": "x"},
    "timers string naming throughput": {**B, "timers": "throughput"},
    "timers string holding throughput": {**B, "timers": "no throughput"},
    "timers list naming throughput": {**B, "timers": ["throughput"]},
    "timers list": {**B, "timers": ["x"]},
    "timers number": {**B, "timers": 1},
    "timers null": {**B, "timers": None},
    "flops_profiler typo": {**B, "flops_profiler": {"enabled": True, "profile_stp": 1}},
    "flops_profiler str": {**B, "flops_profiler": "x"},
    "flops_profiler profile_step str": {**B, "flops_profiler": {"enabled": True, "profile_step": "x"}},
    "activation_checkpointing typo": {**B, "activation_checkpointing": {"partition_activationz": True}},
    "activation_checkpointing str": {**B, "activation_checkpointing": "x"},
    "aio typo": {**B, "aio": {"block_sizee": 1}},
    "aio block_size str": {**B, "aio": {"block_size": "x"}},
    "aio string": {**B, "aio": "x"},
    # top-level wrong types
    "train_batch_size list": {"train_batch_size": [8]},
    "train_batch_size null": {"train_batch_size": None, "train_micro_batch_size_per_gpu": 4},
    "train_batch_size bool": {"train_batch_size": True},
    "train_batch_size 8.5": {"train_batch_size": 8.5},
    "micro string": {"train_micro_batch_size_per_gpu": "4"},
    "micro float": {"train_micro_batch_size_per_gpu": 4.0},
    "gas string": {**B, "gradient_accumulation_steps": "1"},
    "gas float 2.0": {**B, "gradient_accumulation_steps": 2.0},
    "gas null": {**B, "gradient_accumulation_steps": None},
    "gradient_clipping string": {**B, "gradient_clipping": "1.0"},
    "gradient_clipping -1": {**B, "gradient_clipping": -1.0},
    "gradient_clipping null": {**B, "gradient_clipping": None},
    "gradient_clipping list": {**B, "gradient_clipping": [1.0]},
    "steps_per_print 0": {**B, "steps_per_print": 0},
    "steps_per_print -1": {**B, "steps_per_print": -1},
    "steps_per_print string": {**B, "steps_per_print": "10"},
    "steps_per_print null": {**B, "steps_per_print": None},
    "wall_clock_breakdown str": {**B, "wall_clock_breakdown": "yes"},
    "prescale_gradients str": {**B, "prescale_gradients": "yes"},
    "gradient_predivide_factor str": {**B, "gradient_predivide_factor": "2"},
    "gradient_predivide_factor 0": {**B, "gradient_predivide_factor": 0},
    "zero_allow_untested_optimizer str": {**B, "zero_allow_untested_optimizer": "yes"},
    "dump_state str": {**B, "dump_state": "x"},
    "memory_breakdown null": {**B, "memory_breakdown": None},
    "disable_allgather str": {**B, "disable_allgather": "x"},
    "sparse_gradients str": {**B, "sparse_gradients": "x"},
    "seq_parallel dtype bad": {**B, "seq_parallel_communication_data_type": "int8"},
    "sequence_parallel_size 0": {**B, "sequence_parallel_size": 0},
    "sequence_parallel_size str": {**B, "sequence_parallel_size": "2"},
    "dataloader_drop_last str": {**B, "dataloader_drop_last": "x"},
    "use_data_before_expert_parallel_ str": {**B, "use_data_before_expert_parallel_": "x"},
    # optimizer / scheduler
    "optimizer list": {**B, "optimizer": [{"type": "Adam"}]},
    "optimizer string": {**B, "optimizer": "Adam"},
    "optimizer empty": {**B, "optimizer": {}},
    "optimizer type null": {**B, "optimizer": {"type": None, "params": {"lr": 1e-3}}},
    "optimizer type missing w/ params": {**B, "optimizer": {"params": {"lr": 1e-3, "betas": [0.9, 0.99]}}},
    "optimizer params list": {**B, "optimizer": {"type": "AdamW", "params": [1e-3]}},
    "optimizer params null": {**B, "optimizer": {"type": "AdamW", "params": None}},
    "optimizer params lr string": {**B, "optimizer": {"type": "AdamW", "params": {"lr": "1e-3"}}},
    "optimizer legacy_fusion str": {**B, "optimizer": {"type": "Adam", "legacy_fusion": "x"}},
    "optimizer type ADAMW": {**B, "optimizer": {"type": "ADAMW"}},
    "scheduler string": {**B, "scheduler": "WarmupLR"},
    "scheduler type null": {**B, "scheduler": {"type": None}},
    "scheduler empty": {**B, "scheduler": {}},
    "scheduler params str": {**B, "scheduler": {"type": "WarmupLR", "params": "x"}},
    "scheduler params num str": {**B, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "10"}}},
    "scheduler unknown type": {**B, "scheduler": {"type": "Bogus"}},
    # data types / misc sections
    "grad_accum_dtype fp64": {**B, "data_types": {"grad_accum_dtype": "fp64"}},
    "grad_accum_dtype FP32": {**B, "data_types": {"grad_accum_dtype": "FP32"}},
    "grad_accum_dtype null": {**B, "data_types": {"grad_accum_dtype": None}},
    "data_types empty": {**B, "data_types": {}},
    "data_types null": {**B, "data_types": None},
    "checkpoint null": {**B, "checkpoint": None},
    "checkpoint tag_validation lower": {**B, "checkpoint": {"tag_validation": "fail"}},
    "checkpoint use_node_local_storage str": {**B, "checkpoint": {"use_node_local_storage": "x"}},
    "comm dtype null": {**B, "communication_data_type": None},
    "comm dtype fp32": {**B, "communication_data_type": "fp32"},
    "allreduce MEAN": {**B, "gradient_allreduce_op": "MEAN"},
    "allreduce max": {**B, "gradient_allreduce_op": "max"},
    "torch_autocast enabled str": {**B, "torch_autocast": {"enabled": "x"}},
    "torch_autocast dtype null": {**B, "torch_autocast": {"dtype": None}},
    "torch_autocast empty": {**B, "torch_autocast": {}},
    "pipeline empty": {**B, "pipeline": {}},
    "pipeline null": {**B, "pipeline": None},
    "eigenvalue typo": {**B, "eigenvalue": {"enabled": True, "max_iterr": 5}},
    "eigenvalue str": {**B, "eigenvalue": "x"},
    "progressive_layer_drop str": {**B, "progressive_layer_drop": "x"},
    "pld theta str": {**B, "progressive_layer_drop": {"enabled": True, "theta": "x"}},
    "data_efficiency str": {**B, "data_efficiency": "x"},
    "autotuning str": {**B, "autotuning": "x"},
    "nebula str": {**B, "nebula": "x"},
    "quantize_training": {**B, "quantize_training": {"enabled": False}},
    "compression_training": {**B, "compression_training": {}},
    "tensor_parallel str": {**B, "tensor_parallel": "x"},
    "tensor_parallel typo": {**B, "tensor_parallel": {"autotp_size": 1, "tp_sizee": 2}},
    "zero_force_ds_cpu_optimizer str": {**B, "zero_force_ds_cpu_optimizer": "x"},
    # HF templates
    "hf zero2 template": {
        "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                 "hysteresis": 2, "min_loss_scale": 1},
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                              "allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": True,
                              "reduce_scatter": True, "reduce_bucket_size": "auto", "contiguous_gradients": True},
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False},
    "hf zero3 template": {
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "none", "pin_memory": True},
                              "offload_param": {"device": "none", "pin_memory": True}, "overlap_comm": True,
                              "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                              "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                              "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                              "stage3_gather_16bit_weights_on_model_save": True},
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False},
    "hf zero3 template stage3_prefetch typo": {
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto", "stage3_param_persistance_threshold": "auto"},
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"},
    "hf zero3 cpu offload params (old)": {
        "zero_optimization": {"stage": 3, "cpu_offload": True, "cpu_offload_params": True},
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"},
    "hf zero1 template": {"zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8},
                          "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                          "fp16": {"enabled": "auto", "auto_cast": False}},
    "hf template scheduler WarmupDecayLR": {**B, "scheduler": {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}}},
    "hf fp16 auto loss_scale_window auto": {**B, "fp16": {"enabled": "auto", "loss_scale_window": "auto"}},
    "hf bf16 enabled auto + fp16 true": {**B, "bf16": {"enabled": "auto"}, "fp16": {"enabled": True}},
    "accelerate zero stage auto": {**B, "zero_optimization": {"stage": "auto", "offload_optimizer": {"device": "auto"}}},
    "gradient_clipping auto unfilled ok": {"train_batch_size": "auto", "gradient_clipping": "auto"},
    # shapes DeepSpeedConfig reads with .get / arithmetic, and other hand-checked values
    "flops_profiler null": {**B, "flops_profiler": None},
    "flops_profiler enabled str": {**B, "flops_profiler": {"enabled": "yes"}},
    "flops_profiler enabled null": {**B, "flops_profiler": {"enabled": None}},
    "activation_checkpointing null": {**B, "activation_checkpointing": None},
    "activation_checkpointing list": {**B, "activation_checkpointing": [True]},
    "activation_checkpointing auto": {**B, "activation_checkpointing": "auto"},
    "autotuning null": {**B, "autotuning": None},
    "autotuning results_dir empty": {**B, "autotuning": {"enabled": True, "results_dir": ""}},
    "autotuning model_info str": {**B, "autotuning": {"model_info": "x"}},
    "aio null ok": {**B, "aio": None},
    "aio list": {**B, "aio": [1]},
    "data_efficiency null": {**B, "data_efficiency": None},
    "data_efficiency data_sampling str": {**B, "data_efficiency": {"enabled": True, "data_sampling": "x"}},
    "data_efficiency data_routing list": {**B, "data_efficiency": {"data_routing": [1]}},
    "expert_parallel str": {**B, "expert_parallel": "on"},
    "expert_parallel false ok": {**B, "expert_parallel": False},
    "expert_parallel load_balance_coeff": {**B, "expert_parallel": {"enabled": True, "load_balance_coeff": 0.01}},
    "tensor_parallel null": {**B, "tensor_parallel": None},
    "tensor_parallel dtype bf16": {**B, "tensor_parallel": {"autotp_size": 2, "dtype": "bf16"}},
    "tensor_parallel ok": {**B, "tensor_parallel": {"autotp_size": 2, "tp_overlap_comm": True}},
    "tensor_parallel tp null": {**B, "tensor_parallel": {"tp": None}},
    "tensor_parallel tp auto ok": {**B, "tensor_parallel": {"tp": {"tp_size": "auto"}}},
    "tensor_parallel tp typo": {**B, "tensor_parallel": {"tp": {"tp_sise": 2}}},
    "tensor_parallel ce backend bad": {**B, "tensor_parallel": {"vocab_parallel_ce_backend": "triton"}},
    "wall_clock_breakdown null": {**B, "wall_clock_breakdown": None},
    "wall_clock_breakdown 1 ok": {**B, "wall_clock_breakdown": 1},
    "wall_clock_breakdown 0.5": {**B, "wall_clock_breakdown": 0.5},
    "vocabulary_size str": {**B, "vocabulary_size": "50257"},
    "vocabulary_size odd ok": {**B, "vocabulary_size": 50257},
    "comm dtype auto": {**B, "communication_data_type": "auto"},
    "allreduce auto": {**B, "gradient_allreduce_op": "auto"},
    "seq comm dtype auto": {**B, "seq_parallel_communication_data_type": "auto"},
    "micro true": {"train_micro_batch_size_per_gpu": True},
    "gas false": {**B, "gradient_accumulation_steps": False},
    "checkpoint writer str": {**B, "checkpoint": {"writer": "fast"}},
    "checkpoint writer type bad": {**B, "checkpoint": {"writer": {"type": "slow"}}},
    "checkpoint writer type lower ok": {**B, "checkpoint": {"writer": {"type": "python", "data_parallel": "socket"}}},
    "checkpoint writer data_parallel bad": {**B, "checkpoint": {"writer": {"data_parallel": "node"}}},
    "checkpoint tag_validation null": {**B, "checkpoint": {"tag_validation": None}},
    "autocast safe modules dict ok": {**B, "torch_autocast": {"lower_precision_safe_modules": {"torch.nn.Linear": 1}}},
    "autocast safe modules null": {**B, "torch_autocast": {"lower_precision_safe_modules": None}},
    "optimizer max_grad_norm str": {**B, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "max_grad_norm": "1.0"}}},
    "optimizer max_grad_norm null": {**B, "optimizer": {"type": "AdamW", "params": {"max_grad_norm": None}}},
    "optimizer params list no type": {**B, "optimizer": {"params": [1]}},
    "scheduler params list no type": {**B, "scheduler": {"params": [1]}},
    "scheduler null": {**B, "scheduler": None},
    "optimizer type list": {**B, "optimizer": {"type": ["Adam"]}},
    "optimizer type empty string": {**B, "optimizer": {"type": ""}},
    "scheduler type int": {**B, "scheduler": {"type": 5}},
    "alias both prefetch": _z(stage=3, prefetch_bucket_size=1, stage3_prefetch_bucket_size=2),
    "alias both persistence": _z(stage=3, param_persistence_threshold=1, stage3_param_persistence_threshold=2),
    "alias both max_reuse": _z(stage=3, max_reuse_distance=1, stage3_max_reuse_distance=2),
    "cpu_offload + cpu_offload_param s3": _z(stage=3, cpu_offload=True, cpu_offload_param=True),
    "pin_memory + offload_optimizer": _z(stage=2, cpu_offload_use_pin_memory=True, offload_optimizer={"device": "cpu"}),
    "offload_param nvme stage 2": _z(stage=2, offload_param={"device": "nvme"}),
    "bf16 and bfloat16 both": {**B, "bf16": {"enabled": True}, "bfloat16": {"enabled": True}},
    "fp16 loss_scale auto": {**B, "fp16": {"enabled": True, "loss_scale": "auto", "initial_scale_power": "auto"}},
    "autocast enabled with fp16": {**B, "torch_autocast": {"enabled": True, "dtype": "bf16"}, "fp16": {"enabled": True}},
    "zero stage 3 sum allreduce via bare": {**B, "zero_optimization": {"stage": 3}, "gradient_allreduce_op": "SUM"},
    "zenflow sum allreduce": {**_z(stage=2, zenflow={}), "gradient_allreduce_op": "sum"},
    "deepcompile sum allreduce": {**B, "compile": {"deepcompile": True}, "gradient_allreduce_op": "sum"},
    "hf zero2 mixed bf16 true": {"bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "overlap_comm": True,
                                  "reduce_bucket_size": "auto", "allgather_bucket_size": 5e8},
                                  "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                                  "gradient_clipping": "auto", "train_batch_size": "auto"},
    "hf zero3 nvme": {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nvme",
                       "pin_memory": True, "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9},
                       "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "pin_memory": True,
                       "buffer_count": 4, "fast_init": False}}, "aio": {"block_size": 262144, "queue_depth": 32,
                       "thread_count": 1, "single_submit": False, "overlap_events": True},
                      "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"},
    "hf optimizer betas auto + scheduler OneCycle": {**B, "optimizer": {"type": "Adam", "params": {"betas": "auto"}},
                                                     "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": "auto"}}},
}
assert not set(MORE_MUTATIONS) & set(MUTATIONS), set(MORE_MUTATIONS) & set(MUTATIONS)
MUTATIONS.update(MORE_MUTATIONS)


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


# The same text as a file: DeepSpeedConfig(path) reads it with hjson, which makes `1.0` the int 1.
FILES = {
    "wall_clock_breakdown 1.0": '{"train_batch_size": 8, "wall_clock_breakdown": 1.0}',
    "wall_clock_breakdown 0.0": '{"train_batch_size": 8, "wall_clock_breakdown": 0.0}',
    "wall_clock_breakdown 1e0": '{"train_batch_size": 8, "wall_clock_breakdown": 1e0}',
    "wall_clock_breakdown 1.5": '{"train_batch_size": 8, "wall_clock_breakdown": 1.5}',
    "flops_profiler enabled 1.0": '{"train_batch_size": 8, "flops_profiler": {"enabled": 1.0}}',
    "flops_profiler enabled 0.5": '{"train_batch_size": 8, "flops_profiler": {"enabled": 0.5}}',
    "stage 3.0 overlap 1.0": '{"train_batch_size": 8.0, "zero_optimization": {"stage": 3.0, "overlap_comm": 1.0}}',
    "overlap 2.0": '{"train_batch_size": 8, "zero_optimization": {"overlap_comm": 2.0}}',
    "bf16 enabled 1.0": '{"train_batch_size": 8, "bf16": {"enabled": 1.0}}',
    "timers string throughput": '{"train_batch_size": 8, "timers": "throughput"}',
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_file_matches_deepspeed(deepspeed_available, name, tmp_path):
    """`zeromem check` on a file against DeepSpeedConfig(path) on the same file."""
    from deepspeed.runtime.config import DeepSpeedConfig

    from tests.cli.conftest import run_zeromem

    path = tmp_path / "ds_config.json"
    path.write_text(FILES[name], encoding="utf-8")
    try:
        DeepSpeedConfig(str(path))
        theirs = "accept"
    except Exception:  # noqa: BLE001 - any exception is a refusal
        theirs = "reject"
    done = run_zeromem("check", "--format", "json", str(path))
    errors = [f for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"]
    assert ("reject" if errors else "accept") == theirs, f"{name}: DeepSpeed {theirs}; ours {errors}"


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
