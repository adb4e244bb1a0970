"""Issue 21 items 10 and 11 through `zeromem check` / `zeromem rules`: messages that say when they apply."""

from __future__ import annotations

import json

from tests.cli.conftest import run_zeromem, text_at


def test_max_grad_norm_says_it_applies_only_to_the_config_built_optimizer(check_json):
    findings, _, status = check_json(
        '{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "max_grad_norm": 1.0}}}')
    (finding,) = findings
    assert finding["code"] == "ZM256" and finding["severity"] == "warning" and status == 0
    for words in ("when it builds the optimizer from this section", "HF Trainer and Accelerate",
                  "Megatron-DeepSpeed", "gradient_clipping"):
        assert words in finding["message"]
    documented = run_zeromem("rules", "ZM256")
    assert "only when DeepSpeed builds the optimizer" in documented.stdout.replace("\n", " ")
    assert "_configure_optimizer" in documented.stdout


TEMPLATE = """{
  "train_batch_size": TRAIN_BATCH,
  "train_micro_batch_size_per_gpu": MICRO_BATCH,
  "gradient_accumulation_steps": GAS,
  "zero_optimization": {
    "stage": ZERO_STAGE,
    "offload_optimizer": {
      "device": OFFLOAD_DEVICE
    }
  },
  "bf16": {
    "enabled": BF16
  },
  "optimizer": {"type": "AdamW", "params": {"lr": ${LR}
  }},
  "steps_per_print": 10, "wall_clock_breakdown": nope
}
"""
NAMES = ["TRAIN_BATCH", "MICRO_BATCH", "GAS", "ZERO_STAGE", "OFFLOAD_DEVICE", "BF16", "${LR}"]


def test_template_placeholders_are_one_finding_naming_them(check_json):
    """DeepSpeed refuses some placeholders' strings (a number, boolean or choice is read there): one ZM202."""
    findings, text, status = check_json(TEMPLATE)
    [template] = [f for f in findings if f["message"].startswith("unfilled template")]
    assert template["code"] == "ZM202" and text_at(text, template["range"]) == "TRAIN_BATCH,"
    assert "unfilled template placeholders " + ", ".join(NAMES) + ":" in template["message"]
    assert "which DeepSpeed refuses for TRAIN_BATCH, MICRO_BATCH, GAS, ZERO_STAGE, OFFLOAD_DEVICE, BF16," \
        in template["message"]  # ${LR}: the config loader lets a string lr through
    assert "DeepSpeed accepts" not in json.dumps(findings)
    # nothing else on a placeholder; what is not one keeps its own findings
    placeholder_lines = {number for number, line in enumerate(text.splitlines()) if any(n in line for n in NAMES)}
    others = [f for f in findings if f is not template]
    assert not [f for f in others if f["range"]["start"]["line"] in placeholder_lines]
    assert {(f["code"], text_at(text, f["range"])) for f in others} == {
        ("ZM253", "nope"), ("ZM202", "nope")}
    assert status == 1


def test_a_single_refused_template_placeholder(check_json):
    findings, text, status = check_json('{"train_batch_size": 8, "zero_optimization": {"stage": ZERO_STAGE\n}}')
    [finding] = findings
    assert finding["code"] == "ZM202" and "unfilled template placeholder ZERO_STAGE:" in finding["message"]
    assert "which DeepSpeed refuses," in finding["message"] and status == 1


def test_placeholders_deepspeed_lets_through_are_one_zm258_warning(check_json):
    findings, text, status = check_json('{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": '
                                        '{"lr": ${LR},\n "weight_decay": <WD>\n}}}')
    [finding] = findings
    assert finding["code"] == "ZM258" and finding["severity"] == "warning" and status == 0
    assert "placeholders ${LR}, <WD>: hjson reads each as a string, which DeepSpeed's config loader lets through" \
        in finding["message"]


def test_capitalised_values_are_not_taken_for_placeholders(check_json):
    findings, text, _ = check_json('{"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": '
                                   '{"device": CPU\n}}}')
    assert "ZM258" not in {f["code"] for f in findings} and "ZM202" in {f["code"] for f in findings}
