"""Measure TRL's GRPO step (use_vllm false, the default) per phase on CPU: TRL's own code, tiny random models.

    nice -n 5 /work/venv-measure/bin/python benchmarks/preference/grpo.py            # every case -> JSON
    /work/venv-measure/bin/python benchmarks/preference/grpo.py --only grpo-full-ref --explain

What runs (TRL 1.16, trl/trainer/grpo_trainer.py) on a stand-in trainer holding what `__init__` sets at GRPOConfig's
defaults (loss_type "dapo", epsilon 0.2, temperature 1.0, top_p 1.0, top_k 0, no entropy bonus):
- generation: the regular path of `_generate_single_turn`: `unwrap_model_for_generation` (trl/models/utils.py), then
  the policy's `generate` under `no_grad` with the GenerationConfig `__init__` builds (max_new_tokens =
  max_completion_length, do_sample), over the generation batch (per_device_train_batch_size × steps_per_generation
  completions, each prompt already repeated num_generations times by the sampler). An EOS id no random model is
  likely to sample keeps every completion at max_completion_length (the worst case);
- reference: `_get_per_token_logps_and_entropies` of the reference (a copy built like the policy, or the PEFT policy
  under `use_adapter(model, None)`: adapters disabled) under `no_grad`, chunked by per_device_train_batch_size, as
  `_generate_and_score_completions` runs it when beta != 0 (old log-probs are not computed: steps_per_generation
  equals gradient_accumulation_steps, the default);
- forward / backward / optimizer: `_compute_loss` on one micro-batch (the first per_device_train_batch_size
  completions), its backward, the AdamW step.
Both models get `add_fused_lm_head` as `__init__` adds it (policy: log_probs and entropy; reference: log_probs).
The `trl18-grpo-` cases run TRL 1.8.0 (axolotl's pin; --trl18 DIR as benchmarks/preference/measure.py): no fused
head — its `_get_per_token_logps_and_entropies` makes the completion positions' logits (`logits_to_keep` + 1),
`selective_log_softmax` and the entropy under `no_grad`; GRPOConfig's max_completion_length default is 256 there.
Engines: torch (one process); DeepSpeed ZeRO-2 / ZeRO-3 at 2 ranks (`deepspeed.initialize`, the reference through
`prepare_deepspeed`, the plugin's stage read by `unwrap_model_for_generation`); FSDP2 at 2 ranks (`fully_shard` per
decoder layer and on the root; beta 0; this harness builds that model in fp32).
Step 2 of 2 is split into those phases. Results are merged into tests/data/step/preference.json (cases `grpo-`,
`trl18-grpo-`), the other scripts' cases kept.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "step"))
PHASES = ("generation", "reference", "forward", "backward", "optimizer")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"preference_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _grpo_case(cid, prompt=32, completion=96, beta=0.04, steps_per_generation=1, trl=None, **kwargs):
    reference = "none" if beta == 0 else ("adapter" if kwargs.get("lora") else "model")
    case = _module("measure")._case(cid, reference=reference, seq=prompt + completion, **kwargs)
    case.update(trainer="grpo", loss_type="dapo", beta=beta, prompt_length=prompt, completion_length=completion,
                steps_per_generation=steps_per_generation, num_generations=case["micro_batch"], trl_version=trl)
    return case


def cases() -> list[dict]:
    return copy.deepcopy([
        _grpo_case("grpo-full-ref", batch=4),
        _grpo_case("grpo-full-noref", batch=4, beta=0.0),
        _grpo_case("grpo-lora-adapter-ref", batch=4, lora=True),
        _grpo_case("grpo-full-ref-longprompt", batch=4, prompt=96, completion=32),
        _grpo_case("grpo-full-ref-spg2", batch=2, steps_per_generation=2),
        _grpo_case("grpo-ds-z2-r2-full-ref", batch=4, engine="deepspeed", stage=2, ranks=2, impl="for-loop"),
        _grpo_case("grpo-ds-z3-r2-full-ref", batch=4, engine="deepspeed", stage=3, ranks=2, impl="for-loop"),
        _grpo_case("grpo-fsdp2-r2-full-noref", batch=4, beta=0.0, engine="fsdp2", ranks=2),
        _grpo_case("grpo-fsdp2-r2-full-ref", batch=4, engine="fsdp2", ranks=2),
        _grpo_case("trl18-grpo-full-ref", batch=4, trl="1.8.0"),
        _grpo_case("trl18-grpo-full-noref", batch=4, beta=0.0, trl="1.8.0"),
        _grpo_case("trl18-grpo-lora-adapter-ref", batch=4, lora=True, trl="1.8.0"),
        _grpo_case("trl18-grpo-full-ref-b2", batch=2, trl="1.8.0"),
    ])


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in cases()}


def _stand_in(case, model, ref_model, accelerator):
    from collections import defaultdict
    from types import SimpleNamespace
    from trl import GRPOTrainer
    args = SimpleNamespace(gradient_checkpointing_kwargs=None, use_bias_correction_kl=False, delta=None,
                           steps_per_generation=case["steps_per_generation"])
    stand = SimpleNamespace(model=model, ref_model=ref_model, accelerator=accelerator, args=args, beta=case["beta"],
                            loss_type=case["loss_type"], epsilon_low=0.2, epsilon_high=0.2, top_entropy_quantile=1.0,
                            off_policy_mask_threshold=None, importance_sampling_level="token", use_vllm=False,
                            vllm_importance_sampling_correction=False, aux_loss_enabled=False,
                            _entropy_bonus_enabled=False, current_gradient_accumulation_steps=case["steps_per_generation"],
                            max_completion_length=case["completion_length"], temperature=1.0,
                            model_kwarg_keys=inspect.signature(
                                (model.get_base_model() if hasattr(model, "get_base_model") else model).forward
                            ).parameters.keys(),
                            _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    # (its `profiling_decorator` only times it; the function it wraps runs here)
    logps = inspect.unwrap(GRPOTrainer._get_per_token_logps_and_entropies)
    stand._get_per_token_logps_and_entropies = logps.__get__(stand)
    return stand


def _generate(case, model, accelerator, prompt_ids, torch):
    """`_generate_single_turn`'s regular path (no padding: every prompt has the same length)."""
    from transformers import GenerationConfig
    from trl.models.utils import unwrap_model_for_generation
    vocab = case["config"]["vocab_size"]
    generation_kwargs = {"max_new_tokens": case["completion_length"], "do_sample": True, "pad_token_id": 0,
                         "bos_token_id": 1, "eos_token_id": [vocab - 1], "temperature": 1.0, "top_p": 1.0,
                         "top_k": 0, "min_p": None, "repetition_penalty": 1.0, "cache_implementation": None}
    config = GenerationConfig(**generation_kwargs, disable_compile=True)
    inputs = {"input_ids": prompt_ids, "attention_mask": torch.ones_like(prompt_ids)}
    with unwrap_model_for_generation(model, accelerator, generation_kwargs=generation_kwargs) as unwrapped, \
            torch.no_grad():
        prompt_completion_ids = unwrapped.generate(**inputs, generation_config=config)
    return prompt_completion_ids[:, prompt_ids.size(1):]


