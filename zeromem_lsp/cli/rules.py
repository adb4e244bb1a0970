"""`zeromem rules [CODE]`: list the rules, explain one, or print docs/rules.md."""

from __future__ import annotations

import sys

from zeromem_lsp.cli.errors import UsageError
from zeromem_lsp.rules.docs import rule_text, rules_markdown
from zeromem_lsp.rules.registry import RULES


def register(commands) -> None:
    parser = commands.add_parser("rules", help="list or explain the rules")
    parser.add_argument("code", nargs="?", help="a rule code such as ZM101")
    parser.add_argument("--markdown", action="store_true", help="print the rules documentation (docs/rules.md)")
    parser.set_defaults(run=run)


def run(args) -> int:
    if args.markdown:
        sys.stdout.write(rules_markdown())
    elif args.code:
        rule = RULES.get(args.code.upper())
        if rule is None:
            raise UsageError(f"unknown rule code {args.code!r}; run 'zeromem rules' for the list")
        sys.stdout.write(rule_text(rule))
    else:
        for rule in RULES.values():
            print(f"{rule.code}  {rule.severity:<11}  {rule.name}: {rule.summary}")
    return 0
