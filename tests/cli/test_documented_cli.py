"""What a newcomer reads matches the tool: docs/cli.md is generated from the parser and lists every flag
argparse has (with its choices and help), every flag has help text, the top-level help describes the
tool, README's command (a) does what README says, docs/server.md lists every setting, and the install
instructions name nothing that does not exist (no PyPI release, no tag; the LICENSE that pyproject.toml
names is there)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zeromem_lsp.cli import build_parser, main
from zeromem_lsp.cli_reference import cli_markdown
from zeromem_lsp.configs.settings import SETTING_NAMES

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_MD = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def cli_reference() -> dict[str, str]:
    """docs/cli.md: each subcommand's section ('' for the top-level part before the first)."""
    sections = re.split(r"^## zeromem (\w+)\n", CLI_MD, flags=re.MULTILINE)
    return {"": sections[0], **dict(zip(sections[1::2], sections[2::2]))}


def flags(parser: argparse.ArgumentParser):
    return [action for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))]


def test_docs_cli_md_is_generated_from_the_parser():
    assert CLI_MD == cli_markdown(), \
        "docs/cli.md is stale: run `python -m zeromem_lsp.cli_reference --write docs/cli.md`"


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_flag_is_in_docs_cli_md_with_its_choices(name):
    sections = cli_reference()
    assert name in sections, f"docs/cli.md has no `## zeromem {name}` section"
    for action in flags(subcommands()[name]):
        for option in action.option_strings:
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", sections[name]), f"{name} {option}"
        for choice in action.choices or ():
            assert re.search(rf"(?<![\w-]){re.escape(str(choice))}(?![\w-])", sections[name]), \
                f"{name} {action.dest}: {choice}"
        if action.help:
            assert " ".join(action.help.split()) in " ".join(sections[name].replace("\n  ", " ").split()), \
                f"{name} {action.dest}: help"


def test_readme_links_the_cli_reference_instead_of_a_synopsis():
    assert "docs/cli.md" in README
    assert "## CLI reference" not in README


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_flag_has_help_listing_its_choices(name):
    for action in flags(subcommands()[name]):
        assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.option_strings or action.dest}"
        if action.choices and action.metavar is not None:  # argparse shows choices only without a metavar
            assert all(str(choice) in action.help for choice in action.choices), f"{name} {action.dest}"
    for action in flags(build_parser()):
        assert action.help


def test_precision_and_optimizer_help_lists_the_values_check_accepts(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "one of fp32, fp16, bf16" in text
    assert "adam, adamw, sgd, sgd_momentum, lion, adagrad, lamb, adam8bit, adafactor" in text


def test_top_level_help_describes_the_tool_not_its_code():
    done = subprocess.run([sys.executable, "-m", "zeromem_lsp", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "DeepSpeed" in text and "Accelerate" in text and "per-GPU memory" in text
    assert "dispatch" not in text and "argument parsing" not in text


def test_readmes_command_a_exits_1_with_the_findings_it_describes(capsys, monkeypatch):
    assert "(a) prints findings and **exits 1**" in README
    monkeypatch.chdir(ROOT)
    assert main(["check", "examples/"]) == 1
    out = capsys.readouterr().out
    for name, codes in {"zero1-7b-8x24gib.json": ["ZM101"], "accelerate-fsdp-13b-8x40gib.yaml": ["ZM101"],
                        "typos.json": ["ZM201", "ZM203", "ZM253", "ZM255"]}.items():
        assert name in README
        found = {line.split()[1] for line in out.splitlines() if line.startswith(f"examples/{name}:")}
        assert set(codes) <= found, (name, found)
    assert "zero3-13b-offload.json` is clean" in README and "zero3-13b-offload.json" not in out


def test_server_docs_list_every_setting_with_its_camel_case():
    table = (ROOT / "docs" / "server.md").read_text(encoding="utf-8").split("## Settings", 1)[1].split("\n\n")[2]
    for name in SETTING_NAMES:
        row = next((line for line in table.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        if "_" in name:
            camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), name)
            assert f"`{camel}`" in row, name


def test_install_instructions_name_only_what_exists():
    tags = subprocess.run(["git", "tag"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    for text in (README, ci, (ROOT / "docs" / "editors.md").read_text(encoding="utf-8")):
        for rev in re.findall(r"rev: (\S+)", text):
            assert rev == "<commit" or rev in tags, rev  # "<commit SHA>" placeholders, or a real tag
        for ref in re.findall(r"uses: (?:zeromem-lsp/|<owner>/)[\w<>/-]+@(\S+)", text):  # this action
            assert ref in ("<commit", *tags), ref
        commands = [line for line in text.splitlines() if line.startswith("    ") or "run:" in line]
        assert not [line for line in commands if re.search(r"pip install (-q )?zeromem-lsp\b", line)]
    assert "not published on PyPI" in README and "not published on PyPI" in ci


def test_the_license_pyproject_names_is_there():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license = { text = "Apache-2.0" }' in pyproject
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_readmes_example_is_what_the_tool_prints(capsys):
    """README's console example is the tool's output for its command, byte for byte (it had drifted: a peak of
    79.8 GiB shown, 80.0 printed)."""
    block = README.split("```console\n", 1)[1].split("```", 1)[0]
    command, shown = block.split("\n", 2)[:2], block.split("\n", 2)[2]
    argv = " ".join(line.rstrip("\\").strip() for line in command).removeprefix("$ zeromem ").split()
    assert main(argv) == 0
    assert capsys.readouterr().out == shown
