"""What zeromem says today, for the golden files of issue 27 (the step model's redesign must not change it).

`collect(tmp)` returns {name: text} for every golden file:
- `steps.json`: every recorded measurement case (tests/data/step/*.json) as the tests describe it to the step model,
  with each phase's moments and parts, in the step's order;
- `cli.json`: `zeromem estimate` (JSON and text, with `-v`) for each LoRA measurement case and a set of command lines,
  `zeromem check --format json` and `zeromem estimate --config` for every recipe of the corpus at its authors'
  hardware and for the examples;
- `hover.json`: the hover of every top-level key and the `zeromem.memoryReport` text for the examples and recipes.

Written by `python benchmarks/golden/record.py`; held by tests/unit/test_golden.py. Paths under `tmp` are written
as `<tmp>`, so the files do not depend on where they were made.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
RECIPES = DATA / "recipes"


def _step_json(step) -> dict:
    return {"peak": step.peak, "peak_phase": step.peak_phase,
            "phases": {name: {"peak": phase.peak, "moment": phase.moment,
                              "moments": [[moment.name, moment.total, [[part.name, part.bytes] for part in moment.parts]]
                                          for moment in phase.moments]}
                       for name, phase in step.phases.items()}}


def steps() -> dict:
    """Each measured case through the same description its test gives the step model."""
    from tests.unit import (test_grpo, test_preference, test_step, test_step_accumulation, test_step_loss_kernels,
                            test_step_optimizers)
    from zeromem_lsp.configs.model_config import model_shape
    from zeromem_lsp.memory.preference import estimate_preference_step
    from zeromem_lsp.memory.step import StepInputError, estimate_step

    found: dict = {}

    def record(key: str, make) -> None:
        try:
            found[key] = _step_json(make())
        except StepInputError as error:
            found[key] = {"refused": str(error)}

    for case in test_step.CASES:
        record(f"measured/{case['id']}", lambda: estimate_step(model_shape(case["config"]), case["sequence_length"],
                                                               case["micro_batch"], **test_step.arguments(case)))
    for case in test_step_optimizers.CASES:
        def optimizer_step(case=case):
            kwargs = test_step.arguments(case)
            if test_step_optimizers.optimizer(case) in ("adafactor", "adam8bit_torchao"):  # one implementation each
                kwargs["optimizer_impl"] = "for-loop"
            return estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                                 optimizer=test_step_optimizers.optimizer(case), **kwargs)
        record(f"optimizers/{case['id']}", optimizer_step)
    for case in test_preference.CASES:
        def preference_step(case=case):
            preference, kwargs = test_preference.arguments(case)
            return estimate_preference_step(preference, **kwargs)
        record(f"preference/{case['id']}", preference_step)
    for case in test_grpo.CASES:
        def grpo_step(case=case):
            preference, kwargs = test_grpo.grpo(case)
            return estimate_preference_step(preference, **kwargs)
        record(f"grpo/{case['id']}", grpo_step)
    for case in test_step_accumulation.CASES:
        if "lora" in case:
            continue
        for steps_ in (1, case.get("gradient_accumulation_steps", 2)):
            record(f"accumulation/{case['id']}/{steps_}",
                   lambda case=case, steps_=steps_: test_step_accumulation.full_estimate(case, steps_))
    for case in test_step_loss_kernels.CASES:
        record(f"loss_kernels/{case['id']}", lambda case=case: test_step_loss_kernels.estimate(case))
    return found


def run(*args: str) -> dict:
    """`zeromem ARGS` in this process: status and output."""
    from zeromem_lsp.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = main(list(args))
        except SystemExit as leaving:
            status = leaving.code if isinstance(leaving.code, int) else 0
    return {"status": status, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}


LLAMA = str(DATA / "models" / "Meta-Llama-3-8B" / "config.json")
QWEN = str(DATA / "models" / "Qwen2.5-7B" / "config.json")
GEMMA = str(DATA / "models" / "gemma-3-4b-it" / "config.json")
#: command lines across engines, stages, trainers, adapters, loss kernels and the "how far" searches
COMMANDS = [
    ["--parameter-bytes", "400", "--gradient-bytes", "400", "--optimizer-bytes", "800", "-R", "4"],
    ["--parameters", "7e9", "--precision", "bf16", "-R", "8", "--gpu-memory", "80GiB"],
    ["--model-config", LLAMA, "--sequence-length", "8192", "--micro-batch", "1", "-R", "8", "--engine", "deepspeed",
     "--precision", "bf16", "--gpu-memory", "80GiB"],
    ["--model-config", LLAMA, "--sequence-length", "4096", "--micro-batch", "2", "-R", "8", "--engine", "fsdp",
     "--precision", "bf16", "--param-dtype", "fp32", "--gradient-checkpointing", "--gpu-memory", "80GiB"],
    ["--model-config", LLAMA, "--sequence-length", "4096", "--micro-batch", "2", "-R", "4", "--engine", "fsdp",
     "--fsdp-version", "1", "--precision", "bf16", "--gpu-memory", "40GiB"],
    ["--model-config", QWEN, "--sequence-length", "2048", "--micro-batch", "4", "-R", "1", "--engine", "torch",
     "--precision", "bf16", "--optimizer-impl", "for-loop", "--gradient-accumulation-steps", "4"],
    ["--model-config", QWEN, "--sequence-length", "2048", "--micro-batch", "1", "-R", "2", "--engine", "deepspeed",
     "--precision", "bf16", "--loss-kernel", "liger_flce", "--optimizer", "adam8bit"],
    ["--model-config", QWEN, "--sequence-length", "1024", "--micro-batch", "2", "-R", "8", "--engine", "deepspeed",
     "--precision", "bf16", "--trainer", "dpo"],
    ["--model-config", QWEN, "--sequence-length", "1024", "--micro-batch", "2", "-R", "8", "--engine", "deepspeed",
     "--precision", "bf16", "--trainer", "kto", "--precompute-ref-log-probs"],
    ["--model-config", QWEN, "--sequence-length", "512", "--micro-batch", "4", "-R", "8", "--engine", "deepspeed",
     "--precision", "bf16", "--trainer", "grpo", "--max-completion-length", "1024", "--beta", "0.04"],
    ["--model-config", QWEN, "--sequence-length", "512", "--micro-batch", "4", "-R", "8", "--engine", "fsdp",
     "--precision", "bf16", "--trainer", "orpo"],
    ["--model-config", LLAMA, "--sequence-length", "4096", "--micro-batch", "1", "-R", "1", "--engine", "torch",
     "--precision", "bf16", "--lora-rank", "16", "--lora-targets", "all-linear", "--quantization", "nf4",
     "--double-quant", "--gradient-checkpointing", "--gpu-memory", "24GiB"],
    ["--model-config", LLAMA, "--sequence-length", "2048", "--micro-batch", "2", "-R", "8", "--engine", "deepspeed",
     "--precision", "bf16", "--lora-rank", "64", "--lora-targets", "q_proj,v_proj", "--modules-to-save",
     "lm_head,embed_tokens"],
    ["--model-config", GEMMA, "--sequence-length", "2048", "--micro-batch", "1", "-R", "2", "--engine", "fsdp",
     "--precision", "bf16", "--lora-rank", "8", "--lora-targets", "all-linear", "--dora"],
    ["--model-config", LLAMA, "--sequence-length", "8192", "--micro-batch", "1", "-R", "8", "--engine", "deepspeed",
     "--precision", "bf16", "--gpu-memory", "80GiB", "--max-sequence-length"],
    ["--model-config", LLAMA, "--sequence-length", "2048", "--micro-batch", "1", "-R", "8", "--engine", "fsdp",
     "--precision", "bf16", "--gpu-memory", "80GiB", "--max-micro-batch"],
    ["--model-config", QWEN, "--sequence-length", "2048", "--micro-batch", "2", "-R", "2", "--engine", "torch",
     "--precision", "fp32", "--attention", "eager", "--optimizer", "sgd_momentum"],
]


def _clean(value, tmp: Path):
    if isinstance(value, str):
        return value.replace(str(tmp), "<tmp>").replace(str(ROOT), "<root>")
    if isinstance(value, dict):
        return {key: _clean(item, tmp) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item, tmp) for item in value]
    return value


def cli(tmp: Path) -> dict:
    from tests.unit import test_step_lora

    found: dict = {}
    for case in test_step_lora.CASES:
        path = tmp / f"{case['id']}.json"
        path.write_text(json.dumps(case["config"]), encoding="utf-8")
        found[f"lora/{case['id']}"] = run(*test_step_lora.estimate_arguments(case, path))
    for number, command in enumerate(COMMANDS):
        found[f"estimate/{number}/json"] = run("estimate", "--format", "json", *command)
        found[f"estimate/{number}/text"] = run("estimate", *command)
        found[f"estimate/{number}/verbose"] = run("estimate", "-v", *command)
    for case in _recipes():
        launch = ["--world-size", str(case["world_size"]), "--gpu-memory", case["gpu_memory"]]
        if case.get("accelerate_config"):
            launch += ["--accelerate-config", str(RECIPES / case["accelerate_config"])]
        path = str(RECIPES / case["recipe"])
        found[f"recipe/{case['recipe']}/check"] = run("check", "--format", "json", *launch, path)
        found[f"recipe/{case['recipe']}/estimate"] = run("estimate", "--format", "json", "--config", path, *launch)
        found[f"recipe/{case['recipe']}/text"] = run("estimate", "--config", path, *launch)
    for path in sorted((ROOT / "examples").iterdir()):
        found[f"example/{path.name}/check"] = run("check", "--format", "json", str(path))
        found[f"example/{path.name}/estimate"] = run("estimate", "--format", "json", "--config", str(path))
    return _clean(found, tmp)


def _recipes() -> list[dict]:
    manifest = RECIPES / "corpus.json"
    return json.loads(manifest.read_text(encoding="utf-8")) if manifest.is_file() else []


def hovers() -> dict:
    """The hover of each top-level key and the memory report, as the server gives them (analysis + assist)."""
    from zeromem_lsp.analysis import analyse
    from zeromem_lsp.assist.hover import breakdown_markdown, hover_at
    from zeromem_lsp.project import file_loader

    found: dict = {}
    paths = sorted((ROOT / "examples").iterdir()) + [RECIPES / case["recipe"] for case in _recipes()]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        analysis = analyse(text, path.name, loader=file_loader(path.parent))
        root = analysis.document.root if analysis.document is not None else None
        shown = {}
        for member in (root.members if root is not None and root.kind == "object" else []):
            hover = hover_at(analysis, member.key_start + 1)
            shown[member.key] = None if hover is None else hover.markdown
        key = str(path.relative_to(ROOT))
        found[key] = {"hover": shown, "report": breakdown_markdown(analysis.plan, analysis.setup)}
    return found


def collect(tmp: Path) -> dict[str, str]:
    previous = {name: os.environ.get(name) for name in ("HF_HUB_CACHE", "HF_HUB_OFFLINE")}
    os.environ["HF_HUB_CACHE"], os.environ["HF_HUB_OFFLINE"] = str(DATA / "hf_cache"), "1"
    try:
        parts = {"steps.json": steps(), "cli.json": cli(tmp), "hover.json": _clean(hovers(), tmp)}
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return {name: json.dumps(value, indent=1, sort_keys=True) + "\n" for name, value in parts.items()}
