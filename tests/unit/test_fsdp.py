"""FSDP / Accelerate / TrainingArguments analysis: YAML positions, the memory mapping, rules and fixes."""

import json

import pytest

from zeromem_lsp.analysis import analyse
from zeromem_lsp.assist.hover import breakdown_markdown, hover_at
from zeromem_lsp.document.yaml_document import parse_yaml_document
from zeromem_lsp.findings import apply_edits
from zeromem_lsp.memory.plan import MemoryPlan, Unplanned

GIB = 2**30
HEAD = "distributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\n"


def plan_of(text: str, name: str = "accelerate.yaml", loader=None):
    analysis = analyse(text, name, loader=loader)
    return analysis, analysis.plan


def codes(analysis) -> list[str]:
    return [finding.code for finding in analysis.findings]


# --- the positioned YAML tree -------------------------------------------------------------------

def test_yaml_tree_has_exact_key_and_value_ranges():
    text = HEAD + "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD  # comment\n"
    document = parse_yaml_document(text)
    member = document.find(("fsdp_config", "fsdp_sharding_strategy"))
    assert text[member.key_start:member.key_end] == "fsdp_sharding_strategy"
    assert text[member.value.start:member.value.end] == "FULL_SHARD"
    assert text[member.colon] == ":"
    assert document.to_python()["num_processes"] == 8
    assert document.locate(member.value.start + 1).path == ("fsdp_config", "fsdp_sharding_strategy")


def test_yaml_scalars_keep_yaml_types():
    data = parse_yaml_document("a: 'no'\nb: no\nc: 1e3\nd: null\ne: [1, 2]\n").to_python()
    assert data == {"a": "no", "b": False, "c": "1e3", "d": None, "e": [1, 2]}


def test_yaml_syntax_error_is_zm001_with_position():
    text = "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: [2\n"
    analysis = analyse(text, "accelerate.yaml")
    assert analysis.kind == "accelerate"
    errors = [f for f in analysis.findings if f.code == "ZM001"]
    assert errors and errors[0].start > text.index("[")


def test_yaml_duplicate_keys_are_not_errors_but_recorded():
    document = parse_yaml_document("a: 1\na: 2\n")
    assert document.to_python() == {"a": 2}
    assert [p.kind for p in document.problems] == ["yaml_duplicate_key"]
    analysis = analyse(HEAD + HEAD.splitlines()[0] + "\n", "accelerate.yaml")
    assert not [f for f in analysis.findings if f.severity == "error"]


def test_other_yaml_files_are_not_training_configs():
    assert analyse("name: CI\non: [push]\njobs: {}\n", "ci.yml").kind is None
    assert analyse("{ \"zero_optimization\": {\"stage\": 1}, # neox\n}", "125M.yml").kind is None
    assert analyse("jobs: [unclosed\n", "ci.yaml").findings == []


# --- memory mapping -----------------------------------------------------------------------------

@pytest.mark.parametrize(("strategy", "stage"), [("NO_SHARD", "ddp"), ("SHARD_GRAD_OP", "zero2"),
                                                  ("FULL_SHARD", "zero3"), (1, "zero3"), (2, "zero2")])
def test_fsdp1_strategies_map_to_zero_stages(strategy, stage):
    text = HEAD + f"fsdp_config:\n  fsdp_sharding_strategy: {strategy}\n  zeromem: {{parameters: 7B}}\n"
    _, plan = plan_of(text)
    assert isinstance(plan, MemoryPlan) and plan.family == "fsdp" and plan.stage == stage


def test_fsdp_keeps_sharded_parameters_in_fp32_under_mixed_precision():
    text = HEAD + "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n  zeromem: {parameters: 7B}\n"
    _, plan = plan_of(text)
    inputs = plan.inputs
    assert (inputs.parameter_bytes, inputs.gradient_bytes, inputs.optimizer_bytes) == (28 * 10**9, 28 * 10**9, 56 * 10**9)
    assert plan.gpu_bytes == 112 * 10**9 // 8


def test_declared_precision_is_the_loaded_dtype_and_optimizer_state_follows_it():
    text = HEAD + "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n  zeromem: {parameters: 7B, precision: bf16}\n"
    _, plan = plan_of(text)
    assert (plan.inputs.parameter_bytes, plan.inputs.gradient_bytes, plan.inputs.optimizer_bytes) == (
        14 * 10**9, 14 * 10**9, 28 * 10**9)


def test_hybrid_shard_shards_within_a_node():
    text = ("distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\nfsdp_config:\n"
            "  fsdp_sharding_strategy: HYBRID_SHARD\n  zeromem: {parameters: 7B}\n")
    _, plan = plan_of(text)
    assert plan.stage == "zero3" and plan.inputs.world_size == 8
    assert plan.gpu_bytes == 112 * 10**9 // 8
    text = text.replace("HYBRID_SHARD\n", "HYBRID_SHARD_ZERO2\n")
    _, plan = plan_of(text)
    assert plan.stage == "zero2" and plan.inputs.world_size == 8


