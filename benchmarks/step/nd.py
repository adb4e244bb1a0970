"""N-D parallel, activation-offload and tiled training steps, measured on CPU (issue 30) -> tests/data/step/nd.json.

The whole-step method of measure.py (one process per rank over gloo on 127.0.0.1, a StorageTracker entered before
the model is built, step 2 of 2 split into forward / backward / optimizer), applied to what long context adds:

- `tensor` t: torch DTensor tensor parallelism over a 1-D mesh of t ranks with Transformers' Llama plan
  (`LlamaConfig.base_model_tp_plan`: q/k/v/gate/up `ColwiseParallel`, o/down `RowwiseParallel`, every output a local
  tensor) and the untied `lm_head` as `colwise_gather_output` (`ColwiseParallel(output_layouts=Replicate())`: the
  logits gathered to full V on every rank). Embeddings and norms stay replicated.
- `activation_offload: cpu_all`: TRL's `OffloadActivations` (trl/models/activation_offloading.py) around forward and
  backward. A CPU has no device to offload from, so "the device" is emulated: the accelerator is reported as `cpu`,
  every storage the pack hook creates with `empty` / `empty_like` (the host copies: `torch.empty_like(activation,
  device="cpu")`) is tagged host and left out of the per-phase peaks, and the unpack hook returns a fresh copy of a
  host tensor (what `.to(device)` makes on a GPU; on a CPU it would return the host tensor itself). Pinning needs an
  accelerator: `use_pin_memory=False`.
- `ulysses` u: DeepSpeed's `UlyssesSPAttentionHF.register_with_transformers(model, "sdpa", u, b, seq_length=s,
  seq_length_is_variable=False)` (deepspeed/runtime/sequence_parallel/ulysses_sp.py: sdpa wrapped in the all-to-alls),
  each rank fed its s/u slice of the tokens, positions and pre-shifted labels (`shift_labels`, as
  `UlyssesSPDataLoaderAdapter` writes them), the local loss; DDP over the u ranks averages the gradients (DeepSpeed's
  engine reduces over the sequence-data-parallel group).
- `tiled_mlp_shards` n: every decoder layer's MLP forward through DeepSpeed's `TiledMLP.apply`
  (deepspeed/runtime/sequence_parallel/ulysses_sp.py), as DeepSpeed's docstring monkey-patches LlamaMLP.

Every case has a `twin`: the same model, tokens per rank and engine without the mechanism, measured alongside.

    PYTHONPATH=/tmp/ndpkgs nice -n 5 /work/venv-fam/bin/python benchmarks/step/nd.py            # all cases
    PYTHONPATH=/tmp/ndpkgs /work/venv-fam/bin/python benchmarks/step/nd.py --only nd-tp --explain

(/tmp/ndpkgs: `pip install --target /tmp/ndpkgs --no-deps trl==1.16.0 deepspeed==0.19.8 hjson ninja py-cpuinfo
msgpack einops`; DS_ACCELERATOR=cpu is set by measure.run_case.)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cases import _case, _ds  # noqa: E402
from measure import PHASES, METHOD, parser_with_common_arguments, quiet_torch, run_case, versions  # noqa: E402

OUT = HERE.parents[1] / "tests" / "data" / "step" / "nd.json"


def _nd(cid, model, seq, batch=1, ranks=1, checkpointing=False, stage=None, **nd):
    if stage is not None:  # DeepSpeed ZeRO at this stage (bf16, its fp32 master), as measure.py's ds-* cases
        case = _ds(cid, model, stage=stage, ranks=ranks, batch=batch, seq=seq, checkpointing=checkpointing)
    elif ranks > nd.get("tensor", 1):  # the ranks beyond t average their gradients: DDP
        case = _case(cid, model, engine="ddp", seq=seq, batch=batch, ranks=ranks, checkpointing=checkpointing,
                     ddp={"gradient_as_bucket_view": False})
    else:
        case = _case(cid, model, seq=seq, batch=batch, ranks=ranks, checkpointing=checkpointing)
    case["nd"] = dict(sorted(nd.items()))
    return case


def nd_cases() -> list[dict]:
    found = []
    for model, seq in (("llama-h256", 1024), ("llama-h256", 2048), ("llama-h512-v8k", 1024),
                       ("llama-h512-v8k", 2048)):
        tag = f"{model.split('-')[1]}{'-v8k' if 'v8k' in model else ''}-s{seq}"
        found.append(_nd(f"nd-base-{tag}", model, seq))
        found.append(_nd(f"nd-tp2-{tag}", model, seq, ranks=2, tensor=2))
        found.append(_nd(f"nd-tiled2-{tag}", model, seq, tiled_mlp_shards=2))
        found.append(_nd(f"nd-tiled4-{tag}", model, seq, tiled_mlp_shards=4))
        found.append(_nd(f"nd-offload-{tag}", model, seq, activation_offload="cpu_all"))
        found.append(_nd(f"nd-base-ckpt-{tag}", model, seq, checkpointing=True))
        found.append(_nd(f"nd-offload-ckpt-{tag}", model, seq, checkpointing=True, activation_offload="cpu_all"))
    for model, seq in (("llama-h256", 1024), ("llama-h256", 2048), ("llama-h512-v8k", 1024),
                       ("llama-h512-v8k", 2048)):
        tag = f"{model.split('-')[1]}{'-v8k' if 'v8k' in model else ''}-s{seq}"
        found.append(_nd(f"nd-sp2-{tag}", model, seq, ranks=2, ulysses=2))
    found.append(_nd("nd-sp4-h256-s1024", "llama-h256", 1024, ranks=4, ulysses=4))  # kv heads 2 < u: replicated
    for stage in (2, 3):  # ZeRO over the sequence-data-parallel group (dp·u), DeepSpeed given the Ulysses mpu
        found.append(_nd(f"nd-sp2-z{stage}-h512-v8k-s1024", "llama-h512-v8k", 1024, ranks=2, stage=stage, ulysses=2))
        found.append(_nd(f"nd-z{stage}-r2-h512-v8k-s1024", "llama-h512-v8k", 1024, ranks=2, stage=stage))
    for model, seq in (("llama-h256", 1024), ("llama-h512-v8k", 2048)):  # TP keeps each checkpointed input whole
        tag = f"{model.split('-')[1]}{'-v8k' if 'v8k' in model else ''}-s{seq}"
        found.append(_nd(f"nd-tp2-ckpt-{tag}", model, seq, ranks=2, checkpointing=True, tensor=2))
        found.append(_nd(f"nd-tiled2-ckpt-{tag}", model, seq, checkpointing=True, tiled_mlp_shards=2))
    found.append(_nd("nd-tp2-h1024-s1024", "llama-h1024", 1024, ranks=2, tensor=2))
    found.append(_nd("nd-base-h1024-s1024", "llama-h1024", 1024))
    found.append(_nd("nd-tp4-h1024-s512", "llama-h1024", 512, ranks=4, tensor=4))
    found.append(_nd("nd-base-h1024-s512", "llama-h1024", 512))
    return found


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in nd_cases()}


# ---------------------------------------------------------------- child: one rank
def _tensor_parallel(model, world, torch):
    """Transformers' Llama tp_plan on a 1-D mesh (what `tp_plan="auto"` applies), the head gathered."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (world,))
    plan = {}
    for index in range(len(model.model.layers)):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{index}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{index}.{name}"] = RowwiseParallel()
    plan["lm_head"] = ColwiseParallel(output_layouts=Replicate())
    parallelize_module(model, mesh, plan)
    return model


