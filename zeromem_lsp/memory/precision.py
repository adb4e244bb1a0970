"""Bytes per parameter for parameters (P), gradients (G) and optimizer state (O).

Convention: the ZeRO paper's mixed-precision accounting (arXiv 1910.02054, section 3.1): 2 + 2 + 12 = 16 bytes
per parameter with Adam under fp16 / bf16, no master copy in fp32; fp32 gradients (DeepSpeed's grad_accum_dtype, the
18-byte figure) with ``gradient_dtype="fp32"``. docs/memory-model.md's table (checked against this module by
``tests/unit/test_precision.py``) says why.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PRECISIONS", "OPTIMIZERS", "BytesPerParameter", "bytes_per_parameter", "normalize_precision",
           "optimizer_state_bytes"]

PRECISIONS = ("fp32", "fp16", "bf16")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd_momentum", "lion", "adagrad", "lamb", "adam8bit", "adafactor",
              "adam8bit_torchao")

#: Bytes per element of each dtype: the one table (a foundation: every layer reads it from here).
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MASTER_WEIGHT_BYTES = 4  # fp32 master copy kept by the optimizer under mixed precision

# Optimizer state per parameter, in bytes, excluding the master copy: (bytes, description).
_STATE: dict[str, tuple[int, str]] = {
    "adam": (8, "Adam m,v 8 B"),
    "adamw": (8, "AdamW m,v 8 B"),
    "lamb": (8, "LAMB m,v 8 B"),
    "sgd_momentum": (4, "SGD momentum buffer 4 B"),
    "sgd": (0, "SGD without momentum: no state 0 B"),
    "adagrad": (4, "Adagrad sum of squares 4 B"),
    "lion": (4, "Lion momentum 4 B"),
    "adam8bit": (2, "8-bit Adam m,v 2 B (+ block scales)"),
    "adam8bit_torchao": (2, "torchao 8-bit AdamW m,v 2 B (+ block scales)"),
    "adafactor": (0, "Adafactor factored second moment ~0 B (O(rows+cols), beta1 unset)"),
}
assert set(_STATE) == set(OPTIMIZERS)


class BytesPerParameter(NamedTuple):
    """Bytes per parameter for P, G and O under one precision and optimizer."""

    parameter: int
    gradient: int
    optimizer: int
    precision: str
    optimizer_name: str
    explanation: str
    gradient_dtype: str = ""  # dtype the gradients are held in; "" means the training precision

    @property
    def gradient_dtype_name(self) -> str:
        return self.gradient_dtype or self.precision

    @property
    def total(self) -> int:
        return self.parameter + self.gradient + self.optimizer


def optimizer_state_bytes(optimizer: str) -> int:
    """The optimizer's own state per parameter (fp32, no master copy)."""
    return _STATE[_check_optimizer(optimizer)][0]


def _check_optimizer(optimizer: object) -> str:
    name = optimizer.strip().lower() if isinstance(optimizer, str) else None
    if name not in _STATE:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid optimizers: {', '.join(OPTIMIZERS)}")
    return name


def _check_dtype(value: object, what: str) -> str:
    canonical = normalize_precision(value) if isinstance(value, str) else None
    if canonical is None or (what == "gradient_dtype" and str(value).strip().lower() == "no"):
        raise ValueError(f"unknown {what} {value!r}; valid values: {', '.join(PRECISIONS)}")
    return canonical


def bytes_per_parameter(precision: str, optimizer: str, *, gradient_dtype: str | None = None) -> BytesPerParameter:
    """Bytes per parameter for P, G and O at ``precision`` (an alias :func:`normalize_precision` knows) with
    ``optimizer`` (:data:`OPTIMIZERS`, any case); ``gradient_dtype`` (DeepSpeed ``data_types.grad_accum_dtype``)
    overrides G. Raises ValueError naming the bad value and listing the valid ones."""
    precision_name = _check_dtype(precision, "precision")
    optimizer_name = _check_optimizer(optimizer)
    grad_name = precision_name if gradient_dtype is None else _check_dtype(gradient_dtype, "gradient_dtype")

    parameter = DTYPE_BYTES[precision_name]
    gradient = DTYPE_BYTES[grad_name]
    state, state_text = _STATE[optimizer_name]
    mixed = precision_name != "fp32"
    optimizer_bytes = state + (MASTER_WEIGHT_BYTES if mixed else 0)

    grad_text = f"{grad_name} grads {gradient} B"
    if gradient_dtype is not None and grad_name != precision_name:
        grad_text += " (grad_accum_dtype)"
    parts = [f"{precision_name} params {parameter} B", grad_text]
    if mixed:
        parts.append(f"fp32 master {MASTER_WEIGHT_BYTES} B")
    parts.append(state_text)
    explanation = " + ".join(parts)
    if not mixed:
        explanation += " (no master copy)"
    return BytesPerParameter(
        parameter=parameter,
        gradient=gradient,
        optimizer=optimizer_bytes,
        precision=precision_name,
        optimizer_name=optimizer_name,
        explanation=explanation,
        gradient_dtype=grad_name,
    )


#: Each precision's spellings (Accelerate's mixed_precision "no" = full fp32 training).
_PRECISION_ALIASES = {alias: canonical for canonical, aliases in {
    "fp32": ("fp32", "float32", "float", "f32", "32", "no"),
    "fp16": ("fp16", "float16", "half", "f16", "16"),
    "bf16": ("bf16", "bfloat16"),
}.items() for alias in aliases}


def normalize_precision(name: str) -> str | None:
    """Canonical precision for a spelling used by DeepSpeed, Accelerate, HF or torch (``'bfloat16'``, ``'half'``, a
    ``'torch.'`` prefix; Accelerate's ``mixed_precision: no`` is fp32), else None (``'fp8'``, ``'auto'``, ...)."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    if key.startswith("torch."):
        key = key[len("torch.") :]
    return _PRECISION_ALIASES.get(key)