@pytest.mark.parametrize(("reshard", "stage"), [("true", "zero3"), ("false", "zero2")])
def test_fsdp2_reshard_after_forward(reshard, stage):
    text = HEAD + f"fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: {reshard}\n  zeromem: {{parameters: 1B}}\n"
    analysis, plan = plan_of(text)
    assert plan.stage == stage
    assert not [f for f in analysis.findings if f.severity == "error"]


def test_cpu_offload_moves_all_model_state_to_the_host():
    text = HEAD + "fsdp_config:\n  fsdp_offload_params: true\n  zeromem: {parameters: 7B}\n"
    _, plan = plan_of(text)
    assert plan.gpu_bytes == 0 and plan.host_bytes == 112 * 10**9 // 8
    assert "optimizer" in plan.offload.describe()


def test_no_fsdp_config_block_means_full_shard():
    _, plan = plan_of("distributed_type: FSDP\nnum_processes: 4\n")
    assert isinstance(plan, Unplanned)


def test_accelerate_deepspeed_inline_uses_deepspeed_conventions():
    text = ("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\ndeepspeed_config:\n"
            "  zero_stage: 2\n  offload_optimizer_device: cpu\n  zeromem: {parameters: 7B}\n")
    _, plan = plan_of(text)
    assert plan.family == "deepspeed" and plan.stage == "zero2" and plan.inputs.world_size == 8
    assert plan.offload.optimizer == "cpu"
    assert plan.origins["world_size"].path == ("num_processes",)


def test_accelerate_deepspeed_config_file_is_followed_through_the_loader():
    ds = json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1})
    text = "distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
    analysis, plan = plan_of(text, loader={"ds.json": ds}.get)
    assert isinstance(plan, Unplanned)  # no model size yet
    with_size = text + "  zeromem: {parameters: 7B}\n"
    _, plan = plan_of(with_size, loader={"ds.json": ds}.get)
    assert plan.stage == "zero3" and plan.gpu_bytes == 7 * 10**9 * 16 // 8


def test_accelerate_fills_an_auto_stage_in_its_deepspeed_config_file_with_2():
    # DeepSpeedPlugin.__post_init__: zero_stage = int(ACCELERATE_DEEPSPEED_ZERO_STAGE or 2), written over "auto"
    ds = json.dumps({"zero_optimization": {"stage": "auto"}, "bf16": {"enabled": True}})
    text = ("distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
            "  zeromem: {parameters: 7B}\n")
    _, plan = plan_of(text, loader={"ds.json": ds}.get)
    # ZeRO-2, bf16, AdamW: P + (G + O) / R = 14e9 + (14e9 + 84e9) / 8
    assert plan.stage == "zero2" and plan.gpu_bytes == 14 * 10**9 + 98 * 10**9 // 8


# --- rules and fixes ----------------------------------------------------------------------------

def test_budget_fix_switches_the_strategy_in_yaml_spelling():
    text = HEAD + "fsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n  zeromem: {parameters: 7B, gpu_memory: 40GiB}\n"
    analysis = analyse(text, "accelerate.yaml")
    finding = next(f for f in analysis.findings if f.code == "ZM101")
    fixed = apply_edits(text, finding.fixes[0].edits)
    assert "fsdp_sharding_strategy: SHARD_GRAD_OP" in fixed  # 28 GB + 84 GB / 8 = 35.9 GiB fits
    assert "ZM101" not in codes(analyse(fixed, "accelerate.yaml"))


def test_budget_fix_adds_offload_as_a_plain_yaml_line():
    text = HEAD + "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD  # shard\n  zeromem: {parameters: 70B, gpu_memory: 24GiB}\n"
    analysis = analyse(text, "accelerate.yaml")
    finding = next(f for f in analysis.findings if f.code == "ZM101")
    fixed = apply_edits(text, finding.fixes[0].edits)
    assert "\n  fsdp_offload_params: true" in fixed
    assert parse_yaml_document(fixed).to_python()["fsdp_config"]["fsdp_offload_params"] is True
    assert "ZM101" not in codes(analyse(fixed, "accelerate.yaml"))


def test_rename_fix_keeps_yaml_keys_plain():
    text = HEAD + "fsdp_config:\n  fsdp_backward_prefetch_policy: BACKWARD_PRE\n"
    finding = next(f for f in analyse(text, "accelerate.yaml").findings if f.code == "ZM351")
    fixed = apply_edits(text, finding.fixes[0].edits)
    assert "  fsdp_backward_prefetch: BACKWARD_PRE" in fixed


