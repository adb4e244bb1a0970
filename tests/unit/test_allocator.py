"""The caching-allocator simulator against sequences whose figures follow by hand from CUDACachingAllocator.cpp's rules
(each test writes its derivation), and against traces recorded on a GPU (tests/data/gpu/)."""

import functools
import gzip
import json
import random
import time
from pathlib import Path

import pytest

from zeromem_lsp.gpu.allocator import (
    MIB, Allocator, OutOfMemory, allocation_size, replay, round_size, roundup_power2_next_division,
)

KIB = 1 << 10
DATA = Path(__file__).parent.parent / "data" / "gpu"


def test_round_size():
    # round_size: < kMinBlockSize (512) -> 512; else the next multiple of 512
    assert [round_size(n) for n in (1, 511, 512, 513, 1025)] == [512, 512, 512, 1024, 1536]
    # roundup_power2_divisions:4: 1200 lies in [1024, 2048), steps of 256 -> 1280 (the C++ comment's own example);
    # only above kMinBlockSize * 4 = 2048, so 1200 itself keeps the 512 rounding (1536)
    assert roundup_power2_next_division(1200, 4) == 1280
    assert round_size(1200, 4) == 1536
    # 5 MiB + 1 with 4 divisions: [4 MiB, 8 MiB) in steps of 1 MiB -> 6 MiB; a power of two stays
    assert round_size(5 * MIB + 1, 4) == 6 * MIB
    assert round_size(8 * MIB, 4) == 8 * MIB
    # per-interval list (index 0: below 2 MiB, index k: [2^(20+k), 2^(21+k))): 5 MiB + 1 is index 2; with 8
    # divisions the steps are 512 KiB -> 5.5 MiB; 9 MiB + 1 is index 3, which has no entry left -> the last (8):
    # steps of 1 MiB -> 10 MiB
    assert round_size(5 * MIB + 1, [0, 0, 8]) == 5 * MIB + 512 * KIB
    assert round_size(9 * MIB + 1, [0, 0, 8]) == 10 * MIB


def test_allocation_size():
    # get_allocation_size: small -> kSmallBuffer; (1 MiB, 10 MiB) -> kLargeBuffer; else up to kRoundLarge
    assert allocation_size(MIB) == 2 * MIB
    assert allocation_size(MIB + 512) == 20 * MIB
    assert allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB
    assert allocation_size(10 * MIB + 512) == 12 * MIB


def test_small_pool_packs_2mib_segments():
    a = Allocator()
    # 4 requests of 600 KiB: round_size keeps 600 KiB (a multiple of 512); the small pool; a 2 MiB segment holds
    # three (1800 KiB, 248 KiB left, split off since >= 512), the fourth needs a second 2 MiB segment
    handles = [a.malloc(600 * KIB) for _ in range(4)]
    assert (a.reserved, a.allocated) == (4 * MIB, 4 * 600 * KIB)
    # a 200 KiB request fits the 248 KiB remainder of the first segment (best fit: 248 KiB < 1448 KiB): no new segment
    a.malloc(200 * KIB)
    assert a.reserved == 4 * MIB
    # freeing the first segment's three 600 KiB blocks merges them into one free 1800 KiB block; the 200 KiB block
    # still sits between it and the 48 KiB tail, which stays apart; the second segment's 1448 KiB rest is free
    for h in handles[:3]:
        a.free(h)
    sizes = sorted(b.size for b in a.free_blocks(small=True))
    assert sizes == [48 * KIB, 1448 * KIB, 1800 * KIB]
    a.check()


def test_large_pool_20mib_segment_and_split_threshold():
    a = Allocator()
    # 3 MiB: large pool, < kMinLargeAlloc -> a 20 MiB segment; remaining 17 MiB > kSmallSize -> split
    x = a.malloc(3 * MIB)
    assert (a.reserved, a.allocated) == (20 * MIB, 3 * MIB)
    # 16.5 MiB: best fit is the 17 MiB remainder; the rest (0.5 MiB) is not > kSmallSize -> no split, the whole
    # 17 MiB block is handed out and counted in allocated_bytes
    y = a.malloc(16 * MIB + 512 * KIB)
    assert (a.reserved, a.allocated) == (20 * MIB, 20 * MIB)
    # 12 MiB + 1: >= kMinLargeAlloc -> its own segment rounded to kRoundLarge: 14 MiB
    z = a.malloc(12 * MIB + 1)
    assert (a.reserved, a.allocated) == (34 * MIB, 20 * MIB + 12 * MIB + 512)
    for h in (x, y, z):
        a.free(h)
    assert (a.reserved, a.allocated, a.max_reserved, a.max_allocated) == (34 * MIB, 0, 34 * MIB, 32 * MIB + 512)
    # empty_cache: both segments are unsplit again (merged) -> both released
    a.empty_cache()
    assert a.reserved == 0


