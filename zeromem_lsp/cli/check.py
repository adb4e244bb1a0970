"""`zeromem check PATH...`: lint training configs; exit 1 when a finding reaches --fail-on.

Only the argument surface lives here; the work is imported when the command runs, so other
commands start without loading pydantic and the models.
"""

from __future__ import annotations

FORMATS = ("github", "json", "sarif", "text")


def register(commands) -> None:
    parser = commands.add_parser(
        "check", help="lint training configs (exit 1 on errors)",
        description="Lint DeepSpeed, FSDP, Accelerate and TrainingArguments configs: loader validity and memory per GPU.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files, directories (recursive) or globs")
    parser.add_argument("--format", choices=FORMATS, default="text")
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
    settings = parser.add_argument_group("settings (override the file's zeromem block and project settings)")
    settings.add_argument("--gpu-memory", metavar="SIZE")
    settings.add_argument("--parameters", metavar="COUNT")
    settings.add_argument("--world-size", metavar="R", type=int)
    settings.add_argument("--precision")
    settings.add_argument("--optimizer")
    settings.add_argument("--warn-fraction", type=float, metavar="F")
    parser.set_defaults(run=run)



def run(args) -> int:
    from zeromem_lsp.lint import run as lint

    return lint(args)
