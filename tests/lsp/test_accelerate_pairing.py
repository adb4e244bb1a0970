"""A recipe paired with its Accelerate YAML in the editor (pytest-lsp over stdio, as VS Code): the editor
setting `accelerateConfig` (relative to the workspace folder) or the recipe's own zeromem block names the
YAML; the hover credits the ranks to it; when the YAML changes on disk (workspace/didChangeWatchedFiles)
the recipe is analysed again; a missing YAML named in the block is ZM312 on the block's value."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsp_session import ROOT, Doc, vscode_capabilities, with_breakdown
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")

HANDBOOK = ROOT / "tests" / "data" / "recipes" / "alignment-handbook" / "recipes"
LLAMA = ROOT / "tests" / "data" / "models" / "Meta-Llama-3-8B"
AXOLOTL_LORA = ROOT / "tests" / "data" / "recipes" / "axolotl" / "examples" / "llama-3" / "lora-1b.yml"
ZERO3 = "recipes/accelerate_configs/zero3.yaml"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    shutil.copytree(HANDBOOK, root / "recipes")
    shutil.copytree(LLAMA, root / "llama")
    return root.resolve()


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(
    server_command=[sys.executable, "-m", "zeromem_lsp", "serve"]))
async def client(lsp_client: LanguageClient, workspace: Path):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=vscode_capabilities(), root_uri=workspace.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
        initialization_options={"accelerateConfig": ZERO3}))
    yield
    await lsp_client.shutdown_session()


def open_recipe(client: LanguageClient, path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=path.as_uri(), language_id="yaml", version=1, text=text)))
    return path.as_uri()


async def pull(client: LanguageClient, uri: str) -> list[types.Diagnostic]:
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    return list(report.items)


async def hover(client: LanguageClient, uri: str, text: str, needle: str) -> str:
    line = text[:text.index(needle)].count("\n")
    result = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=1)))
    return await with_breakdown(Doc(client, uri, text, 1), result.contents.value)


async def test_the_editor_setting_pairs_the_recipe_and_a_change_on_disk_is_read_again(client, workspace):
    recipe = workspace / "recipes" / "zephyr-7b-beta" / "sft" / "config_full.yaml"
    text = recipe.read_text(encoding="utf-8").replace("mistralai/Mistral-7B-v0.1", str(workspace / "llama"))
    uri = open_recipe(client, recipe, text)
    await pull(client, uri)  # the first pull waits for the editor settings; hover does not
    shown = await hover(client, uri, text, "model_name_or_path:")
    assert f"R = 8 ranks — {workspace / ZERO3} num_processes" in shown
    assert "| ▶ | **ZeRO-3** |" in shown  # the YAML's zero_stage 3, not DDP
    assert f"engine deepspeed — {workspace / ZERO3} distributed_type DEEPSPEED, zero_stage 3" in shown

    watched = [w["globPattern"] for r in client.registrations for reg in r.registrations
               if reg.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES for w in reg.register_options["watchers"]]
    assert "**/*.yaml" in watched

    launch = workspace / ZERO3
    launch.write_text(launch.read_text().replace("num_processes: 8", "num_processes: 4").replace(
        "zero_stage: 3", "zero_stage: 2"))
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=launch.as_uri(), type=types.FileChangeType.Changed)]))
    again = await hover(client, uri, text, "model_name_or_path:")
    assert f"R = 4 ranks — {workspace / ZERO3} num_processes" in again and "| ▶ | **ZeRO-2** |" in again
    assert "distributed_type DEEPSPEED, zero_stage 2" in again


async def test_the_recipe_block_names_it_relative_to_the_recipe_and_a_missing_one_is_zm312(client, workspace):
    folder = workspace / "axolotl"
    folder.mkdir(exist_ok=True)
    base = AXOLOTL_LORA.read_text(encoding="utf-8").replace("NousResearch/Llama-3.2-1B", str(workspace / "llama"))
    text = base + "zeromem:\n  accelerate_config: ../recipes/accelerate_configs/fsdp.yaml\n"
    uri = open_recipe(client, folder / "lora.yml", text)
    await pull(client, uri)
    shown = await hover(client, uri, text, "base_model:")
    assert "R = 8 ranks — ../recipes/accelerate_configs/fsdp.yaml num_processes" in shown  # the block beats the editor
    assert "FULL_SHARD" in shown

    text = base + "zeromem:\n  accelerate_config: launch/zero3.yml\n"
    uri = open_recipe(client, folder / "missing.yml", text)
    [missing] = [item for item in await pull(client, uri) if item.code == "ZM312"]
    assert missing.range.start == types.Position(line=text.count("\n") - 1, character=len("  accelerate_config: "))
    assert str(folder / "launch" / "zero3.yml") in missing.message


async def test_offload_and_stage_hints_name_the_accelerate_yaml_keys(client, workspace):
    """DeepSpeed set up by the YAML's deepspeed_config: the hover's offload hint and ZM101's suggestion name its
    keys (zero_stage, offload_optimizer_device) and the file, not a ds_config's "offload_optimizer"."""
    recipe = workspace / "recipes" / "zephyr-7b-beta" / "sft" / "zero2.yaml"
    launch = "../../accelerate_configs/deepspeed_zero2.yaml"
    text = (recipe.with_name("config_full.yaml").read_text(encoding="utf-8").rstrip("\n")
            .replace("mistralai/Mistral-7B-v0.1", str(workspace / "llama"))
            + f"\nzeromem:\n  accelerate_config: {launch}\n  gpu_memory: 24GiB\n")
    uri = open_recipe(client, recipe, text)
    [overflow] = [item for item in await pull(client, uri) if item.code == "ZM101"]
    assert "the cheapest whose peak fits is ZeRO-3 with optimizer → cpu" in overflow.message
    assert overflow.message.endswith(f"; set `zero_stage: 3` and `offload_optimizer_device: cpu` in {launch}")
    shown = await hover(client, uri, text, "model_name_or_path:")
    assert f"Offload: none. `offload_optimizer_device: cpu` in {launch} would move G (gradients), O (optimizer" in shown
    assert f"— set `zero_stage: 3` and `offload_optimizer_device: cpu` in {launch}." in shown
    assert '"offload_optimizer"' not in shown and '"stage"' not in shown
