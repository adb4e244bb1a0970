"""Fields a config.json leaves out take Transformers' configuration defaults (transformers_defaults.py)."""

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs import transformers_defaults as recorded
from zeromem_lsp.configs.families import FAMILIES
from zeromem_lsp.configs.model_config import SUPPORTED, count_parameters, model_shape, weights_shape

GEMMA3_4B = Path(__file__).resolve().parents[1] / "data" / "models" / "gemma-3-4b-it" / "config.json"


def test_the_recorded_defaults_are_the_config_classes_own():
    """A few values read from Transformers 5.24.0's configuration classes (their dataclass defaults)."""
    assert recorded.TRANSFORMERS_VERSION == "5.24.0"
    assert set(recorded.DEFAULTS) == set(SUPPORTED)
    gemma3 = recorded.DEFAULTS["gemma3_text"]
    assert (gemma3["num_attention_heads"], gemma3["num_key_value_heads"], gemma3["head_dim"],
            gemma3["vocab_size"], gemma3["tie_word_embeddings"]) == (8, 4, 256, 262208, True)
    assert recorded.DEFAULTS["llama"]["num_key_value_heads"] is None  # derived in __post_init__: the heads
    assert recorded.DEFAULTS["mistral"]["num_key_value_heads"] == 8
    assert recorded.DEFAULTS["gpt2"]["n_positions"] == 1024
    assert recorded.ALIASES["gpt2"]["hidden_size"] == "n_embd"
    assert recorded.TEXT_CONFIGS["gemma3"] == ("gemma3_text", True)
    assert recorded.TEXT_CONFIGS["llava"] == ("llama", False)


def test_the_published_gemma3_4b_config_counts_as_transformers_builds_it():
    """google/gemma-3-4b-it's config.json leaves heads, head_dim and vocabulary to the defaults. Transformers
    5.24.0 builds Gemma3ForConditionalGeneration (meta device, tests/data/model_families/counts.json) with
    4,300,079,472 parameters: its language model (language_model + tied lm_head) 3,880,263,168 of them."""
    config = json.loads(GEMMA3_4B.read_text())
    assert "num_attention_heads" not in config["text_config"]
    counted = count_parameters(config)
    assert counted.total == 4_300_079_472 and dict(counted.parts)["language_model"] == 3_880_263_168
    assert counted.model_type == "gemma3"
    assert "Transformers 5.24.0 defaults:" in counted.note
    for used in ("num_attention_heads=8", "num_key_value_heads=4", "head_dim=256", "vocab_size=262208"):
        assert used in counted.note
    whole = model_shape(config)  # the image tokens' activations, the SigLIP tower trained as given
    assert whole.vision.trained and whole.vision.tower.depth == 27 and whole.vision.tokens == 256
    shape = model_shape({**config["text_config"], "model_type": "gemma3_text"})  # the language model alone
    assert (shape.heads, shape.kv_heads, shape.head_dim, shape.vocab, shape.layers) == (8, 4, 256, 262208, 34)
    assert (shape.sliding_window, shape.sliding_layers) == (1024, 34 - 34 // 6)


def test_an_empty_llama_config_is_transformers_default_llama():
    """LlamaConfig() is Llama-2-7B's shape: 6,738,415,616 parameters (the published count)."""
    counted = count_parameters({"model_type": "llama"})
    assert counted.total == 6_738_415_616
    assert "hidden_size=4096" in counted.note and "vocab_size=32000" in counted.note


def test_a_field_the_config_writes_is_not_replaced_and_not_named():
    config = {"model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 128, "vocab_size": 100}
    counted = count_parameters(config)
    assert "num_key_value_heads=8" in counted.note  # MistralConfig's default, not the head count
    assert "hidden_size" not in counted.note
    assert model_shape(config).kv_heads == 8


def test_an_alias_sets_the_field_it_names():
    """GPT2Config.attribute_map: hidden_size is n_embd, so n_embd's default (768) does not apply."""
    config = {"model_type": "gpt2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "vocab_size": 100, "n_positions": 10}
    assert model_shape(config).hidden == 64
    per_layer = 2 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 2 * 64 + 64 * 256 + 256 + 256 * 64 + 64
    assert count_parameters(config).total == 100 * 64 + 10 * 64 + 2 * per_layer + 2 * 64


@pytest.mark.parametrize("text_type, expected", [(None, "llama"), ("mistral", "mistral")])
def test_a_composite_text_config_without_model_type_takes_the_specs_default(text_type, expected):
    text = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
            "vocab_size": 100}
    if text_type:
        text["model_type"] = text_type
    assert weights_shape({"model_type": "llava", "text_config": text}).model_type == expected
    assert f"(language model {expected}: 2 layers" in count_parameters({"model_type": "llava", "text_config": text}).note


def test_a_fixed_text_class_ignores_the_dicts_model_type():
    text = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128}
    assert weights_shape({"model_type": "gemma3", "text_config": text}).model_type == "gemma3_text"


def test_the_generated_module_is_current_where_transformers_is_installed():
    """Where Transformers is importable, the recorded module equals what the generator writes from it."""
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != recorded.TRANSFORMERS_VERSION:
        pytest.skip(f"recorded from Transformers {recorded.TRANSFORMERS_VERSION}, {transformers.__version__} here")
    import runpy

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "model_defaults" / "generate.py"
    generator = runpy.run_path(str(script))
    assert generator["render"](generator["collect"]()) == Path(recorded.__file__).read_text(encoding="utf-8")


def test_the_counters_own_tie_defaults_agree_with_transformers():
    """The families table's tie default is what the configuration class says."""
    for model_type, family in FAMILIES.items():
        assert family.tie is recorded.DEFAULTS[model_type]["tie_word_embeddings"], model_type


def test_an_alias_written_by_transformers_5_wins_over_the_default_under_the_other_name():
    """Issue 29: a qwen3_moe config.json saved by Transformers 5 names its experts `num_local_experts` (attribute_map
    num_experts → num_local_experts); the class default 128 recorded under `num_experts` must not win. 16 experts:
    4 × (attention 786,560 + 16 × 3 × 512 × 256 + router 512 × 16 + norms 1,024) + embeddings 2 × 512,000 + 512."""
    import json

    from zeromem_lsp.configs.model_config import count_parameters_from_text, model_shape_from_text

    config = {"model_type": "qwen3_moe", "hidden_size": 512, "intermediate_size": 1024, "moe_intermediate_size": 256,
              "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 1000,
              "num_experts_per_tok": 2}
    expected = 4 * (786_560 + 16 * 3 * 512 * 256 + 512 * 16 + 1_024) + 2 * 512_000 + 512
    for name in ("num_local_experts", "num_experts"):
        text = json.dumps({**config, name: 16})
        assert count_parameters_from_text(text).total == expected == 29_373_440
        assert model_shape_from_text(text).experts == 16
    assert model_shape_from_text(json.dumps(config)).experts == 128  # absent: the class default
