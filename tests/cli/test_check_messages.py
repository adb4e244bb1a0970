"""Issue 21 items 10 and 11 through `zeromem check` / `zeromem rules`: messages that say when they apply."""

from __future__ import annotations

from tests.cli.conftest import run_zeromem


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
