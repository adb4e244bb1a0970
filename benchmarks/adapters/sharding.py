"""Which parameters the engines shard and which get gradients with LoRA (CPU, gloo, random weights).

    DS_ACCELERATOR=cpu /work/venv-measure/bin/python benchmarks/adapters/sharding.py
    # -> tests/data/adapters/sharding.json

A 2-layer llama (benchmarks/activations BASE shape, fp32) gets a LoRA adapter on layer 1's q_proj only, so one
decoder layer mixes frozen and trainable parameters and the other is all frozen. Then, per engine:
- FSDP1 (use_orig_params=True, one unit per decoder layer, 1 rank): each unit's flat-parameter size and the size
  of its gradient after one backward;
- FSDP2 (fully_shard per decoder layer, 1 rank): the elements of every gradient;
- DeepSpeed ZeRO-1/2/3 (2 ranks, torch AdamW as client optimizer): at stages 1-2 the elements the optimizer
  flattens (bit16_groups) and whether frozen parameters stay whole; at stage 3 each rank's partition of every
  parameter (ds_tensor), frozen ones included; with bf16 enabled (a bf16 base, PEFT's fp32 adapters), the
  adapters' dtype before and after deepspeed.initialize.
Each engine runs in fresh processes.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from pathlib import Path

import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "adapters" / "sharding.json"
sys.path.insert(0, str(ROOT / "benchmarks" / "activations"))
from measure import BASE  # noqa: E402

CONFIG = {**BASE["llama"], "num_hidden_layers": 2}
LORA = {"r": 8, "target_modules": ["layers.1.self_attn.q_proj"]}


def _model(dtype: str = "float32"):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(0)
    fields = dict(CONFIG)
    model_type = fields.pop("model_type")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields), dtype=getattr(torch, dtype))
    return get_peft_model(model, LoraConfig(**LORA))


def _step(model):
    import torch
    ids = torch.randint(0, CONFIG["vocab_size"], (1, 16), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()


def _init(rank: int, world: int, port: int) -> None:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def fsdp1(rank: int, world: int, port: int, out: str) -> None:
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    _init(rank, world, port)
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    model = FSDP(_model(), auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
    _step(model)
    units = []
    for unit in FSDP.fsdp_modules(model):
        flat = unit._flat_param
        trainable = sum(p.numel() for p in unit.module.parameters() if p.requires_grad
                        and not any(p is q for sub in FSDP.fsdp_modules(unit.module) if sub is not unit
                                    for q in sub.parameters()))
        units.append({"module": type(unit.module).__name__, "flat_elements": flat.numel(),
                      "gradient_elements": 0 if flat.grad is None else flat.grad.numel(),
                      "trainable_elements": trainable})
    Path(out).write_text(json.dumps({"units": units}))


def fsdp2(rank: int, world: int, port: int, out: str) -> None:
    from torch.distributed.fsdp import fully_shard
    _init(rank, world, port)
    model = _model()
    for layer in model.base_model.model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    _step(model)
    grads = {name: p.grad.numel() for name, p in model.named_parameters() if p.grad is not None}
    Path(out).write_text(json.dumps({"gradient_elements": sum(grads.values()), "gradients": sorted(grads)}))


def zero(stage: int, rank: int, world: int, port: int, out: str, bf16: bool = False) -> None:
    import deepspeed
    import torch
    _init(rank, world, port)
    model = _model("bfloat16" if bf16 else "float32")
    trainable = [p for p in model.parameters() if p.requires_grad]
    before = sorted({str(p.dtype) for p in trainable})
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage},
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "bf16": {"enabled": bf16}}
    engine, optimizer, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(trainable, lr=1e-3),
                                                 config=config)
    frozen = [p for p in engine.module.parameters() if not p.requires_grad]
    record = {"stage": stage, "world_size": world, "bf16": bf16, "trainable_dtypes_before": before,
              "trainable_dtypes": sorted({str(p.dtype) for p in engine.module.parameters() if p.requires_grad})}
    if stage < 3:
        inner = optimizer
        record["flattened_elements"] = sum(p.numel() for group in inner.bit16_groups for p in group)
        record["frozen_elements_per_rank"] = sum(p.numel() for p in frozen)
        record["frozen_partitioned"] = any(hasattr(p, "ds_tensor") for p in frozen)
    else:
        record["frozen_full_elements"] = sum(p.ds_numel for p in frozen)
        record["frozen_elements_per_rank"] = sum(p.ds_tensor.numel() for p in frozen)
        record["all_full_elements"] = sum(p.ds_numel for p in engine.module.parameters())
        record["all_elements_per_rank"] = sum(p.ds_tensor.numel() for p in engine.module.parameters())
    Path(out).write_text(json.dumps(record))


def _worker(rank: int, job: str, world: int, port: int, folder: str) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    out = f"{folder}/{job}-{rank}.json"
    if job == "fsdp1":
        fsdp1(rank, world, port, out)
    elif job == "fsdp2":
        fsdp2(rank, world, port, out)
    else:
        zero(int(job[4]), rank, world, port, out, bf16=job.endswith("bf16"))


def main() -> int:
    import deepspeed
    import peft
    import torch
    record = {"torch": torch.__version__, "peft": peft.__version__, "deepspeed": deepspeed.__version__,
              "device": "cpu", "config": CONFIG, "lora": LORA, "runs": {}}
    jobs = [("fsdp1", 1), ("fsdp2", 1), ("zero1", 2), ("zero2", 2), ("zero3", 2), ("zero2_bf16", 2)]
    with tempfile.TemporaryDirectory() as folder:
        for index, (job, world) in enumerate(jobs):
            mp.spawn(_worker, args=(job, world, 29600 + index, folder), nprocs=world, join=True)
            record["runs"][job] = json.loads(Path(f"{folder}/{job}-0.json").read_text())
            print(job, record["runs"][job], flush=True)
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"-> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
