"""Over LSP, the stage hover credits each value to the layer it came from (issue 18): an editor
setting, the project file, the file's own zeromem block (top level, or nested in TrainingArguments'
`deepspeed`). Before, an editor `worldSize` was shown as `zeromem.world_size`."""

import json

import pytest
from lsp_session import Doc, client_fixture, with_breakdown
from lsprotocol import types
from pytest_lsp import LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEEPSPEED = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}

client = client_fixture(initialization_options={"zeromem": {"worldSize": 8, "parameters": "7B", "gpuMemory": "80GiB"}},
                        configuration={})


async def _stage_hover(client: LanguageClient, path, data: dict) -> str:
    """The hover on `"stage"` of `data` saved at `path` (a real file: project settings are found from it)."""
    text = json.dumps(data)
    path.write_text(text)
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=path.as_uri(), language_id="json", version=1, text=text)))
    doc = Doc(client, path.as_uri(), text, 1)
    await doc.diagnostics()  # analysed with the settings in effect
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc.identifier, position=doc.position(text.index('"stage"') + 1)))
    assert hover is not None
    return await with_breakdown(doc, hover.contents.value)


async def test_an_editor_setting_is_credited_to_the_editor(client: LanguageClient, tmp_path):
    hover = await _stage_hover(client, tmp_path / "ds_config.json", DEEPSPEED)
    assert "R = 8 ranks — editor setting zeromem.worldSize" in hover
    assert "7B from editor setting zeromem.parameters" in hover
    assert "per GPU — editor setting zeromem.gpuMemory" in hover


async def test_the_project_file_is_credited_above_the_editor(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.zeromem]\nworld-size = 4\n")
    hover = await _stage_hover(client, tmp_path / "ds_config.json", DEEPSPEED)
    assert "R = 4 ranks — pyproject.toml [tool.zeromem]" in hover
    assert "7B from editor setting zeromem.parameters" in hover


async def test_the_file_block_is_credited_with_its_key_path(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.zeromem]\nworld-size = 4\n")
    hover = await _stage_hover(client, tmp_path / "ds_config.json", {**DEEPSPEED, "zeromem": {"world_size": 2}})
    assert "R = 2 ranks — zeromem.world_size" in hover


async def test_a_block_nested_in_training_arguments_is_credited_where_it_is(client: LanguageClient, tmp_path):
    args = {"output_dir": "out", "per_device_train_batch_size": 1, "bf16": True,
            "deepspeed": {**DEEPSPEED, "zeromem": {"world_size": 2}}}
    hover = await _stage_hover(client, tmp_path / "training_args.json", args)
    assert "R = 2 ranks — deepspeed.zeromem.world_size" in hover
    assert "7B from editor setting zeromem.parameters" in hover
