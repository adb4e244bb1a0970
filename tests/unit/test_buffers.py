"""ZeRO and FSDP buffers against numbers derived by hand from DeepSpeed's and Transformers' docs."""

import pytest

from zeromem_lsp.memory.buffers import DEEPSPEED_DEFAULTS, hf_auto_sizes, zero_buffers
from zeromem_lsp.configs.deepspeed.models import ZeroConfig


def test_overlap_comm_at_the_defaults_is_the_documented_9_gb():
    # Transformers' DeepSpeed guide: 5e8 elements × 2 bytes × 2 buckets × 4.5 = 9 GB
    assert zero_buffers(2, overlap_comm=True).total == 9_000_000_000


def test_overlap_comm_at_2e8_is_the_documented_3_6_gb():
    buffers = zero_buffers(2, reduce_bucket_size=200_000_000, allgather_bucket_size=200_000_000, overlap_comm=True)
    assert buffers.total == 3_600_000_000
    assert [part.rule for part in buffers.parts] == ["4.5 × 2 B × 200,000,000 (overlap_comm)"] * 2


def test_stage_1_and_2_default_to_no_overlap():
    # DeepSpeed: overlap_comm unset means stage == 3, so stages 1-2 hold one bucket of each
    for stage in (1, 2):
        assert zero_buffers(stage).total == 2 * 500_000_000 + 2 * 500_000_000
    assert zero_buffers(1, reduce_bucket_size=3, allgather_bucket_size=0, element_bytes=4).total == 12


def test_odd_element_sizes_round_up_once():
    # 4.5 × 1 B × 3 elements = 13.5 → 14 per bucket
    assert [part.bytes for part in zero_buffers(2, reduce_bucket_size=3, allgather_bucket_size=3,
                                                overlap_comm=True, element_bytes=1).parts] == [14, 14]


def test_stage_3_reduce_prefetch_and_live_parameters():
    buffers = zero_buffers(3)
    assert [(part.name, part.bytes) for part in buffers.parts] == [
        ("reduce_bucket_size", 1_000_000_000), ("stage3_prefetch_bucket_size", 100_000_000),
        ("stage3_max_live_parameters", 2_000_000_000)]
    assert buffers.total == 3_100_000_000


def test_stage_3_never_keeps_more_live_parameters_than_the_model_has():
    small = zero_buffers(3, parameters=124_439_808)  # GPT-2 small
    assert small.parts[2].bytes == 2 * 124_439_808
    assert "whole model" in small.parts[2].rule
    assert zero_buffers(3, stage3_max_live_parameters=10, parameters=124_439_808).parts[2].bytes == 20


def test_defaults_are_deepspeeds():
    section = ZeroConfig()
    assert DEEPSPEED_DEFAULTS["reduce_bucket_size"] == section.reduce_bucket_size
    assert DEEPSPEED_DEFAULTS["allgather_bucket_size"] == section.allgather_bucket_size
    assert DEEPSPEED_DEFAULTS["stage3_prefetch_bucket_size"] == section.prefetch_bucket_size
    assert DEEPSPEED_DEFAULTS["stage3_max_live_parameters"] == section.max_live_parameters
    assert DEEPSPEED_DEFAULTS["stage3_param_persistence_threshold"] == section.param_persistence_threshold


@pytest.mark.parametrize(("hidden", "reduce", "prefetch", "persistence"), [
    (4096, 16_777_216, 15_099_494, 40_960),  # Llama-3-8B: 0.9 × 16,777,216 = 15,099,494.4
    (768, 589_824, 530_841, 7_680),  # GPT-2: 0.9 × 589,824 = 530,841.6
    (10, 100, 90, 100),
])
def test_hf_auto_fill(hidden, reduce, prefetch, persistence):
    sizes = hf_auto_sizes(hidden)
    assert (sizes.reduce_bucket_size, sizes.stage3_prefetch_bucket_size,
            sizes.stage3_param_persistence_threshold) == (reduce, prefetch, persistence)


def test_bad_stage_is_refused():
    with pytest.raises(ValueError, match="stage"):
        zero_buffers(4)
