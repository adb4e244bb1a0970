"""A LoRA / QLoRA run's P, G, O for the plan: the pooled formula's inputs with frozen and trainable parameters.

`Adapter` is the plain input (from the resolved settings, or a recipe's adapter fields); `adapter_inputs` turns it
and a model's config.json into the plan's `Inputs`, with every term shown (`AdapterBreakdown`) so that P, G and O
(memory/adapters.py `model_state`) can be rebuilt by hand. Pure; no pydantic (the `zeromem estimate` path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from zeromem_lsp.configs.settings_values import ALL_LINEAR
from zeromem_lsp.configs.lora_modules import AdapterInputError, LoraSettings
from zeromem_lsp.memory.adapters import (EMBEDDING_COPIES, AdapterCount, AdapterState, Quantization, count_adapters,
                                         model_state, trainable_groups)
from zeromem_lsp.memory.lora_activations import activation_dtype
from zeromem_lsp.memory.optimizer_step import EMBEDDING_STATE
from zeromem_lsp.memory.peak import LoraPeak
from zeromem_lsp.memory.plan import AdapterTerms, Inputs
from zeromem_lsp.memory.precision import DTYPE_BYTES, optimizer_state_bytes
from zeromem_lsp.provenance import Origin

#: Optimizers whose state torch allocates like the parameter (`zeros_like(param)`): it follows its dtype.
TENSOR_STATE_OPTIMIZERS = ("adam", "adamw", "lamb", "sgd_momentum", "adagrad", "lion")


class Adapter(NamedTuple):
    """A LoRA run as plain data: what PEFT's LoraConfig and a BitsAndBytesConfig say, each field's origin beside."""

    rank: int
    targets: tuple[str, ...] | str = ALL_LINEAR
    modules_to_save: tuple[str, ...] = ()
    dora: bool = False
    quantization: str = "none"  # none, int8, nf4, fp4
    double_quant: bool = False
    origins: tuple[tuple[str, Origin], ...] = ()  # (field, origin): a tuple keeps the value hashable
    # PEFT's matching fields (configs/lora_targets.py): a string is a regular expression
    exclude_modules: tuple[str, ...] | str = ()
    layers_to_transform: tuple[int, ...] | None = None
    layers_pattern: tuple[str, ...] = ()
    rank_pattern: tuple[tuple[str, int], ...] = ()
    target_parameters: tuple[str, ...] = ()
    target_linear: bool = False  # axolotl lora_target_linear / LLaMA-Factory all: every linear's name added
    #: PEFT's prepare_model_for_kbit_training runs on a quantized base: the weights left unquantized in fp32 and the
    #: forward in fp32 through them; False: they and the activations stay in the compute dtype (docs/adapters.md)
    kbit_prepare: bool = True
    dropout: float = 0.0  # lora_dropout: above 0, each adapter keeps its dropped-out input and a mask
    autocast: bool = True  # PEFT's autocast_adapter_dtype (0.12 on): fp32 adapters; False (PEFT < 0.12): the base's

    def origin(self, field: str) -> Origin | None:
        return dict(self.origins).get(field)

    @property
    def lora(self) -> LoraSettings:
        return LoraSettings(self.rank, self.targets, self.modules_to_save, self.dora, False, self.exclude_modules,
                            self.layers_to_transform, self.layers_pattern, self.rank_pattern, self.target_parameters,
                            self.target_linear)

    @property
    def quantized(self) -> Quantization:
        return Quantization(self.quantization, self.double_quant)

    def describe(self) -> str:
        targets = _names(self.targets)
        if self.target_linear:
            targets = "every linear layer's name" + (f" and {targets}" if self.targets else "")
        parts = [f"LoRA r={self.rank} on {targets}"]
        if self.target_parameters:
            parts.append(f"target_parameters {', '.join(self.target_parameters)}")
        if self.layers_to_transform is not None:
            parts.append(f"layers {', '.join(map(str, self.layers_to_transform))}"
                         + (f" (after {', '.join(self.layers_pattern)})" if self.layers_pattern else ""))
        if self.exclude_modules:
            parts.append(f"excluding {_names(self.exclude_modules)}")
        if self.rank_pattern:
            parts.append("rank_pattern " + ", ".join(f"{key}: {rank}" for key, rank in self.rank_pattern))
        if self.dora:
            parts.append("DoRA")
        if self.modules_to_save:
            parts.append(f"modules_to_save {', '.join(self.modules_to_save)}")
        if self.quantization != "none":
            parts.append(f"{self.quantization} base" + (" + double quantization" if self.double_quant else "")
                         + ("" if self.kbit_prepare else " (no prepare_model_for_kbit_training)"))
        if self.dropout:
            parts.append(f"dropout {self.dropout:g}")
        if not self.autocast:
            parts.append("adapters in the base's dtype (no autocast_adapter_dtype)")
        return ", ".join(parts)


def _names(value: tuple[str, ...] | str) -> str:
    """Names as a list; a string (a regular expression PEFT fullmatches, or all-linear) as written."""
    if isinstance(value, str):
        return value if value == ALL_LINEAR else f"regex {value!r}"
    return ", ".join(value)


@dataclass(frozen=True)
class Term:
    """One addend of P, G or O: `count` parameters at `each` bytes (each None: `bytes` comes from a rule)."""

    label: str
    count: int
    each: int | None
    bytes: int


@dataclass(frozen=True)
class AdapterBreakdown:
    """What the plan's P, G, O are made of with an adapter: counts as PEFT reports them, and every term."""

    adapter: Adapter
    engine: str  # adapters.ENGINES: peft, deepspeed, fsdp1, fsdp2
    count: AdapterCount
    parameter_terms: tuple[Term, ...]
    gradient_terms: tuple[Term, ...]
    optimizer_terms: tuple[Term, ...]
    constant_bytes: int  # quantization constants inside P (attributes: ZeRO-3 / FSDP do not partition them)
    notes: tuple[str, ...]
    precision: str = "bf16"  # the model's (training) dtype
    optimizer: str = "adamw"

    @property
    def trainable(self) -> int:
        return self.count.trainable

    @property
    def total(self) -> int:
        return self.count.all

    def to_json(self) -> dict[str, object]:
        def terms(found: tuple[Term, ...]) -> list[dict[str, object]]:
            return [{"label": t.label, "parameters": t.count, "bytes_each": t.each, "bytes": t.bytes} for t in found]

        adapter = self.adapter
        return {"rank": adapter.rank, "targets": adapter.targets if isinstance(adapter.targets, str)
                else list(adapter.targets), "modules_to_save": list(adapter.modules_to_save), "dora": adapter.dora,
                "exclude_modules": adapter.exclude_modules if isinstance(adapter.exclude_modules, str)
                else list(adapter.exclude_modules), "layers_to_transform": None if adapter.layers_to_transform is None
                else list(adapter.layers_to_transform), "layers_pattern": list(adapter.layers_pattern),
                "rank_pattern": dict(adapter.rank_pattern), "target_parameters": list(adapter.target_parameters),
                "target_linear": adapter.target_linear,
                "quantization": adapter.quantization, "double_quant": adapter.double_quant,
                **({"kbit_prepare": False} if adapter.quantization != "none" and not adapter.kbit_prepare else {}),
                "engine": self.engine,
                "precision": self.precision, "optimizer": self.optimizer,
                "trainable_parameters": self.trainable, "frozen_parameters": self.count.frozen,
                "adapter_parameters": self.count.adapters, "saved_copy_parameters": self.count.saved_copies,
                "parameter_terms": terms(self.parameter_terms), "gradient_terms": terms(self.gradient_terms),
                "optimizer_terms": terms(self.optimizer_terms), "quantization_constant_bytes": self.constant_bytes}


