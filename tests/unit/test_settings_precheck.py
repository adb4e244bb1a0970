"""Settings answered without pydantic must equal what the pydantic model (settings_model.py) gives."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeromem_lsp.configs import settings_model
from zeromem_lsp.configs.settings import (
    SETTING_NAMES, ParametersFromConfig, ZeromemSettings, certainly_valid, validate_settings,
)

ANY = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-2, 10), st.floats(), st.sampled_from([0.5, 1.0, 1, 0, 7e9]),
    st.sampled_from(["7B", "80GiB", "24GB", "1.5e9", "0", "-1", "bf16", "fp16", "fp32", "adamw", "lion", "x", "",
                     " 7B ", "1_000", "80gib", "7G", "AdamW"]),
    st.text(max_size=5), st.dictionaries(st.sampled_from(["from_config", "x"]), st.sampled_from(["m/config.json", "", 3])),
    st.lists(st.integers(), max_size=1),
)
VALUES = st.dictionaries(st.sampled_from([*SETTING_NAMES, "unknown"]), ANY, max_size=5)


def _as_plain(value):
    if isinstance(value, settings_model.ParametersFromConfigModel):
        return ParametersFromConfig(value.from_config)
    return value


def _same(ours, theirs) -> None:
    assert type(ours) is type(theirs), (ours, theirs)
    assert ours == theirs or (isinstance(ours, float) and math.isnan(ours) and math.isnan(theirs))


@settings(max_examples=1500, deadline=None)
@given(VALUES)
def test_values_answered_without_pydantic_are_what_pydantic_gives(values):
    checked = certainly_valid(values)
    model_settings, problems = settings_model.validate(values)
    if checked is None:
        return
    assert problems == []
    reference = settings_model.ZeromemSettingsModel.model_validate(values)
    for name in SETTING_NAMES:
        _same(checked.get(name), _as_plain(getattr(reference, name)))
    assert validate_settings(values) == (ZeromemSettings.from_checked(model_settings), [])


def test_typical_values_are_answered_without_pydantic_and_doubtful_ones_are_not():
    assert certainly_valid({"parameters": "7B", "gpu_memory": "80GiB", "world_size": 8, "warn_fraction": 1}) == {
        "parameters": 7 * 10**9, "gpu_memory": 80 * 2**30, "world_size": 8, "warn_fraction": 1.0}
    assert certainly_valid({"parameters": {"from_config": "m/config.json"}}) == {
        "parameters": ParametersFromConfig("m/config.json")}
    for doubtful in ({"world_size": "8"}, {"world_size": True}, {"warn_fraction": "0.5"}, {"gpu_memory": "80 apples"},
                     {"parameters": 0}, {"precision": "BF16"}, {"unknown": 1}):
        assert certainly_valid(doubtful) is None, doubtful


def test_a_bad_value_still_gets_pydantics_message():
    settings_, problems = validate_settings({"world_size": "8", "gpu_memory": "80GiB"})
    assert settings_ == ZeromemSettings(gpu_memory=80 * 2**30)
    assert [(p.name, p.unknown) for p in problems] == [("world_size", False)]
    assert "integer" in problems[0].message
    with pytest.raises(ValueError):
        ZeromemSettings(world_size=0)


def test_the_plain_value_behaves_like_the_model_did():
    a = ZeromemSettings(parameters="7B", world_size=8)
    assert a == ZeromemSettings(parameters=7 * 10**9, world_size=8) and hash(a) == hash(ZeromemSettings(parameters="7B", world_size=8))
    assert a != ZeromemSettings() and a.gpu_memory is None
    assert a.model_copy(update={"world_size": 4}).world_size == 4 and a.world_size == 8
    assert ZeromemSettings(gpu_memory="24GB").merged_over(a) == ZeromemSettings(parameters="7B", world_size=8, gpu_memory=24 * 10**9)
    with pytest.raises(TypeError):
        a.world_size = 2
    assert copy.deepcopy(a) == a == pickle.loads(pickle.dumps(a))
    assert ZeromemSettings.model_fields["gpu_memory"].description  # hover reads the model's descriptions
