"""ZM2xx: quick fixes for what DeepSpeed refuses at launch or silently mishandles.

The judgement is `configs.deepspeed.validate_deepspeed`, the rule of each issue kind is in
`rules.kinds`; this module gives an issue a fix where one is obvious.
"""

from __future__ import annotations

import json

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.document import Member
from zeromem_lsp.edits import rename_key, replace_value
from zeromem_lsp.findings import Fix
from zeromem_lsp.provenance import Assumed
from zeromem_lsp.readers import data_parallel_world
from zeromem_lsp.rules.context import Context

OFFLOAD_SUCCESSORS = {"offload_optimizer", "offload_param"}
BATCH_INCONSISTENT = "deepspeed.batch_inconsistent"



def _fixes(context: Context, issue: ConfigIssue) -> tuple[Fix, ...]:
    if issue.replacement is None:
        return ()
    member = context.document.find(tuple(issue.path))
    if not isinstance(member, Member):
        return ()
    edits = [rename_key(member, issue.replacement)]
    if issue.replacement in OFFLOAD_SUCCESSORS and member.value is not None and member.value.value is True:
        edits.append(replace_value(member, json.dumps({"device": "cpu"})))
    if issue.kind in ("unknown_key", "top_level_near_miss"):
        title = f"Rename {member.key!r} to {issue.replacement!r}"
    else:
        title = f"Replace {member.key!r} with {issue.replacement!r}"
    return (Fix(title, tuple(edits), preferred=True),)


def _batch_fix(context: Context) -> tuple[Fix, ...]:
    setup = context.setup
    world = None if isinstance(context.origins.get("world_size"), Assumed) else context.settings.world_size
    world = data_parallel_world(context.data, world) if isinstance(context.data, dict) else world
    micro, gas = setup.micro_batch_size, setup.gradient_accumulation_steps
    if world is None or micro is None or gas is None:
        return ()
    member = context.document.find(("train_batch_size",))
    if not isinstance(member, Member):
        return ()
    total = micro * gas * world
    return (Fix(f"Set train_batch_size to {total} (= {micro} × {gas} × {world})",
                (replace_value(member, str(total)),), preferred=True),)


def fixes_for(context: Context, issue: ConfigIssue) -> tuple[Fix, ...]:
    """The quick fix of a DeepSpeed issue whose path is a document path (also inline configs)."""
    return _batch_fix(context) if issue.key == BATCH_INCONSISTENT else _fixes(context, issue)
