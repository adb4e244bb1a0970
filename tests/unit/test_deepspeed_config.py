"""Unit tests of the DeepSpeed 0.19.8 config models and validate_deepspeed (no DeepSpeed needed)."""

from __future__ import annotations

import json

import pytest

from zeromem_lsp.configs.deepspeed import models
from zeromem_lsp.configs.deepspeed.validation import (
    DEPRECATED_KEYS,
    ENGINE_LEVEL_KINDS,
    HF_AUTO_FILLED_PATHS,
    ISSUE_KINDS,
    KNOWN_TOP_LEVEL_KEYS,
    STRICT_SECTIONS,
    ConfigIssue,
    field_doc,
    section_keys,
    validate_deepspeed,
)

B = {"train_batch_size": 8}


def z(**zero):
    return {**B, "zero_optimization": zero}


def kinds(config, **kw):
    return [i.kind for i in validate_deepspeed(config, **kw)]


def errors(config, **kw):
    return [i for i in validate_deepspeed(config, **kw) if i.severity == "error"]


def only(config, kind, **kw):
    found = [i for i in validate_deepspeed(config, **kw) if i.kind == kind]
    assert len(found) == 1, validate_deepspeed(config, **kw)
    return found[0]


# ------------------------------------------------------------------------ clean configs

CLEAN = {
    "hf zero3 auto": {
        "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                  "weight_decay": "auto"}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                     "warmup_num_steps": "auto"}},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "overlap_comm": True,
            "contiguous_gradients": True,
            "sub_group_size": 1e9,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
            "stage3_max_live_parameters": 1e9,
            "stage3_max_reuse_distance": 1e9,
            "stage3_gather_16bit_weights_on_model_save": True,
        },
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "steps_per_print": 2000,
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "wall_clock_breakdown": False,
    },
    "plain zero2": {
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "allgather_bucket_size": 5e8},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4}},
        "zeromem": {"gpu_memory": "80GB"},
    },
    "minimal": {"train_micro_batch_size_per_gpu": 1},
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_configs_have_no_issue(name):
    assert validate_deepspeed(CLEAN[name]) == []


def test_issue_is_frozen_and_kinds_are_documented():
    issue = only(z(stage=4), "invalid_value")
    assert isinstance(issue, ConfigIssue)
    with pytest.raises(AttributeError):
        issue.kind = "x"  # type: ignore[misc]
    import zeromem_lsp.configs.deepspeed.validation as mod

    for kind, severity in ISSUE_KINDS.items():
        assert severity in ("error", "warning")
        assert kind in (mod.__doc__ or ""), kind
    assert ENGINE_LEVEL_KINDS <= set(ISSUE_KINDS)


# ------------------------------------------------------------------------ unknown keys


def test_unknown_key_in_strict_section_with_did_you_mean():
    issue = only(z(stage=3, stage3_prefetch_bucket_sz=1), "unknown_key")
    assert issue.severity == "error"
    assert issue.path == ("zero_optimization", "stage3_prefetch_bucket_sz")
    assert issue.target == "key"
    assert issue.replacement == "stage3_prefetch_bucket_size"
    assert "stage3_prefetch_bucket_sz" in issue.message and "Did you mean" in issue.message


def test_unknown_key_suggests_successor_of_deprecated_match():
    assert only(z(stage=3, cpu_offload_params=True), "unknown_key").replacement == "offload_param"


def test_unknown_key_far_from_anything_has_no_suggestion():
    issue = only({**B, "fp16": {"enabled": True, "completely_different": 1}}, "unknown_key")
    assert issue.replacement is None and "Did you mean" not in issue.message


@pytest.mark.parametrize("config,path", [
    (z(stage=3, offload_param={"device": "cpu", "pin_memroy": True}), ("zero_optimization", "offload_param",
                                                                       "pin_memroy")),
    (z(leaf_module={"clases": []}), ("zero_optimization", "leaf_module", "clases")),
    ({**B, "bf16": {"enable": True}}, ("bf16", "enable")),
    ({**B, "hybrid_engine": {"max_tokens": 1}}, ("hybrid_engine", "max_tokens")),
    ({**B, "compile": {"deep_compile": True}}, ("compile", "deep_compile")),
    ({**B, "weight_quantization": {"bits": 4}}, ("weight_quantization", "bits")),
    ({**B, "timers": {"throughput": {"enable": True}}}, ("timers", "throughput", "enable")),
    ({**B, "tensorboard": {"outputpath": "x"}}, ("tensorboard", "outputpath")),
])
def test_unknown_key_paths_in_every_strict_section(config, path):
    assert only(config, "unknown_key").path == path


