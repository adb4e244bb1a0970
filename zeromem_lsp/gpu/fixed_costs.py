"""What a training process holds on each GPU besides the caching allocator's segments, as tables with their sources.

Three costs, kept apart because they are paid in different places:

- the CUDA context (driver state, the loaded kernels' code): outside the allocator, never in `memory_reserved()`,
  visible in nvidia-smi. Its size depends on the driver, CUDA's module loading (lazy by default on Linux since CUDA
  12.2) and which libraries' kernels get loaded, so it is a documented range, not one number.
- NCCL's buffers per communicator (process group): outside the allocator too (NCCL allocates with cudaMalloc or cuMem
  itself). The Simple protocol's buffer per channel and connection is NCCL_BUFFSIZE; the whole per-communicator figure
  (all protocols, channels, NVLS) is only documented by measurement, so it is a range per interconnect.
- cuBLAS workspaces: taken from the caching allocator (`getNewWorkspace` allocates through
  `c10::cuda::CUDACachingAllocator`), so they are part of `memory_reserved()`; `reserved.py` puts them in the replayed
  allocation stream, and they are listed here only for their size.

Every row names its source; bytes are exact integers (a range is (low, high)).
"""

from __future__ import annotations

from typing import NamedTuple

KIB = 1 << 10
MIB = 1 << 20
MB = 1000 * 1000


class Source(NamedTuple):
    what: str  # what the figure is
    where: str  # the document, code or measurement it comes from


class Range(NamedTuple):
    low: int
    high: int
    source: Source


# ----- the CUDA context
#: Bytes one process's CUDA context holds on a device, by device generation (compute capability major). No vendor
#: documents a figure per generation; the rows carry the measured reports there are: Hopper from our own H200
#: measurement, the others PR #86509's range until a measurement of their own replaces it.
_CONTEXT_LAZY = Range(
    287_047_680, 666_632_192,
    Source("one PyTorch process's device memory after CUDA initialisation: 287,047,680 B with CUDA_MODULE_LOADING=LAZY "
           "(the low end), 666,632,192 B with eager loading (the high end: more kernels loaded, older CUDA)",
           "pytorch/pytorch PR #86509 ('[1.13] Sets CUDA_MODULE_LOADING to LAZY when not set by the user'), the PR's "
           "measurement; lazy loading is CUDA's default on Linux since 12.2 (NVIDIA developer forum, 'How to enable "
           "the CUDA's lazy module loading', citing the CUDA C Programming Guide's Lazy Loading section)"))
#: Measured on one NVIDIA H200 (torch 2.11.0, CUDA 13.0, driver 580.159.04; tests/data/gpu/fixed_costs_h200.json):
#: device memory in use (total - free, cudaMemGetInfo) after CUDA initialisation, 650,969,088 B; after cuBLAS's first
#: use 774,701,056 B, of which 56,623,104 B were the allocator's reserved segments: 718,077,952 B outside it.
_CONTEXT_H200 = Range(
    650_969_088, 774_701_056 - 56_623_104,
    Source("CUDA context of a PyTorch process on an H200: after CUDA init (low) and after cuBLAS init, the allocator's "
           "reserved bytes taken off (high)", "zeromem issue 31 measurement, tests/data/gpu/fixed_costs_h200.json"))
CONTEXT: dict[str, Range] = {
    "volta": _CONTEXT_LAZY,  # sm70
    "ampere": _CONTEXT_LAZY,  # sm80 / sm86
    "ada": _CONTEXT_LAZY,  # sm89
    "hopper": _CONTEXT_H200,  # sm90
    "blackwell": _CONTEXT_LAZY,  # sm100 / sm120
}
#: Device names → generation, for the GPUs recipes name (`gpu` setting, a trace's device_name).
GENERATION_OF: dict[str, str] = {
    "V100": "volta", "A100": "ampere", "A10": "ampere", "A40": "ampere", "A6000": "ampere", "RTX 3090": "ampere",
    "L4": "ada", "L40": "ada", "RTX 4090": "ada", "H100": "hopper", "H200": "hopper", "H800": "hopper",
    "GH200": "hopper", "B200": "blackwell", "GB200": "blackwell", "B100": "blackwell", "RTX 5090": "blackwell",
}


def generation(device_name: str) -> str | None:
    """The generation of a device name such as 'NVIDIA H200' (longest matching key wins: 'GH200' over 'H200')."""
    upper = device_name.upper()
    hits = [key for key in GENERATION_OF if key.upper() in upper]
    return GENERATION_OF[max(hits, key=len)] if hits else None


