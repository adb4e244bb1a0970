"""A simulator of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator`).

It keeps the allocator's own state (segments, blocks split out of them, the free blocks of each pool and stream ordered
by (size, address), the unmapped tails of expandable segments) and the two statistics `torch.cuda.memory_allocated()`
and `torch.cuda.memory_reserved()` read (`stats.allocated_bytes`, `stats.reserved_bytes`, aggregate), with their peaks.
Sizes are exact integers. Names below are the C++ ones, so each rule can be checked against the source (torch 2.11-2.13;
the sizing constants live in `c10/core/AllocatorConfig.h` since the config moved there):

- `round_size`: below kMinBlockSize (512) a request takes 512 bytes, otherwise it is rounded up to a multiple of 512,
  or, with `roundup_power2_divisions:N` (default off), above 512·N to the next of N equal steps between two powers of
  two (`roundup_power2_next_division`).
- `get_pool`: rounded sizes up to kSmallSize (1 MiB) go to the small pool, larger ones to the large pool; every pool is
  searched per stream (`BlockComparatorSize` orders by stream, then size, then address).
- `get_allocation_size`: what a new segment (`cudaMalloc`) holds: kSmallBuffer (2 MiB) for the small pool,
  `large_segment_size` (kLargeBuffer, 20 MiB by default) below kMinLargeAlloc (10 MiB), otherwise the request rounded
  up to kRoundLarge (2 MiB).
- `get_free_block`: best fit, the smallest cached block of the stream whose size is at least the rounded size (ties by
  lowest address); with max_split_size set, a block of max_split_size or more serves no smaller request and serves a
  larger one only if it exceeds it by less than `max_non_split_rounding_size` (20 MiB by default).
- `should_split`: the rest of a block is split off when it is at least kMinBlockSize in the small pool (or anywhere
  with expandable segments), and in the large pool when it is more than kSmallSize (and the request is below
  max_split_size): a large block up to 1 MiB too big is handed out whole, and counted whole in `allocated_bytes`.
- `free_block` / `try_merge_blocks`: a freed block merges with a free neighbour of the same segment; segments are never
  returned to the driver on free, only by `release_cached_blocks` (`torch.cuda.empty_cache()` or the retry after a
  failed `cudaMalloc`), which frees every unsplit cached segment and unmaps the whole free pages of expandable ones.
- `expandable_segments:True` (`find_expandable_block`, `map_block`, `try_allocate_expandable_block`, `unmap_block`):
  one virtual range per (stream, pool), 1 1/8 of the device's memory large, is mapped in pages of kSmallBuffer (small
  pool) or `large_segment_size` (large pool) only as far as the rounded request needs (the request, not
  `get_allocation_size`'s segment); `reserved` counts mapped pages. Unmapping happens only in `release_cached_blocks`.

Not modelled: CUDA graph private pools, `garbage_collection_threshold` (needs a memory fraction), IPC, per-block
`record_stream` events (a replayed trace's `free_requested` / `free_completed` pair stands for them).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

MIB = 1 << 20
K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = MIB  # kSmallSize: largest "small" allocation
K_SMALL_BUFFER = 2 * MIB  # kSmallBuffer: small allocations are packed in 2 MiB segments (and pages)
K_MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: allocations between 1 and 10 MiB use a large_segment_size segment
K_ROUND_LARGE = 2 * MIB  # kRoundLarge: larger allocations are rounded up to 2 MiB
K_LARGE_BUFFER = 20 * MIB  # kLargeBuffer: AcceleratorAllocatorConfig's large_segment_size_ default
UNLIMITED = (1 << 64) - 1  # max_split_size's default: std::numeric_limits<size_t>::max()
#: Virtual address space an expandable segment reserves when no device size is given: 1 1/8 of an H100's 80 GiB. Only
#: the ordering of candidates depends on it (an unmapped tail is always far larger than any mapped block).
DEFAULT_DEVICE_MEMORY = 80 * (1 << 30)


class OutOfMemory(Exception):
    """What `torch.OutOfMemoryError` is: no cached block fits and the device (`capacity`) cannot map or malloc more."""


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """`roundup_power2_next_division`: the next of `divisions` equal steps between the powers of two around size."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)  # power2_floor >> log2(divisions)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def divisions_for(size: int, divisions: int | Sequence[int]) -> int:
    """`AcceleratorAllocatorConfig::roundup_power2_divisions(size)`: one number for all sizes, or one per power-of-two
    interval from 1 MiB (index 0, also every smaller size) to 64 GiB (the last index, also every larger size)."""
    if isinstance(divisions, int):
        return divisions
    if not divisions:
        return 0
    index = min(max(size.bit_length() - 1 - 20, 0), len(divisions) - 1)
    return divisions[index]


