"""The calculator's view of a memory plan: the four stage figures, what fits, the cheapest fit.

`Estimate` is not a second model: it reads a `MemoryPlan` — of a config, or of the settings alone (no offload,
no stage chosen: resolved/planner.SettingsSource) — so `zeromem estimate` and the config analysis compute the same
figures the same way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zeromem_lsp.memory.peak import Peak
from zeromem_lsp.memory.plan import Inputs, MemoryPlan, inputs_from_parameters
from zeromem_lsp.memory.stages import ALL

__all__ = ["Estimate", "Inputs", "inputs_from_parameters"]


class Estimate(NamedTuple):
    plan: MemoryPlan

    @property
    def inputs(self) -> Inputs:
        return self.plan.inputs

    @property
    def figures(self) -> dict[str, int]:
        """Model state per GPU at each stage the engine has (the contract figures)."""
        return {stage: self.plan.placement.gpu[stage] for stage in self.plan.stages}

    @property
    def peak(self) -> Peak | None:
        return self.plan.peak

    @property
    def gpu_memory(self) -> int | None:
        return self.plan.gpu_memory

    @property
    def model_state_fits(self) -> dict[str, bool] | None:
        """Whether each stage's model state (the contract figure) fits the budget."""
        if self.gpu_memory is None:
            return None
        return {stage: figure <= self.gpu_memory for stage, figure in self.figures.items()}

    @property
    def fits(self) -> dict[str, bool] | None:
        """Whether each stage fits: by its peak when the peak is known, else by its model state."""
        if self.gpu_memory is None:
            return None
        return {stage: self.plan.verdict_bytes(stage) <= self.gpu_memory for stage in self.figures}

    @property
    def cheapest_fitting(self) -> str | None:
        """The lowest stage (least communication) that fits the budget (by its peak when known)."""
        found = self.plan.lowest_fitting(self.plan.offload)
        return found.stage if found is not None else None

    def largest(self, name: str) -> dict[str, int | None]:
        """Per stage, the largest sequence length or micro-batch (`name`) whose peak fits the budget (None: not even
        1, or the peak unknown). Needs a budget and a known peak."""
        peak, budget = self.plan.peak, self.gpu_memory
        if budget is None or peak is None or not self.plan.peak_known:
            return {stage: None for stage in self.figures}
        return {stage: peak.largest(name, stage, budget) for stage in self.figures}

    def to_json(self) -> dict[str, Any]:
        inputs = self.inputs
        result: dict[str, Any] = dict(self.figures)
        result["inputs"] = {
            "parameter_bytes": inputs.parameter_bytes,
            "gradient_bytes": inputs.gradient_bytes,
            "optimizer_bytes": inputs.optimizer_bytes,
            "world_size": inputs.world_size,
        }
        if inputs.parameters is not None:
            result["inputs"]["parameters"] = inputs.parameters
            adapter = inputs.adapter
            result["inputs"]["trainable_parameters"] = adapter.trainable if adapter is not None else inputs.parameters
        if inputs.adapter is not None:
            result["inputs"]["adapter"] = inputs.adapter.to_json()
        if inputs.per_parameter is not None:
            bpp = inputs.per_parameter
            result["inputs"]["precision"] = bpp.precision
            result["inputs"]["optimizer"] = bpp.optimizer_name
            result["inputs"]["bytes_per_parameter"] = {"parameter": bpp.parameter, "gradient": bpp.gradient,
                                                       "optimizer": bpp.optimizer}
        result["formulas"] = {stage.key: stage.formula for stage in ALL}
        result["assumptions"] = list(inputs.assumptions)
        result["gpu_memory"] = self.gpu_memory
        if self.plan.stage is not None:
            result["stage"] = self.plan.stage  # the configured stage (`estimate --config`)
        if "world_size" in self.plan.origins:
            result["world_size_from"] = self.plan.origins["world_size"].note
        result["fits"] = self.fits
        result["model_state_fits"] = self.model_state_fits
        judged = {self.plan.judged_by(stage) for stage in self.figures}
        result["fits_by"] = judged.pop() if len(judged) == 1 else "peak where known, else model state"
        result["cheapest_fitting_stage"] = self.cheapest_fitting
        result["approximate"] = self.plan.approximate
        result["ignored"] = [item.to_json() for item in self.plan.ignored]
        result["engine_assumed"] = self.plan.engine_assumed
        result["world_assumed"] = self.plan.world_assumed
        return result

