"""The pooled-byte model: persistent model-state bytes per rank for DDP and ZeRO 1-3.

P, G, O are parameter, gradient and optimizer-state bytes; R is the number of ranks.
The categories a stage shards form one pool, rounded up once:

    ddp   = P + G + O
    zero1 = P + G + ceil(O / R)
    zero2 = P + ceil((G + O) / R)
    zero3 = ceil((P + G + O) / R)

Integer arithmetic only: every figure is an exact Python int.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from numbers import Number

STAGES = ("ddp", "zero1", "zero2", "zero3")


def ceil_div(numerator: int, denominator: int) -> int:
    """Exact ceiling of numerator / denominator for non-negative ints."""
    return -(-numerator // denominator)


def exact_int(name: str, value: object, *, minimum: int) -> int:
    """Convert a number to an exact int, or raise naming the argument and the value."""
    if type(value) is int and value >= minimum:  # the common case, without the ABC checks below
        return value
    result: int
    if isinstance(value, bool) or not isinstance(value, Number):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if isinstance(value, int):
        result = value
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        result = int(value)
    elif isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        result = int(value)
    elif isinstance(value, Fraction):
        if value.denominator != 1:
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        result = value.numerator
    else:
        raise TypeError(f"{name} must be an int, float, Decimal or Fraction, got {value!r}")
    if result < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return result


def model_state_bytes(
    parameter_bytes: object,
    gradient_bytes: object,
    optimizer_bytes: object,
    world_size: object,
) -> dict[str, int]:
    """Per-rank persistent model-state bytes for each stage: keys ddp, zero1, zero2, zero3."""
    p = exact_int("parameter_bytes", parameter_bytes, minimum=0)
    g = exact_int("gradient_bytes", gradient_bytes, minimum=0)
    o = exact_int("optimizer_bytes", optimizer_bytes, minimum=0)
    r = exact_int("world_size", world_size, minimum=1)
    return {
        "ddp": p + g + o,
        "zero1": p + g + ceil_div(o, r),
        "zero2": p + ceil_div(g + o, r),
        "zero3": ceil_div(p + g + o, r),
    }
