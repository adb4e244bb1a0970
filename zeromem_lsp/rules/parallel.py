"""ZM109: the N-D degrees against the world size, the sequence length and the model (configs/parallel_checks.py
`degree_problems`), each at the key or setting that gives the degree."""

from __future__ import annotations

from collections.abc import Iterator

from zeromem_lsp.configs.parallel_checks import degree_problems
from zeromem_lsp.findings import Finding
from zeromem_lsp.memory.plan import MemoryPlan
from zeromem_lsp.provenance import Assumed
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule

DOES_NOT_FIT = rule("ZM109")


def check(context: Context) -> Iterator[Finding]:
    plan = context.plan
    if not isinstance(plan, MemoryPlan) or plan.peak is None:
        return
    inputs = plan.peak.source
    if not inputs.parallel:
        return
    origin = plan.origins.get("world_size")
    # parallelism_config's product is what the plan's ranks are there: Accelerate's own check compares it; an assumed
    # world (no source gives one: the degrees' smallest) is no world to refuse them against
    assumed = isinstance(origin, Assumed) or origin is not None and origin.path == ("parallelism_config",)
    world = None if assumed else plan.inputs.world_size
    for problem in degree_problems(inputs.parallel, context.workload.data_parallel, world, inputs.sequence_length,
                                   inputs.shape):
        path = problem.at.path if problem.at.path is not None and context.exists(problem.at.path) else None
        yield context.finding(DOES_NOT_FIT, problem.message, path, "value")