def test_unknown_keys_outside_strict_sections_are_fine():
    config = {**B, "optimizer": {"type": "Adam", "params": {"lr": 1, "foo": 2}}, "activation_checkpointing":
              {"whatever": 1}, "zeromem": {"anything": True}}
    assert validate_deepspeed(config) == []


# ------------------------------------------------------------------------ aliases


def test_alias_and_bare_name_both_accepted():
    assert validate_deepspeed(z(stage=3, max_live_parameters=1, stage3_max_reuse_distance=5)) == []
    assert validate_deepspeed(z(stage=3, gather_16bit_weights_on_model_save=True)) == []


def test_alias_and_bare_name_together_is_an_error():
    issue = only(z(stage=3, max_live_parameters=1, stage3_max_live_parameters=2), "alias_conflict")
    assert issue.severity == "error"
    assert issue.path == ("zero_optimization", "max_live_parameters")
    assert issue.replacement == "stage3_max_live_parameters"


def test_error_path_uses_the_name_the_user_wrote():
    assert only(z(max_live_parameters=-1), "invalid_value").path == ("zero_optimization", "max_live_parameters")
    assert only(z(stage3_max_live_parameters=-1), "invalid_value").path == (
        "zero_optimization", "stage3_max_live_parameters")


# ------------------------------------------------------------------------ values


@pytest.mark.parametrize("config,path", [
    (z(stage=4), ("zero_optimization", "stage")),
    (z(stage="three"), ("zero_optimization", "stage")),
    (z(reduce_bucket_size=0), ("zero_optimization", "reduce_bucket_size")),
    (z(reduce_bucket_size=5.5), ("zero_optimization", "reduce_bucket_size")),
    (z(sub_group_size=-1), ("zero_optimization", "sub_group_size")),
    (z(overlap_comm="yes please"), ("zero_optimization", "overlap_comm")),
    (z(stage=3, offload_param={"device": "CPU"}), ("zero_optimization", "offload_param", "device")),
    (z(stage=3, offload_optimizer={"device": "cpu", "ratio": 1.5}),
     ("zero_optimization", "offload_optimizer", "ratio")),
    ({**B, "fp16": {"loss_scale": -1}}, ("fp16", "loss_scale")),
    ({**B, "fp16": {"initial_scale_power": 2.5}}, ("fp16", "initial_scale_power")),
    ({**B, "hybrid_engine": {"max_out_tokens": 0}}, ("hybrid_engine", "max_out_tokens")),
    ({**B, "compile": {"passes": ["z2"]}}, ("compile", "passes", 0)),
    ({**B, "communication_data_type": "int8"}, ("communication_data_type",)),
    ({**B, "gradient_allreduce_op": "avg"}, ("gradient_allreduce_op",)),
    ({**B, "checkpoint": {"tag_validation": "bogus"}}, ("checkpoint", "tag_validation")),
    ({**B, "fp16": None}, ("fp16",)),
    ({**B, "zero_optimization": None}, ("zero_optimization",)),
])
def test_invalid_values(config, path):
    issue = only(config, "invalid_value")
    assert issue.severity == "error" and issue.path == path and issue.target == "value"


@pytest.mark.parametrize("config", [
    z(stage="3"), z(stage=3.0), z(reduce_bucket_size=5e8), z(reduce_bucket_size="500"),
    z(allgather_bucket_size=0), z(overlap_comm="yes"), {**B, "communication_data_type": "FP16"},
    {**B, "fp16": {"enabled": True, "loss_scale": 128, "loss_scale_window": 0}},
    z(stage=3, leaf_module={"classes": "a.B"}), z(stage=3, offload_param=None),
])
def test_values_deepspeed_accepts(config):
    assert errors(config) == []


def test_message_names_key_and_value():
    issue = only(z(stage=4), "invalid_value")
    assert "zero_optimization.stage" in issue.message and "4" in issue.message