# ----- cuBLAS workspaces (through the caching allocator)
#: `parseChosenWorkspaceSize` (aten/src/ATen/cuda/CublasHandlePool.cpp): without CUBLAS_WORKSPACE_CONFIG the
#: workspace is ":4096:2:16:8" (2 × 4096 KiB + 8 × 16 KiB) except on sm90 (major 9, minor 0: Hopper), where it is
#: 4096 KiB × 8 = 32 MiB. cuBLASLt shares it (TORCH_CUBLASLT_UNIFIED_WORKSPACE is on unless set false), so no second
#: workspace is added for it. One workspace per (cuBLAS handle, stream) (`setWorkspaceForHandle`); handles are per
#: thread (`DeviceThreadHandlePool`).
CUBLAS_WORKSPACE: dict[str, Range] = {
    gen: Range(size, size, Source(f"default cuBLAS workspace on {gen}: {config}",
                                  "pytorch/pytorch aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize"))
    for gen, size, config in (
        ("volta", 2 * 4096 * KIB + 8 * 16 * KIB, ":4096:2:16:8"),
        ("ampere", 2 * 4096 * KIB + 8 * 16 * KIB, ":4096:2:16:8"),
        ("ada", 2 * 4096 * KIB + 8 * 16 * KIB, ":4096:2:16:8"),
        ("hopper", 8 * 4096 * KIB, ":4096:8 (sm90)"),
        ("blackwell", 2 * 4096 * KIB + 8 * 16 * KIB, ":4096:2:16:8 (only sm90 gets 32 MiB in the code read)"),
    )
}


def cublas_workspace(gen: str, config: str | None = None) -> int:
    """The workspace bytes for a CUBLAS_WORKSPACE_CONFIG value (':SIZE_KIB:COUNT' pairs, summed as torch sums them),
    or the generation's default."""
    if config:
        parts = [p for p in config.split(":") if p != ""]
        if len(parts) >= 2 and len(parts) % 2 == 0 and all(p.isdigit() for p in parts):
            return sum(int(parts[i]) * KIB * int(parts[i + 1]) for i in range(0, len(parts), 2))
    return CUBLAS_WORKSPACE[gen].low


#: Workspaces one training step creates: the Python thread's handle runs the forward's matmuls and the autograd
#: engine's device thread (a different thread, so a different handle from the per-thread pool) runs the backward's,
#: both on the current stream. An assumption read from the handle pool's design; a trace replay checks it.
WORKSPACES_PER_STEP = 2


# ----- NCCL
#: NCCL_BUFFSIZE's default: "the size of the buffer used by NCCL when communicating data between pairs of GPUs",
#: 4194304 B (NCCL User Guide, Environment Variables, NCCL_BUFFSIZE).
NCCL_BUFFSIZE = 4 * MIB

#: Measured device memory per NCCL communicator after its first collective, by interconnect. Ranges, because NCCL
#: sizes its buffers by channels (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS), protocols and algorithms for the topology
#: it finds, and memory grows linearly with channels (NCCL maintainer in NVIDIA/nccl #864 / #986).
NCCL_PER_COMMUNICATOR: dict[str, Range] = {
    "nvlink": Range(544 * MB, 688 * MB, Source(
        "4× A100 with NVLink, PyTorch process groups each running a 4 MB all-reduce: 544 MB for a 2-GPU group, "
        "688 MB for a group of 3 or 4", "NVIDIA/nccl issue #964 (measurement in the issue)")),
    "nvswitch_nvls": Range(688 * MB, 1600 * MB, Source(
        "NVSwitch systems with NVLink SHARP (NVLS, on by default where supported: NCCL_NVLS_ENABLE) take more: about "
        "1.6 GB for one communicator after an all-reduce; NVLS is disabled in NVIDIA's own launchers to save memory",
        "NVIDIA/nccl issue #864 (1.6 GB, one communicator); NVIDIA/NeMo-Framework-Launcher PR #127 'set "
        "NCCL_NVLS_ENABLE=0 for memory saving'; NVIDIA/JAX-Toolbox PR #383")),
    "one_rank": Range(1_357_709_312 - 751_632_384 - (54_525_952 - 33_554_432),
                      1_357_709_312 - 751_632_384 - (54_525_952 - 33_554_432), Source(
        "a 1-rank process group's communicator after one all-reduce on an H200 (NCCL 2.28.3): device memory in use "
        "grew by 606,076,928 B, of which 20,971,520 B were the caching allocator's: 585,105,408 B outside it",
        "zeromem issue 31 measurement, tests/data/gpu/fixed_costs_h200.json")),
    "pcie": Range(2 * 2 * NCCL_BUFFSIZE, 544 * MB, Source(
        "no published per-communicator measurement on PCIe found: from the Simple protocol's two ring connections "
        "(send, receive) of NCCL_BUFFSIZE on two channels, up to the NVLink figure", "NCCL User Guide NCCL_BUFFSIZE; "
        "NVIDIA/nccl #986 (ring: 2 connections per channel)")),
}


class FixedCosts(NamedTuple):
    """Per GPU: the context and NCCL outside the allocator (a range each), the cuBLAS workspace inside it."""
    context: Range
    nccl: Range
    communicators: int
    workspace: int  # one cuBLAS workspace (bytes); the replay allocates WORKSPACES_PER_STEP of them

    @property
    def outside_low(self) -> int:
        return self.context.low + self.communicators * self.nccl.low

    @property
    def outside_high(self) -> int:
        return self.context.high + self.communicators * self.nccl.high


def fixed_costs(device_name: str = "H100", ranks: int = 1, interconnect: str = "nvlink", communicators: int = 1,
                cublas_config: str | None = None) -> FixedCosts:
    """The fixed costs for one GPU of a run: no NCCL communicator on a single GPU."""
    gen = generation(device_name) or "hopper"
    nccl = NCCL_PER_COMMUNICATOR[interconnect]
    return FixedCosts(CONTEXT[gen], nccl, communicators if ranks > 1 else 0, cublas_workspace(gen, cublas_config))