def test_top_level_zeromem_block_is_read_but_reported_for_accelerate():
    analysis = analyse(HEAD + "zeromem: {parameters: 7B}\n", "accelerate.yaml")
    assert "ZM307" in codes(analysis)
    assert analysis.settings.parameters == 7 * 10**9


def test_fsdp1_reshard_after_forward_is_ignored_only_when_it_differs():
    quiet = HEAD + "fsdp_config:\n  fsdp_version: 1\n  fsdp_reshard_after_forward: FULL_SHARD\n"
    assert "ZM352" not in codes(analyse(quiet, "accelerate.yaml"))
    loud = quiet.replace("reshard_after_forward: FULL_SHARD", "reshard_after_forward: SHARD_GRAD_OP")
    assert "ZM352" in codes(analyse(loud, "accelerate.yaml"))


def test_fsdp_config_json_is_read_with_json_load():
    analysis = analyse('{"fsdp_forward_prefetch": true, // prefetch\n}', "fsdp_config.json")
    assert analysis.kind == "fsdp"
    assert "ZM001" in codes(analysis)


def test_transformers_mutual_exclusion_ignores_zero_min_num_params():
    text = '{"fsdp_transformer_layer_cls_to_wrap": ["MixtralDecoderLayer"], "xla": true, "min_num_params": 0}'
    assert not [f for f in analyse(text, "fsdp_config.json").findings if f.severity == "error"]


# --- TrainingArguments JSON ---------------------------------------------------------------------

def test_training_arguments_inline_deepspeed_is_a_deepspeed_config():
    text = json.dumps({"output_dir": "out", "deepspeed": {"zero_optimization": {"stage": 4},
                                                          "train_micro_batch_size_per_gpu": 1}})
    analysis = analyse(text, "args.json")
    assert analysis.kind == "hf-arguments"
    hit = next(f for f in analysis.findings if f.code == "ZM202")
    assert text[hit.start:hit.end] == "4"


def test_training_arguments_fsdp_options_drive_the_plan():
    text = json.dumps({"output_dir": "out", "fsdp": "shard_grad_op offload auto_wrap",
                       "fsdp_config": {"zeromem": {"parameters": "1B", "world_size": 4}}})
    _, plan = plan_of(text, "args.json")
    assert plan.stage == "zero2" and plan.gpu_bytes == 0


def test_training_arguments_deepspeed_path_is_followed_relative_to_the_file():
    ds = json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}})
    text = json.dumps({"output_dir": "out", "deepspeed": "ds.json"})
    _, plan = plan_of(text, "args.json", loader={"ds.json": ds}.get)
    assert isinstance(plan, Unplanned) and any("model size" in item for item in plan.missing)
    _, plan = plan_of(text, "args.json")
    assert isinstance(plan, Unplanned) and any("ds.json" in item for item in plan.missing)


# --- parameters from a model config.json -------------------------------------------------------

LLAMA3_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "tie_word_embeddings": False}


def test_parameters_from_config_through_the_loader():
    text = HEAD + "fsdp_config:\n  zeromem: {parameters: {from_config: model/config.json}}\n"
    analysis, plan = plan_of(text, loader={"model/config.json": json.dumps(LLAMA3_8B)}.get)
    assert plan.inputs.parameters == 8_030_261_248
    assert "8,030,261,248" in analysis.parameter_source


def test_parameters_from_config_problems_are_zm104():
    text = '{"zero_optimization": {"stage": 2}, "zeromem": {"parameters": {"from_config": "c.json"}}}'
    analysis = analyse(text, "ds_config.json", loader={"c.json": '{"model_type": "t5"}'}.get)
    hit = next(f for f in analysis.findings if f.code == "ZM104")
    assert "t5" in hit.message and "supported" in hit.message
    analysis = analyse(text, "ds_config.json")
    assert "cannot read" in next(f for f in analysis.findings if f.code == "ZM104").message


def test_fsdp_config_schema_accepts_both_spellings_and_rejects_bad_values():
    import jsonschema

    from zeromem_lsp.schemas import render

    validator = jsonschema.Draft7Validator(json.loads(render("fsdp-config.schema.json")))
    good = {"fsdp_backward_prefetch": "backward_pre", "use_orig_params": "True", "min_num_params": 0,
            "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"], "zeromem": {"parameters": "7B"}}
    assert list(validator.iter_errors(good)) == []
    assert list(validator.iter_errors({"backward_prefetch": "BACKWARDS"}))


# --- DeepSpeed inline in TrainingArguments: positions are in the inline dict -------------------

