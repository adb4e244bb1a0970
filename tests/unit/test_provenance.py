"""Every value credits the layer it came from (issue 18): a command-line flag, the file's own zeromem
block (top level, or nested in TrainingArguments' `deepspeed`), the project file, an editor setting.
Hover and the peak's JSON (`peak_inputs`, what `zeromem estimate --format json` prints) say the same."""

import json

import pytest

from zeromem_lsp.analysis import analyse
from zeromem_lsp.assist.hover import breakdown_markdown, hover_at
from zeromem_lsp.configs.layers import (
    EDITOR, FILE_BLOCK, PROJECT, SettingsLayer, command_line, editor, file_block, resolve,
)
from zeromem_lsp.configs.settings import BYTE_SETTINGS, ZeromemSettings
from zeromem_lsp.configs.settings_model import ZeromemSettingsModel
from zeromem_lsp.configs.settings_values import GRPO_KEYS
from zeromem_lsp.memory.peak import INPUT_LABELS
from zeromem_lsp.project import discover, file_loader
from tests.cli.conftest import run_zeromem
from tests.cli.test_estimate_peak import write_config

DEEPSPEED = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


def _analysis(tmp_path, data: dict, name: str = "ds_config.json", settings=ZeromemSettings(),
              forced=ZeromemSettings()):
    path = tmp_path / name
    text = json.dumps(data)
    path.write_text(text)
    layers = discover(path).layers_for(path) if settings is None else settings
    return text, analyse(text, name, layers, forced, file_loader(path))


def _credits(text: str, analysis) -> tuple[str, dict]:
    """(the stage hover, the peak's JSON inputs)."""
    hover = breakdown_markdown(analysis.plan, analysis.setup)  # the whole breakdown behind the stage hover
    return hover, analysis.plan.peak.to_json()["peak_inputs"]


def _model(tmp_path) -> dict:
    return {"from_config": str(write_config(tmp_path, "llama-0"))}


def test_the_resolution_keeps_the_highest_layer_and_names_it():
    layers = (command_line(ZeromemSettings(world_size=16)), file_block(ZeromemSettings(world_size=8, micro_batch=2),
              ("deepspeed", "zeromem")), SettingsLayer(ZeromemSettings(gpu_memory="80GiB", micro_batch=9), PROJECT,
              "pyproject.toml [tool.zeromem]"), editor(ZeromemSettings(gpu_memory="24GiB", reserved="2GiB")))
    resolved = resolve(layers)
    assert (resolved.settings.world_size, resolved.settings.micro_batch, resolved.settings.gpu_memory,
            resolved.settings.reserved) == (16, 2, 80 * 2**30, 2 * 2**30)
    assert {name: origin for name, origin in resolved.origins.items()} == {
        "world_size": ("--world-size", None),
        "micro_batch": ("deepspeed.zeromem.micro_batch", ("deepspeed", "zeromem", "micro_batch")),
        "gpu_memory": ("pyproject.toml [tool.zeromem]", None),
        "reserved": ("editor setting zeromem.reserved", None),
    }
    assert editor(ZeromemSettings()).origin("world_size").note == "editor setting zeromem.worldSize"
    assert [layer.layer for layer in layers[1:]] == [FILE_BLOCK, PROJECT, EDITOR]


def test_command_line_flags_rank_above_the_block_and_are_credited(tmp_path):
    block = {"parameters": _model(tmp_path), "world_size": 2, "sequence_length": 64}
    text, analysis = _analysis(tmp_path, {**DEEPSPEED, "zeromem": block},
                               forced=ZeromemSettings(world_size=8, sequence_length=32))
    hover, inputs = _credits(text, analysis)
    assert "R = 8 ranks — --world-size" in hover
    assert inputs["sequence_length"] == {"value": 32, "from": "--sequence-length"}


def test_the_file_block_at_the_top_level_is_credited_with_its_key_path(tmp_path):
    block = {"parameters": _model(tmp_path), "world_size": 2, "sequence_length": 64, "gpu_memory": "80GiB"}
    text, analysis = _analysis(tmp_path, {**DEEPSPEED, "zeromem": block}, settings=ZeromemSettings(world_size=8))
    hover, inputs = _credits(text, analysis)
    assert "R = 2 ranks — zeromem.world_size" in hover
    assert "per GPU — zeromem.gpu_memory" in hover
    assert inputs["sequence_length"] == {"value": 64, "from": "zeromem.sequence_length"}
    assert analysis.plan.origins["world_size"].path == ("zeromem", "world_size")


def test_a_block_nested_in_training_arguments_deepspeed_is_credited_where_it_is(tmp_path):
    block = {"parameters": _model(tmp_path), "world_size": 2, "sequence_length": 64}
    args = {"output_dir": "out", "per_device_train_batch_size": 1, "bf16": True,
            "deepspeed": {**DEEPSPEED, "zeromem": block}}
    text, analysis = _analysis(tmp_path, args, "training_args.json")
    hover, inputs = _credits(text, analysis)
    assert "R = 2 ranks — deepspeed.zeromem.world_size" in hover
    assert "from deepspeed.zeromem.parameters: " in hover  # then how the count was made
    assert inputs["sequence_length"] == {"value": 64, "from": "deepspeed.zeromem.sequence_length"}
    assert analysis.plan.origins["world_size"].path == ("deepspeed", "zeromem", "world_size")


