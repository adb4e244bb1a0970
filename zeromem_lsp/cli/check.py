"""`zeromem check PATH...`: lint training configs; exit 1 when a finding reaches --fail-on.

Only the argument surface lives here; the work is imported when the command runs, so other
commands start without loading pydantic and the models.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from pathlib import Path

from zeromem_lsp.cli.errors import UsageError
from zeromem_lsp.configs.model_source import HubAccess
from zeromem_lsp.memory.precision import OPTIMIZERS, PRECISIONS  # plain tuples: no pydantic

FORMATS = ("github", "json", "sarif", "text")


def register(commands) -> None:
    parser = commands.add_parser(
        "check", help="lint training configs (exit 1 on errors)",
        description="Lint DeepSpeed, FSDP, Accelerate and TrainingArguments configs and axolotl, LLaMA-Factory and TRL "
                    "recipes: loader validity and memory per GPU.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files, directories (recursive) or globs")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (path:line:column, 1-based), json (LSP ranges: 0-based lines, UTF-16 "
                        "characters; with a summary), sarif (1-based, UTF-16 columns), github (workflow "
                        "annotations, 1-based); the summary goes to stderr except with -q")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip matching paths")
    parser.add_argument("--select", metavar="CODES", help="only these codes or prefixes, comma-separated (ZM1,ZM203)")
    parser.add_argument("--ignore", metavar="CODES", help="drop these codes or prefixes, comma-separated")
    parser.add_argument("--fail-on", choices=("error", "warning", "information"), default="error",
                        help="lowest severity that makes the exit status 1 (default error)")
    parser.add_argument("--quiet", "-q", action="store_true", help="print findings only, no summary or progress")
    parser.add_argument("--statistics", action="store_true", help="count findings per rule")
    parser.add_argument("--verbose", "-v", action="store_true", help="list skipped files and why (stderr)")
    parser.add_argument("--fix", action="store_true",
                        help="apply safe fixes in place (renames of misspelt and deprecated keys); report what remains")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="with --fix or --diff: also fixes that change the run (stage, offload, batch sizes)")
    parser.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    add_offline(parser)
    settings = parser.add_argument_group("settings (override the file's zeromem block and project settings)")
    settings.add_argument("--gpu-memory", metavar="SIZE", help="per-GPU budget, e.g. 80GiB or 24GB")
    settings.add_argument("--parameters", metavar="COUNT", help="model parameter count, e.g. 7B, 350M")
    settings.add_argument("--world-size", metavar="R", type=int, help="number of ranks (GPUs)")
    settings.add_argument("--precision", help=f"one of {', '.join(PRECISIONS)} (default: from the config)")
    settings.add_argument("--optimizer", help=f"one of {', '.join(OPTIMIZERS)} (default: from the config)")
    settings.add_argument("--warn-fraction", type=float, metavar="F",
                          help="warn when model state exceeds this fraction of --gpu-memory (default 0.9)")
    settings.add_argument("--accelerate-config", metavar="PATH", help=launch_help())
    parser.set_defaults(run=run)


def add_offline(parser) -> None:
    parser.add_argument("--offline", action="store_true",
                        help="never fetch a model's config.json from the Hugging Face Hub: the caches only "
                        "(also ZEROMEM_OFFLINE=1, HF_HUB_OFFLINE=1)")


def hub_access(args) -> HubAccess:
    """"cache" under --offline, else "fetch" (configs/hub.py still honours the offline variables)."""
    return "cache" if getattr(args, "offline", False) else "fetch"


def launch_help() -> str:
    from zeromem_lsp.cli.launch_option import HELP

    return HELP


def parse_codes(text: str | None) -> tuple[str, ...] | None:
    """--select/--ignore: comma-separated codes or prefixes, each naming at least one rule."""
    from zeromem_lsp.rules.registry import RULES

    if text is None:
        return None
    codes = tuple(code.strip().upper() for code in text.split(",") if code.strip())
    unknown = [code for code in codes if not any(known.startswith(code) for known in RULES)]
    if unknown:
        raise UsageError(f"unknown rule code or prefix: {', '.join(unknown)}")
    return codes


def forced_settings(args):
    """The settings options, validated like a zeromem block."""
    from zeromem_lsp.configs.settings import validate_settings

    values = {
        "gpu_memory": args.gpu_memory, "parameters": args.parameters, "world_size": args.world_size,
        "precision": args.precision, "optimizer": args.optimizer, "warn_fraction": args.warn_fraction,
    }
    if args.accelerate_config is not None:
        from zeromem_lsp.cli.launch_option import accelerate_config

        values["accelerate_config"] = accelerate_config(args.accelerate_config)
    settings, problems = validate_settings({k: v for k, v in values.items() if v is not None})
    if problems:
        raise UsageError(f"--{problems[0].name.replace('_', '-')}: {problems[0].message}")
    return settings


def budget_note(args) -> str | None:
    """`--gpu-memory 80GB`: the note that a GPU sold as "80 GB" has 80 GiB."""
    from zeromem_lsp.configs.settings_values import decimal_budget_note

    note = decimal_budget_note(args.gpu_memory)
    return f"zeromem: note: --gpu-memory {note}" if note else None


class Progress:
    """A one-line counter on a terminal's stderr, for long runs."""

    def __init__(self, enabled: bool):
        self.enabled, self.shown = enabled and sys.stderr.isatty(), False

    def __call__(self, done: int, total: int) -> None:
        if self.enabled and total >= 50 and (done % 25 == 0 or done == total):
            self.shown = True
            sys.stderr.write(f"\rchecked {done}/{total} files")
            sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")


