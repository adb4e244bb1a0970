"""docs/cli.md, generated from the argument parser: every subcommand's usage, description and flags with
their help and choices, grouped as argparse groups them, then the notes argparse has no place for.

    python -m zeromem_lsp.cli_reference                        # print the Markdown
    python -m zeromem_lsp.cli_reference --write docs/cli.md    # write it

tests/cli/test_documented_cli.py fails while the committed docs/cli.md is stale. The usage lines are built
here from the actions rather than by argparse's formatter, so the page does not depend on the terminal's
width or on the Python version's formatting.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from zeromem_lsp.cli import build_parser

WIDTH = 100
HEADER = """# Command-line reference

<!-- GENERATED from the argument parser by `python -m zeromem_lsp.cli_reference --write docs/cli.md`;
     edit zeromem_lsp/cli/ (the flags' help) or zeromem_lsp/cli_reference.py (the notes), not this file. -->

Every subcommand also takes `-h` / `--help`, which prints the same flags and help as this page.
"""

#: What `--help` has no place for, per subcommand: exit statuses, value syntax, output details.
NOTES = {
    "check": """\
`check` takes files, directories (searched recursively; files that are not training configs are skipped, `-v`
lists them) and globs: DeepSpeed JSON (`ds_config.json`), HF `--fsdp_config` JSON, TrainingArguments JSON,
Accelerate YAML and axolotl / LLaMA-Factory / TRL recipes. Each finding is one line
(`file:line:column: code severity: message`); a summary of the errors and warnings goes to stderr.

Exit status: 0 no finding at `--fail-on` (default: error), 1 otherwise, 2 bad usage or unreadable input.

`--fix` applies the safe fixes in place, `--unsafe-fixes` adds those that change the run, `--diff` previews
them ([ci.md](ci.md), "Fixing"). `--warn-fraction` (default 0.9) sets when ZM102 warns that a stage is close to
the budget. `--format json` gives 0-based lines, the text, GitHub and SARIF formats 1-based ones
([ci.md](ci.md), "Output formats"). The settings flags override the file's `zeromem` block and the project
settings ([ci.md](ci.md), "Project settings").
""",
    "estimate": """\
Three ways to give the model: `--parameter-bytes`, `--gradient-bytes` and `--optimizer-bytes` (all three);
`--parameters COUNT` (with `--precision` and `--optimizer`, default: the config's, else bf16 and adamw); or
`--model-config` (a `config.json`, which counts the parameters, so `--parameters` may be left out, and
gives the shape for the peak: add `--sequence-length` and `--micro-batch`). `--config FILE` reads a training
config as `check` does (its `zeromem` block, project settings, buckets, `overlap_comm`, stage and offload);
every option given overrides it and is credited as `--flag`; with a recipe, `--accelerate-config` names the
Accelerate config it is launched with.

Exit status: 0; 1 when `--gpu-memory` is given and no stage fits it — judged on the peak when the peak is
known, else on model state; 2 bad usage or an invalid setting in `--config`'s file (printed as `check`
prints it).

Sizes accept `80GB` (10^9), `80GiB` (2^30), `1.5TiB`, `85899345920`, `80e9`; parameter counts accept `7B`,
`7.5e9`, `350M`, `8_030_261_248`.

`--format json` gives exact integers: the model-state bytes per stage and, with `--model-config`,
`activations`, `buffers` and `peak` (`ddp`, `zero1`, `zero2`, `zero3`; `ddp` only with `--engine torch`;
null where the peak is unknown), `phases` per stage (`phases` {`forward`, `backward`, `optimizer`} →
bytes, `peak_phase`, its `moment` and `parts`, or `{"unknown": why}`), `fits` / `model_state_fits` /
`fits_by`, and `peak_inputs`, keyed by setting name (`sequence_length`, `micro_batch`,
`gradient_accumulation_steps`, `gradient_checkpointing`, `attention`, `dtype`, `reserved`, `engine`,
`param_dtype`, `optimizer_impl`), each `{"value", "from"}` (earlier builds keyed them by display label,
`"sequence length"`, `"micro-batch"`; changed in issue 18). With a LoRA rank, `inputs.trainable_parameters`
sits beside `inputs.parameters` and `inputs.adapter` holds every term. What the peak is and how each flag of
"the training step the peak follows" changes it: [memory-model.md](memory-model.md); LoRA, the loss
kernels and the preference trainers: [adapters.md](adapters.md).
""",
    "rules": "`zeromem rules --markdown > docs/rules.md` regenerates docs/rules.md (a test fails while it is stale).\n",
    "schema": "`zeromem schema --write schemas` regenerates the JSON Schemas in `schemas/` (a test fails while they "
              "are stale).\n",
    "serve": "The language server and its settings: [server.md](server.md); editor set-ups: [editors.md](editors.md).\n",
}


def _subcommands(parser: argparse.ArgumentParser) -> tuple[dict[str, argparse.ArgumentParser], dict[str, str]]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return dict(action.choices), summaries


def _shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
            and a.help != argparse.SUPPRESS]


def _name(action: argparse.Action) -> str:
    """The option as usage shows it: the first long form (`--world-size`, not `-R`)."""
    return next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])


def _value(action: argparse.Action) -> str:
    """What follows the option: its choices as a|b|c, else its metavar, else its dest in capitals."""
    if action.choices is not None:
        return "|".join(str(choice) for choice in action.choices)
    return _metavar(action) or action.dest.upper()


def _metavar(action: argparse.Action) -> str | None:
    """The metavar as argparse shows it (a tuple, one name per value: joined by spaces)."""
    return " ".join(action.metavar) if isinstance(action.metavar, tuple) else action.metavar


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _usage_item(action: argparse.Action) -> str:
    if not action.option_strings:  # positional
        value = _metavar(action) or action.dest
        forms = {"?": f"[{value}]", "*": f"[{value}...]", "+": f"{value}..."}
        return forms.get(action.nargs, value) if isinstance(action.nargs, str) else value
    text = _name(action) + (f" {_value(action)}" if _takes_value(action) else "")
    return text if action.required else f"[{text}]"


def usage(prog: str, parser: argparse.ArgumentParser) -> str:
    """The usage lines, wrapped at WIDTH with the continuation under the first flag; each item whole."""
    actions = _shown(parser)
    exclusive = {id(a): group for group in parser._mutually_exclusive_groups for a in group._group_actions}
    items, done = [], set()
    for action in [a for a in actions if a.option_strings] + [a for a in actions if not a.option_strings]:
        group = exclusive.get(id(action))
        if group is None:
            items.append(_usage_item(action))
        elif id(group) not in done:
            done.add(id(group))
            inner = " | ".join(_usage_item(a).strip("[]") for a in group._group_actions)
            items.append(f"({inner})" if group.required else f"[{inner}]")
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        items.append("COMMAND ...")
    lines, line = [], prog
    indent = " " * (len(prog) + 1)
    for item in items:
        if len(line) + 1 + len(item) > WIDTH and line.strip():
            lines.append(line)
            line = indent + item
        else:
            line = f"{line} {item}"
    lines.append(line)
    return "\n".join(lines)


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(" ".join(text.split()), WIDTH))


def _flag_line(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    if action.option_strings:
        names = ", ".join(f"`{o}" + (f" {_value(action)}`" if _takes_value(action) else "`")
                          for o in sorted(action.option_strings, key=lambda o: (not o.startswith("--"), o)))
    else:
        names = f"`{action.metavar or action.dest}`"
    notes = []
    if action.required and action.option_strings:
        notes.append("required")
    if isinstance(action, argparse._AppendAction):
        notes.append("repeatable")
    for group in parser._mutually_exclusive_groups:
        if action in group._group_actions:
            others = [_name(a) for a in group._group_actions if a is not action]
            notes.append("not with " + ", ".join(f"`{o}`" for o in others))
    help_text = " ".join((action.help or "").split())
    suffix = f" ({'; '.join(notes)})" if notes else ""
    return textwrap.fill(f"- {names}{suffix}: {help_text}", WIDTH, subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)


def _groups(parser: argparse.ArgumentParser) -> str:
    out = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a in _shown(parser)]
        if not actions:
            continue
        out.append(f"**{group.title}**\n")
        if group.description:
            out.append(_wrap(group.description) + "\n")
        out.append("\n".join(_flag_line(action, parser) for action in actions) + "\n")
    return "\n".join(out)


def cli_markdown() -> str:
    """The whole of docs/cli.md."""
    parser = build_parser()
    commands, summaries = _subcommands(parser)
    out = [HEADER]
    out.append(f"    {usage('zeromem', parser)}\n")
    out.append(_wrap(parser.description or "") + "\n")
    out.append(_groups(parser))
    out.append("| command | what |\n|---|---|")
    out.append("\n".join(f"| [`zeromem {name}`](#zeromem-{name}) | {summaries[name]} |" for name in sorted(commands)))
    out.append("")
    for name in sorted(commands):
        sub = commands[name]
        out.append(f"## zeromem {name}\n")
        out.append(_wrap(summaries[name][:1].upper() + summaries[name][1:] + ".") + "\n")
        out.append("\n".join("    " + line for line in usage(f"zeromem {name}", sub).splitlines()) + "\n")
        if sub.description:
            out.append(_wrap(sub.description) + "\n")
        out.append(_groups(sub))
        if name in NOTES:
            out.append(NOTES[name])
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"] and len(argv) == 2:
        Path(argv[1]).write_text(cli_markdown(), encoding="utf-8")
        print(argv[1])
        return 0
    if argv:
        print("usage: python -m zeromem_lsp.cli_reference [--write PATH]", file=sys.stderr)
        return 2
    sys.stdout.write(cli_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
