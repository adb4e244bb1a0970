"""The DeepSpeed section rules that pydantic validators apply, as plain functions.

The models in models.py call them from their validators (raising pydantic errors), and
the generated pre-check (precheck.py) calls the same functions, so a rule has one text.
A cross-field rule returns None when it holds, else (error type, message template, context) — the
arguments of pydantic_core.PydanticCustomError. A field rule returns the value to validate next or
raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Optional

Problem = Optional[tuple[str, str, dict]]


def zero_cross_field(stage: int, compute_grad_norm: bool, offload_optimizer: Any, fields_set: set[str],
                     deprecated_pairs: Iterable[tuple[str, str]]) -> Problem:
    """ZeroConfig: compute_grad_norm=false only at stages 1-2; partial offload only at stage 3; a
    deprecated key never together with its replacement."""
    if not compute_grad_norm and stage not in (1, 2):
        return ("invalid_combination",
                "compute_grad_norm=false is only supported with ZeRO stage 1 or 2 (stage is {stage})",
                {"stage": stage, "path": ("compute_grad_norm",)})
    if offload_optimizer is not None and offload_optimizer.ratio < 1.0 and stage != 3:
        return ("partial_offload_below_stage3",
                "offload_optimizer.ratio {ratio} (partial offload) needs ZeRO stage 3, but stage is {stage}",
                {"ratio": offload_optimizer.ratio, "stage": stage, "path": ("offload_optimizer", "ratio")})
    for old, new in deprecated_pairs:
        if old in fields_set and new in fields_set:
            return ("deprecated_with_replacement",
                    "deprecated key '{old}' and its replacement '{new}' cannot be given together",
                    {"old": old, "new": new, "path": (old,)})
    return None


def fp16_dynamic_scaling(enabled: bool, loss_scale: float, loss_scale_window: int, min_loss_scale: int) -> Problem:
    """FP16Config: with dynamic loss scaling (loss_scale 0) the window and the minimum must be > 0."""
    if enabled and loss_scale == 0:
        for name, value in (("loss_scale_window", loss_scale_window), ("min_loss_scale", min_loss_scale)):
            if value <= 0:
                return ("invalid_combination",
                        "fp16.{name} must be > 0 when dynamic loss scaling is on (loss_scale 0)",
                        {"name": name, "path": (name,)})
    return None


def fp16_loss_scale(value: Any) -> float:
    """fp16.loss_scale: any finite number >= 0 (DeepSpeed casts it with float())."""
    if isinstance(value, bool):
        raise ValueError("fp16.loss_scale must be a number, not a boolean")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError("fp16.loss_scale must be a number") from None
    if not math.isfinite(value):
        raise ValueError("fp16.loss_scale must be finite")
    if value < 0:
        raise ValueError("fp16.loss_scale must be >= 0 (0 means dynamic loss scaling)")
    return value


def fp16_integer_only(field_name: str, value: Any) -> Any:
    """fp16.loss_scale_window / min_loss_scale: what int() accepts, but no booleans or infinities."""
    name = f"fp16.{field_name}"
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not a boolean")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite")
    try:
        int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer") from None
    return value
