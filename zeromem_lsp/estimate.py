"""Inputs (P, G, O, R) and a per-GPU budget → the four stage figures, what fits, and the cheapest fit.

Pure: no I/O, no text parsing. Both `zeromem estimate` and the config analysis build an `Estimate`,
so every front end shows the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zeromem_lsp.core import STAGES, model_state_bytes
from zeromem_lsp.precision import BytesPerParameter

STAGE_LABELS = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}
STAGE_NUMBERS = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
FORMULAS = {
    "ddp": "P + G + O",
    "zero1": "P + G + ceil(O / R)",
    "zero2": "P + ceil((G + O) / R)",
    "zero3": "ceil((P + G + O) / R)",
}


@dataclass(frozen=True)
class Inputs:
    """P, G, O in bytes and R ranks, plus how they were obtained (for display)."""

    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    world_size: int
    parameters: int | None = None
    per_parameter: BytesPerParameter | None = None
    assumptions: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Estimate:
    inputs: Inputs
    figures: dict[str, int]
    gpu_memory: int | None

    @property
    def fits(self) -> dict[str, bool] | None:
        if self.gpu_memory is None:
            return None
        return {stage: self.figures[stage] <= self.gpu_memory for stage in STAGES}

    @property
    def cheapest_fitting(self) -> str | None:
        """The lowest stage (least communication) whose figure fits the budget."""
        fits = self.fits
        if fits is None:
            return None
        return next((stage for stage in STAGES if fits[stage]), None)

    def to_json(self) -> dict:
        inputs = self.inputs
        result: dict = dict(self.figures)
        result["inputs"] = {
            "parameter_bytes": inputs.parameter_bytes,
            "gradient_bytes": inputs.gradient_bytes,
            "optimizer_bytes": inputs.optimizer_bytes,
            "world_size": inputs.world_size,
        }
        if inputs.parameters is not None:
            result["inputs"]["parameters"] = inputs.parameters
        if inputs.per_parameter is not None:
            bpp = inputs.per_parameter
            result["inputs"]["precision"] = bpp.precision
            result["inputs"]["optimizer"] = bpp.optimizer_name
            result["inputs"]["bytes_per_parameter"] = {
                "parameter": bpp.parameter,
                "gradient": bpp.gradient,
                "optimizer": bpp.optimizer,
            }
        result["formulas"] = dict(FORMULAS)
        result["assumptions"] = list(inputs.assumptions)
        result["gpu_memory"] = self.gpu_memory
        result["fits"] = self.fits
        result["cheapest_fitting_stage"] = self.cheapest_fitting
        return result


def inputs_from_parameters(
    parameters: int, per_parameter: BytesPerParameter, world_size: int, assumptions: tuple[str, ...] = ()
) -> Inputs:
    """Scale bytes-per-parameter by a parameter count (exact)."""
    return Inputs(
        parameter_bytes=parameters * per_parameter.parameter,
        gradient_bytes=parameters * per_parameter.gradient,
        optimizer_bytes=parameters * per_parameter.optimizer,
        world_size=world_size,
        parameters=parameters,
        per_parameter=per_parameter,
        assumptions=(per_parameter.explanation, *assumptions),
    )


def estimate(inputs: Inputs, gpu_memory: int | None = None) -> Estimate:
    figures = model_state_bytes(
        inputs.parameter_bytes, inputs.gradient_bytes, inputs.optimizer_bytes, inputs.world_size
    )
    return Estimate(inputs=inputs, figures=figures, gpu_memory=gpu_memory)
