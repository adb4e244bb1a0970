"""The single-GPU suite: allocated and reserved per phase, the allocator's traces, the CUDA context (needs torch).

    python benchmarks/step/measure_gpu.py --suite single --out-dir OUT       # one H200: about 6 minutes
    python benchmarks/step/measure_gpu.py --suite single --device cpu --smoke --out-dir OUT   # the loop on CPU

One child process per allocator setting (`PYTORCH_CUDA_ALLOC_CONF` is read once, when CUDA starts): without and
with `expandable_segments:True`. Each child runs every case of `single_cases()` in turn, in one process; between
cases everything is dropped and `torch.cuda.empty_cache()` hands the segments back, so each case starts from an
allocator holding only what persists (cuBLAS workspaces). Per case:
- three training steps; before each phase of each step the allocator's peaks are reset
  (`torch.cuda.reset_peak_memory_stats`) and at its end `max_memory_allocated` / `max_memory_reserved` are read;
- `torch.cuda.mem_get_info()` at the end of step 3 (the device's used bytes: context + reserved + what is outside
  the caching allocator) beside `memory_reserved()` at that moment;
- the allocator's own trace (`torch.cuda.memory._record_memory_history`, no stacks) from before the model is
  built to the end of step 3, and the segments held when recording began: a replay of the trace through a model of
  the caching allocator must reach the recorded `max_memory_reserved`.
Cases: the single-rank torch and PEFT cases that tests/data/step/measured*.json hold as CPU storage counts (so
GPU allocated can be set beside CPU live bytes), and real-shaped models (Llama-3.2-1B, Qwen2.5-0.5B / 1.5B,
Llama-3.1-8B) in full, LoRA and QLoRA fine-tunes with their weights random (from the config, on the GPU).
Each child stops starting cases once its time budget is spent, and says which it skipped.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
PHASES = ("forward", "backward", "optimizer")
STEPS = 3
SETTINGS = {"default": "", "expandable": "expandable_segments:True"}
RECORD = HERE.parents[1] / "tests" / "data" / "gpu"

# Real shapes (config.json of the Hub repositories named; weights random)
REAL = {
    # meta-llama/Llama-3.2-1B
    "llama3.2-1b": {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "head_dim": 64, "intermediate_size": 8192, "num_hidden_layers": 16, "vocab_size": 128256,
                    "tie_word_embeddings": True, "rope_theta": 500000.0, "attention_dropout": 0.0},
    # Qwen/Qwen2.5-0.5B
    "qwen2.5-0.5b": {"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "intermediate_size": 4864, "num_hidden_layers": 24, "vocab_size": 151936,
                     "tie_word_embeddings": True, "rope_theta": 1000000.0, "attention_dropout": 0.0},
    # Qwen/Qwen2.5-1.5B
    "qwen2.5-1.5b": {"model_type": "qwen2", "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 2,
                     "intermediate_size": 8960, "num_hidden_layers": 28, "vocab_size": 151936,
                     "tie_word_embeddings": True, "rope_theta": 1000000.0, "attention_dropout": 0.0},
    # meta-llama/Llama-3.1-8B
    "llama3.1-8b": {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 128256,
                    "tie_word_embeddings": False, "rope_theta": 500000.0, "attention_dropout": 0.0},
}


def _real(cid, model, **kwargs):
    from cases import _case, _lora
    lora = kwargs.pop("lora", None)
    if lora is not None:
        case = _lora(cid, "tiny", *lora, **kwargs)
    else:
        case = _case(cid, "tiny", **kwargs)
    case["model"], case["config"] = model, dict(sorted(REAL[model].items()))
    case["real_shape"] = True
    return case


def single_cases() -> list[dict]:
    """Real shapes first (they matter most if the budget runs out), then the CPU-measured single-rank cases."""
    from cases import ALL, NF4, QV, cases, lora_cases, optimizer_cases
    real = [
        _real("gpu-llama3.2-1b-bf16-foreach-s2048b2", "llama3.2-1b", regime="bf16", impl="foreach", seq=2048, batch=2),
        _real("gpu-llama3.2-1b-bf16-foreach-gc-s4096b2", "llama3.2-1b", regime="bf16", impl="foreach", seq=4096,
              batch=2, checkpointing=True),
        _real("gpu-llama3.2-1b-autocast-fused-s1024b4", "llama3.2-1b", regime="autocast", impl="fused", seq=1024,
              batch=4),
        _real("gpu-qwen2.5-0.5b-bf16-foreach-s4096b2", "qwen2.5-0.5b", regime="bf16", impl="foreach", seq=4096,
              batch=2),
        _real("gpu-qwen2.5-1.5b-bf16-for-loop-gc-s2048b4", "qwen2.5-1.5b", regime="bf16", impl="for-loop", seq=2048,
              batch=4, checkpointing=True),
        _real("gpu-llama3.1-8b-lora-all-r16-gc-s2048b2", "llama3.1-8b", lora=(ALL, 16), regime="bf16",
              impl="foreach", seq=2048, batch=2, checkpointing=True),
        _real("gpu-llama3.1-8b-lora-qv-r8-s1024b1", "llama3.1-8b", lora=(QV, 8), regime="bf16", impl="foreach",
              seq=1024, batch=1),
        _real("gpu-llama3.1-8b-bf16-foreach-gc-s2048b1", "llama3.1-8b", regime="bf16", impl="foreach", seq=2048,
              batch=1, checkpointing=True),
        _real("gpu-llama3.2-1b-qlora-nf4-all-r16-gc-s2048b2", "llama3.2-1b", lora=(ALL, 16, NF4), regime="bf16",
              impl="foreach", seq=2048, batch=2, checkpointing=True),
        _real("gpu-qwen2.5-1.5b-lora-all-r8-s2048b2", "qwen2.5-1.5b", lora=(ALL, 8), regime="bf16", impl="foreach",
              seq=2048, batch=2),
    ]
    measured = [case for case in [*cases(), *lora_cases(), *optimizer_cases()]
                if case["engine"] == "torch" and case["ranks"] == 1 and not case["fake"]]
    return real + measured


def extra_cases() -> list[dict]:
    """What the CPU cannot show: torch.compile (inductor's CUDA kernels), and long context on real shapes."""
    from cases import ALL
    compiled = _real("gpu-llama3.2-1b-bf16-foreach-s2048b2-compile", "llama3.2-1b", regime="bf16", impl="foreach",
                     seq=2048, batch=2)
    compiled["compile"] = True
    compiled_gc = _real("gpu-llama3.2-1b-bf16-foreach-gc-s4096b2-compile", "llama3.2-1b", regime="bf16",
                        impl="foreach", seq=4096, batch=2, checkpointing=True)
    compiled_gc["compile"] = True
    return [
        _real("gpu-llama3.2-1b-lora-all-r16-gc-s32768b1", "llama3.2-1b", lora=(ALL, 16), regime="bf16",
              impl="foreach", seq=32768, batch=1, checkpointing=True),
        _real("gpu-llama3.1-8b-lora-all-r16-gc-s16384b1", "llama3.1-8b", lora=(ALL, 16), regime="bf16",
              impl="foreach", seq=16384, batch=1, checkpointing=True),
        _real("gpu-qwen2.5-1.5b-bf16-foreach-gc-s16384b1", "qwen2.5-1.5b", regime="bf16", impl="foreach",
              seq=16384, batch=1, checkpointing=True),
        compiled, compiled_gc,
    ]


def _versions() -> dict:
    from importlib import metadata
    found = {}
    for name in ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "trl", "deepspeed"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def _smi() -> dict | None:
    """nvidia-smi's reading of the device (used, total, driver), or None where there is none."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total,driver_version",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20).stdout
        name, used, total, driver = [part.strip() for part in text.strip().splitlines()[0].split(",")]
        return {"name": name, "used_mib": int(used), "total_mib": int(total), "driver": driver}
    except Exception:  # no nvidia-smi: the record says so by its absence
        return None


def build(case: dict, torch, device: str):
    """The case's model on the device, as HF Trainer would train it (LoRA through PEFT, QLoRA loaded quantized)."""
    import tempfile
    from transformers import AutoConfig, AutoModelForCausalLM
    fields = dict(case["config"])
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    config._attn_implementation = case["attention"]
    dtype = torch.bfloat16 if case["regime"] == "bf16" else torch.float32
    lora = dict(case.get("lora") or {})
    quantization = lora.pop("quantization", None)
    import transformers
    from versions_compat import dtype_keyword
    key = dtype_keyword(transformers.__version__)  # (Transformers < 4.56 names it torch_dtype)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, **{key: dtype})
    if quantization:  # as transformers loads a QLoRA base: saved, loaded back through bitsandbytes
        from peft import prepare_model_for_kbit_training
        from transformers import BitsAndBytesConfig
        fields = dict(quantization)
        fields["bnb_4bit_compute_dtype"] = getattr(torch, fields["bnb_4bit_compute_dtype"])
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            del model
            torch.cuda.empty_cache() if device == "cuda" else None
            model = AutoModelForCausalLM.from_pretrained(folder, **{key: torch.bfloat16}, device_map={"": device},
                                                         attn_implementation=case["attention"],
                                                         quantization_config=BitsAndBytesConfig(**fields))
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(**{key: value for key, value in lora.items() if value is not None}))
    model.train()
    if case["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if case.get("compile"):  # as HF Trainer's torch_compile=True wraps the model (default backend inductor)
        model = torch.compile(model)
    return model


def read(meter) -> dict:
    """A PhaseMeter's statistics now (measure_gpu.cuda_meter, or tracker_meter on CPU: reserved unknown)."""
    meter.sync()
    allocated, max_allocated, reserved, max_reserved = meter.stats()
    return {"allocated": allocated, "max_allocated": max_allocated, "reserved": reserved, "max_reserved": max_reserved}


def _compact_segments(segments) -> list:
    keep = ("address", "total_size", "stream", "segment_type", "allocated_size", "active_size", "is_expandable")
    return [{**{key: segment.get(key) for key in keep},
             "blocks": [{key: block.get(key) for key in ("address", "size", "requested_size", "state")}
                        for block in segment.get("blocks", [])]} for segment in segments]


def run_case(case: dict, torch, device: str, trace: bool) -> tuple[dict, dict | None]:
    import gc
    from engines import torch_optimizer, trainable
    started = time.time()
    tracker = None
    recording = None
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
        if trace:
            try:  # (clear_history: torch >= 2.5)
                torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                         max_entries=2_000_000, clear_history=True)
            except TypeError:
                torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                         max_entries=2_000_000)
            start = torch.cuda.memory._snapshot()
            recording = {"initial_segments": _compact_segments(start["segments"]),
                         "skip": len(start["device_traces"][0]) if start["device_traces"] else 0}
    else:
        from tracker import StorageTracker
        tracker = StorageTracker()
        tracker.__enter__()
        before = {"allocated": 0, "reserved": None}
    from measure_gpu import cuda_meter, tracker_meter
    meter = cuda_meter(torch) if tracker is None else tracker_meter(tracker)
    try:
        model = build(case, torch, device)
        optimizer = torch_optimizer(case, trainable(model), torch)
        built = read(meter)
        generator = torch.Generator().manual_seed(1)
        ids = torch.randint(0, case["config"]["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                            generator=generator).to(device)
        steps = []
        for _ in range(STEPS):
            phases = {}
            for phase in PHASES:
                meter.sync()
                meter.reset()
                start_allocated = read(meter)["allocated"]
                if phase == "forward":
                    if case["regime"] == "autocast":
                        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
                            loss = model(input_ids=ids, labels=ids).loss
                    else:
                        loss = model(input_ids=ids, labels=ids).loss
                elif phase == "backward":
                    loss.backward()
                    del loss
                else:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                phases[phase] = {"start_allocated": start_allocated, **read(meter)}
            steps.append(phases)
        result = {"id": case["id"], "steps": steps, "built": built, "before": before,
                  "params": sum(p.numel() for p in model.parameters()),
                  "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}
        if device == "cuda":
            free, total = torch.cuda.mem_get_info()
            result["device_used_end"] = total - free
            result["reserved_end"] = torch.cuda.memory_reserved()
            stats = torch.cuda.memory_stats()
            result["allocator_stats"] = {key: stats.get(key) for key in (
                "num_alloc_retries", "num_ooms", "segment.all.peak", "allocation.all.allocated",
                "inactive_split_bytes.all.peak", "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak",
                "allocated_bytes.large_pool.peak", "allocated_bytes.small_pool.peak")}
        peaks = {phase: max(step[phase]["max_allocated"] for step in steps[1:]) for phase in PHASES}
        result["step_max_allocated"] = max(peaks.values())
        result["peak_phase"] = max(peaks, key=peaks.get)
        if device == "cuda":
            result["step_max_reserved"] = max(step[phase]["max_reserved"] for step in steps[1:] for phase in PHASES)
            result["max_reserved_all_steps"] = max(step[phase]["max_reserved"] for step in steps for phase in PHASES)
            result["max_allocated_all_steps"] = max(step[phase]["max_allocated"] for step in steps
                                                    for phase in PHASES)
        del model, optimizer, ids
    except Exception as error:  # reported in the record; the other cases still run
        import traceback
        result = {"id": case["id"], "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-2000:]}
    finally:
        if tracker is not None:
            tracker.__exit__(None, None, None)
    if recording is not None:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = snapshot["device_traces"][0][recording["skip"]:]
        recording.update(id=case["id"], events=[[e["action"], e["addr"], e["size"], e["stream"]] for e in events])
        if "error" not in result:
            recording.update(max_reserved=result["max_reserved_all_steps"],
                             max_allocated=result["max_allocated_all_steps"])
        recording.pop("skip")
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    result["seconds"] = round(time.time() - started, 2)
    return result, recording


def _nccl_cost(torch, total: int) -> dict:
    """Device bytes outside the caching allocator that a one-rank NCCL communicator takes (init, one all-reduce)."""
    import torch.distributed as dist
    try:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        before = total - torch.cuda.mem_get_info()[0]
        reserved_before = torch.cuda.memory_reserved()
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
        tensor = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        after = total - torch.cuda.mem_get_info()[0]
        result = {"used_before": before, "used_after": after, "reserved_before": reserved_before,
                  "reserved_after": torch.cuda.memory_reserved(),
                  "env": {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}}
        del tensor
        dist.destroy_process_group()
        torch.cuda.empty_cache()
        result["used_after_destroy"] = total - torch.cuda.mem_get_info()[0]
        return result
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def child(setting: str, device: str, smoke: bool, budget: float, out_dir: Path, only: list[str] | None,
          extra: bool = False) -> int:
    import warnings
    warnings.filterwarnings("ignore")
    started = time.time()
    smi_before = _smi() if device == "cuda" else None
    import torch
    import transformers
    from cases import smoke_case
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    record: dict = {"setting": setting, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                    "versions": _versions(), "device": device, "steps": STEPS, "cases": [], "skipped": []}
    if device == "cuda":
        free0, total = torch.cuda.mem_get_info()  # creates the context
        x = torch.zeros(1, device="cuda")
        after_init = total - torch.cuda.mem_get_info()[0]
        a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
        (a @ a).sum().item()  # cuBLAS handle and workspace
        after_cublas = total - torch.cuda.mem_get_info()[0]
        reserved_after_cublas = torch.cuda.memory_reserved()
        del a, x
        torch.cuda.empty_cache()
        record["context"] = {
            "total": total, "used_after_init": after_init, "used_after_cublas": after_cublas,
            "reserved_after_cublas_before_empty_cache": reserved_after_cublas,
            "reserved_after_empty_cache": torch.cuda.memory_reserved(),
            "allocated_after_empty_cache": torch.cuda.memory_allocated(),
            "used_after_empty_cache": total - torch.cuda.mem_get_info()[0],
            "smi_before_torch": smi_before, "smi_after": _smi(),
            "device_name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
        if setting == "default":
            record["context"]["nccl"] = _nccl_cost(torch, total)
    else:
        torch.set_num_threads(2)
    chosen = [smoke_case()] if smoke else extra_cases() if extra else single_cases()
    if only:
        chosen = [case for case in chosen if any(case["id"].startswith(prefix) for prefix in only)]
    traces = []
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / f"results_{setting}.json"
    for index, case in enumerate(chosen, 1):
        if time.time() - started > budget:
            record["skipped"].append(case["id"])
            continue
        result, recording = run_case(case, torch, device, trace=(device == "cuda"))
        record["cases"].append({"case": case, **result})
        if recording is not None:
            traces.append(recording)
        if "error" in result:
            line = "ERROR " + result["error"][:300]
        else:
            line = (f"allocated {result['step_max_allocated'] / 2**20:.1f} MiB in {result['peak_phase']}"
                    + (f", reserved {result['step_max_reserved'] / 2**20:.1f} MiB" if device == "cuda" else ""))
        print(f"[{setting}] {index}/{len(chosen)} {case['id']} ({result['seconds']} s): {line}", flush=True)
        results_path.write_text(json.dumps(record))
    record["seconds"] = round(time.time() - started, 1)
    results_path.write_text(json.dumps(record))
    if traces:
        header = {"torch": record["versions"].get("torch"), "setting": setting,
                  "expandable_segments": "expandable_segments:True" in record["alloc_conf"],
                  "device_name": record.get("context", {}).get("device_name")}
        with gzip.open(out_dir / f"allocator_traces_{setting}.json.gz", "wt") as handle:
            json.dump({**header, "cases": traces}, handle)
    return 0


def main(args) -> int:
    """Every allocator setting in its own child process, one after the other, sharing the time budget."""
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = ["default"] if args.device == "cpu" else list(SETTINGS)
    failed = 0
    for setting in settings:
        env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        if SETTINGS[setting]:
            env["PYTORCH_CUDA_ALLOC_CONF"] = SETTINGS[setting]
        else:
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        command = [sys.executable, str(HERE / "measure_gpu.py"), "--suite", "single", "--setting", setting,
                   "--device", args.device, "--out-dir", str(out_dir), "--budget", str(args.budget / len(settings))]
        command += ["--smoke"] if args.smoke else []
        for prefix in args.only or []:
            command += ["--only", prefix]
        failed += subprocess.run(command, env=env).returncode != 0
    return 1 if failed else 0
