"""Measure preference-training steps (TRL DPO / KTO) per phase on CPU: real TRL loss code, tiny random models.

Run with the measuring venv (torch CPU, transformers, deepspeed, peft, trl), one case at a time:

    nice -n 5 /work/venv-measure/bin/python benchmarks/preference/measure.py            # every case -> JSON
    /work/venv-measure/bin/python benchmarks/preference/measure.py --only dpo-full --explain

The `trl18-` cases run TRL 1.8.0 (what axolotl pins: its DPOTrainer and KTOTrainer make the full logits and use
selective_log_softmax, no fused head; its KTOTrainer refuses a micro-batch of 1) from a directory given with --trl18 (made by
`pip install --no-deps --target DIR trl==1.8.0`), put first on the children's PYTHONPATH.

The trainers themselves need a tokenizer and datasets; what runs here is TRL's own `_compute_loss`
(trl/trainer/dpo_trainer.py DPOTrainer._compute_loss, trl/trainer/kto_trainer.py KTOTrainer._compute_loss) called
on a stand-in trainer object that holds the attributes it reads, with the models prepared as the trainers'
`__init__` prepares them: `add_fused_lm_head` on the policy (its PEFT base) and on the reference, the reference
built like the policy (same config and dtype), `prepare_deepspeed` (trl/models/utils.py) for it under DeepSpeed,
none for a PEFT policy (the adapters are disabled for the reference forward) or with precomputed reference
log-probs (they arrive in the batch). The batch is what the collators make: DPO stacks chosen and rejected
(2·b rows), KTO b completions and b mismatched KL completions. The StorageTracker of benchmarks/step is entered
before the models are built; step 2 of 2 is split into forward (the whole `_compute_loss`: policy, KL and
reference forwards and the loss), backward, optimizer. Results: tests/data/step/preference.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "step"))
OUT = HERE.parents[1] / "tests" / "data" / "step" / "preference.json"
PHASES = ("forward", "backward", "optimizer")
PROMPT = 32  # prompt tokens of every row (completion_mask 0 there)
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def _case(cid, trainer="dpo", reference="model", engine="torch", stage=None, ranks=1, lora=False, batch=1, seq=128,
          impl="foreach", model="llama-h256", trl=None, attention="sdpa", use_cache=None):
    from cases import MODELS, ds_config
    case = {"id": cid, "trainer": trainer, "reference": reference, "engine": engine, "ranks": ranks,
            "lora": dict(LORA) if lora else None, "micro_batch": batch, "sequence_length": seq, "prompt_length": PROMPT,
            "model": model, "config": dict(sorted(MODELS[model].items())), "regime": "bf16" if engine == "torch"
            else "ds-bf16", "optimizer": {"name": "AdamW", "impl": impl, "lr": 1e-4}, "attention": attention,
            "gradient_checkpointing": False, "loss_type": "sigmoid" if trainer == "dpo" else "kto", "beta": 0.1,
            "trl_version": trl}
    if engine == "deepspeed":
        case["ds_config"] = ds_config(stage, batch)
    if use_cache is not None:  # axolotl's check_model_config (src/axolotl/loaders/utils.py) sets it False
        case["config"]["use_cache"] = use_cache
    return case


def cases() -> list[dict]:
    """reference: "model" (a frozen copy), "adapter" (the PEFT policy with adapters off), "precomputed"."""
    return copy.deepcopy([
        _case("dpo-full-ref"),
        _case("dpo-full-ref-b2", batch=2),
        _case("dpo-full-precomputed", reference="precomputed"),
        _case("dpo-lora-adapter-ref", reference="adapter", lora=True),
        _case("dpo-ds-z3-r2-full-ref", engine="deepspeed", stage=3, ranks=2, impl="for-loop"),
        _case("dpo-ds-z2-r2-full-ref", engine="deepspeed", stage=2, ranks=2, impl="for-loop"),
        _case("kto-full-ref", trainer="kto", batch=2),
        _case("kto-ds-z3-r2-full-ref", trainer="kto", engine="deepspeed", stage=3, ranks=2, batch=2, impl="for-loop"),
        _case("trl18-dpo-full-ref", trl="1.8.0"),
        _case("trl18-dpo-full-ref-b2", batch=2, trl="1.8.0"),
        _case("trl18-dpo-full-precomputed", reference="precomputed", trl="1.8.0"),
        _case("trl18-dpo-lora-adapter-ref", reference="adapter", lora=True, trl="1.8.0"),
        # TRL 1.8's KTOTrainer refuses a micro-batch of 1 (its KL term needs a mismatched neighbour)
        _case("trl18-kto-full-ref", trainer="kto", batch=2, trl="1.8.0"),
        _case("trl18-kto-full-ref-b4", trainer="kto", batch=4, trl="1.8.0"),
        _case("trl18-kto-full-precomputed", trainer="kto", reference="precomputed", batch=2, trl="1.8.0"),
        _case("trl18-kto-lora-adapter-ref", trainer="kto", reference="adapter", lora=True, batch=2, trl="1.8.0"),
        _case("trl18-kto-full-ref-eager", trainer="kto", batch=2, trl="1.8.0", attention="eager"),
        _case("trl18-kto-full-ref-axolotl", trainer="kto", batch=2, trl="1.8.0", use_cache=False),
        _case("trl18-kto-lora-adapter-ref-axolotl", trainer="kto", reference="adapter", lora=True, batch=2,
              trl="1.8.0", use_cache=False),
        # TRL 1.8's prepare_deepspeed (trl/models/utils.py): the reference sharded at ZeRO-3, ZeRO-0 below it
        _case("trl18-dpo-ds-z3-r2-full-ref", engine="deepspeed", stage=3, ranks=2, impl="for-loop", trl="1.8.0"),
        _case("trl18-dpo-ds-z2-r2-full-ref", engine="deepspeed", stage=2, ranks=2, impl="for-loop", trl="1.8.0"),
        _case("trl18-kto-ds-z3-r2-full-ref", trainer="kto", engine="deepspeed", stage=3, ranks=2, batch=2,
              impl="for-loop", trl="1.8.0"),
        _case("trl18-kto-ds-z2-r2-full-ref", trainer="kto", engine="deepspeed", stage=2, ranks=2, batch=2,
              impl="for-loop", trl="1.8.0"),
    ])


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in cases()}


# ---------------------------------------------------------------- child: one rank of one case
class _Accelerator:
    """What `_compute_loss` asks of accelerate's Accelerator on one process (gathers are identities per rank)."""

    def __init__(self, device, ds_config=None):
        from types import SimpleNamespace
        self.device = device
        self.state = SimpleNamespace(deepspeed_plugin=SimpleNamespace(deepspeed_config=ds_config))

    def gather_for_metrics(self, value):
        return value

    gather = gather_for_metrics

    def unwrap_model(self, model):
        return model

    def autocast(self):
        import contextlib
        return contextlib.nullcontext()