def test_best_fit_and_no_reuse_across_streams():
    a = Allocator()
    big = a.malloc(40 * MIB)
    small = a.malloc(24 * MIB)
    a.free(big)
    a.free(small)
    # 22 MiB: best fit is the 24 MiB block (not the 40 MiB one); remaining 2 MiB > 1 MiB -> split
    h = a.malloc(22 * MIB)
    assert h == small and a.reserved == 64 * MIB
    # the same request on another stream cannot use stream 0's cached 40 MiB: a new 22 MiB segment
    a.malloc(22 * MIB, stream=7)
    assert a.reserved == 86 * MIB


def test_split_blocks_keep_their_segment_until_whole():
    a = Allocator()
    x, y = a.malloc(5 * MIB), a.malloc(5 * MIB)  # one 20 MiB segment: x, y, 10 MiB free
    a.free(x)
    a.empty_cache()  # the segment is split (y alive): nothing released
    assert a.reserved == 20 * MIB
    a.free(y)  # y merges with x's 5 MiB and the 10 MiB tail: one unsplit 20 MiB block
    a.empty_cache()
    assert a.reserved == 0


def test_fragmentation_needs_new_segment():
    a = Allocator()
    # four 5 MiB blocks fill one 20 MiB segment exactly (the last takes the 5 MiB rest: 0 left, no split)
    hs = [a.malloc(5 * MIB) for _ in range(4)]
    a.free(hs[0])
    a.free(hs[2])
    # 10 MiB free in two separate 5 MiB holes: a 6 MiB request fits neither -> a new 20 MiB segment
    a.malloc(6 * MIB)
    assert (a.reserved, a.allocated) == (40 * MIB, 16 * MIB)


def test_max_split_size():
    a = Allocator(max_split_size=30 * MIB)
    x = a.malloc(40 * MIB)
    a.free(x)
    # a 5 MiB request may not take the oversize (>= max_split_size) 40 MiB block: a new 20 MiB segment
    a.malloc(5 * MIB)
    assert a.reserved == 60 * MIB
    # a 32 MiB request may take it (40 < 32 + max_non_split_rounding 20), whole: size >= max_split_size -> no split
    a.malloc(32 * MIB)
    assert (a.reserved, a.allocated) == (60 * MIB, 45 * MIB)


def test_expandable_segments_map_pages_on_demand():
    a = Allocator(expandable=True)
    # 5 MiB: large pool; the segment maps the rounded request in 20 MiB pages: 1 page, not get_allocation_size
    x = a.malloc(5 * MIB)
    assert a.reserved == 20 * MIB
    # 30 MiB: the free 15 MiB after x plus the unmapped tail: map 15 MiB more -> one more 20 MiB page (40 MiB);
    # the block grows to 35 MiB, 5 MiB split off (expandable: split when >= 512)
    a.malloc(30 * MIB)
    assert (a.reserved, a.allocated) == (40 * MIB, 35 * MIB)
    # a 100 MiB tensor: the 5 MiB free tail + 95 MiB more mapped -> 5 pages (100 MiB) more: 140 MiB reserved
    z = a.malloc(100 * MIB)
    assert a.reserved == 140 * MIB
    # free x (5 MiB at the start, no whole page) and z: empty_cache unmaps whole free pages only: z's 100 MiB block
    # plus the 5 MiB before it cover [35, 140) MiB: pages 2..6 (40..140 MiB) unmapped, [35, 40) stays
    a.free(x)
    a.free(z)
    a.empty_cache()
    assert (a.reserved, a.allocated) == (40 * MIB, 30 * MIB)
    a.check()


def test_expandable_small_pool_uses_2mib_pages():
    a = Allocator(expandable=True)
    hs = [a.malloc(700 * KIB) for _ in range(3)]
    # 700 KiB -> small pool; the first maps one 2 MiB page; the second fits in the 1348 KiB rest; the third needs
    # 700 KiB: 648 KiB free + 1 more page (the mapped range grows to 4 MiB)
    assert a.reserved == 4 * MIB
    for h in hs:
        a.free(h)
    a.empty_cache()
    assert a.reserved == 0 and not a.segments