def _tile_mlps(model, shards):
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP

    def mlp_forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    for layer in model.model.layers:
        mlp = layer.mlp
        weights = [mlp.down_proj.weight, mlp.gate_proj.weight, mlp.up_proj.weight]
        mlp.forward = (lambda module, ws: lambda x: TiledMLP.apply(mlp_forward, module, x, shards, ws))(mlp, weights)


def _offloader(tracker, torch):
    """TRL's OffloadActivations on a CPU posing as the device (module docstring)."""
    import trl.models.activation_offloading as offloading
    original = torch.accelerator.current_accelerator
    torch.accelerator.current_accelerator = lambda *args, **kwargs: torch.device("cpu")
    try:
        hooks = offloading.OffloadActivations(use_pin_memory=False, use_streams=False)
    finally:
        torch.accelerator.current_accelerator = original
    pack, unpack = hooks.pack_hook, hooks.unpack_hook

    def tagged_pack(tensor):
        tracker.hosting = True
        try:
            return pack(tensor)
        finally:
            tracker.hosting = False

    def device_unpack(key):
        value = unpack(key)
        if tracker.serial(value) in tracker.host:
            return value.clone()  # the copy `.to(device)` makes on a GPU
        return value

    hooks.pack_hook, hooks.unpack_hook = tagged_pack, device_unpack
    return hooks


