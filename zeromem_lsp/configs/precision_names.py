"""The names configs give an optimizer → memory/precision.OPTIMIZERS: DeepSpeed's `optimizer.type`, torch.optim's
class names and HF TrainingArguments' `optim`; None where a name is something the memory model does not follow.
Reading config values, not modelling bytes (a precision's spellings: memory/precision.normalize_precision).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

# DeepSpeed optimizer.type values (DeepSpeed lower-cases its own names) and torch.optim class names; 1-bit Adam keeps
# Adam's m, v (plus communication error buffers, not counted).
_DEEPSPEED_TYPES = {alias: canonical for canonical, aliases in {
    "adam": ("adam", "onebitadam", "zerooneadam", "muadam", "fusedadam", "cpuadam", "deepspeedcpuadam"),
    "adamw": ("adamw", "muadamw"),
    "lamb": ("lamb", "onebitlamb", "fusedlamb"),
    "lion": ("lion", "fusedlion"),
    "adagrad": ("adagrad", "cpuadagrad", "deepspeedcpuadagrad"),
    "adafactor": ("adafactor",),
}.items() for alias in aliases}
# HF TrainingArguments.optim values.
_HF_OPTIM = {alias: canonical for canonical, aliases in {
    "adamw": ("adamw_hf", "adamw_torch", "adamw_torch_fused", "adamw_torch_xla", "adamw_torch_npu_fused",
              "adamw_apex_fused", "paged_adamw_32bit", "paged_adamw"),
    "adam8bit": ("adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit"),
    "adam8bit_torchao": ("adamw_torch_8bit",),  # torchao's AdamW8bit (trainer_optimizer.py `_get_torchao_optimizer`)
    "adafactor": ("adafactor",),
    "lion": ("lion_32bit", "paged_lion_32bit", "paged_lion"),
    "adagrad": ("adagrad",),
}.items() for alias in aliases}
# Names whose state depends on `momentum` (torch.optim.SGD, DeepSpeed MuSGD wraps it; HF "sgd").
_SGD_NAMES = {"sgd", "musgd"}


def _number(value: object) -> object:
    if isinstance(value, str):
        try:
            return Fraction(value.strip())
        except ValueError:
            return None
    return value


def optimizer_from_deepspeed_type(name: str, params: Mapping[str, object] | None = None) -> str | None:
    """One of memory/precision.OPTIMIZERS for a DeepSpeed ``optimizer.type``, a torch.optim class name or an HF
    ``TrainingArguments.optim`` value (the tables above, any case), or None when unknown — deliberately for Muon,
    4/8-bit Lion, ``adamw_anyprecision``, and Adam with ``amsgrad`` in ``params`` (docs/memory-model.md). SGD (and
    MuSGD) is ``sgd_momentum`` only with a positive ``momentum`` in ``params``."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    params = params if isinstance(params, Mapping) else {}
    if key in _SGD_NAMES:
        momentum = _number(params.get("momentum", 0))
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float, Fraction)):
            return None
        return "sgd_momentum" if momentum > 0 else "sgd"
    canonical = _DEEPSPEED_TYPES.get(key) or _HF_OPTIM.get(key)
    if canonical in ("adam", "adamw") and params.get("amsgrad") is True:
        return None
    return canonical