def test_expandable_vs_fixed_reserved_on_growing_batches():
    # batches that grow by one row each step (the Note [Expandable Segments] case): 12 MiB, 14 MiB, 16 MiB tensors.
    # Fixed segments: each request >= 10 MiB gets its own cudaMalloc rounded to 2 MiB and none fits a freed smaller
    # one: 12 + 14 + 16 = 42 MiB reserved. Expandable: all in one segment, 20 MiB pages; 12 MiB maps 1 page (20);
    # freed, 14 MiB fits the free 20 MiB block; freed, 16 MiB fits too: 20 MiB reserved.
    fixed, grows = Allocator(), Allocator(expandable=True)
    for n in (12, 14, 16):
        for a in (fixed, grows):
            a.free(a.malloc(n * MIB))
    assert (fixed.reserved, grows.reserved) == (42 * MIB, 20 * MIB)


def test_capacity_releases_cache_before_oom():
    a = Allocator(capacity=64 * MIB)
    a.free(a.malloc(40 * MIB))
    # 30 MiB: the cached 40 MiB block fits (best fit), split: 10 MiB rest > 1 MiB
    a.free(a.malloc(30 * MIB))
    # 50 MiB: no block; cudaMalloc(50) would pass 64 MiB with 40 reserved -> release_cached_blocks frees the whole
    # 40 MiB segment, retry succeeds: 50 MiB reserved
    a.malloc(50 * MIB)
    assert (a.reserved, a.max_reserved) == (50 * MIB, 50 * MIB)
    with pytest.raises(OutOfMemory):
        a.malloc(20 * MIB)


def test_replay_of_a_synthetic_trace():
    # record the simulator's own decisions, then replay the events: the same peaks
    src = Allocator()
    rng = random.Random(3)
    events, live = [], []
    for _ in range(2000):
        if live and rng.random() < 0.45:
            h, n = live.pop(rng.randrange(len(live)))
            src.free(h)
            events += [("free_requested", h, n, 0), ("free_completed", h, n, 0)]
        else:
            n = rng.choice([rng.randrange(1, 2 * MIB), rng.randrange(MIB, 64 * MIB)])
            h = src.malloc(n)
            live.append((h, n))
            events.append(("alloc", h, n, 0))
    r = replay(events)
    assert (r.max_reserved, r.max_allocated, r.end_reserved, r.end_allocated) == (
        src.max_reserved, src.max_allocated, src.reserved, src.allocated)
    assert r.same_address == r.allocs


def test_replay_is_fast():
    rng = random.Random(0)
    events, live = [], []
    addr = 0
    for _ in range(100_000):
        if live and rng.random() < 0.5:
            h, n = live.pop(rng.randrange(len(live)))
            events += [("free_requested", h, n, 0), ("free_completed", h, n, 0)]
        else:
            addr += 1
            n = rng.choice([rng.randrange(1, MIB), rng.randrange(MIB, 256 * MIB)])
            live.append((addr, n))
            events.append(("alloc", addr, n, 0))
    start = time.perf_counter()
    replay(events, expandable=False)
    replay(events, expandable=True)
    assert time.perf_counter() - start < 10.0  # ~0.5 s alone; generous for loaded CI machines


@functools.lru_cache(maxsize=1)
def _cases() -> tuple:
    return tuple(_read_cases())


def _read_cases():
    for path in sorted(DATA.glob("allocator_traces*.json.gz")):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        for case in doc["cases"]:
            if "max_reserved" in case:
                yield pytest.param(case, doc["device_total_memory"], id=case["id"])


@pytest.mark.parametrize(("case", "device_memory"), list(_cases()))
def test_replay_of_gpu_traces(case, device_memory):
    """Traces recorded on an H200 (torch 2.11, three training steps each, tests/data/gpu/): the replay reaches the
    recorded max_memory_reserved and max_memory_allocated exactly, makes as many segments (or mappings) as the GPU
    did and, with fixed segments, puts every allocation at the address the GPU used."""
    r = replay(case["events"], expandable=case["expandable_segments"], initial_segments=case["initial_segments"],
               device_memory=device_memory)
    assert (r.max_reserved, r.max_allocated) == (case["max_reserved"], case["max_allocated"])
    assert r.segment_allocs == r.recorded_segment_allocs
    if not case["expandable_segments"]:
        assert r.same_address == r.allocs


def test_the_recorded_traces_are_there():
    ids = [p.id for p in _cases()]
    assert len(ids) >= 20 and any(i.startswith("expandable:") for i in ids)