def round_size(size: int, divisions: int | Sequence[int] = 0) -> int:
    """`round_size`: the bytes a request of `size` bytes takes in a block."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    n = divisions_for(size, divisions)
    if n > 1 and size > K_MIN_BLOCK_SIZE * n:
        return roundup_power2_next_division(size, n)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def allocation_size(size: int, large_segment_size: int = K_LARGE_BUFFER) -> int:
    """`get_allocation_size`: the segment a new `cudaMalloc` makes for a rounded request of `size` bytes."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return large_segment_size
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Segment:
    """An expandable segment (`ExpandableSegment`): a reserved virtual range of `pages` pages of `page` bytes, of which
    the pages in `mapped` are backed by physical memory."""

    __slots__ = ("base", "page", "pages", "mapped", "stream", "small")

    def __init__(self, base: int, page: int, pages: int, stream: int, small: bool) -> None:
        self.base, self.page, self.pages, self.stream, self.small = base, page, pages, stream, small
        self.mapped: set[int] = set()

    @property
    def size(self) -> int:
        return self.page * self.pages


class Block:
    """`Block`: a piece of a segment, allocated or free, mapped or (expandable segments) not."""

    __slots__ = ("ptr", "size", "requested", "stream", "small", "allocated", "pending", "mapped", "prev", "next",
                 "segment")

    def __init__(self, ptr: int, size: int, stream: int, small: bool, segment: Segment | None = None) -> None:
        self.ptr, self.size, self.stream, self.small, self.segment = ptr, size, stream, small, segment
        self.requested = 0
        self.allocated = False
        self.pending = False  # freed by the program, its stream uses not yet completed (event_count > 0)
        self.mapped = True
        self.prev: Block | None = None
        self.next: Block | None = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "pending" if self.pending else "free" if self.mapped else "unmapped"
        return f"Block({self.ptr:#x}, {self.size}, {state})"


def _free(block: Block | None) -> bool:
    """`allocatable` / the test at the top of `try_merge_blocks`: a neighbour nobody holds."""
    return block is not None and not block.allocated and not block.pending


