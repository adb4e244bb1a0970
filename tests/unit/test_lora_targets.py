"""The string rules of configs/lora_targets.py on the examples docs/adapters.md gives (PEFT's own counts for whole
configs are compared in test_adapters.py)."""

import pytest

from zeromem_lsp.configs.lora_targets import (
    EXCLUDED, TargetSpec, TargetSpecError, check_spec, layer_index, matches, pattern_key,
)

Q0 = "model.layers.0.self_attn.q_proj"


def test_layer_index_is_the_first_number_after_a_named_segment():
    assert layer_index("model.layers.3.mlp.up_proj", ()) == 3
    assert layer_index("transformer.h.1.attn.c_attn", ()) == 1
    assert layer_index("model.layers.1.mlp.experts.0.w1", ()) == 1  # the lazy match: not the expert's index
    assert layer_index("lm_head", ()) is None
    assert layer_index("model.layers.2.mlp.up_proj", ("h", "layers")) == 2
    assert layer_index("model.layers.2.mlp.up_proj", "h") is None


def test_rank_pattern_keys_match_the_end_after_a_dot_first_key_wins():
    assert pattern_key(("v_proj", "proj"), "model.layers.0.self_attn.v_proj") == "v_proj"
    assert pattern_key(("proj",), Q0) is None  # "proj" must follow a dot or start the name
    assert pattern_key((r".*proj", "q_proj"), Q0) == r".*proj"
    assert pattern_key(("layers.1.self_attn.q_proj",), Q0) is None
    assert pattern_key((r"^model\.layers\.0.*",), Q0) == r"^model\.layers\.0.*"


def test_targets_exclusions_and_layers():
    assert matches(TargetSpec(r".*\.(q_proj|v_proj)"), Q0) and not matches(TargetSpec("q_proj"), Q0)
    assert matches(TargetSpec(("q_proj",), exclude=("layers.0.self_attn.q_proj",)), Q0) is EXCLUDED
    assert matches(TargetSpec(("q_proj",), exclude=r".*self_attn.*"), Q0) is EXCLUDED
    assert matches(TargetSpec(("q_proj",), modules_to_save=("self_attn",)), Q0) is EXCLUDED  # and its children
    assert not matches(TargetSpec(("q_proj",), layers_to_transform=(1,)), Q0)
    assert matches(TargetSpec((Q0,), layers_to_transform=(1,)), Q0)  # named in full: the layers are not consulted
    assert matches(TargetSpec(("q_proj",), layers_to_transform=0), Q0)


@pytest.mark.parametrize("spec, field", [
    (TargetSpec(".*", layers_to_transform=(0,)), "layers_to_transform"),
    (TargetSpec(("q_proj",), layers_pattern="layers"), "layers_pattern"),
    (TargetSpec("all-linear", layers_pattern="layers", layers_to_transform=(0,)), "layers_to_transform"),
    (TargetSpec(("q_proj",), exclude="[a-"), "exclude_modules"),
    (TargetSpec(("q_proj",), layers_to_transform=(0,), layers_pattern=("(",)), "layers_pattern"),
    (TargetSpec(("q_proj",), layers_to_transform=(-1,)), "layers_to_transform"),
])
def test_what_loraconfig_refuses_names_the_field(spec, field):
    with pytest.raises(TargetSpecError) as refused:
        check_spec(spec)
    assert refused.value.field == field