def test_the_project_file_is_credited(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.zeromem]\nworld-size = 4\nsequence-length = 16\nparameters = { from_config = "config.json" }\n'
        '[[tool.zeromem.overrides]]\nfiles = ["ds_*.json"]\nreserved = "2GiB"\n')
    write_config(tmp_path, "llama-0")
    text, analysis = _analysis(tmp_path, DEEPSPEED, settings=None)
    hover, inputs = _credits(text, analysis)
    assert "R = 4 ranks — pyproject.toml [tool.zeromem]" in hover
    assert inputs["sequence_length"] == {"value": 16, "from": "pyproject.toml [tool.zeromem]"}
    assert inputs["reserved"] == {"value": 2 * 2**30, "from": "pyproject.toml [[tool.zeromem.overrides]]"}


def test_an_editor_setting_is_credited_as_one(tmp_path):
    settings = (editor(ZeromemSettings(world_size=8, parameters=_model(tmp_path), sequence_length=128)),)
    text, analysis = _analysis(tmp_path, DEEPSPEED, settings=settings)
    hover, inputs = _credits(text, analysis)
    assert "R = 8 ranks — editor setting zeromem.worldSize" in hover
    assert "zeromem.world_size" not in hover  # the old hover credited a block that is not there
    assert inputs["sequence_length"] == {"value": 128, "from": "editor setting zeromem.sequenceLength"}


def test_peak_inputs_are_keyed_by_field_name_in_estimate_json(tmp_path):
    config = write_config(tmp_path, "llama-0")
    done = run_zeromem("estimate", "--model-config", str(config), "--world-size", "2", "--sequence-length", "64",
                       "--micro-batch", "2", "--reserved", "2GiB", "--format", "json")
    inputs = json.loads(done.stdout)["peak_inputs"]
    assert list(inputs) == [name for name in INPUT_LABELS if name != "fsdp_version"][:-8] == ["sequence_length", "micro_batch",
                                                       "gradient_accumulation_steps", "gradient_checkpointing",
                                                       "attention", "dtype", "reserved", "engine", "param_dtype",
                                                       "optimizer_impl", "loss_kernel", "trainer"]  # not FSDP: no version
    # (nor a Transformers version: none is given, installed or pinned here)
    assert inputs["trainer"] == {"value": "sft", "from": "default: sft (the model's own loss)"}
    # shown only when given (a TRL recipe's SFT loss, a stated k-bit preparation, a Transformers release given,
    # installed or pinned); GRPO's only with trainer grpo
    assert list(INPUT_LABELS)[-8:] == ["precompute_ref_log_probs", "sft_loss", "kbit_prepare", "transformers_version",
                                       *GRPO_KEYS]
    assert inputs["sequence_length"] == {"value": 64, "from": "--sequence-length"}
    assert inputs["micro_batch"] == {"value": 2, "from": "--micro-batch"}
    assert inputs["reserved"] == {"value": 2 * 2**30, "from": "--reserved"}


def test_one_list_of_byte_settings_is_the_models_byte_fields():
    byte_fields = {name for name, field in ZeromemSettingsModel.model_fields.items()
                   if "ByteSize" in str(field.metadata) or "80GiB" in json.dumps(field.json_schema_extra or {})}
    schema = ZeromemSettingsModel.model_json_schema()["properties"]
    byte_pattern = {name for name, prop in schema.items() if "[kKMGTPE]" in json.dumps(prop)}
    assert set(BYTE_SETTINGS) == byte_pattern
    assert byte_fields <= set(BYTE_SETTINGS)


@pytest.mark.parametrize("name", sorted(BYTE_SETTINGS))
def test_hovering_a_byte_setting_shows_bytes(name):
    text = json.dumps({"train_batch_size": 8, "zeromem": {name: "2GiB"}})
    hover = hover_at(analyse(text, "ds_config.json"), text.index(f'"{name}"') + 1).markdown
    assert "In effect: 2.0 GiB (2,147,483,648 B)" in hover, hover


def test_hovering_a_zeromem_key_says_which_layer_is_in_effect():
    text = json.dumps({"train_batch_size": 8, "zeromem": {"world_size": 2, "gpu_memory": "24GiB"}})
    analysis = analyse(text, "ds_config.json", (editor(ZeromemSettings(gpu_memory="80GiB")),),
                       ZeromemSettings(world_size=4))
    world = hover_at(analysis, text.index('"world_size"') + 1).markdown
    budget = hover_at(analysis, text.index('"gpu_memory"') + 1).markdown
    assert "In effect: `4` — --world-size" in world
    assert "In effect: 24.0 GiB (25,769,803,776 B) — zeromem.gpu_memory" in budget
