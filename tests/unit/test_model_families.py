"""Issue 29's families (olmo2, olmo3, olmoe, qwen2_moe, granite, smollm3, starcoder2, cohere, cohere2) against
Transformers.

tests/data/model_families/counts.json is written by benchmarks/model_families/count.py from Transformers 5.24
(each config of tests/data/model_families/configs/ loaded with AutoConfig.from_pretrained, the model built by
AutoModelForCausalLM.from_config on the meta device). Checked here without torch: zeromem's exact parameter count,
its weights inventory (every named_parameters() name and shape, in order) and its module tree (every
named_modules() name, what PEFT's target_modules match)."""

import json
import re
from pathlib import Path

import pytest

from zeromem_lsp.configs.families import FAMILIES
from zeromem_lsp.configs.model_config import UnsupportedModel, count_parameters, model_shape
from zeromem_lsp.configs.vision import VISION_LANGUAGE
from zeromem_lsp.configs.lora_modules import inventory, module_tree

DATA = Path(__file__).resolve().parents[1] / "data" / "model_families"
RECORD = json.loads((DATA / "counts.json").read_text(encoding="utf-8"))
#: the language models (the vision-language composites of the record: tests/unit/test_vision_language.py)
NAMES = sorted(name for name, found in RECORD["models"].items() if found["model_type"] not in VISION_LANGUAGE)
NEW = {"olmo2", "olmo3", "olmoe", "qwen2_moe", "granite", "smollm3", "starcoder2", "cohere", "cohere2", "deepseek_v3",
       "gpt_oss", "glm4_moe", "qwen3_next", "llama4_text", "phimoe"}
ALSO = {"qwen3_moe"}  # an older family read through an alias (a config saved by Transformers 5)


def config(name: str) -> dict:
    return json.loads((DATA / "configs" / f"{name}.json").read_text(encoding="utf-8"))


def test_the_record_covers_every_new_family_from_transformers_5_24():
    assert RECORD["transformers"] == "5.24.0"
    assert {found["model_type"] for found in RECORD["models"].values()} == NEW | ALSO | set(VISION_LANGUAGE)
    assert sorted(path.stem for path in (DATA / "configs").glob("*.json")) == sorted(RECORD["models"])
    real = [name for name in NAMES if not name.startswith(("tiny-", "defaults-only-"))]
    assert len(real) >= 20


@pytest.mark.parametrize("name", NAMES)
def test_the_count_is_transformers(name):
    found = RECORD["models"][name]
    counted = count_parameters(config(name))
    assert (counted.total, counted.model_type) == (found["parameters"], found["model_type"])


@pytest.mark.parametrize("name", NAMES)
def test_the_weights_are_named_parameters(name):
    """Every parameter with its shape, in registration order (a tied head is not listed by named_parameters)."""
    found = inventory(config(name))
    assert found.tied is RECORD["models"][name]["tied"]
    assert named_parameters(found) == RECORD["models"][name]["named_parameters"]


def named_parameters(found) -> list:
    """The module tree's parameters as named_parameters() lists them: the embeddings, each layer's weights in the
    inventory's order (a bias after its weight), the final norm and an untied head."""
    _, parameters = module_tree(found)
    kept = [p for p in parameters if not (p.weight.kind == "head" and found.tied)]
    group = [0 if p.layer is None and p.weight.role in ("embedding", "positions") else 1 if p.layer is not None else 2
             for p in kept]
    order = sorted(range(len(kept)), key=lambda k: (group[k], kept[k].layer or 0))
    return [[kept[k].key, list(_shape(kept[k]))] for k in order]


def _shape(parameter) -> tuple[int, ...]:
    shapes = parameter.weight.shapes()
    return shapes[1] if parameter.key.endswith(".bias") else shapes[0]


#: parameterless modules memory/adapters.py's module tree cannot place yet: Llama 4's weightless q/k L2 norm (only on
#: its rotary layers, Llama4TextAttention) and its dense layers' activation (Llama4TextMLP.activation_fn, on the
#: layers outside moe_layers; module_tree puts a family's per-layer modules on every layer unless they start "mlp.")
UNPLACED = {"llama4_text": re.compile(r"\.(self_attn\.qk_norm|feed_forward\.activation_fn)$")}


@pytest.mark.parametrize("name", NAMES)
def test_the_module_tree_is_named_modules(name):
    modules, _ = module_tree(inventory(config(name)))
    recorded = RECORD["models"][name]["named_modules"]
    unplaced = UNPLACED.get(RECORD["models"][name]["model_type"])
    expected = [key for key in recorded if not (unplaced and unplaced.search(key))]
    assert sorted(m.key for m in modules) == sorted(expected)
    if unplaced:  # the gap is those modules alone, and they are parameterless
        assert all(not key.endswith(".weight") for key in set(recorded) - set(expected))


MEASURED = {"olmo2", "olmo3", "granite", "smollm3", "starcoder2", "cohere", "cohere2", "olmoe", "deepseek_v3",
            "glm4_moe", "gpt_oss", "llama4_text", "phimoe", "qwen3_next", "qwen2_moe"}  # tests/data/activations


@pytest.mark.parametrize("model_type", sorted(MEASURED))
def test_the_measured_ones_have_an_activation_model(model_type):
    assert FAMILIES[model_type].activations is True
    for name in (n for n in NAMES if RECORD["models"][n]["model_type"] == model_type):
        assert model_shape(config(name)).model_type == model_type


def test_every_new_family_is_measured():
    assert set(NEW) == MEASURED