def _stand_in(case, model, ref_model, accelerator):
    """The DPOTrainer / KTOTrainer attributes `_compute_loss` reads, at their config defaults."""
    from collections import defaultdict
    from types import SimpleNamespace
    args = SimpleNamespace(gradient_checkpointing_kwargs=None)  # the only TrainingArguments field it reads
    common = dict(model=model, ref_model=ref_model, accelerator=accelerator, args=args, aux_loss_enabled=False,
                  precompute_ref_logps=case["reference"] == "precomputed", beta=case["beta"],
                  _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0,
                  _tp_size=1, router_aux_loss_coef=0.0)
    if case["trainer"] == "dpo":
        return SimpleNamespace(**common, ld_alpha=None, f_divergence_type="reverse_kl", loss_types=["sigmoid"],
                               loss_weights=[1.0], use_weighting=False, label_smoothing=0.0,
                               f_alpha_divergence_coef=1.0)
    from trl import KTOTrainer
    stand = SimpleNamespace(**common, loss_type="kto", calculate_KL=True, desirable_weight=1.0,
                            undesirable_weight=1.0)
    stand._compute_kl_logps = KTOTrainer._compute_kl_logps.__get__(stand)
    return stand


def _batch(case, rank, torch):
    generator = torch.Generator().manual_seed(1 + rank)
    vocab, b, s = case["config"]["vocab_size"], case["micro_batch"], case["sequence_length"]
    rows = 2 * b if case["trainer"] == "dpo" else b

    def ids():
        return torch.randint(0, vocab, (rows, s), generator=generator)

    completion = torch.ones(rows, s, dtype=torch.long)
    completion[:, :case["prompt_length"]] = 0
    batch = {"input_ids": ids(), "attention_mask": torch.ones(rows, s, dtype=torch.long), "completion_mask": completion}
    if case["trainer"] == "kto":
        batch.update(KL_input_ids=ids(), KL_attention_mask=torch.ones(rows, s, dtype=torch.long),
                     KL_completion_mask=completion.clone(), label=torch.tensor([True, False] * (b // 2) + [True] * (b % 2)))
    if case["reference"] == "precomputed":
        if case["trainer"] == "dpo":
            batch.update(ref_chosen_logps=-torch.rand(b, generator=generator) * 100,
                         ref_rejected_logps=-torch.rand(b, generator=generator) * 100)
        else:
            batch.update(ref_logps=-torch.rand(b, generator=generator) * 100,
                         ref_KL_logps=-torch.rand(b, generator=generator) * 100)
    return batch


def run_rank(case: dict, rank: int, world: int) -> dict:
    import contextlib
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from engines import Labeller, build_model, torch_optimizer
    from tracker import StorageTracker
    import trl
    if case["trl_version"] is not None and trl.__version__ != case["trl_version"]:
        raise RuntimeError(f"the case needs trl {case['trl_version']} (--trl18), found {trl.__version__}")
    fused = case["trl_version"] is None  # TRL 1.8 has no fused LM head: the model's own forward makes the logits

    def add_fused_lm_head(module, outputs=("log_probs",)):
        if fused:
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
        deepspeed_run = case["engine"] == "deepspeed"
        if deepspeed_run:
            import deepspeed
            deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        plain = {key: value for key, value in case.items() if key != "lora"}  # get_peft_model runs below, after the head
        model = build_model(plain, torch)
        ref_model = build_model(plain, torch) if case["reference"] == "model" else None
        # DPOTrainer.__init__ / KTOTrainer.__init__: the fields their metrics read (no WPO weighting)
        outputs = ("log_probs", "entropy", "mean_logits") + (("is_top1",) if case["trainer"] == "dpo" else ())
        add_fused_lm_head(model, outputs=outputs)
        if case["lora"]:
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **case["lora"]))
            extra["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if ref_model is not None:
            ref_model.eval()  # (prepare_deepspeed / prepare_model(evaluation_mode=True) leave it in eval mode)
            add_fused_lm_head(ref_model)
        accelerator = _Accelerator(torch.device("cpu"), case.get("ds_config"))
        if deepspeed_run:
            from transformers.integrations import HfDeepSpeedConfig
            keep.append(HfDeepSpeedConfig(copy.deepcopy(case["ds_config"])))  # is_deepspeed_zero3_enabled() reads it
            client = torch_optimizer(case, [p for p in model.parameters() if p.requires_grad], torch)
            engine, wrapper, _, _ = deepspeed.initialize(model=model, optimizer=client, model_parameters=[
                p for p in model.parameters() if p.requires_grad], config=copy.deepcopy(case["ds_config"]))
            if ref_model is not None:
                from trl.models.utils import prepare_deepspeed
                ref_model = prepare_deepspeed(ref_model, accelerator)
            caller, inner = engine, getattr(wrapper, "optimizer", wrapper)
            labeller = Labeller(tracker, model, inner, wrapper=wrapper)
        else:
            caller = model
            inner = torch_optimizer(case, [p for p in model.parameters() if p.requires_grad], torch)
            wrapper = None
            labeller = Labeller(tracker, model, inner)
        from trl import DPOTrainer, KTOTrainer
        trainer_class = DPOTrainer if case["trainer"] == "dpo" else KTOTrainer
        stand = _stand_in(case, model, ref_model, accelerator)
        batch = _batch(case, rank, torch)
        losses = []
        for step in (1, 2):
            phase = (lambda name: None) if step == 1 else tracker.begin
            if step == 1:
                tracker.begin("step1")
            else:
                labeller.collect()
            phase("forward")
            loss = trainer_class._compute_loss(stand, caller, batch, False)
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
                inner.step()
                inner.zero_grad(set_to_none=True)
            tracker.end()
        labels = {**labeller.labels, **reference_labels(tracker, ref_model)}
        result = rank_result(rank, tracker, labels, PHASES, "forward", losses=losses,
                             seconds=round(time.time() - started, 1), **extra, model_numel=sum(
                                 p.numel() for p in (model.get_base_model() if case["lora"] else model).parameters()))
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
    return result


def reference_labels(tracker, ref_model) -> dict:
    """The reference model's storages (its parameters and, under ZeRO-3, their partitions) labelled "ref_param"."""
    if ref_model is None:
        return {}
    found = [tensor for p in ref_model.parameters() for tensor in (p, getattr(p, "ds_tensor", None)) if tensor is not None]
    return {serial: "ref_param" for serial in map(tracker.serial, found) if serial is not None}


def rank_result(rank: int, tracker, labels: dict, phases, first: str, **fields) -> dict:
    """One rank's record: each phase of step 2 with its breakdown, the peak and the phase holding it; `first`: the
    phase whose start is the persistent state before step 2; `fields`: losses, timings and the like."""
    result = {"rank": rank, "persistent_before_step2": tracker.phases[first]["start"], "phases": {},
              "step1_peak": tracker.phases["step1"]["peak"], **fields}
    for name in phases:
        found = tracker.phases[name]
        result["phases"][name] = {"peak": found["peak"], "start": found["start"], "end": found["end"],
                                  **tracker.breakdown(name, labels)}
    result["step_peak"] = max(result["phases"][name]["peak"] for name in phases)
    result["peak_phase"] = max(phases, key=lambda name: result["phases"][name]["peak"])
    return result


def child_result(rank: int, run) -> dict:
    """`run()`'s record, or the error it raised (reported in the record)."""
    try:
        return run()
    except Exception as error:
        import traceback
        return {"rank": rank, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}


def merge_after_others(out: Path, entry: dict, order: list[str], ranks: list[dict]) -> dict:
    """`entry` (with the first rank error, if any) into the record after the cases other scripts recorded, in
    `order` among its own script's; returns the record, not yet written."""
    record = json.loads(out.read_text())
    errors = [rank["error"] for rank in ranks if "error" in rank]
    if errors:
        entry["error"] = errors[0]
    kept = [item for item in record["cases"] if item["id"] != entry["id"]]
    ours = sorted([item for item in kept if item["id"] in order] + [entry], key=lambda item: order.index(item["id"]))
    record["cases"] = [item for item in kept if item["id"] not in order] + ours
    return record


def write_record(out: Path, record: dict) -> None:
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def _child_main(case_id: str, rank: int, world: int, out: Path) -> int:
    out.write_text(json.dumps(child_result(rank, lambda: run_rank(by_id()[case_id], rank, world))))
    return 0


# ---------------------------------------------------------------- parent
def versions() -> dict:
    import importlib.metadata as metadata
    found = {}
    for name in ("torch", "transformers", "deepspeed", "peft", "trl"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def merge(out: Path, case: dict, ranks: list[dict]) -> None:
    """The case into the record, in this script's order ahead of the cases (and versions) other scripts recorded."""
    record = json.loads(out.read_text()) if out.exists() else {}
    kept = [item for item in record.get("cases", []) if item["id"] != case["id"]]
    entry = {**case, "per_rank": ranks}
    errors = [rank["error"] for rank in ranks if "error" in rank]
    if errors:
        entry["error"] = errors[0]
    order = list(by_id())
    ours = sorted([item for item in kept if item["id"] in order] + [entry], key=lambda item: order.index(item["id"]))
    from measure import METHOD
    record = {"versions": {**record.get("versions", {}), **versions(), "trl (trl18- cases)": "1.8.0"}, "device": "cpu",
              "method": METHOD + "; TRL's _compute_loss on a stand-in trainer", "phases": list(PHASES),
              "cases": ours + [item for item in kept if item["id"] not in order]}
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def main(argv=None) -> int:
    from measure import parser_with_common_arguments, run_case, summary
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=900)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--trl18", help="a directory holding trl 1.8.0 (pip install --no-deps --target DIR)")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.result)
    selected = [case for case in cases() if not args.only or any(case["id"].startswith(p) for p in args.only)]
    failed = 0
    for index, case in enumerate(selected, 1):
        if case["trl_version"] and not args.trl18:
            print(f"{case['id']}: skipped (needs --trl18)")
            continue
        env = {"PYTHONPATH": args.trl18} if case["trl_version"] else None
        ranks = run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve(), env=env)
        print(f"{index}/{len(selected)} {summary(case, ranks)}", flush=True)
        failed += any("error" in rank for rank in ranks)
        if args.explain:
            print(json.dumps(ranks, indent=1)[:6000])
        else:
            merge(args.out, case, ranks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
