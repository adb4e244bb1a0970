"""Measure TRL's reference-free preference steps (ORPO, CPO, SimPO: trl/experimental/orpo, trl/experimental/cpo) per
phase on CPU: TRL's own `compute_loss`, tiny random models.

    nice -n 5 /work/venv-measure/bin/python benchmarks/preference/trl_reference_free.py

What runs is the trainer's own `compute_loss` (its `concatenated_forward`: the model's logits of 2·b rows, the
chosen rows' NLL through `nn.CrossEntropyLoss` on a contiguous copy of their shifted logits, `get_batch_logps` with
`selective_log_softmax`) on an ORPOTrainer / CPOTrainer made without `__init__`, holding what its `__init__` sets at
the config's defaults (beta 0.1; CPO: cpo_alpha 1.0, simpo_gamma 0.5). SimPO is CPOTrainer with loss_type "simpo".
The run and the record are those of benchmarks/preference/llamafactory.py (cases `trl-`, same file).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "step"))


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"preference_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trl_case(cid, trainer, loss_type, **kwargs):
    case = _module("measure")._case(cid, reference="none", **kwargs)
    case.update(trainer=trainer, loss_type=loss_type, trl_version=None, reference_free=True)
    return case


def cases() -> list[dict]:
    return copy.deepcopy([
        _trl_case("trl-orpo-full", "orpo", "orpo"),
        _trl_case("trl-orpo-full-b2", "orpo", "orpo", batch=2),
        _trl_case("trl-orpo-lora", "orpo", "orpo", lora=True),
        _trl_case("trl-cpo-full", "cpo", "sigmoid"),
        _trl_case("trl-simpo-full", "simpo", "simpo"),
    ])


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in cases()}


def _trainer(case):
    import trl.experimental.cpo as cpo
    import trl.experimental.orpo as orpo
    return orpo.ORPOTrainer if case["trainer"] == "orpo" else cpo.CPOTrainer


def _stand_in(trainer_class, case, ref_model, accelerator, torch):
    from collections import defaultdict
    stand = trainer_class.__new__(trainer_class)
    stand.__dict__.update(
        is_encoder_decoder=False, padding_value=0, label_pad_token_id=-100, aux_loss_enabled=False,
        aux_loss_coef=0.0, beta=case["beta"], accelerator=accelerator, _peft_has_been_casted_to_bf16=False,
        _stored_metrics=defaultdict(lambda: defaultdict(list)), args=types.SimpleNamespace(device=torch.device("cpu")))
    if case["trainer"] != "orpo":  # CPOConfig defaults
        stand.__dict__.update(cpo_alpha=1.0, loss_type=case["loss_type"], label_smoothing=0.0, simpo_gamma=0.5,
                              alpha=0.0, pad_token_id=0)
    return stand


def _batch(case, rank, torch):
    """The trainers' collator: chosen_* and rejected_* of b rows each, prompt labels -100."""
    generator = torch.Generator().manual_seed(1 + rank)
    vocab, b, s = case["config"]["vocab_size"], case["micro_batch"], case["sequence_length"]
    batch = {}
    for side in ("chosen", "rejected"):
        input_ids = torch.randint(0, vocab, (b, s), generator=generator)
        labels = input_ids.clone()
        labels[:, :case["prompt_length"]] = -100
        batch.update({f"{side}_input_ids": input_ids, f"{side}_attention_mask": torch.ones(b, s, dtype=torch.long),
                      f"{side}_labels": labels})
    return batch


def _child_main(case_id: str, rank: int, world: int, out: Path) -> int:
    import torch
    lf = _module("llamafactory")
    case = by_id()[case_id]
    result = _module("measure").child_result(
        rank, lambda: lf.run_rank(case, rank, world, "", trainer=(_trainer(case), _stand_in, _batch)))
    del torch
    out.write_text(json.dumps(result))
    return 0


def merge(out: Path, case: dict, ranks: list[dict]) -> None:
    """The case into the preference record after the others; TRL's version is the record's own."""
    shared = _module("measure")
    shared.write_record(out, shared.merge_after_others(out, {**case, "per_rank": ranks}, list(by_id()), ranks))


def main(argv=None) -> int:
    from measure import parser_with_common_arguments, run_case, summary
    lf = _module("llamafactory")
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=900)
    parser.add_argument("--out", type=Path, default=lf.OUT)
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
        ranks = run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve())
        print(f"{index}/{len(selected)} {summary(case, ranks)}", flush=True)
        failed += any("error" in rank for rank in ranks)
        merge(args.out, case, ranks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
