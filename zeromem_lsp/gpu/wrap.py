"""What wrapping a model in FSDP1 leaves in the caching allocator: the allocations and frees of
`FullyShardedDataParallel(model, device_id=..., sync_module_states=True)` when the model is on the CPU (or, on the other
ranks, on the meta device), derived from torch's code (torch 2.13; the same steps since 2.1), as data.

When it holds: FSDP1 is given a model that is not on the GPU and a `device_id`, so FSDP itself moves every unit to the
GPU as it wraps it:
- Answer.AI's fsdp_qlora `train.py` (AnswerDotAI/fsdp_qlora@4cd69234:train.py:541-549: with `low_memory`, the default,
  rank 0 loads the model on the CPU, the others on the meta device; QLoRA quantizes each weight on the GPU and keeps
  only its data on the CPU, train.py:216-220, so the quantization constants are already on the GPU; train.py:634
  empties the cache after loading; FSDP(..., device_id=torch.cuda.current_device(), sync_module_states=low_memory)
  at train.py:723-737; nothing empties the cache before `torch.cuda.reset_peak_memory_stats` at train.py:809);
- Hugging Face Trainer and Accelerate with FSDP1: the Trainer leaves the model where it is under FSDP
  (transformers 5.24 trainer.py:484-494, `place_model_on_device = False`) and Accelerate always passes
  `device_id=self.device` and the plugin's `sync_module_states` (accelerate 1.16 accelerator.py:1919-1931; with
  `cpu_ram_efficient_loading` only rank 0 holds weights, the others are on meta), and neither empties the cache after.
It does not hold for FSDP2 (`fully_shard` shards in place, per parameter) nor for a script that moves the model to the
GPU before wrapping it (then every weight is on the GPU unsharded first: a different, larger stream).

The stream, per FSDP unit, in the order `_recursive_wrap` builds them (children before their parent: each wrapped
leaf, each decoder layer, then the root), on rank 0 (the rank whose figures these scripts print and log):
1. `_move_module_to_device` (torch/distributed/fsdp/_init_utils.py:977-1028, `_move_states_to_device` 1054):
   `param.data = param.to(device)`, one allocation per parameter of the unit not already flattened by a nested unit;
2. `_sync_module_params_and_buffers` (_init_utils.py:1110-1170) → `_sync_params_and_buffers`
   (torch/distributed/utils.py:318-328) → `dist._broadcast_coalesced(..., PARAM_BROADCAST_BUCKET_SIZE = 250 MiB,
   _init_utils.py:60)`: c10d `broadcast_coalesced` (torch/csrc/distributed/c10d/comm.cpp) groups the tensors into
   buckets with `compute_bucket_assignment_by_size` (a bucket closes once it reaches the limit), keeps at most two
   buckets in flight, and each bucket is `flatten_dense_tensors` (torch/csrc/utils/tensor_flatten.h: `at::cat` of the
   tensors, or a view when the bucket holds one tensor), freed when its broadcast is finished and copied back;
3. `FlatParamHandle.__init__` → `flatten_tensors` (torch/distributed/fsdp/_flat_param.py:838-893): `torch.cat` of
   the unit's parameters, one allocation of the unit's size (no alignment padding: use_orig_params=False, 566-612);
4. `FlatParamHandle.shard` (_flat_param.py:945-973, `_get_shard` 1122-1139): a sharded strategy clones rank 0's chunk
   (`chunk(world_size)[0]`, ⌈numel / world size⌉ elements; rank 0 is never padded) and frees the unsharded flat
   parameter (`_typed_storage()._resize_(0)`, 970); NO_SHARD keeps the flat parameter as it is;
5. the original parameters are freed when `_init_param_handle_from_module` returns (its `managed_params` list held
   them; the module now holds views into the flat parameter, `_use_unsharded_views`, 621), the last first.

Assumptions: every parameter of a unit has one dtype (one broadcast bucket stream); buffers (rotary tables, a few MiB
at most) are left out; the module is traversed in `module.parameters()` order (the move's breadth-first order differs
only in which small tensor comes first); the quantization constants are allocated in weight order before wrapping,
one block per weight, with nothing between them (loading quantizes in parallel threads and empties the cache
after, train.py:626-634)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import prod
from typing import NamedTuple

from zeromem_lsp.configs.families import Weight, weights
from zeromem_lsp.configs.lora_modules import Target
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.memory.adapters import Quantization, packed_bytes, quantized, quantized_weight_bytes

#: _init_utils.py:60 PARAM_BROADCAST_BUCKET_SIZE
BROADCAST_BUCKET = 250 * 1024 * 1024
#: c10d comm.cpp broadcast_coalesced: `max_in_flight = 2`
IN_FLIGHT = 2
#: the part the wrapped model's tensors count in: the step's own parameters (they stay live into the step)
KEPT = "parameters"
CONSTANTS = "quantization constants"


class Op(NamedTuple):
    action: str  # "alloc" / "free"; "release" / "complete": a free that waits on another stream, then returns
    part: str
    size: int


class Unit(NamedTuple):
    """One FSDP unit: the bytes of each parameter it flattens, in `module.parameters()` order."""

    name: str
    tensors: tuple[int, ...]


def buckets(sizes: Sequence[int], limit: int = BROADCAST_BUCKET) -> list[list[int]]:
    """`compute_bucket_assignment_by_size` with one limit and one dtype: a bucket closes when it reaches `limit`."""
    out: list[list[int]] = [[]]
    for size in sizes:
        out[-1].append(size)
        if sum(out[-1]) >= limit:
            out.append([])
    return [bucket for bucket in out if bucket]


def _broadcast(sizes: Sequence[int]) -> list[Op]:
    """broadcast_coalesced: each bucket of two or more tensors is concatenated (a single tensor is broadcast through
    a view: 0 bytes); at most IN_FLIGHT buckets at once, the oldest finished (and freed) first."""
    ops: list[Op] = []
    flight: list[int] = []
    for bucket in buckets(sizes):
        if len(flight) >= IN_FLIGHT:
            ops += [Op("free", "broadcast bucket", flight.pop(0))]
        flight.append(sum(bucket) if len(bucket) > 1 else 0)
        ops.append(Op("alloc", "broadcast bucket", flight[-1]))
    ops += [Op("free", "broadcast bucket", flat) for flat in flight]
    return [op for op in ops if op.size]


def unit_stream(unit: Unit, ranks: int, sharded: bool, itemsize: int, sync: bool = True,
                offload: bool = False) -> list[Op]:
    """One unit's wrap on rank 0 (the module docstring's steps 1-5); its flat parameter or shard stays (`KEPT`),
    unless CPUOffload(offload_params=True) moves it to the host right after sharding (`flat_param_to(cpu)`,
    _init_utils.py:672-673)."""
    ops = [Op("alloc", "wrap: moved", size) for size in unit.tensors]
    if sync:
        ops += _broadcast(unit.tensors)
    total = sum(unit.tensors)
    held = -(-total // itemsize // ranks) * itemsize if sharded else total
    if sharded:
        ops += [Op("alloc", "wrap: flat", total), Op("alloc", KEPT, held), Op("free", "wrap: flat", total)]
    else:
        ops.append(Op("alloc", KEPT, total))  # the concatenation is the flat parameter
    ops += [Op("free", KEPT, held)] if offload else []
    return ops + [Op("free", "wrap: moved", size) for size in reversed(unit.tensors)]


class WrapModel(NamedTuple):
    """What the wrap needs of the run: the model, its adapters (each trainable leaf its own unit: train.py's and
    PEFT's `fsdp_auto_wrap_policy` lambda policy, a leaf module whose weight requires grad), their dtypes, the
    quantization of the frozen linear weights."""

    shape: ModelShape
    itemsize: int  # the stored parameters' bytes per element (bf16: 2; a Params4bit is stored as quant_storage)
    targets: tuple[Target, ...] = ()
    adapter_itemsize: int = 2
    quantization: Quantization = Quantization()


def _weight_bytes(weight: Weight, model: WrapModel) -> list[int]:
    shapes = weight.shapes()
    if model.quantization.kind != "none" and quantized(weight):
        return [packed_bytes(weight.elements, model.quantization)] + [prod(s) * model.itemsize for s in shapes[1:]]
    return [prod(s) * model.itemsize for s in shapes]


def _adapter_units(model: WrapModel, weight: Weight, layer: int | None) -> list[Unit]:
    found = [t for t in model.targets if t.weight.path == weight.path and (layer is None or layer in (t.layers or ()))]
    return [Unit(f"{weight.path} lora_{ab}", (n * t.rank * model.adapter_itemsize,)) for t in found
            for ab, n in (("A", weight.in_features), ("B", weight.out_features))]


def units(model: WrapModel) -> list[Unit]:
    """Every FSDP unit in construction order: per decoder layer its adapters' units, then the layer; then the root
    (embeddings, final norm, head and anything else outside the layers, with the adapters there first)."""
    found = weights(model.shape)
    out: list[Unit] = []
    for layer in range(model.shape.layers):
        own = [w for w in found if w.layers is not None and layer in w.layers]
        out += [u for w in own for u in _adapter_units(model, w, layer)]
        out.append(Unit(f"layer {layer}", tuple(b for w in own for b in _weight_bytes(w, model))))
    outside = [w for w in found if w.layers is None and not (w.role == "head" and model.shape.tied)]
    out += [u for w in outside for u in _adapter_units(model, w, None)]
    return out + [Unit("root", tuple(b for w in outside for b in _weight_bytes(w, model)))]


def constants(model: WrapModel) -> list[int]:
    """The quantization constants of each quantized weight instance (absmax, nested absmax, codes: one block each
    weight), on the GPU before wrapping: bitsandbytes quantizes on the GPU and the scripts move only the data."""
    if model.quantization.kind == "none":
        return []
    return [quantized_weight_bytes(w.elements, w.out_features, model.quantization)
            - packed_bytes(w.elements, model.quantization)
            for w in weights(model.shape) if quantized(w) for _ in range(w.instances)]


def _waiting(ops: list[Op]) -> list[Op]:
    """The broadcast buckets' frees as `record_stream` makes them (torch before TORCH_NCCL_AVOID_RECORD_STREAMS
    became the default, e.g. 2.2: ProcessGroupNCCL records each collective's input on the NCCL stream): the block
    returns to the pool only once the broadcast is done, which the unit's flatten and shard, issued right after it,
    do not wait for; the next unit's first copy to the GPU (from pageable memory: the host waits for it, behind the
    broadcast) does."""
    return [Op("release", op.part, op.size) if op.part == "broadcast bucket" and op.action == "free" else op
            for op in ops]


def wrap_stream(model: WrapModel, ranks: int, sharded: bool, sync: bool = True, record_stream: bool = False,
                offload: bool = False) -> list[Op]:
    """The allocations of loading's leftovers (the quantization constants) and of wrapping every unit.
    `record_stream`: the broadcast buckets are freed as torch 2.2 frees them (`_waiting`); 2.13 frees them at once.
    `offload`: FSDP's CPUOffload(offload_params=True), each flat parameter moved to the host once sharded."""
    ops = [Op("alloc", CONSTANTS, size) for size in constants(model)]
    waiting: list[Op] = []
    for unit in units(model):
        stream = unit_stream(unit, ranks, sharded, model.itemsize, sync, offload)
        stream = _waiting(stream) if record_stream else stream
        ops += stream[:1] + [Op("complete", op.part, op.size) for op in waiting] + stream[1:]
        waiting = [op for op in stream if op.action == "release"]
    return ops + [Op("complete", op.part, op.size) for op in waiting]


def kept(ops: Iterable[Op]) -> dict[str, int]:
    """Bytes each part holds at the end of a stream."""
    out: dict[str, int] = {}
    for op in ops:
        out[op.part] = out.get(op.part, 0) + (op.size if op.action == "alloc" else -op.size)
    return {part: size for part, size in out.items() if size}


__all__ = ["BROADCAST_BUCKET", "CONSTANTS", "IN_FLIGHT", "KEPT", "Op", "Unit", "WrapModel", "buckets", "constants",
           "kept", "unit_stream", "units", "wrap_stream"]