def check(args, fixes=None):
    """The `LintResult` of these arguments: what `zeromem check` prints, computed in-process
    (`fixes`: a cli.fix.FixSession for --fix/--diff)."""
    from zeromem_lsp.lint import LintInputError, lint

    # The modules just imported live as long as the process: keep the collector from walking them
    # again on every collection while thousands of configs are analysed (~10% of a large run).
    gc.freeze()
    select, ignore = parse_codes(args.select), parse_codes(args.ignore)
    forced = forced_settings(args)
    progress = Progress(not args.quiet)
    try:
        return lint(args.paths, args.exclude, forced, select, ignore, progress, fixes.apply if fixes else None,
                    hub_access(args))
    except LintInputError as error:
        raise UsageError(str(error)) from None
    finally:
        progress.close()


def exit_status(result, fail_on: str) -> int:
    """1 when a finding reaches `fail_on` (error > warning > information > hint), else 0."""
    from zeromem_lsp.findings import SEVERITIES

    threshold = SEVERITIES.index(fail_on)
    return 1 if any(SEVERITIES.index(f.severity) <= threshold for f in result.findings) else 0


def run(args) -> int:
    from zeromem_lsp.cli.reporters import REPORTERS
    from zeromem_lsp.findings import SEVERITIES
    from zeromem_lsp.rules.registry import RULES

    fixes = fix_session(args)
    result = check(args, fixes)
    colour = args.format == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    summary = run_summary(result)
    folded: list[str] = []
    shown = result.files
    if args.format == "text" and not args.verbose and any(Path(path).is_dir() for path in args.paths):
        shown, folded = fold_launch_files(result.files)
    if fixes and args.diff:
        sys.stdout.write("".join(fixes.diffs))
    else:
        sys.stdout.write(REPORTERS[args.format]([r for r in shown if r.findings], colour, summary))
        if folded:
            print(f"{len(folded)} launch file{'s' if len(folded) != 1 else ''} (DeepSpeed / Accelerate / FSDP configs "
                  "without a model) not budget-checked on their own: the recipes that name them are; -v lists them")
    summary_stream = sys.stdout if args.format == "text" else sys.stderr
    if args.statistics:
        for code, count in sorted(result.counts(lambda f: f.code).items()):
            print(f"{count:5}  {code}  {RULES[code].name}", file=summary_stream)
    if args.verbose:
        for name, reason in result.skipped:
            print(f"skipped {name}: {reason}", file=sys.stderr)
    if not args.quiet:
        for name, reason in result.unchecked:
            print(f"zeromem: warning: {name}: {reason}", file=sys.stderr)
        counts = result.counts(lambda f: f.severity)
        parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 and s != 'information' else ''}" for s in SEVERITIES if counts[s]]
        checked = result.checked
        print(f"{', '.join(parts) or 'no findings'} in {checked} config{'s' if checked != 1 else ''}"
              f" ({len(result.skipped)} skipped)", file=sys.stderr)
        if not fixes and fixable_line(summary):
            print(fixable_line(summary), file=sys.stderr)
    if fixes and not args.quiet:
        print(fixes.summary(), file=sys.stderr)
    if not args.quiet and budget_note(args):
        print(budget_note(args), file=sys.stderr)
    status = exit_status(result, args.fail_on)  # of the fixed text
    return max(status, fixes.status()) if fixes else status


#: Recipe kinds: their budget findings are their own; a launch file's (a DeepSpeed JSON, an Accelerate YAML) ZM103
#: "cannot check the budget" in a directory run is the same note once per file.
RECIPE_KINDS = ("axolotl", "llamafactory", "trl")


def fold_launch_files(files: list) -> tuple[list, list[str]]:
    """(the files with each launch file's lone "cannot check the budget" note taken out, the launch files folded):
    a directory run says it once (-v: per file)."""
    from zeromem_lsp.rules.registry import rule_named

    note = rule_named("memory-not-computable").code
    shown, folded = [], []
    for found in files:
        lone = [f for f in found.findings if f.code == note and f.severity == "information"]
        if found.kind is not None and found.kind not in RECIPE_KINDS and lone:
            folded.append(found.path)
            found = dataclasses.replace(found, findings=[f for f in found.findings if f not in lone])
        shown.append(found)
    return shown, folded


def run_summary(result) -> dict:
    """What the run found, as JSON and SARIF carry it: counts per severity, configs checked, files
    skipped, findings --fix / --unsafe-fixes would fix, and paths named that gave no config."""
    from zeromem_lsp.autofix import fixable

    counts = result.counts(lambda f: f.severity)
    safe, unsafe = fixable(result.findings)
    return {"errors": counts["error"], "warnings": counts["warning"], "information": counts["information"],
            "hints": counts["hint"], "configs_checked": result.checked, "skipped": len(result.skipped),
            "fixable": safe, "unsafe_fixable": unsafe,
            "not_checked": [{"path": name, "reason": reason} for name, reason in result.unchecked]}


def fixable_line(summary: dict) -> str | None:
    """ruff's line: `[*] 2 fixable with the --fix option (1 hidden fix can be enabled with ...)`."""
    safe, unsafe = summary["fixable"], summary["unsafe_fixable"]
    hidden = (f" ({unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with the --unsafe-fixes option)"
              if unsafe else "")
    if safe:
        return f"[*] {safe} fixable with the --fix option{hidden}."
    return f"No fixes available{hidden}." if unsafe else None


def fix_session(args):
    """--fix / --diff (with --unsafe-fixes): the session that applies and counts the fixes."""
    if args.unsafe_fixes and not (args.fix or args.diff):
        raise UsageError("--unsafe-fixes goes with --fix or --diff")
    if not (args.fix or args.diff):
        return None
    from zeromem_lsp.cli.fix import FixSession

    return FixSession(args)
