"""The pydantic-free pre-check must never change a verdict: whatever it vouches for, pydantic accepts
with the same values; and every finding stays identical with and without it.

Cases: the oracle's generated configs and mutations (tests/oracle), the repository's configs, the
real corpus in ../shared when present, and hypothesis-made sections.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from zeromem_lsp.analysis import analyse
from zeromem_lsp.configs.deepspeed import validation as ds
from zeromem_lsp.configs.deepspeed import models
from zeromem_lsp.configs.deepspeed.catalog import STRICT_SECTION_NAMES
from zeromem_lsp.configs.deepspeed.facts import SECTIONS
from zeromem_lsp.configs.deepspeed.facts_render import TARGET, render
from zeromem_lsp.configs.deepspeed.precheck import Vouched, vouch
from tests.oracle import test_deepspeed_oracle as oracle
from tests.oracle import test_deepspeed_sections as oracle_sections

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"


def test_generated_facts_are_current():
    assert TARGET.read_text(encoding="utf-8") == render(), (
        "zeromem_lsp/configs/deepspeed/facts.py is stale: run "
        "`python -m zeromem_lsp.configs.deepspeed.facts_render --write`")


def test_the_sections_of_a_typical_config_are_vouchable():
    """Guards the speed-up itself: the sections nearly every config has need no pydantic."""
    for name in ("ZeroConfig", "OffloadOptimizerConfig", "OffloadParamConfig", "FP16Config", "BF16Config"):
        assert SECTIONS[name]["vouch"], name
    assert not SECTIONS["ZenFlowConfig"]["vouch"]  # its own validator is not shared: always pydantic


# ------------------------------------------------------------------ section level


def _assert_same(vouched: Vouched, instance: BaseModel) -> None:
    assert vouched.model_fields_set == instance.model_fields_set
    for name in type(instance).model_fields:
        ours, theirs = getattr(vouched, name), getattr(instance, name)
        if isinstance(theirs, BaseModel):
            assert isinstance(ours, Vouched), name
            _assert_same(ours, theirs)
            continue
        assert type(ours) is type(theirs), (name, ours, theirs)
        assert ours == theirs or (isinstance(ours, float) and math.isnan(ours) and math.isnan(theirs)), name


def _check_section(model_name: str, data: object) -> bool:
    """Compare the pre-check with pydantic on one section; True when the pre-check vouched."""
    vouched = vouch(model_name, data)
    if vouched is None:
        return False
    model = getattr(models, model_name)
    try:
        instance = model.model_validate(data)
    except ValidationError as error:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"pre-check vouched for {data!r} but {model_name} refuses it: {error}")
    _assert_same(vouched, instance)
    return True


def _sections_of(config: object):
    """(model name, section dict after DeepSpeed drops "auto") for every strict section in a config."""
    if not isinstance(config, dict):
        return
    for path, name in STRICT_SECTION_NAMES.items():
        value = config
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, dict):
            yield name, ds._drop_auto(value, name, path, [])


@functools.cache
def _oracle_configs() -> dict[str, object]:
    cases: dict[str, object] = {}
    for family, generate in oracle_sections.GENERATORS.items():
        try:
            made = generate()
        except ModuleNotFoundError:  # "model" reads DeepSpeed's own classes: only with DeepSpeed installed
            continue
        cases.update({f"{family}: {name}": config for name, config in made.items()})
    cases.update({f"mutation: {name}": config for name, config in oracle.MUTATIONS.items()})
    cases.update({f"engine: {name}": config for name, config in oracle.ENGINE.items()})
    return cases


@functools.cache
def _file_texts() -> dict[str, str]:
    paths = [*sorted((ROOT / "tests").rglob("*.json")), *sorted((ROOT / "examples").rglob("*.json"))]
    if CORPUS.is_dir():
        paths += sorted(p for p in CORPUS.rglob("*") if p.suffix in (".json", ".yaml", ".yml"))
    return {str(p.relative_to(p.parents[1])): p.read_text(encoding="utf-8", errors="replace") for p in paths}


def test_every_section_the_precheck_vouches_for_pydantic_accepts_with_the_same_values():
    vouched = seen = 0
    for config in _oracle_configs().values():
        for name, data in _sections_of(config):
            seen += 1
            vouched += _check_section(name, data)
    for text in _file_texts().values():
        try:
            config = json.loads(text)
        except ValueError:
            continue
        for name, data in _sections_of(config):
            seen += 1
            vouched += _check_section(name, data)
    assert seen > 300 and 0 < vouched < seen  # both paths really exercised (~390 sections without ../shared)


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(), st.sampled_from([5e8, 1e9, 0.0, -0.0, 1.0, 2.5]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["auto", "cpu", "none", "nvme", "3", "true", "",
                                                                     "symmetric", "z1", "torch", "1e3"]),
    st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.sampled_from(["device", "x"]),
                                                                                   st.sampled_from(["cpu", 1]),
                                                                                   max_size=2),
)


def _typed(draw, spec: tuple):
    """A value of the field's own kind (often near its bounds), else any value at all."""
    kind, detail, optional, bounds, *_ = spec
    if draw(st.integers(0, 3)) == 0:
        return draw(VALUES)
    if optional and draw(st.integers(0, 5)) == 0:
        return None
    low = next((b for b in bounds[:2] if b is not None), None)
    high = next((b for b in bounds[2:] if b is not None), None)
    if kind == "bool":
        return draw(st.booleans())
    if kind == "int":
        edges = [v for b in (low, high) if b is not None for v in (b - 1, b, b + 1)]
        number = draw(st.one_of(st.integers(-2, 10**10), st.sampled_from(edges or [0])))
        return float(number) if draw(st.booleans()) else number
    if kind == "float":
        edges = [v for b in (low, high) if b is not None for v in (b - 0.5, b, b + 0.5)]
        return draw(st.one_of(st.floats(-2, 2), st.integers(-2, 2), st.sampled_from(edges or [0.0])))
    if kind == "str":
        return draw(st.text(max_size=4))
    if kind == "enum":
        return draw(st.sampled_from(detail))
    if kind == "model":
        return _section_data(draw, detail)
    return draw(VALUES)