def engine_for(family: str, fsdp_version: int | None = None) -> str:
    """adapters.model_state's engine for a plan family: DeepSpeed's recast, FSDP1/2, else PEFT with torch."""
    return {"deepspeed": "deepspeed", "fsdp": "fsdp2" if fsdp_version == 2 else "fsdp1"}.get(family, "peft")


def _trainable_terms(count: AdapterCount, engine: str, dtype: str, gradient: int, optimizer: str,
                     adapter_dtype: str) -> tuple[tuple[Term, ...], tuple[Term, ...], tuple[Term, ...]]:
    """(P, G, O) terms of the trainable parameters, as adapters.model_state computes them."""
    state, follows = optimizer_state_bytes(optimizer), optimizer in TENSOR_STATE_OPTIMIZERS
    wide = EMBEDDING_STATE.get(optimizer, 0)
    groups = [one for one in trainable_groups(count, engine, dtype, adapter_dtype, state, follows, wide) if one[1]]
    master = " + fp32 master 4 B)" if DTYPE_BYTES[dtype] < 4 else ")"
    opt = tuple(Term(f"trainable ({optimizer} state {state} B{master}" if engine == "deepspeed" else
                     f"{label.split(' (')[0]} ({optimizer} at 32 bits: HF Trainer's nn.Embedding override)"
                     if wide and label.startswith(EMBEDDING_COPIES) else
                     f"{label.split(' (')[0]} ({optimizer} state in their dtype)", n, each, n * each)
                for label, n, _, each in groups)
    grads = tuple(Term(label, n, gradient or w, n * (gradient or w)) for label, n, w, _ in groups)
    params = tuple(Term(label, n, w, n * w) for label, n, w, _ in groups)
    return params, grads, opt