def _host_aware(tracker_class):
    class HostAwareTracker(tracker_class):
        """StorageTracker whose phases count device bytes only: storages made by empty / empty_like while
        `hosting` are host copies (kept in `host`, their bytes in `host_current`)."""

        def __init__(self):
            super().__init__()
            self.hosting, self.host, self.host_current = False, set(), 0

        def register(self, tensor, op=""):
            if self.serial(tensor) in self.host:  # (a host copy seen again: copy_'s output, unpack's clone input)
                return
            hosted = self.hosting and op.startswith("empty")
            before, phase = self.next_serial, self.phase
            if hosted:
                self.phase = None  # no peak counted with the host copy in it
            super().register(tensor, op)
            self.phase = phase
            if hosted and self.next_serial > before:
                serial = self.next_serial - 1
                self.host.add(serial)
                self.host_current += self.live[serial]
                self.current -= self.live[serial]
                self.live[serial] = 0

        def _freed(self, key, serial):
            if serial in self.host:
                self.host.discard(serial)
                self.live.pop(serial, None)
                if self.serial_of.get(key) == serial:
                    del self.serial_of[key]
                return
            super()._freed(key, serial)

    return HostAwareTracker


def run_rank(case: dict, rank: int, world: int) -> dict:
    import contextlib
    from engines import Labeller, build_model, torch_optimizer, trainable
    from tracker import StorageTracker
    torch = quiet_torch()
    started = time.time()
    nd = case["nd"]
    tracker = _host_aware(StorageTracker)()
    with tracker:
        if world > 1 and case["engine"] != "deepspeed":
            torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
        elif world > 1:
            import deepspeed
            deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        model = build_model(case, torch)
        if nd.get("tensor", 1) > 1:
            model = _tensor_parallel(model, world, torch)
        ulysses = nd.get("ulysses", 1)
        calls: list[int] = []
        mpu = None
        if ulysses > 1:
            import deepspeed
            from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
            deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)  # (its comm wraps torch's group)
            import deepspeed.comm as ds_comm
            original_all_to_all = ds_comm.all_to_all_single

            def counted(*args, **kwargs):  # proof that attention went through the all-to-alls
                calls.append(1)
                return original_all_to_all(*args, **kwargs)
            ds_comm.all_to_all_single = counted
            mpu = UlyssesSPAttentionHF.register_with_transformers(model, "sdpa", ulysses, case["micro_batch"],
                                                            seq_length=case["sequence_length"],
                                                            seq_length_is_variable=False)
        if nd.get("tiled_mlp_shards"):
            _tile_mlps(model, nd["tiled_mlp_shards"])
        module, engine, wrapper = model, None, None
        if case["engine"] == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            module = DistributedDataParallel(model, **case["ddp"])
        optimizer = torch_optimizer(case, trainable(module), torch)
        if case["engine"] == "deepspeed":  # HF Trainer's client optimizer; the mpu makes ZeRO's group dp·u
            import deepspeed
            engine, wrapper, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                                         model_parameters=trainable(model),
                                                         config=dict(case["ds_config"]), mpu=mpu)
            module, optimizer = engine, getattr(wrapper, "optimizer", wrapper)
        labeller = Labeller(tracker, model, optimizer, wrapper=wrapper)
        offload = nd.get("activation_offload", "none") == "cpu_all"
        generator = torch.Generator().manual_seed(1)  # the same tokens on every rank (one data-parallel group)
        ids = torch.randint(0, case["config"]["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                            generator=generator)
        seq, inputs = case["sequence_length"], {"input_ids": ids, "labels": ids}
        if ulysses > 1:  # this rank's slice, the labels shifted before slicing
            shifted = torch.cat([ids[:, 1:], torch.full((ids.shape[0], 1), -100)], 1)
            part = slice(rank * seq // ulysses, (rank + 1) * seq // ulysses)
            inputs = {"input_ids": ids[:, part].contiguous(), "position_ids": torch.arange(seq)[None, part],
                      "labels": shifted[:, part].contiguous(), "shift_labels": shifted[:, part].contiguous()}
        losses = []
        for step in (1, 2):
            phase = (lambda name: tracker.begin("step1." + name)) if step == 1 else tracker.begin
            labeller.collect()
            hooks = _offloader(tracker, torch) if offload else contextlib.nullcontext()
            with hooks:
                phase("forward")
                loss = module(**inputs).loss
                phase("backward")
                engine.backward(loss) if engine is not None else loss.backward()
            losses.append(float(loss.detach().float().item()))
            del loss, hooks
            labeller.collect()
            phase("optimizer")
            if engine is not None:
                engine.step()
            else:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            tracker.end()
            labeller.collect()
    result = {"rank": rank, "persistent_before_step2": tracker.phases["forward"]["start"], "losses": losses,
              "phases": {}, "seconds": round(time.time() - started, 1), "host_bytes_end": tracker.host_current,
              "all_to_all_calls": len(calls)}
    for name in PHASES:
        phase = tracker.phases[name]
        result["phases"][name] = {"peak": phase["peak"], "start": phase["start"], "end": phase["end"],
                                  **tracker.breakdown(name, labeller.labels)}
    result["step_peak"] = max(result["phases"][name]["peak"] for name in PHASES)
    result["param_numel_local"] = sum(getattr(p, "_local_tensor", p).numel() for p in model.parameters())
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return result


def _child_main(case_id: str, rank: int, world: int, out: Path) -> int:
    try:
        result = run_rank(by_id()[case_id], rank, world)
    except Exception as error:
        import traceback
        result = {"rank": rank, "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-3000:]}
    out.write_text(json.dumps(result))
    return 0


def merge(out: Path, case: dict, ranks: list[dict]) -> None:
    record = json.loads(out.read_text()) if out.exists() else {}
    kept = {item["id"]: item for item in record.get("cases", [])}
    entry = {**case, "per_rank": ranks}
    errors = [rank.get("error") for rank in ranks if "error" in rank]
    if errors:
        entry["error"] = errors[0]
    kept[case["id"]] = entry
    found = versions()
    found["trl"] = _version("trl")
    record = {**found, "device": "cpu", "method": METHOD + "; host copies of activation offload tagged and left out",
              "phases": list(PHASES), "cases": [kept[cid] for cid in by_id() if cid in kept]}
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _version(name):
    import importlib.metadata as metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv=None) -> int:
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=600)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--skip-done", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.result)
    selected = [case for case in nd_cases() if not args.only or any(case["id"].startswith(p) for p in args.only)]
    if args.skip_done and OUT.exists():
        done = {item["id"] for item in json.loads(OUT.read_text())["cases"] if "error" not in item}
        selected = [case for case in selected if case["id"] not in done]
    for index, case in enumerate(selected, 1):
        ranks = run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve())
        bad = [rank for rank in ranks if "error" in rank]
        if bad:
            print(f"{index}/{len(selected)} {case['id']}: ERROR {bad[0]['error']}", bad[0].get("traceback", "")[-800:],
                  bad[0].get("log_tail", "")[-800:], flush=True)
        else:
            top = max(ranks, key=lambda rank: rank["step_peak"])
            print(f"{index}/{len(selected)} {case['id']}: " + " ".join(
                f"{name[:3]}={top['phases'][name]['peak'] / 2**20:.2f}" for name in PHASES) + f" {top['seconds']}s",
                flush=True)
        if args.explain:
            print(json.dumps(ranks, indent=1)[:4000])
        else:
            merge(OUT, case, ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
