"""`zeromem estimate` and `zeromem check` agree on every recipe of the corpus (tests/data/recipes/corpus.json),
read from the vendored Hugging Face cache offline, as the recipe alone and as launched (its Accelerate config and
world size), at budgets around each recipe's own verdict figure (the peak when known, else model state):

- estimate's verdict for the configured (or assumed) stage fits ⇔ check gives no ZM101 / ZM106 for it, and
  estimate refuses (an unread model, no world size) ⇔ check has no budget verdict either;
- the figure check quotes is estimate's: ZM106 the peak, ZM101 the model state, and ZM101 only where the step
  holds that state (the peak unknown, or at or above it);
- a budget finding is an error only when its figure is exact: ZM106 only when the estimate is not approximate,
  ZM101 only when the model-state figure rests on no assumption (a key the model leaves out of the step alone
  leaves P, G, O exact); and an exact peak more than the model's uncertainty over the budget is an error.

Budgets are derived from estimate's own figure, so no expected figure is copied from a run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

DATA = Path(__file__).resolve().parents[1] / "data"
RECIPES = DATA / "recipes"
CORPUS = json.loads((RECIPES / "corpus.json").read_text())
GiB = 2**30
BUDGET = ("ZM101", "ZM106")


def _launch(case: dict, launched: bool) -> tuple[str, ...]:
    if not launched:
        return ()
    accelerate = ("--accelerate-config", str(RECIPES / case["accelerate_config"])) if case["accelerate_config"] else ()
    return (*accelerate, "--world-size", str(case["world_size"]))


def _estimate(recipe: Path, launch: tuple[str, ...], *budget: str) -> dict | None:
    done = run_zeromem("estimate", "--config", str(recipe), "--offline", "--format", "json", *launch, *budget)
    assert "Traceback" not in done.stderr
    if done.returncode == 2:  # refused: an input is missing
        return None
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _check(recipe: Path, launch: tuple[str, ...], budget: int) -> list[dict]:
    done = run_zeromem("check", "--offline", "--format", "json", "-q", "--gpu-memory", f"{budget}GiB", *launch,
                       str(recipe))
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["findings"]


def _quoted(finding: dict) -> int:
    """The exact bytes a budget finding judges: ZM101's model state, ZM106's peak (the sum's total)."""
    pattern = r"\(([\d,]+) B\) for model state" if finding["code"] == "ZM101" else r"= ([\d,]+) B \("
    found = re.search(pattern, finding["message"])
    assert found is not None, finding["message"]
    return int(found.group(1).replace(",", ""))


def _budgets(peak: int | None, state: int) -> list[int]:
    """GiB budgets 20% either side of the verdict figure, and between a peak and the model state above it."""
    figure = peak if peak is not None else state
    budgets = {max(1, round(figure * factor / GiB)) for factor in (0.8, 1.2)}
    if peak is not None and peak < state:  # the model state over the budget, the peak within it
        budgets.add(round((peak + state) / 2 / GiB))
    return sorted(budgets)


@pytest.mark.parametrize("launched", [False, True], ids=["alone", "launched"])
@pytest.mark.parametrize("case", CORPUS, ids=[case["recipe"] for case in CORPUS])
def test_estimate_and_check_agree_on_the_budget(case, launched, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache"))
    recipe, launch = RECIPES / case["recipe"], _launch(case, launched)
    plain = _estimate(recipe, launch)
    if plain is None:  # estimate cannot judge: check gives no verdict on any budget either
        assert not [item for item in _check(recipe, launch, 80) if item["code"] in BUDGET]
        return
    stage = plain["stage"]
    peak, state = plain["peak"].get(stage) if plain["peak"] else None, plain[stage]
    for budget in _budgets(peak, state):
        estimate = _estimate(recipe, launch, "--gpu-memory", f"{budget}GiB")
        assert estimate is not None and estimate["stage"] == stage
        found = [item for item in _check(recipe, launch, budget) if item["code"] in BUDGET]
        where = f"{case['recipe']} at {budget} GiB: {found}"
        assert estimate["fits"][stage] is (not found), where
        assert estimate["fits_by"] == ("peak" if peak is not None else "model state")
        if not found:
            continue
        (finding,) = found
        if finding["code"] == "ZM106":
            assert peak is not None and _quoted(finding) == peak, where
            exact = not estimate["approximate"]
            assert (finding["severity"] == "error") is (exact and peak > budget * GiB * 1.1), where
        else:
            assert _quoted(finding) == state and (peak is None or peak >= state), where
            exact = "approximate" not in finding["message"]
            assert exact or estimate["approximate"], where  # what check calls approximate, estimate does too
            assert not exact or not (estimate["engine_assumed"] or estimate["world_assumed"]), where
            assert (finding["severity"] == "error") is exact, where