class Allocator:
    """One device's caching allocator. `malloc(size, stream)` returns a handle (the block's address) for `free`.

    Settings are PYTORCH_CUDA_ALLOC_CONF's: `expandable` (expandable_segments), `max_split_size`
    (max_split_size_mb, in bytes here), `max_non_split_rounding_size`, `roundup_power2_divisions`,
    `large_segment_size`. `capacity` (bytes the process may reserve; None: unlimited) makes a request that cannot be
    met release cached segments and retry as `malloc` does, then raise OutOfMemory. `device_memory` sizes the virtual
    range of an expandable segment. `address` (optional) picks the address of a new `cudaMalloc` of n bytes (a trace
    replay passes the recorded one); by default addresses grow."""

    def __init__(self, expandable: bool = False, *, max_split_size: int = UNLIMITED,
                 max_non_split_rounding_size: int = K_LARGE_BUFFER, roundup_power2_divisions: int | Sequence[int] = 0,
                 large_segment_size: int = K_LARGE_BUFFER, capacity: int | None = None,
                 device_memory: int = DEFAULT_DEVICE_MEMORY, address: Callable[[int], int | None] | None = None) -> None:
        self.expandable = expandable
        self.max_split_size = max_split_size
        self.max_non_split_rounding_size = max_non_split_rounding_size
        self.divisions = roundup_power2_divisions
        self.large_segment_size = large_segment_size
        self.capacity = capacity
        self.device_memory = device_memory
        self.address = address
        # free mapped blocks per (small pool?, stream), sorted by (size, ptr): BlockPool::blocks
        self._blocks: dict[tuple[bool, int], list[tuple[int, int, Block]]] = {}
        # unmapped pieces of expandable segments per (small pool?, stream), sorted by ptr: BlockPool::unmapped
        self._unmapped: dict[tuple[bool, int], list[tuple[int, Block]]] = {}
        self.active: dict[int, Block] = {}  # allocated (or pending) blocks by address
        self.segments: list[Segment] = []  # live expandable segments
        self._next_address = 1 << 40
        self._ranges: list[tuple[int, int]] = []  # live segments' address ranges (expandable: the whole VA)
        self.allocated = 0
        self.reserved = 0
        self.max_allocated = 0
        self.max_reserved = 0
        self.requested = 0  # stats.requested_bytes: the requests' own sizes
        self.num_segments = 0  # stats.segment: cudaMalloc'd segments alive (expandable: not counted, as in torch)
        self.num_device_alloc = 0  # cudaMalloc / map calls
        self.num_device_free = 0
        self.num_ooms = 0

    # ----- statistics
    def _reserve(self, n: int) -> None:
        self.reserved += n
        if self.reserved > self.max_reserved:
            self.max_reserved = self.reserved

    def reset_peak(self) -> None:
        """`resetPeakStats`: peaks restart from the current figures (torch.cuda.reset_peak_memory_stats)."""
        self.max_allocated, self.max_reserved = self.allocated, self.reserved

    # ----- the sorted pools
    def _insert(self, block: Block) -> None:
        insort(self._blocks.setdefault((block.small, block.stream), []), (block.size, block.ptr, block))

    def _erase(self, block: Block) -> None:
        blocks = self._blocks[(block.small, block.stream)]
        i = bisect_left(blocks, (block.size, block.ptr))
        if i == len(blocks) or blocks[i][2] is not block:
            raise AssertionError(f"{block!r} is not in its pool")
        del blocks[i]

    def _insert_unmapped(self, block: Block) -> None:
        insort(self._unmapped.setdefault((block.small, block.stream), []), (block.ptr, block))

    def _erase_unmapped(self, block: Block) -> None:
        unmapped = self._unmapped[(block.small, block.stream)]
        i = bisect_left(unmapped, (block.ptr,))
        if i == len(unmapped) or unmapped[i][1] is not block:
            raise AssertionError(f"{block!r} is not among the unmapped")
        del unmapped[i]

    def free_blocks(self, small: bool | None = None) -> list[Block]:
        """The cached (free, mapped) blocks, in the allocator's order."""
        return [entry[2] for (is_small, _), blocks in sorted(self._blocks.items())
                for entry in blocks if small is None or is_small == small]

    # ----- malloc
    def malloc(self, size: int, stream: int = 0) -> int:
        """`DeviceCachingAllocator::malloc`: a block for `size` bytes on `stream`; returns its address."""
        if size <= 0:
            raise ValueError("a zero-byte tensor takes no block (allocate() returns nullptr)")
        rounded = round_size(size, self.divisions)
        small = rounded <= K_SMALL_SIZE
        block = self._get_free_block(rounded, small, stream)
        if block is None:  # alloc_block, then release oversize cached segments, then all of them, retrying
            block = self._alloc_block(rounded, small, stream)
            if block is None and self._release_available_cached_blocks(rounded, small, stream):
                block = self._alloc_block(rounded, small, stream)
            if block is None:
                self.release_cached_blocks()
                block = self._alloc_block(rounded, small, stream)
            if block is None:
                self.num_ooms += 1
                raise OutOfMemory(f"cannot allocate {size} bytes: {self.reserved} reserved, "
                                  f"{self.allocated} allocated, capacity {self.capacity}")
        return self._alloc_found_block(block, rounded, size, self._should_split(block, rounded))

    def _get_free_block(self, size: int, small: bool, stream: int) -> Block | None:
        blocks = self._blocks.get((small, stream))
        if not blocks:
            return None
        i = bisect_left(blocks, (size,))
        if i == len(blocks):
            return None
        block = blocks[i][2]
        if block.segment is not None:
            if self.expandable:
                # best fit counts what an expandable block could grow to: its size plus an unmapped tail after it
                def grows(b: Block) -> int:
                    return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
                while (block.segment is not None and i + 1 < len(blocks)
                       and grows(blocks[i + 1][2]) < grows(block)):
                    i += 1
                    block = blocks[i][2]
            else:  # expandable segments turned off after some were made: only ordinary blocks
                i += 1
                while i < len(blocks) and blocks[i][2].segment is not None:
                    i += 1
                if i == len(blocks):
                    return None
                block = blocks[i][2]
        if size < self.max_split_size and block.size >= self.max_split_size:
            return None
        if size >= self.max_split_size and block.size >= size + self.max_non_split_rounding_size:
            return None
        del blocks[i]
        return block

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.small or self.expandable:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block: Block, size: int, requested: int, split: bool) -> int:
        if split:
            head = Block(block.ptr, size, block.stream, block.small, block.segment)
            head.prev, head.next = block.prev, block
            if block.prev is not None:
                block.prev.next = head
            block.prev = head
            block.ptr += size
            block.size -= size
            self._insert(block)
            block = head
        block.allocated = True
        block.requested = requested
        self.active[block.ptr] = block
        self.allocated += block.size
        if self.allocated > self.max_allocated:
            self.max_allocated = self.allocated
        self.requested += requested
        return block.ptr

    def _overlaps(self, ptr: int, size: int) -> bool:
        i = bisect_left(self._ranges, (ptr + size,))
        return i > 0 and self._ranges[i - 1][1] > ptr

    def _new_address(self, size: int) -> int:
        """The address of a new segment: the `address` hook's, unless the simulator still holds memory there."""
        ptr = self.address(size) if self.address is not None else None
        if ptr is None or self._overlaps(ptr, size):
            ptr = self._next_address
        self._next_address = max(self._next_address, ptr + size + K_ROUND_LARGE - 1) // K_ROUND_LARGE * K_ROUND_LARGE
        insort(self._ranges, (ptr, ptr + size))
        return ptr

    def _drop_range(self, base: int) -> None:
        i = bisect_left(self._ranges, (base,))
        assert i < len(self._ranges) and self._ranges[i][0] == base
        del self._ranges[i]

    def _alloc_block(self, size: int, small: bool, stream: int) -> Block | None:
        """`alloc_block`: a new segment (`cudaMalloc` of `get_allocation_size`), or with expandable segments more
        mapped pages (`try_allocate_expandable_block`)."""
        if self.expandable:
            return self._try_allocate_expandable_block(size, small, stream)
        alloc = allocation_size(size, self.large_segment_size)
        if self.capacity is not None and self.reserved + alloc > self.capacity:
            return None
        block = Block(self._new_address(alloc), alloc, stream, small)
        self._reserve(alloc)
        self.num_segments += 1
        self.num_device_alloc += 1
        return block

    # ----- expandable segments
    def _page(self, small: bool) -> int:
        return K_SMALL_BUFFER if small else self.large_segment_size

    def _find_expandable_block(self, size: int, small: bool, stream: int) -> Block:
        def room(b: Block | None) -> bool:  # has_available_address_space
            total = 0
            while total < size and _free(b):
                assert b is not None
                total += b.size
                b = b.next
            return total >= size
        for _, c in list(self._unmapped.get((small, stream), [])):
            if _free(c.prev):
                assert c.prev is not None
                c = c.prev
            if room(c):
                return c
        page = self._page(small)
        pages = -(-(self.device_memory + self.device_memory // 8) // page)
        segment = Segment(self._new_address(page * pages), page, pages, stream, small)
        self.segments.append(segment)
        candidate = Block(segment.base, segment.size, stream, small, segment)
        candidate.mapped = False
        self._insert_unmapped(candidate)
        return candidate

    def _map_block(self, block: Block, size: int) -> bool:
        segment = block.segment
        assert segment is not None and not block.mapped
        first = (block.ptr - segment.base) // segment.page
        last = -(-(block.ptr + size - segment.base) // segment.page)
        mapped = (last - first) * segment.page
        if self.capacity is not None and self.reserved + mapped > self.capacity:
            return False
        segment.mapped.update(range(first, last))
        self._erase_unmapped(block)
        block.mapped = True
        if mapped < block.size:
            rest = Block(block.ptr + mapped, block.size - mapped, block.stream, block.small, segment)
            rest.mapped = False
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            self._insert_unmapped(rest)
            block.size = mapped
        self._merge(block, block.prev)
        self._merge(block, block.next)
        self._insert(block)
        self._reserve(mapped)
        self.num_device_alloc += 1
        return True

    def _try_allocate_expandable_block(self, size: int, small: bool, stream: int) -> Block | None:
        candidate = self._find_expandable_block(size, small, stream)
        if not candidate.mapped and not self._map_block(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:
            following = candidate.next
            assert following is not None
            if not self._map_block(following, min(size - candidate.size, following.size)):
                return None
            candidate = following  # map_block merged the candidate into it
        self._erase(candidate)
        return candidate

    def _unmap_block(self, block: Block) -> None:
        segment = block.segment
        assert segment is not None
        first = -(-(block.ptr - segment.base) // segment.page)
        last = (block.ptr + block.size - segment.base) // segment.page
        if first >= last:
            return
        self._erase(block)
        start, length = segment.base + first * segment.page, (last - first) * segment.page
        segment.mapped.difference_update(range(first, last))
        if start > block.ptr:
            before = Block(block.ptr, start - block.ptr, block.stream, block.small, segment)
            before.prev, before.next = block.prev, block
            if block.prev is not None:
                block.prev.next = before
            block.prev = before
            self._insert(before)
        after_size = block.size - (start - block.ptr) - length
        if after_size > 0:
            after = Block(start + length, after_size, block.stream, block.small, segment)
            after.prev, after.next = block, block.next
            if block.next is not None:
                block.next.prev = after
            block.next = after
            self._insert(after)
        block.ptr, block.size, block.mapped = start, length, False
        self._merge(block, block.prev)
        self._merge(block, block.next)
        self._insert_unmapped(block)
        self.reserved -= length
        self.num_device_free += 1

    # ----- free
    def free(self, handle: int, *, completed: bool = True) -> None:
        """`free`: the block goes back to its pool (`free_block`) and merges with free neighbours. With
        completed=False only the program's side happens (`allocated_bytes` drops, the block stays out of the pool as
        while it waits on another stream's events); `complete_free` then returns it."""
        block = self.active.get(handle)
        if block is None or not block.allocated:
            raise KeyError(f"no allocated block at {handle:#x}")
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        if completed:
            self._free_block(block)
        else:
            block.pending = True

    def complete_free(self, handle: int) -> None:
        """`free_block` of a block whose stream uses completed (a trace's `free_completed`)."""
        block = self.active.get(handle)
        if block is None or not block.pending:
            raise KeyError(f"no block waiting at {handle:#x}")
        block.pending = False
        self._free_block(block)

    def _free_block(self, block: Block) -> None:
        del self.active[block.ptr]
        block.requested = 0
        self._merge(block, block.prev)
        self._merge(block, block.next)
        self._insert(block)

    def _merge(self, dst: Block, src: Block | None) -> int:
        """`try_merge_blocks`: dst takes over a neighbour that is free and mapped alike."""
        if not _free(src) or src is None or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            self._erase(src)
        else:
            self._erase_unmapped(src)
        if dst.prev is src:
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ----- releasing cached memory
    def _release_block(self, block: Block) -> None:
        """`release_block`: cudaFree of a whole cached segment."""
        self._erase(block)
        self._drop_range(block.ptr)
        self.reserved -= block.size
        self.num_segments -= 1
        self.num_device_free += 1

    def _release_available_cached_blocks(self, size: int, small: bool, stream: int) -> bool:
        """`release_available_cached_blocks`: with max_split_size set, free oversize cached segments, the smallest
        one that is large enough, or else the largest ones until enough is freed."""
        if self.max_split_size == UNLIMITED:
            return False
        blocks = self._blocks.get((small, stream), [])
        key = max(size, self.max_split_size)
        i = bisect_left(blocks, (key,))
        if i < len(blocks):
            self._release_block(blocks[i][2])
            return True
        released = 0
        i = len(blocks) - 1
        while i >= 0 and released < key and blocks[i][2].size >= self.max_split_size:
            released += blocks[i][2].size
            self._release_block(blocks[i][2])
            i -= 1
        return released >= key

    def release_cached_blocks(self) -> bool:
        """`release_cached_blocks` (torch.cuda.empty_cache()): every unsplit cached segment is freed, large pool
        first; every whole free page of an expandable segment is unmapped, and a segment left all unmapped goes."""
        for small in (False, True):
            to_unmap = []
            for (is_small, _), blocks in sorted(self._blocks.items()):
                if is_small != small:
                    continue
                for *_, block in list(blocks):
                    if block.segment is not None:
                        to_unmap.append(block)
                    elif not block.is_split():
                        self._release_block(block)
            for block in to_unmap:
                self._unmap_block(block)
                if not block.mapped and not block.is_split():
                    assert block.segment is not None
                    self._erase_unmapped(block)
                    self.segments.remove(block.segment)
                    self._drop_range(block.segment.base)
        return False  # malloc retries alloc_block next

    empty_cache = release_cached_blocks

    # ----- inspection
    def segments_view(self) -> list[dict[str, Any]]:
        """Like `torch.cuda.memory_snapshot()`: each segment (an expandable one: each mapped run) with its blocks."""
        heads = [b for b in self.active.values()] + [e[2] for bl in self._blocks.values() for e in bl]
        out = []
        for head in sorted(heads, key=lambda b: b.ptr):
            if head.prev is not None and head.prev.mapped:
                continue
            blocks: list[dict[str, Any]] = []
            b: Block | None = head
            while b is not None and b.mapped:
                blocks.append({"size": b.size, "requested_size": b.requested,
                               "state": "active_allocated" if b.allocated else
                               "active_pending_free" if b.pending else "inactive"})
                b = b.next
            out.append({"address": head.ptr, "total_size": sum(x["size"] for x in blocks), "stream": head.stream,
                        "segment_type": "small" if head.small else "large", "expandable": head.segment is not None,
                        "blocks": blocks})
        return out

    def check(self) -> None:
        """Invariants: reserved is the sum of the segments, allocated of the allocated blocks."""
        view = self.segments_view()
        assert sum(s["total_size"] for s in view) == self.reserved, (view, self.reserved)
        assert sum(b.size for b in self.active.values() if b.allocated) == self.allocated


# ----- replay of recorded traces
class Replay(NamedTuple):
    max_reserved: int
    max_allocated: int
    end_reserved: int
    end_allocated: int
    allocs: int  # alloc events replayed
    same_address: int  # of them, how many the simulator placed where the GPU did (non-expandable replays)
    segment_allocs: int  # segments (or mappings) the simulator made
    recorded_segment_allocs: int  # segment_alloc / segment_map events in the trace


def seed(allocator: Allocator, segments: Iterable[dict[str, Any]]) -> dict[int, int]:
    """Rebuild the state a snapshot's `segments` show (blocks in address order, each "active_allocated",
    "active_pending_free" or "inactive"); returns the recorded address of each allocated block → its handle. Segments
    without an "address" get fresh ones. A snapshot shows an expandable segment as one entry per mapped run: the runs
    of one (stream, pool) become one segment whose virtual range starts at the first run, with unmapped blocks
    between the runs and after the last."""
    handles: dict[int, int] = {}
    expandable: dict[tuple[int, bool], list[dict[str, Any]]] = {}

    def chain(prev: Block | None, block: Block) -> Block:
        block.prev = prev
        if prev is not None:
            prev.next = block
        return block

    def blocks_of(seg: dict[str, Any], base: int, stream: int, small: bool, segment: Segment | None,
                  prev: Block | None) -> Block | None:
        ptr = base
        for info in seg["blocks"]:
            block = chain(prev, Block(ptr, int(info["size"]), stream, small, segment))
            if info.get("state", "inactive") in ("active_allocated", "active_pending_free"):
                block.allocated = True
                block.requested = int(info.get("requested_size", info["size"]))
                allocator.active[ptr] = block
                allocator.allocated += block.size
                allocator.requested += block.requested
                handles[int(info.get("address", ptr))] = ptr
            else:
                allocator._insert(block)
            prev, ptr = block, ptr + block.size
        allocator.reserved += int(seg["total_size"])
        return prev

    for seg in sorted(segments, key=lambda s: int(s.get("address", 0))):
        small = seg.get("segment_type", "large") == "small"
        stream = int(seg.get("stream", 0))
        if seg.get("is_expandable") or seg.get("expandable"):
            expandable.setdefault((stream, small), []).append(seg)
            continue
        total = int(seg["total_size"])
        if "address" in seg:
            base = int(seg["address"])
            insort(allocator._ranges, (base, base + total))
            allocator._next_address = max(allocator._next_address, base + total)
        else:
            base = allocator._new_address(total)
        allocator.num_segments += 1
        blocks_of(seg, base, stream, small, None, None)
    for (stream, small), runs in expandable.items():
        page = allocator._page(small)
        pages = -(-(allocator.device_memory + allocator.device_memory // 8) // page)
        base = int(runs[0]["address"]) if "address" in runs[0] else allocator._new_address(page * pages)
        segment = Segment(base, page, pages, stream, small)
        allocator.segments.append(segment)
        if "address" in runs[0]:
            insort(allocator._ranges, (base, base + segment.size))
            allocator._next_address = max(allocator._next_address, base + segment.size)
        prev: Block | None = None
        ptr = base
        for run in runs:
            start = int(run.get("address", ptr))
            if start > ptr:  # an unmapped gap between two mapped runs
                gap = chain(prev, Block(ptr, start - ptr, stream, small, segment))
                gap.mapped = False
                allocator._insert_unmapped(gap)
                prev = gap
            total = int(run["total_size"])
            segment.mapped.update(range((start - base) // page, (start + total - base) // page))
            prev = blocks_of(run, start, stream, small, segment, prev)
            ptr = start + total
        tail = chain(prev, Block(ptr, base + segment.size - ptr, stream, small, segment))
        tail.mapped = False
        allocator._insert_unmapped(tail)
    allocator.reset_peak()
    return handles


def replay(events: Iterable[Sequence[Any]], *, expandable: bool = False,
           initial_segments: Iterable[dict[str, Any]] = (), lend_addresses: bool = True, **settings: Any) -> Replay:
    """Replay a recorded trace (`torch.cuda.memory._snapshot()["device_traces"]` entries as (action, addr, size,
    stream)) through the simulator from the state `initial_segments` shows. Allocations and frees drive it; the
    trace's own segment events only lend the GPU's addresses to new segments (so best fit breaks ties between equal
    blocks as the GPU did; `lend_addresses=False`: addresses of its own) and mark `empty_cache` calls (a segment_free /
    segment_unmap the simulator did not cause)."""
    pending: list[tuple[int, int]] = []

    def address(size: int) -> int | None:
        for i, (addr, n) in enumerate(pending):
            if n == size:
                del pending[i]
                return addr
        return None

    allocator = Allocator(expandable, address=address if lend_addresses else None, **settings)
    handles = seed(allocator, initial_segments)
    allocs = same = recorded = 0
    made = allocator.num_device_alloc
    released = False
    for action, addr, size, stream, *_ in events:
        if action == "alloc":
            released = False
            handle = allocator.malloc(int(size), int(stream))
            pending.clear()
            handles[int(addr)] = handle
            allocs += 1
            same += handle == int(addr)
        elif action == "free_requested":
            allocator.free(handles[int(addr)], completed=False)
        elif action == "free_completed":
            handle = handles.pop(int(addr))
            allocator.complete_free(handle)
        elif action in ("segment_alloc", "segment_map"):
            recorded += 1
            if action == "segment_alloc":
                pending.append((int(addr), int(size)))
        elif action in ("segment_free", "segment_unmap"):
            if not released:
                allocator.release_cached_blocks()
                released = True
    return Replay(allocator.max_reserved, allocator.max_allocated, allocator.reserved, allocator.allocated,
                  allocs, same, allocator.num_device_alloc - made, recorded)