INLINE_ARGS = json.dumps({"output_dir": "out", "deepspeed": {
    "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1,
    "zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "24GiB"}}}, indent=1)


def test_training_arguments_inline_deepspeed_paths_are_rooted_in_the_document():
    from zeromem_lsp.assist.hover import hover_at
    from zeromem_lsp.assist.inlay import inlay_hints

    analysis, plan = plan_of(INLINE_ARGS, "args.json")
    assert plan.stage_path == ("deepspeed", "zero_optimization", "stage")
    assert plan.origins["precision"].path == ("deepspeed", "bf16", "enabled")
    stage = INLINE_ARGS.index('"stage": 2') + len('"stage": ')
    hit = next(f for f in analysis.findings if f.code == "ZM101")
    assert (hit.start, hit.end) == (stage, stage + 1)
    hints = inlay_hints(analysis, 0, len(INLINE_ARGS))
    assert [hint.offset for hint in hints] == [stage + 1] and "GiB/GPU" in hints[0].label
    hover = hover_at(analysis, stage)
    assert hover is not None and "ZeRO-2" in hover.markdown and "```text" in hover.markdown


def test_deepspeed_loaded_from_another_file_has_no_position_here():
    ds = json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                     "zeromem": {"parameters": "7B", "world_size": 8}})
    text = json.dumps({"output_dir": "out", "deepspeed": "ds.json",
                       "fsdp_config": {"zeromem": {"parameters": "7B", "world_size": 8}}})
    _, plan = plan_of(text, "args.json", loader={"ds.json": ds}.get)
    assert isinstance(plan, MemoryPlan) and plan.stage_path is None and plan.origins["precision"].path is None
    text = HEAD.replace("FSDP", "DEEPSPEED").replace("mixed_precision: bf16\n", "") + (
        "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zeromem: {parameters: 7B}\n")
    _, plan = plan_of(text, loader={"ds.json": ds}.get)
    assert isinstance(plan, MemoryPlan) and plan.stage_path is None and plan.origins["precision"].path is None


def test_zm101_names_the_keys_of_the_file_that_holds_the_deepspeed_settings():
    """7B bf16 AdamW on 8 ranks, ZeRO-2 = 14e9 + ⌈(14e9 + 84e9)/8⌉ B > 12 GiB; ZeRO-3 with the optimizer on the CPU
    fits: the suggestion names the keys as the file that holds them spells them, and the file when it is another."""
    block = {"parameters": "7B", "world_size": 8, "gpu_memory": "12GiB", "precision": "bf16"}
    ds = json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}})
    text = json.dumps({"output_dir": "out", "deepspeed": "ds.json", "fsdp_config": {"zeromem": block}})
    analysis, _ = plan_of(text, "args.json", loader={"ds.json": ds}.get)
    [overflow] = [f for f in analysis.findings if f.code == "ZM101"]
    assert overflow.message.endswith('; set `"stage": 3` and `"offload_optimizer": {"device": "cpu"}` in ds.json')
    yaml = (HEAD.replace("FSDP", "DEEPSPEED") + "deepspeed_config:\n  zero_stage: 2\n  zeromem: "
            + json.dumps(block) + "\n")
    analysis, plan = plan_of(yaml)
    [overflow] = [f for f in analysis.findings if f.code == "ZM101"]
    assert overflow.fixes and "; set" not in overflow.message  # its own keys: the quick fix edits them
    assert "`offload_optimizer_device: cpu` would move" in breakdown_markdown(analysis.plan, analysis.setup)


# --- integers: one shared reading ---------------------------------------------------------------

def test_integral_floats_are_read_alike_everywhere():
    from zeromem_lsp.configs import accelerate, training

    assert accelerate.positive_int is training.positive_int
    assert [training.positive_int(v) for v in (2, 2.0, 2.5, True, 0, -1, "2")] == [2, 2, None, None, None, None, None]
    text = ("distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n"
            "  zero_stage: 3.0\n  zeromem: {parameters: 7B}\n")
    analysis, plan = plan_of(text)
    assert isinstance(plan, MemoryPlan) and plan.stage == "zero3" and "ZM201" not in codes(analysis)


# --- counts past Python's int-to-str digit limit ------------------------------------------------

def test_parameter_note_formats_counts_past_the_str_digit_limit(monkeypatch):
    from zeromem_lsp.configs import model_config

    huge = model_config.ParameterCount(10**5000, "llama", "llama: 1 layers, tied embeddings")
    monkeypatch.setattr(model_config, "count_parameters_from_text", lambda text: huge)
    text = '{"zero_optimization": {"stage": 2}, "zeromem": {"parameters": {"from_config": "c.json"}}}'
    analysis = analyse(text, "ds_config.json", loader={"c.json": "{}"}.get)
    note = analysis.parameter_source
    assert note.startswith("100,000,000,") and note.endswith(" parameters counted from c.json (llama: 1 layers, tied embeddings)")
