"""Live tensor storage bytes, counted at every dispatched aten op (needs torch; runs in the measuring venv).

`StorageTracker` is a TorchDispatchMode. Every storage an op returns (or takes, if not yet seen) is registered
once with its byte size and a `weakref.finalize` that subtracts it when the storage is freed. Views share
one storage, so nothing is counted twice. Meta tensors (DeepSpeed keeps some) use no memory: they are
counted apart, in `meta_current`, because MemTracker counts them. FakeTensors are counted only under the
case's own FakeTensorMode (`fake_mode`). `UntypedStorage.resize_` (FSDP2 frees and re-allocates unsharded
parameters that way) is not dispatched and is patched to update the size. Enter the tracker before the
model is built so parameters and DeepSpeed's flat buffers are registered when they are created.

Phases: `begin(name)` starts one; the tracker keeps that phase's peak, the live bytes at its end, and a
snapshot (storage serial -> bytes) at the peak, so the peak can be broken down afterwards by `breakdown`.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import is_traceable_wrapper_subclass_type
from torch.utils._pytree import tree_flatten

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover - torch without distributed
    DTensor = None
from torch._subclasses.fake_tensor import FakeTensor


def _storage(tensor):
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse / wrapper subclasses without one storage
        return None


class StorageTracker(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # serial -> bytes
        self.serial_of: dict[int, int] = {}  # id(storage) -> serial (removed when freed)
        self.info: dict[int, tuple] = {}  # serial -> (op, shape, dtype) of the tensor that first showed it
        self.current = 0
        self.meta_current = 0
        self.meta_seen: dict[int, int] = {}  # id(storage) -> bytes of live meta storages
        self.next_serial = 0
        self.phase: str | None = None
        self.phases: dict[str, dict] = {}
        self._orig_resize = torch.UntypedStorage.resize_
        # the FakeTensorMode a case runs under (its fake storages are what it counts); any other FakeTensor holds no
        # memory: DTensor's sharding propagation makes global-shape ones in a FakeTensorMode of its own
        # (torch/distributed/tensor/_sharding_prop.py `_propagate_tensor_meta_non_cached`) on every cache miss
        self.fake_mode = None

    # --- registration ---
    def _freed(self, key: int, serial: int) -> None:
        self.current -= self.live.pop(serial, 0)
        if self.serial_of.get(key) == serial:
            del self.serial_of[key]

    def _meta_freed(self, key: int) -> None:
        self.meta_current -= self.meta_seen.pop(key, 0)

    def register(self, tensor, op: str = "") -> None:
        storage = _storage(tensor)
        if storage is None or (isinstance(tensor, FakeTensor) and tensor.fake_mode is not self.fake_mode):
            return
        if tensor.device.type == "meta":
            if id(storage) not in self.meta_seen:
                self.meta_seen[id(storage)] = storage.nbytes()
                self.meta_current += storage.nbytes()
                weakref.finalize(storage, self._meta_freed, id(storage))
            return
        key = id(storage)
        serial = self.serial_of.get(key)
        size = storage.nbytes()
        if serial is None:
            serial = self.next_serial
            self.next_serial += 1
            self.serial_of[key] = serial
            self.live[serial] = size
            self.current += size
            self.info[serial] = (op, tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""))
            weakref.finalize(storage, self._freed, key, serial)
        elif self.live[serial] != size:  # resized in place (aten resize_, out= ops)
            self.current += size - self.live[serial]
            self.live[serial] = size
        self._touch()

    def serial(self, tensor) -> int | None:
        storage = _storage(tensor)
        return None if storage is None else self.serial_of.get(id(storage))

    def _touch(self) -> None:
        phase = self.phases.get(self.phase)
        if phase is not None and self.current > phase["peak"]:
            phase["peak"] = self.current
            phase["dirty"] = True

    # --- the mode ---
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(is_traceable_wrapper_subclass_type(kind) for kind in types):
            # let DTensor (and other wrapper subclasses: torchao's 8-bit optimizer state) desugar to the ops on the
            # tensors they wrap, which come back here; the wrapper itself owns no memory
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        name = func.__name__
        for value in tree_flatten((args, kwargs))[0]:
            if isinstance(value, torch.Tensor) and self.serial(value) is None and value.device.type != "meta":
                self.register(value, "input:" + name)
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self.register(value, name)
        self._snapshot_if_peak()
        return out

    def _snapshot_if_peak(self) -> None:
        phase = self.phases.get(self.phase)
        if phase is not None and phase.pop("dirty", False):
            phase["at_peak"] = dict(self.live)

    def __enter__(self):
        tracker = self
        original = self._orig_resize

        def resize_(storage, size):
            result = original(storage, size)
            serial = tracker.serial_of.get(id(storage))
            if serial is not None:
                new = storage.nbytes()
                tracker.current += new - tracker.live[serial]
                tracker.live[serial] = new
                tracker._touch()
                tracker._snapshot_if_peak()
            return result

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *args):
        torch.UntypedStorage.resize_ = self._orig_resize
        return super().__exit__(*args)

    # --- phases ---
    def begin(self, name: str) -> None:
        self.end()
        self.phase = name
        self.phases[name] = {"start": self.current, "peak": self.current, "at_peak": dict(self.live)}

    def end(self) -> None:
        phase = self.phases.get(self.phase)
        if phase is not None:
            self._snapshot_if_peak()
            phase["end"] = self.current
        self.phase = None

    def breakdown(self, name: str, labels: dict[int, str], top: int = 6) -> dict:
        """The phase's peak split by label (serial -> label; unlabelled is "other"), with its largest
        unlabelled storages described."""
        at_peak = self.phases[name]["at_peak"]
        parts: dict[str, int] = {}
        others = []
        for serial, size in at_peak.items():
            label = labels.get(serial, "other")
            parts[label] = parts.get(label, 0) + size
            if label == "other" and size:
                others.append((size, serial))
        others.sort(reverse=True)
        largest = [{"bytes": size, "op": self.info[serial][0], "shape": list(self.info[serial][1]),
                    "dtype": self.info[serial][2]} for size, serial in others[:top]]
        return {"parts": dict(sorted(parts.items())), "largest_other": largest}