class _Accelerator(_module("measure")._Accelerator):
    """What GRPO's code asks of accelerate's Accelerator on one rank: the DeepSpeed plugin (its config and ZeRO
    stage, read by trl/distributed.py `DistributedBackend` and `prepare_deepspeed`) or none; per-rank reductions."""

    def __init__(self, device, ds_config=None, world=1):
        from types import SimpleNamespace
        super().__init__(device)
        plugin = None if ds_config is None else SimpleNamespace(
            deepspeed_config=ds_config, zero_stage=ds_config["zero_optimization"]["stage"])
        self.state = SimpleNamespace(deepspeed_plugin=plugin, fsdp_plugin=None)
        self.num_processes = world

    def unwrap_model(self, model):
        return getattr(model, "module", model)  # a DeepSpeed engine's module, as accelerate's

    def reduce(self, value, reduction="sum"):
        return value


def run_rank(case: dict, rank: int, world: int) -> dict:
    import contextlib
    import warnings
    from types import SimpleNamespace
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from engines import Labeller, build_model, torch_optimizer
    from tracker import StorageTracker
    import trl
    from trl import GRPOTrainer
    from trl.trainer.utils import use_adapter
    if case["trl_version"] is not None and trl.__version__ != case["trl_version"]:
        raise RuntimeError(f"the case needs trl {case['trl_version']} (--trl18), found {trl.__version__}")

    def add_fused_lm_head(module, outputs=("log_probs",)):  # TRL 1.16's GRPOTrainer.__init__; none in TRL 1.8
        if case["trl_version"] is None:
            from trl.trainer.utils import add_fused_lm_head as add
            add(module, outputs=outputs)
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    started = time.time()
    tracker = StorageTracker()
    extra: dict = {}
    keep = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(tracker)
        deepspeed_run, fsdp_run = case["engine"] == "deepspeed", case["engine"] == "fsdp2"
        if deepspeed_run:
            import deepspeed
            deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        elif world > 1:
            torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
        plain = {key: value for key, value in case.items() if key != "lora"}
        model = build_model(plain, torch)
        ref_model = build_model(plain, torch) if case["reference"] == "model" else None
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        if case["lora"]:
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **case["lora"]))
            extra["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if ref_model is not None:
            ref_model.eval()
            add_fused_lm_head(ref_model)
        accelerator = _Accelerator(torch.device("cpu"), case.get("ds_config"), world)
        trainable = [p for p in model.parameters() if p.requires_grad]
        if deepspeed_run:
            from transformers.integrations import HfDeepSpeedConfig
            keep.append(HfDeepSpeedConfig(copy.deepcopy(case["ds_config"])))  # is_deepspeed_zero3_enabled() reads it
            engine, wrapper, _, _ = deepspeed.initialize(model=model, optimizer=torch_optimizer(case, trainable, torch),
                                                         model_parameters=trainable,
                                                         config=copy.deepcopy(case["ds_config"]))
            if ref_model is not None:
                from trl.models.utils import prepare_deepspeed
                ref_model = prepare_deepspeed(ref_model, accelerator)
            caller, optimizer = engine, getattr(wrapper, "optimizer", wrapper)
            labeller = Labeller(tracker, model, optimizer, wrapper=wrapper)
        else:
            if fsdp_run:  # FSDP2 as Accelerate applies it: each decoder layer, then the root (reshard after forward)
                from torch.distributed.device_mesh import init_device_mesh
                from torch.distributed.fsdp import fully_shard
                mesh = init_device_mesh("cpu", (world,))
                for layer in model.model.layers:
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
                if ref_model is not None:  # prepare_fsdp (trl/models/utils.py), FSDP2: fully_shard of the root only,
                    # with Accelerate's reshard_after_forward (True for fsdp_version 2, accelerate/utils/dataclasses.py)
                    fully_shard(ref_model, mesh=mesh, reshard_after_forward=True)
                trainable = [p for p in model.parameters() if p.requires_grad]
                accelerator.state.fsdp_plugin = SimpleNamespace(fsdp_version=2)
            caller = model
            optimizer = torch_optimizer(case, trainable, torch)
            labeller = Labeller(tracker, model, optimizer)
        stand = _stand_in(case, caller, ref_model, accelerator)
        b, rows = case["micro_batch"], case["micro_batch"] * case["steps_per_generation"]
        generator = torch.Generator().manual_seed(1 + rank)
        losses, lengths = [], []
        for step in (1, 2):
            phase = (lambda name: None) if step == 1 else tracker.begin
            if step == 1:
                tracker.begin("step1")
            else:
                labeller.collect()
            prompt_ids = torch.randint(3, case["config"]["vocab_size"] - 1, (rows, case["prompt_length"]),
                                       generator=generator)
            phase("generation")
            completion_ids = _generate(case, caller, accelerator, prompt_ids, torch)
            lengths.append(completion_ids.size(1))
            completion_mask = torch.ones_like(completion_ids)
            ids = torch.cat([prompt_ids, completion_ids], dim=1)
            mask = torch.ones_like(ids)
            phase("reference")
            ref_logps = None
            if case["beta"] != 0.0:
                with torch.no_grad():
                    if ref_model is not None:
                        ref_logps, _, _ = stand._get_per_token_logps_and_entropies(
                            ref_model, ids, mask, completion_ids.size(1), batch_size=b)
                    else:
                        with use_adapter(model, adapter_name=None):
                            ref_logps, _, _ = stand._get_per_token_logps_and_entropies(
                                model, ids, mask, completion_ids.size(1), batch_size=b)
            inputs = {"prompt_ids": prompt_ids[:b], "prompt_mask": torch.ones_like(prompt_ids[:b]),
                      "completion_ids": completion_ids[:b], "completion_mask": completion_mask[:b],
                      "advantages": torch.randn(b, generator=generator),
                      "num_items_in_batch": completion_mask.sum()}
            if ref_logps is not None:
                inputs["ref_per_token_logps"] = ref_logps[:b]
            phase("forward")
            loss = inspect.unwrap(GRPOTrainer._compute_loss)(stand, caller, inputs)
            phase("backward")
            if deepspeed_run:
                engine.backward(loss)
            else:
                loss.backward()
            losses.append(float(loss.detach().float().item()))
            del loss
            if step == 2:
                labeller.collect()
            phase("optimizer")
            if deepspeed_run:
                engine.step()
            else:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            tracker.end()
            del inputs, ref_logps, ids, mask, completion_ids, completion_mask, prompt_ids
        shared = _module("measure")
        labels = {**labeller.labels, **shared.reference_labels(tracker, ref_model)}
        result = shared.rank_result(rank, tracker, labels, PHASES, "generation", losses=losses,
                                    completion_lengths=lengths, seconds=round(time.time() - started, 1), **extra,
                                    model_numel=sum(p.numel() for p in
                                                    (model.get_base_model() if case["lora"] else model).parameters()))
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
    return result


def _child_main(case_id: str, rank: int, world: int, out: Path) -> int:
    result = _module("measure").child_result(rank, lambda: run_rank(by_id()[case_id], rank, world))
    out.write_text(json.dumps(result))
    return 0


def merge(out: Path, case: dict, ranks: list[dict]) -> None:
    """The case into the preference record after the others (theirs kept as they are); TRL's version is the
    record's own."""
    shared = _module("measure")
    entry = {**case, "per_rank": ranks, "phases": list(PHASES)}
    shared.write_record(out, shared.merge_after_others(out, entry, list(by_id()), ranks))


def main(argv=None) -> int:
    from measure import parser_with_common_arguments, run_case, summary
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=900)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--out", type=Path, default=_module("measure").OUT)
    parser.add_argument("--trl18", help="a directory holding trl 1.8.0 (pip install --no-deps --target DIR)")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.result)
    import trl
    record = json.loads(args.out.read_text())
    if record["versions"]["trl"] != trl.__version__:
        raise SystemExit(f"the record's TRL is {record['versions']['trl']}, this Python's {trl.__version__}")
    failed = 0
    selected = [case for case in cases() if not args.only or any(case["id"].startswith(p) for p in args.only)]
    for index, case in enumerate(selected, 1):
        if case["trl_version"] and not args.trl18:
            print(f"{case['id']}: skipped (needs --trl18)")
            continue
        env = {"PYTHONPATH": args.trl18} if case["trl_version"] else None
        ranks = run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve(), env=env)
        print(f"{index}/{len(selected)} {summary(case, ranks)}", flush=True)
        failed += any("error" in rank for rank in ranks)
        if args.explain:
            print(json.dumps(ranks, indent=1)[:8000])
        else:
            merge(args.out, case, ranks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
