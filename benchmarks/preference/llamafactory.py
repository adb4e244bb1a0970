"""Measure LLaMA-Factory's own DPO steps (pref_loss sigmoid / orpo / simpo) and KTO steps per phase on CPU: its
trainer code, tiny random models.

LLaMA-Factory runs `stage: dpo` through CustomDPOTrainer (src/llamafactory/train/dpo/trainer.py), a subclass of TRL's
DPOTrainer from the TRL it pins (trl>=0.18,<=0.24): its `concatenated_forward` casts the model's logits to fp32 and
scores them with `get_batch_logps` (src/llamafactory/train/trainer_utils.py: log_softmax over the vocabulary, gather);
the sigmoid loss is TRL 0.24's `dpo_loss`; orpo and simpo use no reference model (`use_ref_model`,
hparams/finetuning_args.py). The reference is a second copy of the model for a full fine-tune, the PEFT policy with
its adapters disabled for LoRA (train/trainer_utils.py `create_ref_model`). `stage: kto` runs CustomKTOTrainer
(train/kto/trainer.py) on TRL 0.24's `kto_loss`: b completions with gradients, b mismatched KL completions under
`no_grad`, both again through the reference.

Its sources at the commit tests/data/recipes/SOURCES.md cites (`git archive <commit> src`) and TRL 0.24.0
(`pip install --no-deps --target DIR trl==0.24.0`) are given as directories:

    nice -n 5 /work/venv-measure/bin/python benchmarks/preference/llamafactory.py --src /tmp/lfdpo/src --trl /tmp/trl024

LLaMA-Factory's package imports its data and model loaders (torchaudio, omegaconf ...) that the loss never runs:
the children load only its `train` modules, with `llamafactory.hparams` and `llamafactory.model` stubbed (names the
trainer module imports but the loss path never calls). A CustomDPOTrainer made without `__init__` holds the
attributes its `__init__` sets (at FinetuningArguments' defaults) and its own `compute_loss` runs, as the HF Trainer
calls it. The model's forward is the measuring venv's Transformers (newer than LLaMA-Factory's pin; the tiny Llama's
forward makes the same full logits). Results are merged into tests/data/step/preference.json (cases `lf-`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "step"))
OUT = HERE.parents[1] / "tests" / "data" / "step" / "preference.json"
PHASES = ("forward", "backward", "optimizer")
IGNORE_INDEX = -100  # LLaMA-Factory's extras/constants.py


def _preference_script():
    """benchmarks/preference/measure.py (its case shape and helpers; `measure` on the path is benchmarks/step's)."""
    spec = importlib.util.spec_from_file_location("preference_measure", HERE / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lf_case(cid, pref_loss="sigmoid", reference="model", **kwargs):
    case = _preference_script()._case(cid, reference=reference, **kwargs)
    case.update(trainer="dpo" if pref_loss in ("sigmoid", "hinge", "ipo") else pref_loss, loss_type=pref_loss,
                trl_version="0.24.0", llamafactory=True)
    if pref_loss == "kto":
        case["loss_type"] = "kto"
    return case


def cases() -> list[dict]:
    """reference: "model" (a full fine-tune's copy), "adapter" (LoRA: the policy with adapters disabled), "none"."""
    return copy.deepcopy([
        _lf_case("lf-dpo-full-ref"),
        _lf_case("lf-dpo-full-ref-b2", batch=2),
        _lf_case("lf-dpo-lora-adapter-ref", reference="adapter", lora=True),
        _lf_case("lf-orpo-full", pref_loss="orpo", reference="none"),
        _lf_case("lf-simpo-lora", pref_loss="simpo", reference="none", lora=True),
        _lf_case("lf-dpo-ds-z3-r2-full-ref", engine="deepspeed", stage=3, ranks=2, impl="for-loop"),
        _lf_case("lf-kto-full-ref", pref_loss="kto", batch=2),
        _lf_case("lf-kto-lora-adapter-ref", pref_loss="kto", reference="adapter", lora=True, batch=2),
    ])


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in cases()}


# ---------------------------------------------------------------- child: one rank of one case
def load_trainer(src: str, trainer: str = "dpo"):
    """CustomDPOTrainer (CustomKTOTrainer for kto) from LLaMA-Factory's `src`, importing only its train modules."""
    import trl.import_utils as available  # transformers 5's _is_package_available returns a (truthy) tuple
    for name in dir(available):
        value = getattr(available, name)
        if name.endswith("_available") and isinstance(value, tuple):
            setattr(available, name, value[0])
    root = str(Path(src) / "llamafactory")
    for name in ("llamafactory", "llamafactory.train", "llamafactory.train.dpo", "llamafactory.train.kto"):
        package = types.ModuleType(name)
        package.__path__ = [root + name[len("llamafactory"):].replace(".", "/")]
        sys.modules[name] = package
    stubs = {"llamafactory.hparams": ("FinetuningArguments", "ModelArguments", "DataArguments"),
             "llamafactory.model": ("find_all_linear_modules", "load_model", "load_tokenizer",
                                    "load_valuehead_params")}
    for name, names in stubs.items():
        module = types.ModuleType(name)
        for attribute in names:
            setattr(module, attribute, None)
        sys.modules[name] = module
    if trainer == "kto":
        from llamafactory.train.kto.trainer import CustomKTOTrainer
        return CustomKTOTrainer
    from llamafactory.train.dpo.trainer import CustomDPOTrainer
    return CustomDPOTrainer


def _stand_in(trainer_class, case, ref_model, accelerator, torch):
    """A CustomDPOTrainer with what its `__init__` sets (FinetuningArguments' defaults), no HF Trainer state."""
    from collections import defaultdict
    stand = trainer_class.__new__(trainer_class)
    if case["trainer"] == "kto":  # CustomKTOTrainer.__init__ (kto_chosen_weight / kto_rejected_weight 1.0)
        stand.__dict__.update(
            reference_free=False, label_pad_token_id=IGNORE_INDEX, padding_value=0, is_encoder_decoder=False,
            precompute_ref_log_probs=False, _peft_has_been_casted_to_bf16=False, ref_model=ref_model,
            _stored_metrics=defaultdict(lambda: defaultdict(list)), beta=case["beta"], desirable_weight=1.0,
            undesirable_weight=1.0, ftx_gamma=0.0, calculate_KL=True, loss_type="kto", accelerator=accelerator,
            args=types.SimpleNamespace(device=torch.device("cpu")), model_accepts_loss_kwargs=False)
        return stand
    use_ref = case["loss_type"] not in ("orpo", "simpo")  # FinetuningArguments.__post_init__: use_ref_model
    stand.__dict__.update(
        finetuning_args=types.SimpleNamespace(use_ref_model=use_ref), f_divergence_type="reverse_kl",
        f_divergence_params=None, reference_free=False, label_pad_token_id=IGNORE_INDEX, padding_value=0,
        is_encoder_decoder=False, precompute_ref_log_probs=False, _peft_has_been_casted_to_bf16=False,
        ref_model=ref_model, _stored_metrics=defaultdict(lambda: defaultdict(list)), beta=case["beta"],
        loss_type=case["loss_type"], ftx_gamma=0.0, bco_gemma=0.0, label_smoothing=0.0, simpo_gamma=0.5,
        ld_alpha=None, accelerator=accelerator, args=types.SimpleNamespace(device=torch.device("cpu")),
        model_accepts_loss_kwargs=False)
    return stand


def _batch(case, rank, torch):
    """LLaMA-Factory's pairwise collator: chosen rows then rejected rows, prompt labels IGNORE_INDEX; its KTO
    collator: b completions, b mismatched KL completions (`kl_` keys) and `kto_tags`."""
    generator = torch.Generator().manual_seed(1 + rank)
    vocab, b, s = case["config"]["vocab_size"], case["micro_batch"], case["sequence_length"]
    if case["trainer"] == "kto":
        batch = {}
        for prefix in ("", "kl_"):
            input_ids = torch.randint(0, vocab, (b, s), generator=generator)
            labels = input_ids.clone()
            labels[:, :case["prompt_length"]] = IGNORE_INDEX
            batch.update({f"{prefix}input_ids": input_ids, f"{prefix}attention_mask": torch.ones(b, s, dtype=torch.long),
                          f"{prefix}labels": labels})
        batch["kto_tags"] = torch.tensor([True, False] * (b // 2) + [True] * (b % 2))
        return batch
    input_ids = torch.randint(0, vocab, (2 * b, s), generator=generator)
    labels = input_ids.clone()
    labels[:, :case["prompt_length"]] = IGNORE_INDEX
    return {"input_ids": input_ids, "attention_mask": torch.ones(2 * b, s, dtype=torch.long), "labels": labels}


def run_rank(case: dict, rank: int, world: int, src: str, trainer=None) -> dict:
    """One rank's step 2 per phase. `trainer`: (the trainer class, its stand-in maker, its batch maker) when not
    LLaMA-Factory's (benchmarks/preference/trl_reference_free.py)."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    import trl
    from engines import Labeller, build_model, torch_optimizer
    from tracker import StorageTracker
    if case["trl_version"] is not None and trl.__version__ != case["trl_version"]:
        raise RuntimeError(f"the case needs trl {case['trl_version']} (--trl), found {trl.__version__}")
    trainer_class, stand_in, make_batch = trainer or (load_trainer(src, case["trainer"]), _stand_in, _batch)
    accelerator = _preference_script()._Accelerator(torch.device("cpu"), case.get("ds_config"))
    accelerator.is_main_process = True
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    started = time.time()
    tracker = StorageTracker()
    extra: dict = {}
    keep = []
    plain = {key: value for key, value in case.items() if key != "lora"}  # build_model applies no PEFT here
    with contextlib.ExitStack() as stack:
        stack.enter_context(tracker)
        deepspeed_run = case["engine"] == "deepspeed"
        if deepspeed_run:
            import deepspeed
            deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        model = build_model(plain, torch)
        ref_model = build_model(plain, torch) if case["reference"] == "model" else None
        if case["lora"]:
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **case["lora"]))
            extra["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if ref_model is not None:
            ref_model.eval()
        params = [p for p in model.parameters() if p.requires_grad]
        if deepspeed_run:
            from transformers.integrations import HfDeepSpeedConfig
            keep.append(HfDeepSpeedConfig(copy.deepcopy(case["ds_config"])))
            engine, wrapper, _, _ = deepspeed.initialize(model=model, optimizer=torch_optimizer(case, params, torch),
                                                         model_parameters=params,
                                                         config=copy.deepcopy(case["ds_config"]))
            if ref_model is not None:  # CustomDPOTrainer.__init__: trl.models.utils.prepare_deepspeed
                from trl.models.utils import prepare_deepspeed
                ref_model = prepare_deepspeed(ref_model, accelerator)
            caller, inner = engine, getattr(wrapper, "optimizer", wrapper)
            labeller = Labeller(tracker, model, inner, wrapper=wrapper)
        else:
            caller, inner, wrapper = model, torch_optimizer(case, params, torch), None
            labeller = Labeller(tracker, model, inner)
        stand = stand_in(trainer_class, case, ref_model, accelerator, torch)
        batch = make_batch(case, rank, torch)
        losses = []
        for step in (1, 2):
            phase = (lambda name: None) if step == 1 else tracker.begin
            if step == 1:
                tracker.begin("step1")
            else:
                labeller.collect()
            phase("forward")
            loss = stand.compute_loss(caller, dict(batch))  # the Trainer hands it its own copy of the inputs
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
        shared = _preference_script()
        labels = {**labeller.labels, **shared.reference_labels(tracker, ref_model)}
        result = shared.rank_result(rank, tracker, labels, PHASES, "forward", losses=losses,
                                    seconds=round(time.time() - started, 1), **extra, model_numel=sum(
                                        p.numel() for p in (model.get_base_model() if case["lora"] else model).parameters()))
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
    return result


def _child_main(case_id: str, rank: int, world: int, out: Path, src: str) -> int:
    result = _preference_script().child_result(rank, lambda: run_rank(by_id()[case_id], rank, world, src))
    out.write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------- parent
def merge(out: Path, case: dict, ranks: list[dict], commit: str) -> None:
    """The case into the preference record (after the TRL cases), the LLaMA-Factory version beside the others."""
    shared = _preference_script()
    record = shared.merge_after_others(out, {**case, "per_rank": ranks, "llamafactory": commit}, list(by_id()), ranks)
    record["versions"]["llamafactory (lf- cases)"] = commit
    record["versions"]["trl (lf- cases)"] = case["trl_version"]
    shared.write_record(out, record)


def main(argv=None) -> int:
    from measure import parser_with_common_arguments, run_case, summary
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=900)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--src", required=True, help="LLaMA-Factory's src directory at the cited commit")
    parser.add_argument("--trl", help="a directory holding trl 0.24.0 (pip install --no-deps --target DIR)")
    parser.add_argument("--commit", default="ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30", help="the src's commit")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.result, args.src)
    selected = [case for case in cases() if not args.only or any(case["id"].startswith(p) for p in args.only)]
    failed = 0
    for index, case in enumerate(selected, 1):
        env = {"PYTHONPATH": args.trl} if args.trl else None
        ranks = run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve(), env=env,
                         extra_args=("--src", args.src))
        print(f"{index}/{len(selected)} {summary(case, ranks)}", flush=True)
        failed += any("error" in rank for rank in ranks)
        if args.explain:
            print(json.dumps(ranks, indent=1)[:6000])
        else:
            merge(args.out, case, ranks, args.commit)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
