"""The batch-size triple, checked exactly as DeepSpeed 0.19.8 infers and asserts it.

DeepSpeed reads train_batch_size (T), train_micro_batch_size_per_gpu (M) and
gradient_accumulation_steps (G); fills a missing one by floor division with the world size W;
then asserts T > 0, M > 0, G > 0 and T == M * G * W.
"""

from __future__ import annotations

from typing import Any, Optional

from .issue import ConfigIssue, issue

T, M, G = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"


def _infer(t: Any, m: Any, g: Any, w: int) -> tuple[Any, Any, Any]:
    """DeepSpeed's _set_batch_related_parameters (None = not given)."""
    if t is not None and m is not None and g is not None:
        return t, m, g
    if t is not None and m is not None:
        return t, m, t // m // w
    if t is not None and g is not None:
        return t, t // w // g, g
    if m is not None and g is not None:
        return m * g * w, m, g
    if t is not None:
        return t, t // w, 1
    return m * w, m, 1


def batch_issues(config: dict, world_size: Optional[int]) -> list[ConfigIssue]:
    out: list[ConfigIssue] = []
    values: dict[str, Any] = {}
    deferred = False  # "auto" (filled by HF/Accelerate) or an unusable value
    for key in (T, M, G):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value == "auto":
            deferred = True
            continue
        if isinstance(value, bool):  # DeepSpeed does arithmetic on it: true is 1, false is 0
            out.append(issue("suspicious_value", (key,), "value",
                             f"'{key}' is {str(value).lower()}; DeepSpeed reads it as {int(value)}. Use a number."))
            value = int(value)
        if not isinstance(value, (int, float)):
            out.append(issue("invalid_value", (key,), "value",
                             f"'{key}' must be a positive integer, got {value!r}: DeepSpeed fails on it at launch."))
            deferred = True
            continue
        if isinstance(value, float) and not value.is_integer():
            out.append(issue("suspicious_value", (key,), "value",
                             f"'{key}' is {value!r}; DeepSpeed accepts a fractional batch size but it makes no sense."))
        values[key] = value
    bad = False
    for key, value in values.items():
        if value <= 0:
            out.append(issue("batch_non_positive", (key,), "value",
                             f"'{key}' is {value!r}; DeepSpeed requires it to be greater than 0."))
            bad = True
    if bad or deferred:
        return out
    t, m, g = values.get(T), values.get(M), values.get(G)
    if t is None and m is None:
        anchor = (G,) if g is not None else ()
        out.append(issue("batch_missing", anchor, "key",
                         f"Neither '{T}' nor '{M}' is set: DeepSpeed needs at least one of them."))
        return out
    if world_size is not None:
        t2, m2, g2 = _infer(t, m, g, world_size)
        for key, value in ((M, m2), (G, g2)):
            if value <= 0:
                out.append(issue("batch_inconsistent", (T,), "value",
                                 f"With world size {world_size}, DeepSpeed derives {key} = {value} from"
                                 f" {T} = {t}; it must be greater than 0."))
                return out
        if t2 != m2 * g2 * world_size:
            out.append(issue("batch_inconsistent", (T,), "value",
                             f"{T} {t2} != {M} {m2} x {G} {g2} x world size {world_size}: DeepSpeed refuses"
                             " this batch combination."))
        return out
    # World size unknown: report only what fails for every world size.
    if t is not None and m is not None and g is not None:
        per_rank = m * g
        if t % per_rank != 0 or t < per_rank:
            out.append(issue("batch_inconsistent", (T,), "value",
                             f"{T} {t} is not {M} {m} x {G} {g} x a whole number of GPUs"
                             f" (it would need world size {t / per_rank:g}): DeepSpeed refuses it."))
    elif t is not None and m is not None:
        if t % m != 0 or t < m:
            out.append(issue("batch_inconsistent", (T,), "value",
                             f"{T} {t} is not a multiple of {M} {m}: no world size makes the batch triple"
                             " consistent, and DeepSpeed refuses it."))
    elif t is not None and g is not None:
        if t % g != 0:
            out.append(issue("batch_inconsistent", (T,), "value",
                             f"{T} {t} is not a multiple of {G} {g}: no world size makes the batch triple"
                             " consistent, and DeepSpeed refuses it."))
    return out
