"""What autograd keeps for backward, as the CPU measurements count it (benchmarks/activations, adapters, loss).

Inside `SavedTensors.hooks()` every tensor saved for backward reaches `torch.autograd.graph.saved_tensors_hooks`;
its storage is counted once (unique by data pointer), the model's parameters excluded. With non-reentrant
gradient checkpointing a checkpointed layer's saved tensors never reach the hook: what the checkpoint keeps
are the layer's inputs, added by `record_checkpoint_inputs`.
"""

from __future__ import annotations

import functools


def tensors(value) -> list:
    """Every tensor in value (tuples, lists, dicts, partials walked)."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in tensors(item)]
    if isinstance(value, dict):
        return tensors(list(value.values()))
    if isinstance(value, functools.partial):
        return tensors([value.args, value.keywords])
    return []


def storages(value, found: dict) -> None:
    """Record the storages of every tensor in value (tuples, lists, dicts, partials walked)."""
    for tensor in tensors(value):
        storage = tensor.untyped_storage()
        found[storage.data_ptr()] = storage.nbytes()


class SavedTensors:
    """The unique storages saved for backward of `model`'s forward, its parameters excluded; with `explain`,
    one line per storage in the order first seen (`shapes`)."""

    def __init__(self, model, explain: bool = False):
        self.parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.found: dict[int, int] = {}
        self.shapes: list[str] = []
        self.explain = explain
        self.dropped: set[int] = set()  # the inputs of a checkpoint frame torch drops (record_checkpoint_inputs)

    def _keep(self, pointer: int, size: int, describe) -> None:
        if pointer in self.parameters or pointer in self.dropped:
            return
        if self.explain and pointer not in self.found:
            self.shapes.append(describe())
        self.found[pointer] = size

    def pack(self, tensor):
        storage = tensor.untyped_storage()
        self._keep(storage.data_ptr(), storage.nbytes(),
                   lambda: f"{tuple(tensor.shape)} {tensor.dtype} {storage.nbytes()}")
        return tensor

    def hooks(self):
        """The context that records what the forward inside it saves."""
        import torch
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda tensor: tensor)

    def record_checkpoint_inputs(self, model, only_with_grad: bool = False) -> None:
        """Wrap each checkpointed layer's checkpoint function (after gradient_checkpointing_enable) to record
        the inputs it keeps. `only_with_grad`: not where nothing in the layer requires grad (no input, positional or
        keyword, no parameter of its module): such a checkpoint saves nothing, so torch drops its frame and the inputs
        with it — the inputs torch's `_checkpoint_without_reentrant_generator` packs into the frame (`save_inputs`,
        through these hooks) are not counted either (a frozen Qwen3-VL tower, whose blocks get inputs without grad:
        checked freed after the forward)."""
        for module in model.modules():
            inner = getattr(module, "_gradient_checkpointing_func", None)
            if inner is not None:
                def recording(function, *args, _inner=inner, _module=module, **kwargs):
                    # an input passed by keyword sits in the partial GradientCheckpointingLayer hands over
                    # (Llama4VisionEncoderLayer is called so)
                    needs = any(tensor.requires_grad for tensor in tensors((function, args, kwargs))) or any(
                        parameter.requires_grad for parameter in _module.parameters())
                    kept: dict[int, int] = {}
                    storages((function, args, kwargs) if needs or not only_with_grad else args, kept)
                    if needs or not only_with_grad:
                        for pointer, size in kept.items():
                            self._keep(pointer, size, lambda size=size: f"checkpoint input {size}")
                        return _inner(function, *args, **kwargs)
                    dropped = set(kept) - set(self.found) - self.dropped  # what save_inputs packs, then frees
                    self.dropped |= dropped
                    try:
                        return _inner(function, *args, **kwargs)
                    finally:
                        self.dropped -= dropped
                module._gradient_checkpointing_func = recording

    @property
    def total(self) -> int:
        return sum(self.found.values())
