"""`zeromem estimate` without --config: its options are the command-line settings layer, planned by `planner.plan`
as a config's settings are (issue 27). The same settings declared in a DeepSpeed config's zeromem block give the
same figures at the config's stage — model state, the peak, the phase holding it and its parts — and the same
inputs of the peak, each option credited as its `--flag` where the block's key is credited as the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

ROOT = Path(__file__).resolve().parents[2]
QWEN = str(ROOT / "tests/data/models/Qwen2.5-7B/config.json")
LLAMA = str(ROOT / "tests/data/models/Meta-Llama-3-8B/config.json")

#: (the options, the zeromem block declaring the same settings, the ds_config keys the options stand for)
CASES = {
    "full": (["--model-config", QWEN, "-R", "8", "--sequence-length", "1024", "--micro-batch", "2"],
             {"parameters": {"from_config": QWEN}, "world_size": 8, "sequence_length": 1024, "micro_batch": 2}, {}),
    "lora": (["--model-config", LLAMA, "-R", "8", "--sequence-length", "512", "--micro-batch", "1", "--lora-rank",
              "16", "--lora-targets", "q_proj,v_proj", "--attention", "eager"],
             {"parameters": {"from_config": LLAMA}, "world_size": 8, "sequence_length": 512, "micro_batch": 1,
              "lora_rank": 16, "lora_targets": ["q_proj", "v_proj"], "attention": "eager"}, {}),
    "accumulating": (["--model-config", QWEN, "-R", "4", "--sequence-length", "2048", "--micro-batch", "1",
                      "--gradient-checkpointing", "--gradient-accumulation-steps", "4", "--reserved", "0",
                      "--gpu-memory", "80GiB", "--loss-kernel", "liger_flce"],
                     {"parameters": {"from_config": QWEN}, "world_size": 4, "sequence_length": 2048, "micro_batch": 1,
                      "gradient_checkpointing": True, "gradient_accumulation_steps": 4, "reserved": "0",
                      "gpu_memory": "80GiB", "loss_kernel": "liger_flce"}, {}),
}


def _json(*args: str) -> dict:
    done = run_zeromem("estimate", "--format", "json", *args)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def _values(data: dict) -> dict:
    return {name: given["value"] for name, given in data["peak_inputs"].items()}


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_the_options_give_what_the_same_zeromem_block_gives(tmp_path, case, stage):
    options, block, keys = CASES[case]
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"bf16": {"enabled": True}, "zero_optimization": {"stage": stage}, **keys,
                                  "zeromem": block}))
    flags, declared = _json(*options), _json("--config", str(config))
    key = f"zero{stage}"
    assert flags[key] == declared[key]
    assert flags["inputs"]["parameter_bytes"] == declared["inputs"]["parameter_bytes"]
    assert flags["peak"][key] == declared["peak"][key]
    assert flags["phases"][key] == declared["phases"][key]
    shared = {name for name in _values(flags) if name not in ("engine", "dtype")}  # named apart: flag vs config
    assert {name: _values(flags)[name] for name in shared} == {name: _values(declared)[name] for name in shared}
    given = {name for name in ("sequence_length", "micro_batch", "gradient_accumulation_steps", "loss_kernel")
             if name in block}
    assert {flags["peak_inputs"][name]["from"] for name in given} <= {"--" + name.replace("_", "-") for name in given}
    assert {declared["peak_inputs"][name]["from"] for name in given} == {f"zeromem.{name}" for name in given}