def _section_data(draw, name: str) -> dict:
    section = SECTIONS[name]
    keys = draw(st.lists(st.sampled_from(sorted(section["keys"]) + ["unknown_key"]), max_size=6, unique=True))
    if "unknown_key" in keys and draw(st.booleans()):
        keys.remove("unknown_key")
    return {key: _typed(draw, section["fields"][section["keys"][key]]) if key in section["keys"] else draw(VALUES)
            for key in keys}


@st.composite
def sections(draw):
    name = draw(st.sampled_from(sorted(SECTIONS)))
    return name, _section_data(draw, name)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections())
def test_hypothesis_sections_agree_with_pydantic(case):
    _check_section(*case)


# ------------------------------------------------------------------ findings level


def _issues(config: object, world_size=None, stage_for_auto=0) -> list:
    return [(i.kind, i.path, i.target, i.message, getattr(i, "replacement", None))
            for i in ds.validate_deepspeed(config, world_size=world_size, stage_for_auto=stage_for_auto)]


def _findings(text: str, name: str) -> list:
    return [(f.code, f.severity, f.message, f.start, f.end) for f in analyse(text, name).findings]


@pytest.fixture
def without_precheck(monkeypatch):
    def run(function, *args, **kwargs):
        with monkeypatch.context() as patch:
            patch.setattr(ds, "vouch", lambda *a: None)
            patch.setattr(ds, "unknown_keys", lambda *a: None)  # misspelt keys worded without pydantic
            return function(*args, **kwargs)

    return run


def test_every_oracle_config_gets_identical_issues_with_and_without_the_precheck(without_precheck):
    for name, config in _oracle_configs().items():
        for world_size, stage_for_auto in ((None, 0), (8, 2)):
            assert _issues(config, world_size, stage_for_auto) == without_precheck(
                _issues, config, world_size, stage_for_auto), name


def test_every_file_gets_identical_findings_with_and_without_the_precheck(without_precheck):
    assert _file_texts()
    for name, text in _file_texts().items():
        assert _findings(text, name) == without_precheck(_findings, text, name), name


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sections(), max_size=3), st.sampled_from([0, 1, 2, 3, "auto"]))
def test_hypothesis_configs_get_identical_issues(sections_, stage):
    config: dict = {"train_batch_size": 8, "zero_optimization": {"stage": stage}}
    for model_name, data in sections_:
        paths = [p for p, n in STRICT_SECTION_NAMES.items() if n == model_name]
        target = config
        for key in paths[0][:-1]:
            target = target.setdefault(key, {}) if isinstance(target.get(key, {}), dict) else {}
        target[paths[0][-1]] = data
    ours = _issues(config, 8, 2)
    original = ds.vouch, ds.unknown_keys
    ds.vouch = ds.unknown_keys = lambda *a: None
    try:
        assert ours == _issues(config, 8, 2)
    finally:
        ds.vouch, ds.unknown_keys = original


@pytest.mark.parametrize("allgather", [None, 5e8, 2**40, -5, 1.5, "x", True])
@pytest.mark.parametrize("legacy", [True, False])
def test_the_legacy_boolean_zero_section_gets_identical_issues(without_precheck, legacy, allgather):
    config = {"train_batch_size": 8, "zero_optimization": legacy}
    if allgather is not None:
        config["allgather_size"] = allgather
    assert _issues(config) == without_precheck(_issues, config)


def test_did_you_mean_candidates_are_the_models_keys():
    """The did-you-mean of an unknown key reads the accepted keys from the facts, not the models."""
    from zeromem_lsp.configs.deepspeed.catalog import section_keys
    from zeromem_lsp.configs.deepspeed.precheck import accepted_keys

    for path, name in STRICT_SECTION_NAMES.items():
        assert accepted_keys(name) == sorted(section_keys(path)), path


def test_misspelt_keys_are_reported_without_loading_pydantic():
    """A config whose only validity problems are misspelt keys (the common finding) is checked
    without importing pydantic or the models, with pydantic's wording (the tests above compare)."""
    probe = (
        "import sys\n"
        "from zeromem_lsp.configs.deepspeed import validate_deepspeed\n"
        "issues = validate_deepspeed({'train_batch_size': 8, 'fp16': {'enabled': False, 'loss_scale_windw': 1},"
        " 'zero_optimization': {'stage': 2, 'overlap_com': True}})\n"
        "print([i.kind for i in issues], 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["['unknown_key',", "'unknown_key']", "False"], done.stderr