@pytest.mark.parametrize("model_type", sorted(name for name, family in FAMILIES.items() if not family.activations))
def test_no_peak_is_guessed_for_the_unmeasured(model_type):
    """Counted exactly, but no activation model (phi): the shape the step model needs is refused, naming the type."""
    shaped = {"model_type": model_type, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "num_hidden_layers": 2, "vocab_size": 100}
    with pytest.raises(UnsupportedModel, match=f"no activation model for model_type '{model_type}'"):
        model_shape(shaped)


def test_published_counts():
    """The model cards' sizes: OLMo-2 7B 7.30B, Command R+ 104B, StarCoder2-15B 16B (untied), SmolLM3 3.08B."""
    totals = {name: RECORD["models"][name]["parameters"] for name in NAMES}
    assert totals["OLMo-2-1124-7B"] == 7_298_617_344
    assert round(totals["c4ai-command-r-plus"] / 1e9) == 104
    assert round(totals["starcoder2-15b"] / 1e9) == 16
    assert round(totals["SmolLM3-3B"] / 1e7) == 308
    assert round(totals["OLMoE-1B-7B-0924"] / 1e8) == 69
    assert (round(totals["Qwen1.5-MoE-A2.7B"] / 1e8), round(totals["Qwen2-57B-A14B"] / 1e8)) == (143, 574)


def test_the_docs_table_says_what_the_families_table_says():
    """docs/model-families.md has one row per family; its activation columns are the traits'."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "model-families.md").read_text(encoding="utf-8")
    rows = {cells[0]: cells for line in text.splitlines() if line.startswith("| ")
            for cells in [[cell.strip() for cell in line.strip("|").split("|")]] if cells[0] in FAMILIES}
    assert set(rows) == set(FAMILIES)
    for name, family in FAMILIES.items():
        assert rows[name][2] == ("measured" if family.activations else "none"), name
        lora = "measured" if family.activations and family.lora_measured else "none" if not family.activations \
            else "not measured"
        assert rows[name][3] == lora, name


def test_published_counts_of_the_moe_families():
    """Model cards / published totals: DeepSeek-V3 671B (without its MTP layer, which Transformers does not build),
    Qwen3-Next-80B-A3B 79,674,391,296 (its published tensor total), gpt-oss 20.9B / 116.8B (dequantized), Llama-4
    Scout / Maverick 109B / 400B with vision (text alone 107.8B / 400.7B), GLM-4.5-Air 106B, Phi-3.5-MoE 41.9B."""
    totals = {name: RECORD["models"][name]["parameters"] for name in NAMES}
    assert round(totals["DeepSeek-V3"] / 1e9) == 671
    assert totals["Qwen3-Next-80B-A3B-Instruct"] == 79_674_391_296
    assert (round(totals["gpt-oss-20b"] / 1e8), round(totals["gpt-oss-120b"] / 1e8)) == (209, 1168)
    assert (round(totals["Llama-4-Scout-17B-16E.text"] / 1e9), round(totals["Llama-4-Maverick-17B-128E.text"] / 1e9)) \
        == (108, 401)
    assert round(totals["GLM-4.5-Air"] / 1e9) == 107 and round(totals["Phi-3.5-MoE-instruct"] / 1e8) == 419


def test_expert_counts_are_read_through_attribute_map_aliases():
    """A key written under its attribute_map alias sets the field (PreTrainedConfig.__setattr__): qwen3_moe's
    num_experts ← num_local_experts (a config saved by Transformers 5: 16 experts, not the default 128), deepseek_v3's
    n_routed_experts ← num_local_experts, gpt_oss's num_local_experts ← num_experts."""
    for name, experts in (("tiny-qwen3-moe-v5-local-experts", 16), ("tiny-deepseek-v3-local-experts-bias", 6),
                          ("tiny-gpt-oss-num-experts-alias", 6)):
        found = inventory(config(name))
        assert {w.experts for w in found.weights if w.role == "experts_gate_up"} == {experts}, name


def test_a_llama4_composite_counts_its_text_model_as_llama4_text():
    """Llama4Config builds its text_config as Llama4TextConfig whatever the dict says (TEXT_CONFIGS): the composite's
    language_model part is the text model's count, and the whole is what Transformers builds."""
    composite = config("Llama-4-Scout-17B-16E-Instruct")
    composite["text_config"] = {**composite["text_config"], "model_type": "something_else"}
    counted = count_parameters(composite)
    assert counted.total == RECORD["models"]["Llama-4-Scout-17B-16E-Instruct"]["parameters"]
    assert dict(counted.parts)["language_model"] == RECORD["models"]["Llama-4-Scout-17B-16E.text"]["parameters"]
    assert counted.model_type == "llama4" and "llama4_text" in counted.note


def test_deepseek_layers_follow_first_k_dense_replace_and_q_lora_rank():
    """DeepseekV3DecoderLayer: a dense MLP below first_k_dense_replace, experts from there; DeepseekV3Attention: one
    q_proj where q_lora_rank is null (Moonlight), else q_a_proj / q_a_layernorm / q_b_proj."""
    for name, dense, q in (("DeepSeek-V3", 3, "q_a_proj"), ("Moonlight-16B-A3B", 1, "q_proj")):
        recorded = [key for key, _ in RECORD["models"][name]["named_parameters"]]
        assert sum(key.endswith("mlp.gate_proj.weight") for key in recorded) == dense
        assert f"model.layers.0.self_attn.{q}.weight" in recorded
        found = inventory(config(name))
        assert {w.path.split(".")[-1] for w in found.weights if w.role in ("q", "q_a")} == {q}
