"""`zeromem schema`: print or write the JSON Schemas generated from the models."""

from __future__ import annotations

import sys
from pathlib import Path

from zeromem_lsp.cli.errors import UsageError


def register(commands) -> None:
    parser = commands.add_parser("schema", help="print or write the JSON Schemas")
    parser.add_argument("name", nargs="?", default="deepspeed.schema.json",
                        help="which schema to print (default deepspeed.schema.json)")
    parser.add_argument("--write", metavar="DIR", help="write every schema into DIR")
    parser.set_defaults(run=run)


def run(args) -> int:
    from zeromem_lsp.schemas import SCHEMAS, render

    if args.name not in SCHEMAS:
        raise UsageError(f"unknown schema {args.name!r}; choose from {', '.join(sorted(SCHEMAS))}")
    if args.write is None:
        sys.stdout.write(render(args.name))
        return 0
    folder = Path(args.write)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in SCHEMAS:
            (folder / name).write_text(render(name), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{folder}: cannot write: {error.strerror or error}") from None
    for name in SCHEMAS:
        print(folder / name)
    return 0