def test_invalid_combination():
    issue = only(z(stage=3, compute_grad_norm=False), "invalid_combination")
    assert issue.path == ("zero_optimization", "compute_grad_norm")
    assert errors(z(stage=2, compute_grad_norm=False)) == []
    assert only({**B, "fp16": {"enabled": True, "loss_scale_window": 0}}, "invalid_combination").path == (
        "fp16", "loss_scale_window")
    assert "invalid_combination" in kinds({**B, "fp16": {"fp16_master_weights_and_grads": True}})
    assert "invalid_combination" not in kinds({**z(stage=1), "fp16": {"fp16_master_weights_and_grads": True}})
    assert "invalid_combination" in kinds({**z(stage=2), "bf16": {"bf16_optimizer_states": True}})
    assert "invalid_combination" in kinds({**z(stage=3), "gradient_allreduce_op": "SUM"})
    assert "invalid_combination" not in kinds({**z(stage=2), "gradient_allreduce_op": "sum"})


# ------------------------------------------------------------------------ precision


def test_fp16_and_bf16():
    issue = only({**B, "fp16": {"enabled": True}, "bf16": {"enabled": True}}, "fp16_and_bf16")
    assert issue.severity == "error"
    assert "fp16_and_bf16" in kinds({**B, "fp16": {"enabled": True}, "bfloat16": {"enabled": True}})
    assert "fp16_and_bf16" not in kinds({**B, "fp16": {"enabled": True}, "bf16": {"enabled": False}})
    assert "fp16_and_bf16" not in kinds({**B, "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})


def test_legacy_bfloat16():
    issue = only({**B, "bfloat16": {"enabled": True}}, "deprecated_key")
    assert issue.severity == "warning" and issue.replacement == "bf16"
    # bf16 present: bfloat16 is ignored entirely (even its unknown keys)
    config = {**B, "bf16": {"enabled": False}, "bfloat16": {"enabled": True, "x": 1}}
    assert errors(config) == [] and "deprecated_key" in kinds(config)
    # bf16 null: DeepSpeed falls back to bfloat16
    assert "unknown_key" in kinds({**B, "bf16": None, "bfloat16": {"x": 1}})
    # "auto" in the legacy block: HF Transformers and Accelerate add a bf16 block of their own from their mixed
    # precision (accelerate DeepSpeedPlugin.set_mixed_precision), which DeepSpeed reads first: no claim that DeepSpeed's
    # default False runs, the rename says why
    auto = kinds({**B, "bfloat16": {"enabled": "auto"}})
    assert "auto_not_filled" not in auto and "deprecated_key" in auto
    assert "'bf16' block" in only({**B, "bfloat16": {"enabled": "auto"}}, "deprecated_key").message


# ------------------------------------------------------------------------ deprecated keys


@pytest.mark.parametrize("old,new", [
    ("cpu_offload", "offload_optimizer"),
    ("cpu_offload_param", "offload_param"),
    ("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"),
])
def test_deprecated_key_warns_with_successor(old, new):
    issue = only(z(stage=3, **{old: True}), "deprecated_key")
    assert issue.severity == "warning" and issue.replacement == new and issue.path == ("zero_optimization", old)


def test_deprecated_pin_memory_has_no_direct_successor():
    issue = only(z(stage=3, cpu_offload_use_pin_memory=True, offload_param={"device": "cpu"}), "deprecated_key")
    assert issue.replacement is None
    assert errors(z(stage=3, cpu_offload_use_pin_memory=True, offload_param={"device": "cpu"})) == []


@pytest.mark.parametrize("config", [
    z(stage=2, cpu_offload=True, offload_optimizer={"device": "cpu"}),
    z(stage=2, cpu_offload=False, offload_optimizer={"device": "cpu"}),
    z(stage=3, cpu_offload_param=True, offload_param={"device": "cpu"}),
    z(stage=3, stage3_gather_fp16_weights_on_model_save=True, gather_16bit_weights_on_model_save=False),
    z(stage=3, stage3_gather_fp16_weights_on_model_save=True, stage3_gather_16bit_weights_on_model_save=True),
])
def test_deprecated_with_replacement(config):
    issue = only(config, "deprecated_with_replacement")
    assert issue.severity == "error" and issue.target == "key"
    assert "deprecated_key" not in kinds(config)


def test_legacy_zero_true():
    issue = only({**B, "zero_optimization": True}, "deprecated_key")
    assert issue.path == ("zero_optimization",) and "stage 1" in issue.message
    assert errors({**B, "zero_optimization": True}) == []
    assert only({**B, "zero_optimization": True, "allgather_size": -5}, "invalid_value").path == (
        "allgather_size",)


# ------------------------------------------------------------------------ offload and stages


def test_partial_offload_below_stage3():
    issue = only(z(stage=2, offload_optimizer={"device": "cpu", "ratio": 0.5}), "partial_offload_below_stage3")
    assert issue.severity == "error" and issue.path == ("zero_optimization", "offload_optimizer", "ratio")
    assert "partial_offload_below_stage3" not in kinds(z(stage=3, offload_optimizer={"device": "cpu",
                                                                                    "ratio": 0.5}))
    assert "partial_offload_below_stage3" not in kinds(z(stage=2, offload_optimizer={"device": "cpu"}))


def test_offload_param_below_stage3():
    issue = only(z(stage=2, offload_param={"device": "cpu"}), "offload_param_below_stage3")
    assert issue.severity == "warning" and issue.path == ("zero_optimization", "offload_param")
    assert "offload_param_below_stage3" not in kinds(z(stage=3, offload_param={"device": "cpu"}))
    assert "offload_param_below_stage3" not in kinds(z(stage=1, offload_param={"device": "none"}))
    assert "offload_param_below_stage3" in kinds(z(stage=2, cpu_offload_param=True))


# ------------------------------------------------------------------------ removed features


@pytest.mark.parametrize("config,path", [
    ({**B, "sparse_attention": {"mode": "fixed"}}, ("sparse_attention",)),
    ({**B, "curriculum_learning": {"enabled": False}}, ("curriculum_learning",)),
    ({**B, "amp": {"enabled": "auto"}}, ("amp",)),
    ({**B, "compression_training": {}}, ("compression_training",)),
    ({**B, "quantize_training": {}}, ("quantize_training",)),
    (z(stage=3, mics_shard_size=8), ("zero_optimization", "mics_shard_size")),
    (z(stage=3, zeropp_loco_param={}), ("zero_optimization", "zeropp_loco_param")),
])
def test_removed_features(config, path):
    issue = only(config, "removed_feature")
    assert issue.severity == "error" and issue.path == path and issue.target == "key"
    assert "unknown_key" not in kinds(config)


# ------------------------------------------------------------------------ batch triple


def test_batch_missing():
    issue = only({"gradient_accumulation_steps": 2}, "batch_missing")
    assert issue.severity == "error"
    assert "batch_missing" in kinds({"steps_per_print": 1})
    assert "batch_missing" not in kinds({"train_micro_batch_size_per_gpu": "auto"})


@pytest.mark.parametrize("key", ["train_batch_size", "train_micro_batch_size_per_gpu",
                                 "gradient_accumulation_steps"])
def test_batch_non_positive(key):
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    config[key] = 0
    assert only(config, "batch_non_positive").path == (key,)


def test_batch_inconsistent_without_world_size():
    config = {"train_batch_size": 33, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    issue = only(config, "batch_inconsistent")
    assert "33" in issue.message
    ok = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    assert validate_deepspeed(ok) == []  # implies world size 4
    assert "batch_inconsistent" in kinds({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 3})
    assert "batch_inconsistent" in kinds({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 16})
    assert "batch_inconsistent" in kinds({"train_batch_size": 8, "gradient_accumulation_steps": 3})


def test_batch_with_world_size():
    ok = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    assert validate_deepspeed(ok, world_size=4) == []
    assert "batch_inconsistent" in kinds(ok, world_size=2)
    assert "batch_inconsistent" in kinds({"train_batch_size": 8}, world_size=3)
    assert validate_deepspeed({"train_batch_size": 8}, world_size=4) == []
    assert "batch_inconsistent" in kinds({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4},
                                         world_size=4)
    assert validate_deepspeed({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3},
                              world_size=7) == []


def test_batch_auto_is_unknown_and_bad_types_are_errors():
    config = {"train_batch_size": 33, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2}
    assert validate_deepspeed(config) == []
    assert only({"train_batch_size": "8"}, "invalid_value").path == ("train_batch_size",)
    assert only({"train_micro_batch_size_per_gpu": 2.5}, "suspicious_value").severity == "warning"


# ------------------------------------------------------------------------ "auto"


def test_auto_where_hf_fills_it_is_silent():
    config = {"train_batch_size": "auto", "gradient_clipping": "auto",
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    assert validate_deepspeed(config) == []
    for path in HF_AUTO_FILLED_PATHS:
        assert isinstance(path, tuple)


def test_auto_in_strict_section_is_dropped_with_a_warning():
    issue = only(z(contiguous_gradients="auto"), "auto_not_filled")
    assert issue.severity == "warning" and issue.path == ("zero_optimization", "contiguous_gradients")
    assert "True" in issue.message  # the default DeepSpeed falls back to
    # an unknown key with value "auto" is dropped before the strict check: not an error
    assert errors(z(bogus="auto", offload_param={"device": "auto"})) == []


def test_auto_stage_is_stage_0_for_a_plain_deepspeed_launch():
    # DeepSpeed drops "auto" inside zero_optimization, so the default stage 0 applies and the
    # stage-dependent rules fire; the stage itself gets a warning that says so.
    partial = z(stage="auto", offload_optimizer={"device": "cpu", "ratio": 0.5})
    assert [i.kind for i in errors(partial)] == ["partial_offload_below_stage3"]
    assert "stage 0 under a plain DeepSpeed launch" in errors(partial)[0].message
    warning = only(partial, "auto_not_filled")
    assert warning.path == ("zero_optimization", "stage") and "stage 0" in warning.message
    assert [i.path[-1] for i in errors(z(stage="auto", compute_grad_norm=False))] == ["compute_grad_norm"]
    master = {**z(stage="auto"), "fp16": {"enabled": True, "fp16_master_weights_and_grads": True}}
    assert [i.path for i in errors(master)] == [("fp16", "fp16_master_weights_and_grads")]
    assert "unknown_key" in kinds(z(stage="auto", bogus=1))


def test_auto_stage_filled_by_hf_is_judged_at_the_filled_stage():
    from zeromem_lsp.configs.deepspeed.catalog import HF_AUTO_STAGE

    assert HF_AUTO_STAGE == 2  # Accelerate's DeepSpeedPlugin: ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2
    assert errors(z(stage="auto", compute_grad_norm=False), stage_for_auto=HF_AUTO_STAGE) == []
    master = {**z(stage="auto"), "fp16": {"enabled": True, "fp16_master_weights_and_grads": True}}
    assert errors(master, stage_for_auto=HF_AUTO_STAGE) == []
    partial = errors(z(stage="auto", offload_optimizer={"device": "cpu", "ratio": 0.5}), stage_for_auto=2)
    assert [i.kind for i in partial] == ["partial_offload_below_stage3"]
    assert "is 2 here" in partial[0].message
    assert "auto_not_filled" not in kinds(z(stage="auto"), stage_for_auto=2)


def test_auto_elsewhere_warns():
    issue = only({**B, "steps_per_print": "auto"}, "auto_not_filled")
    assert issue.path == ("steps_per_print",)
    assert "auto_not_filled" in kinds({**B, "optimizer": {"type": "Adam", "params": {"amsgrad": "auto"}}})
    assert validate_deepspeed({**B, "pipeline": {"stages": "auto"}}) == []
    assert validate_deepspeed({**B, "data_types": {"keep_in_fp32_modules": "auto"}}) == []


def test_auto_as_a_whole_section():
    assert only({**B, "fp16": "auto"}, "invalid_value").path == ("fp16",)
    assert errors({**B, "tensorboard": "auto"}) == []


# ------------------------------------------------------------------------ top level


def test_top_level_near_miss():
    issue = only({**B, "train_batch_sise": 8}, "top_level_near_miss")
    assert issue.severity == "warning" and issue.replacement == "train_batch_size" and issue.target == "key"
    assert validate_deepspeed({**B, "my_own_block": {}, "zeromem": {}}) == []
    assert validate_deepspeed({**B, "comment": "not a typo of comet"}) == []
    assert only({**B, "gradient_acumulation_steps": 1}, "top_level_near_miss").replacement == (
        "gradient_accumulation_steps")


def test_known_top_level_keys():
    for key in ("train_batch_size", "gradient_clipping", "optimizer", "scheduler", "data_types",
                "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
                "communication_data_type", "prescale_gradients", "bfloat16", "zero_optimization"):
        assert key in KNOWN_TOP_LEVEL_KEYS
    assert "zeromem" not in KNOWN_TOP_LEVEL_KEYS


# ------------------------------------------------------------------------ optimizer (engine level)


def test_optimizer_checks():
    assert only({**B, "optimizer": {"type": "OneBitAdam"}}, "unknown_optimizer").severity == "warning"  # only deepspeed.initialize refuses it
    assert "unknown_optimizer" in kinds({**B, "optimizer": {"type": "AdamX"}})
    assert validate_deepspeed({**B, "optimizer": {"type": "SGD"}}) == []
    issue = only({**z(stage=2), "optimizer": {"type": "SGD"}}, "incompatible_optimizer")
    assert issue.path == ("optimizer", "type")
    assert validate_deepspeed({**z(stage=2), "optimizer": {"type": "SGD"},
                               "zero_allow_untested_optimizer": True}) == []
    assert validate_deepspeed({**z(stage=3), "optimizer": {"type": "ADAMW"}}) == []
    issue = only({**B, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1}}},
                 "unsupported_optimizer_param")
    assert issue.replacement == "gradient_clipping"


# ------------------------------------------------------------------------ world-size monotonicity


@pytest.mark.parametrize("t,m,g", [(8, 4, 2), (8, 4, None), (8, None, 2), (8, None, None), (None, 4, 2),
                                   (12, 3, 2), (24, 4, None)])
def test_unknown_world_size_never_reports_more_than_world_size_one(t, m, g):
    config = {k: v for k, v in (("train_batch_size", t), ("train_micro_batch_size_per_gpu", m),
                                ("gradient_accumulation_steps", g)) if v is not None}
    assert len(errors(config)) <= len(errors(config, world_size=1)) or errors(config, world_size=None) == []


# ------------------------------------------------------------------------ helpers for editors


def test_field_doc():
    doc = field_doc(("zero_optimization", "stage"))
    assert doc is not None and doc.default == 0 and doc.enum_values == (0, 1, 2, 3) and doc.strict
    doc = field_doc(("zero_optimization", "stage3_prefetch_bucket_size"))
    assert doc.default == 50_000_000 and doc.type == "integer" and "prefetch_bucket_size" in doc.aliases
    assert field_doc(["zero_optimization", "prefetch_bucket_size"]).default == 50_000_000
    doc = field_doc(("zero_optimization", "cpu_offload"))
    assert doc.is_deprecated and doc.replacement == "offload_optimizer"
    assert field_doc(("zero_optimization", "offload_param", "device")).enum_values == ("none", "cpu", "nvme")
    assert field_doc(("fp16", "initial_scale_power")).default == 16
    assert field_doc(("timers", "throughput", "enabled")).default is True
    assert field_doc(("gradient_clipping",)).default == 1.0
    assert field_doc(("zero_optimization", "nope")) is None
    assert field_doc(()) is None


def test_section_keys():
    keys = section_keys(("zero_optimization",))
    assert "stage" in keys and "stage3_max_live_parameters" in keys and "max_live_parameters" in keys
    assert keys[-1] in {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
                        "stage3_gather_fp16_weights_on_model_save"}
    assert section_keys(("zero_optimization", "offload_optimizer"))[:2] == ["buffer_count", "cpuadam_cores_perc"]
    assert section_keys(("optimizer",)) == []
    assert set(section_keys(())) == set(KNOWN_TOP_LEVEL_KEYS)


def test_deprecated_keys_table():
    assert DEPRECATED_KEYS[("zero_optimization", "cpu_offload")] == "offload_optimizer"
    assert DEPRECATED_KEYS[("bfloat16",)] == "bf16"


def test_every_field_has_a_description_and_schema_works():
    for model in set(STRICT_SECTIONS.values()) | {models.DeepSpeedTopLevel}:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name}"
    schema = models.DeepSpeedTopLevel.model_json_schema()
    json.dumps(schema)
    zero = schema["$defs"]["ZeroConfig"]
    assert zero["additionalProperties"] is False
    assert "stage3_prefetch_bucket_size" in zero["properties"] and "prefetch_bucket_size" in zero["properties"]
    assert zero["properties"]["reduce_bucket_size"]["exclusiveMinimum"] == 0


def test_models_directly():
    assert models.ZeroConfig.model_validate({"stage3_max_live_parameters": 5}).max_live_parameters == 5
    with pytest.raises(Exception):
        models.ZeroConfig.model_validate({"stage": 2, "offload_optimizer": {"ratio": 0.3}})


# ------------------------------------------- blocks DeepSpeedConfig reads by hand (.get / arithmetic)


@pytest.mark.parametrize("config, path", [
    ({**B, "flops_profiler": None}, ("flops_profiler",)),
    ({**B, "activation_checkpointing": "auto"}, ("activation_checkpointing",)),
    ({**B, "autotuning": [1]}, ("autotuning",)),
    ({**B, "data_efficiency": True}, ("data_efficiency",)),
    ({**B, "aio": "x"}, ("aio",)),
    ({**B, "expert_parallel": "on"}, ("expert_parallel",)),
    ({**B, "tensor_parallel": None}, ("tensor_parallel",)),
    ({**B, "wall_clock_breakdown": None}, ("wall_clock_breakdown",)),
    ({**B, "flops_profiler": {"enabled": "yes"}}, ("flops_profiler", "enabled")),
    ({**B, "vocabulary_size": "50257"}, ("vocabulary_size",)),
    ({**B, "communication_data_type": "auto"}, ("communication_data_type",)),
    ({**B, "gradient_allreduce_op": "auto"}, ("gradient_allreduce_op",)),
    ({**B, "checkpoint": {"writer": "fast"}}, ("checkpoint", "writer")),
    ({**B, "checkpoint": {"writer": {"type": "slow"}}}, ("checkpoint", "writer", "type")),
    ({**B, "optimizer": {"type": "AdamW", "params": {"max_grad_norm": "1.0"}}},
     ("optimizer", "params", "max_grad_norm")),
    ({**B, "expert_parallel": {"load_balance_coeff": 0.01}}, ("expert_parallel", "load_balance_coeff")),
    ({**B, "tensor_parallel": {"dtype": "bf16"}}, ("tensor_parallel", "dtype")),
])
def test_loose_blocks_refused(config, path):
    assert [i.path for i in errors(config)] == [path]
    assert errors(config)[0].kind == "invalid_value"


@pytest.mark.parametrize("config", [
    {**B, "aio": None},
    {**B, "expert_parallel": False},
    {**B, "wall_clock_breakdown": 1},
    {**B, "vocabulary_size": 50257},
    {**B, "checkpoint": {"writer": {"type": "python", "data_parallel": "socket"}}},
    {**B, "torch_autocast": {"lower_precision_safe_modules": {"torch.nn.Linear": 1}}},
    {**B, "tensor_parallel": {"autotp_size": 2, "tp": {"tp_size": "auto"}}},
    {"train_micro_batch_size_per_gpu": True},
])
def test_loose_blocks_accepted(config):
    assert not errors(config)


def test_tensor_parallel_is_strict():
    found = only({**B, "tensor_parallel": {"tp": {"tp_sise": 2}}}, "unknown_key")
    assert found.path == ("tensor_parallel", "tp", "tp_sise") and found.replacement == "tp_size"
    assert "tp_overlap_comm" in section_keys(("tensor_parallel",))


def test_boolean_batch_is_read_as_a_number():
    assert kinds({"train_batch_size": True}) == ["suspicious_value"]
    assert "batch_non_positive" in kinds({**B, "gradient_accumulation_steps": False})


@pytest.mark.parametrize("value", [float("inf"), "9" * 5000, None, [], {}, "1_000", " 8 ", 8.7, True])
def test_dynamic_batching_int_conversion_never_raises(value):
    # DeepSpeed calls int() on these; whatever int() refuses (inf, 5000 digits, null, lists) is an
    # error here, whatever it takes ("1_000", " 8 ", 8.7, true) is not.
    config = {**B, "data_efficiency": {"data_sampling": {"dynamic_batching": {"max_batch_size": value}}}}
    try:
        int(value)
        refused = False
    except (TypeError, ValueError, OverflowError):
        refused = True
    assert bool(errors(config)) == refused