def adapter_inputs(config: dict[str, Any], adapter: Adapter, family: str, precision: str, optimizer: str, world_size: int,
                   fp32_gradients: bool = False, fsdp_version: int | None = None,
                   assumptions: tuple[str, ...] = ()) -> tuple[Inputs, AdapterBreakdown]:
    """The plan's inputs for LoRA training of the model `config` describes; raises AdapterInputError (its
    `.field` an adapters.py name: SETTING_OF_FIELD maps it to the setting) or UnsupportedModel."""
    engine = engine_for(family, fsdp_version)
    gradient_dtype = "fp32" if fp32_gradients and precision != "fp32" else ""
    adapter_dtype = "fp32" if adapter.autocast else precision  # PEFT < 0.12: update_layer's self.to(weight.dtype)
    state: AdapterState = model_state(
        config, adapter.lora, adapter.quantized, engine=engine, dtype=precision, gradient_dtype=gradient_dtype,
        optimizer_state=optimizer_state_bytes(optimizer), state_follows_dtype=optimizer in TENSOR_STATE_OPTIMIZERS,
        embedding_state=EMBEDDING_STATE.get(optimizer, 0),
        kbit_upcast=adapter.kbit_prepare, adapter_dtype=adapter_dtype)
    count = count_adapters(config, adapter.lora)
    frozen = state.frozen
    upcast = adapter.quantization != "none" and engine != "deepspeed" and adapter.kbit_prepare
    float_width = frozen.float_bytes // frozen.other_parameters if frozen.other_parameters else 0
    frozen_terms = []
    if frozen.quantized_weights:
        frozen_terms.append(Term(f"frozen linear weights, {adapter.quantization}"
                                 + (" + double quantization" if adapter.double_quant else "")
                                 + " (packed values + constants, docs/adapters.md)", frozen.quantized_weights, None,
                                 frozen.quantized_bytes))
    label = ("frozen (fp32: prepare_model_for_kbit_training's upcast)" if upcast
             else f"frozen{' embeddings, head, norms, biases' if frozen.quantized_weights else ''} ({precision}"
             + (", no prepare_model_for_kbit_training)" if frozen.quantized_weights and not adapter.kbit_prepare
                and engine != "deepspeed" else ")"))
    frozen_terms.append(Term(label, frozen.other_parameters, float_width, frozen.float_bytes))
    params, grads, opt = _trainable_terms(count, engine, "fp32" if upcast else precision, 4 * bool(gradient_dtype),
                                          optimizer, adapter_dtype)
    notes = list(state.notes[1:])
    if engine == "fsdp1":
        notes.append("FSDP1: every unit all frozen or all trainable (PEFT's fsdp_auto_wrap_policy); "
                     "use_orig_params=True with decoder-layer units keeps a gradient for the frozen weights too")
    if frozen.constant_bytes:
        notes.append(f"of P, {frozen.constant_bytes:,} B are quantization constants, which ZeRO-3 and FSDP do "
                     "not partition (counted as partitioned by the stage formula)")
    breakdown = AdapterBreakdown(adapter, engine, count, (*frozen_terms, *params), grads, opt, frozen.constant_bytes,
                                 tuple(notes), precision, optimizer)
    shown = tuple(sum(t.bytes for t in terms) for terms in (breakdown.parameter_terms, grads, opt))
    if shown != (state.parameter_bytes, state.gradient_bytes, state.optimizer_bytes):
        raise AssertionError(f"adapter terms {shown} disagree with adapters.model_state {state[:3]}")
    note = f"{count.trainable:,} trainable of {count.all:,} parameters: {adapter.describe()}"
    inputs = Inputs(state.parameter_bytes, state.gradient_bytes, state.optimizer_bytes, world_size,
                    parameters=count.all, assumptions=(note, *assumptions, *notes), adapter=breakdown)
    return inputs, breakdown


def lora_peak(breakdown: AdapterTerms | None, dtype: str | None) -> LoraPeak | None:
    """LoRA's activation inputs for a plan's AdapterBreakdown: DeepSpeed recasts the adapters (and any k-bit
    upcast) to the training dtype; else the adapters in their own dtype, the forward as `activation_dtype` says."""
    if not isinstance(breakdown, AdapterBreakdown) or dtype is None:
        return None
    recast, quantized = breakdown.engine == "deepspeed", breakdown.adapter.quantization != "none"
    parameters, gradients, states = (sum(term.bytes for term in terms) for terms in
                                     (breakdown.parameter_terms, breakdown.gradient_terms, breakdown.optimizer_terms))
    forward = activation_dtype(dtype, quantized, not recast and breakdown.adapter.kbit_prepare)
    own = "fp32" if breakdown.adapter.autocast else breakdown.precision
    frozen = [term.each for term in breakdown.parameter_terms if term.label.startswith("frozen") and term.each]
    return LoraPeak(breakdown.count, dtype if recast else own, forward, parameters, gradients, states, breakdown.engine,
                    breakdown.adapter.dropout > 0, breakdown.adapter.quantized, frozen[-1] if frozen else 2)


__all__ = ["Adapter", "AdapterBreakdown", "AdapterInputError", "SETTING_OF_FIELD", "Term", "adapter_from_settings",
           "adapter_inputs", "adapter_problem", "engine_for", "lora_peak"]
