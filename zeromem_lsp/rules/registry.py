"""The one table of rules: code → severity, name and documentation (ruff's shape).

`docs/rules.md`, SARIF rule metadata, `zeromem rules` and hover on a code are all generated from
this table. Codes are stable forever once released.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.findings import Finding, Fix


class Rule(NamedTuple):
    code: str
    name: str  # kebab-case description of the bad pattern
    severity: str
    summary: str  # what it does
    rationale: str  # why it matters
    example: str  # a config that triggers it
    fix: str  # what to do instead
    safe_fix: bool = False  # its quick fix keeps what the launcher does (a rename): `zeromem check --fix` applies it
    lesser_severity: str | None = None  # the severity when the rule's message says the case is a lesser one

    def at(self, message: str, start: int, end: int, fixes: tuple[Fix, ...] = (),
           related: tuple[tuple[int, int, str], ...] = (), lesser: bool = False) -> Finding:
        """A finding of this rule over [start, end): the only way findings are made. `lesser`: the rule's
        lesser case (ZM106 within the model's uncertainty), reported at `lesser_severity`."""
        severity = self.lesser_severity if lesser and self.lesser_severity else self.severity
        return Finding(self.code, severity, message, start, end, fixes, related)


def _rules(*rules: Rule) -> dict[str, Rule]:
    return {rule.code: rule for rule in rules}


RULES: dict[str, Rule] = _rules(
    Rule(
        "ZM001", "syntax-error", "error",
        "The file cannot be parsed as JSON/hjson.",
        "DeepSpeed loads configs with hjson and aborts on a syntax error; nothing else can be checked in the "
        "broken part of the file.",
        '{"zero_optimization": {"stage": 2,,}}',
        '{"zero_optimization": {"stage": 2}}',
    ),
    Rule(
        "ZM002", "file-too-large", "information",
        "The document is larger than the analysis limit and was not analysed.",
        "Training configs are a few kilobytes; analysing a document of tens of megabytes would stall the editor.",
        "a 50 MB JSON file",
        "Check the training config itself, not a data file; the limit is documented in docs/reliability.md.",
    ),
    Rule(
        "ZM003", "unreadable-encoding", "error",
        "The file is not UTF-8 text (invalid UTF-8, UTF-16, or binary data).",
        "DeepSpeed and HF open config files as UTF-8; the launch fails before any setting is read.",
        "a ds_config.json saved as UTF-16 by a Windows editor",
        "Save the file as UTF-8 (without a byte-order mark).",
    ),
    Rule(
        "ZM101", "stage-exceeds-gpu-memory", "error",
        "The chosen ZeRO stage needs more GPU memory per rank than the declared `gpu_memory` budget. A warning "
        "when the figure is approximate: the config sets a memory-relevant key the model does not cover (named in "
        "the message), or a recipe's engine or world size is only assumed. Not reported when the step's peak is "
        "known and fits, or is below the model state: the verdict follows the peak (ZM106 when it does not fit; a "
        "LoRA base, experts divided by expert parallelism or DeepSpeed's bucketed gradients make a model state the "
        "step never holds at once).",
        "The job would queue, launch and die with CUDA out-of-memory while building the optimizer. The figure "
        "counts only persistent model state (parameters, gradients, optimizer state), so a real run needs more.",
        '{"zero_optimization": {"stage": 1}, "bf16": {"enabled": true},\n'
        ' "zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "24GiB"}}',
        'Use the cheapest stage that fits (here `"stage": 3`), offload the optimizer '
        '(`"offload_optimizer": {"device": "cpu"}`), or add GPUs.',
        lesser_severity="warning",
    ),
    Rule(
        "ZM102", "stage-near-gpu-memory", "warning",
        "The chosen stage fits the budget but uses more than `warn_fraction` (default 0.9) of it.",
        "Activations, communication buffers and allocator fragmentation come on top of model state; a config at "
        "95% of the budget for model state alone will almost certainly run out of memory.",
        '{"zero_optimization": {"stage": 3}, "zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "15GiB"}}',
        "Move to a higher stage, offload, or raise `warn_fraction` if you have measured the headroom.",
    ),
    Rule(
        "ZM103", "memory-not-computable", "information",
        "A GPU budget is declared but the per-GPU figure cannot be computed; the message says what is missing, or "
        "why the step's peak is unknown (a trainer or setup the phase model does not cover: only the model state is "
        "then checked).",
        "A budget without a figure silently checks nothing; saying what is missing lets you declare it, and saying "
        "the peak is unknown keeps a fitting model state from reading as a fitting run.",
        '{"zero_optimization": {"stage": 2}, "zeromem": {"gpu_memory": "80GiB"}}',
        'Declare the missing inputs in the `zeromem` block, e.g. `"parameters": "7B", "world_size": 8`.',
    ),
    Rule(
        "ZM104", "invalid-zeromem-setting", "error",
        "A value in the `zeromem` block (or in project/editor settings) is invalid; or a recipe value the estimate "
        "needs is impossible (a LoRA rank ≤ 0 or above 65536, a micro-batch or sequence length that is not a "
        "positive integer), a combination the recipe's tool refuses (LLaMA-Factory's pure_bf16 with a ZeRO-3 "
        "config; axolotl's context_parallel_size without flash attention, or with sample packing and a micro-batch "
        "above 1), or the recipe names no model.",
        "zeromem cannot compute what you asked for; DeepSpeed itself ignores the block, and the recipe's tool "
        "refuses such a value or fails on it.",
        '{"zeromem": {"gpu_memory": "80 GBs"}}',
        'Use a valid value, e.g. `"gpu_memory": "80GiB"`.',
    ),
    Rule(
        "ZM105", "world-size-conflict", "error",
        "The declared `zeromem.world_size` contradicts the world size implied by the batch triple.",
        "train_batch_size = micro batch × gradient accumulation × world size; DeepSpeed aborts when the "
        "numbers disagree with the real world size.",
        '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,\n'
        ' "zeromem": {"world_size": 4}}',
        "Fix `world_size` or the batch sizes so that they agree (here world size 8).",
    ),
    Rule(
        "ZM106", "peak-exceeds-gpu-memory", "error",
        "The chosen stage's model state fits the `gpu_memory` budget (or is over it but above the peak: a figure "
        "the step never holds at once), but its estimated peak — the largest phase "
        "(forward, backward, optimizer step) of one training step + `reserved` — does not. An error when the peak "
        "is over the budget by more than the model's uncertainty (10%, docs/memory-model.md); a warning inside it, and "
        "whenever the figure is approximate (a memory-relevant key set that the model does not cover, an assumed "
        "engine or world size: the message names them).",
        "Model state is only what the optimizer keeps; the step also holds the activations of one micro-batch "
        "and the loss's fp32 gradients (2 × 4 bytes × micro-batch × sequence × vocabulary), the communication "
        "buckets, the optimizer step's fp32 copies and the CUDA context. The job fails with out-of-memory in the first forward or backward. The "
        "estimate follows the Transformers modelling code and is held to ±10% of measured steps, so a peak more "
        "than 10% over the budget fails `zeromem check`, pre-commit and the Action; closer than that it warns.",
        '{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2},\n'
        ' "bf16": {"enabled": true}, "zeromem": {"parameters": {"from_config": "qwen2-0.5b/config.json"},\n'
        ' "world_size": 8, "sequence_length": 8192, "gpu_memory": "80GiB"}}',
        "Halve the micro-batch and double `gradient_accumulation_steps` (the global batch stays the same), enable "
        "gradient checkpointing, or shrink the bucket sizes — whichever the message names as the largest part — "
        "or take the cheapest stage / offload / micro-batch whose peak fits, which the message names.",
        lesser_severity="warning",
    ),
    Rule(
        "ZM107", "gpu-memory-in-decimal-gigabytes", "information",
        "`gpu_memory` is written in decimal gigabytes (`80GB` = 80 × 10⁹ bytes), but a GPU sold as \"80 GB\" has "
        "80 GiB (80 × 2³⁰ bytes).",
        "The budget is then 7% smaller than the card, so a stage that fits the card can be reported as not "
        "fitting. `GB` is read as 10⁹ on purpose (docs/memory-model.md); this note only says what the card has.",
        '{"zero_optimization": {"stage": 2}, "zeromem": {"gpu_memory": "80GB"}}',
        'Write `"gpu_memory": "80GiB"` for an 80 GB card (`nvidia-smi` shows 81920MiB).',
    ),
    Rule(
        "ZM109", "parallel-degree-does-not-fit", "error",
        "A tensor, context, Ulysses or expert parallel degree the run cannot take, once the world size, the sequence "
        "length and the model are known: degrees whose product does not divide the world size (or, with axolotl's "
        "dp_shard_size and dp_replicate_size, does not fill it), a sequence length torch context parallelism cannot "
        "split into 2 × cp chunks, or attention heads Ulysses cannot split.",
        "axolotl (utils/distributed.py) and Accelerate (ParallelismConfig._validate_accelerator) refuse degrees that "
        "do not fill the world; torch's ring attention needs 2 × cp equal chunks; DeepSpeed's Ulysses all-to-all "
        "moves whole heads (ulysses_sp.py). The launch fails after the model is loaded.",
        "base_model: Qwen/Qwen3-8B\ncontext_parallel_size: 3\nzeromem:\n  world_size: 8",
        "Pick degrees whose product divides the world size (here context_parallel_size: 2, 4 or 8).",
    ),
    Rule(
        "ZM108", "recipe-model-not-counted", "information",
        "A recipe's model (`base_model`, `model_name_or_path`) cannot be counted: no config.json here (not a file, "
        "not a model directory, not in the local Hugging Face cache, not fetched from the Hub: gated, missing, offline "
        "or unreachable; the message says every place looked and why), or a model type zeromem does not count (and "
        "Transformers could not count on the meta device here).",
        "The tool downloads the model at launch, so the recipe is not wrong; but without the model's shape there "
        "is no memory estimate, and nothing would say why.",
        "base_model: NousResearch/Llama-3.2-1B   # not downloaded",
        "huggingface-cli download NousResearch/Llama-3.2-1B config.json, or declare parameters "
        "(--parameters 1.2B, [tool.zeromem]).",
    ),
    Rule(
        "ZM201", "unknown-key-in-strict-section", "error",
        "A key DeepSpeed does not know appears in a section DeepSpeed validates strictly "
        "(`zero_optimization`, offload sections, `fp16`, `bf16`, ...).",
        "DeepSpeed's pydantic models forbid extra keys there: the launch aborts with "
        "'Extra inputs are not permitted' after the job has been scheduled.",
        '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sz": 5e7}}',
        '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7}}',
        safe_fix=True,
    ),
    Rule(
        "ZM202", "invalid-value", "error",
        "A value has the wrong type, is outside its range, or is not one of the allowed choices.",
        "DeepSpeed validates these values at start-up and refuses the config.",
        '{"zero_optimization": {"stage": 4}}',
        '{"zero_optimization": {"stage": 3}}',
    ),
    Rule(
        "ZM203", "duplicate-key", "error",
        "The same key appears twice in one object.",
        "DeepSpeed refuses configs with duplicate keys ('Duplicate keys in DeepSpeed config'); other JSON "
        "readers silently keep the last one.",
        '{"zero_optimization": {"stage": 2, "stage": 3}}',
        "Keep one of them.",
    ),
    Rule(
        "ZM204", "batch-size-missing", "error",
        "Neither `train_batch_size` nor `train_micro_batch_size_per_gpu` is given.",
        "DeepSpeed cannot derive the batch configuration and aborts.",
        '{"gradient_accumulation_steps": 4}',
        '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}',
    ),
    Rule(
        "ZM205", "batch-size-not-positive", "error",
        "A batch-size value is zero or negative.",
        "DeepSpeed requires every batch value to be greater than zero.",
        '{"train_micro_batch_size_per_gpu": 0}',
        '{"train_micro_batch_size_per_gpu": 1}',
    ),
    Rule(
        "ZM206", "batch-sizes-inconsistent", "error",
        "train_batch_size ≠ train_micro_batch_size_per_gpu × gradient_accumulation_steps × world_size.",
        "DeepSpeed checks this identity at start-up and aborts when it does not hold exactly.",
        '{"train_batch_size": 33, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}',
        "Make the product exact, or leave one of the three out and let DeepSpeed infer it.",
    ),
    Rule(
        "ZM207", "fp16-and-bf16-enabled", "error",
        "Both `fp16.enabled` and `bf16.enabled` are true.",
        "DeepSpeed refuses to run both mixed-precision modes at once.",
        '{"fp16": {"enabled": true}, "bf16": {"enabled": true}}',
        "Enable only one of them.",
    ),
    Rule(
        "ZM208", "deprecated-key-with-replacement", "error",
        "A deprecated key is given together with the key that replaces it.",
        "DeepSpeed cannot tell which one you mean and refuses the config.",
        '{"zero_optimization": {"cpu_offload": true, "offload_optimizer": {"device": "cpu"}}}',
        "Delete the deprecated key.",
        safe_fix=True,
    ),
    Rule(
        "ZM209", "partial-offload-below-stage-3", "error",
        "`offload_optimizer.ratio` is below 1 but the stage is not 3.",
        "Partial optimizer offload is implemented only for ZeRO stage 3; DeepSpeed aborts otherwise.",
        '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}',
        'Use `"stage": 3` or remove `ratio`.',
    ),
    Rule(
        "ZM210", "removed-feature", "error",
        "The config uses a DeepSpeed feature that has been removed.",
        "Current DeepSpeed refuses these sections instead of silently ignoring them.",
        '{"curriculum_learning": {"enabled": true}}',
        "Remove the section, or move it to its replacement named in the message.",
    ),
    Rule(
        "ZM211", "invalid-config", "error",
        "DeepSpeed refuses this combination of settings (the message says why).",
        "The launch aborts while DeepSpeed builds its runtime configuration.",
        '{"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9, "max_live_parameters": 1e9}}',
        "Follow the message: change or remove one of the conflicting settings.",
    ),
    Rule(
        "ZM256", "fails-at-initialize", "warning",
        "`deepspeed.initialize` refuses this although the config file itself loads: an optimizer DeepSpeed "
        "no longer has or that ZeRO cannot use, or an optimizer parameter DeepSpeed rejects.",
        "The config passes DeepSpeed's config loader, so nothing complains until the engine is built on every "
        "rank of the job. It is a warning because whether it fails depends on how the optimizer is created: "
        "the optimizer checks (including `optimizer.params.max_grad_norm`) apply only when DeepSpeed builds the "
        "optimizer from the `optimizer` section, which it always does under HF Trainer and Accelerate (they "
        "refuse a code optimizer beside the section); a client optimizer passed to `deepspeed.initialize` in "
        "code, as Megatron-DeepSpeed does, never reaches them (deepspeed/runtime/engine.py, "
        "`_configure_optimizer`).",
        '{"optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 2}}',
        'Use an optimizer DeepSpeed supports with ZeRO (e.g. `"type": "AdamW"`); move `max_grad_norm` to the '
        "top-level `gradient_clipping`.",
    ),
    Rule(
        "ZM257", "suspicious-value", "warning",
        "A value DeepSpeed accepts but that is almost certainly not what was meant (e.g. a fractional batch size).",
        "DeepSpeed converts or ignores it silently, so the run differs from the file.",
        '{"train_micro_batch_size_per_gpu": 2.5}',
        "Write the value you mean, as a whole number or a known choice.",
    ),
    Rule(
        "ZM258", "unfilled-placeholder", "warning",
        "The file is a template: values such as `ZERO_STAGE`, `${LR}` or `<MICRO_BATCH>` are still unquoted "
        "placeholders. One finding per file names them all: this warning when DeepSpeed's config loader lets "
        "their strings through, a ZM202 error when it refuses one (a number, boolean or choice is read there).",
        "hjson reads an unquoted placeholder as a string (with the comma after it), and json.load (HF "
        "Transformers, Accelerate) fails on the file. Each placeholder would otherwise give a ZM253 and a ZM202 of "
        "its own; they are left out, and the values are checked once filled in.",
        '{"zero_optimization": {"stage": ZERO_STAGE}, "train_micro_batch_size_per_gpu": MICRO_BATCH}',
        "Fill the template (the launcher script's `sed` or `envsubst`) and check the filled file, or exclude "
        "templates with `--exclude` / `--ignore ZM258`.",
    ),
    Rule(
        "ZM251", "deprecated-key", "warning",
        "A deprecated key is used; DeepSpeed still accepts it but names a successor.",
        "Deprecated keys are removed in later releases; the successor is what the docs describe.",
        '{"zero_optimization": {"stage": 2, "cpu_offload": true}}',
        '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}',
        safe_fix=True,
    ),
    Rule(
        "ZM252", "ignored-setting", "warning",
        "A setting that DeepSpeed silently ignores in this configuration, e.g. `offload_param` below stage 3.",
        "You believe parameters are offloaded but they stay on the GPU.",
        '{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}',
        'Use `"stage": 3` or remove the setting.',
    ),
    Rule(
        "ZM253", "not-strict-json", "warning",
        "Comments, trailing commas, missing commas, unquoted keys or unquoted values.",
        "DeepSpeed reads configs with hjson and accepts these, but HF Transformers and Accelerate read a "
        "DeepSpeed config path with plain `json.load`, which fails on them.",
        '{"zero_optimization": {"stage": 2,}  // ZeRO-2\n}',
        '{"zero_optimization": {"stage": 2}}',
    ),
    Rule(
        "ZM254", "auto-not-filled", "warning",
        'A value is "auto" where neither HF Transformers nor Accelerate fills it in.',
        'Nobody replaces this "auto"; DeepSpeed then fails or uses a default you did not choose.',
        '{"zero_optimization": {"stage": "auto"}}',
        "Write the value explicitly.",
    ),
    Rule(
        "ZM255", "misspelled-top-level-key", "warning",
        "An unknown top-level key that closely resembles one DeepSpeed reads.",
        "DeepSpeed ignores unknown top-level keys, so a typo silently drops the setting.",
        '{"train_batch_sise": 32}',
        '{"train_batch_size": 32}',
    ),
    Rule(
        "ZM301", "invalid-fsdp-value", "error",
        "An FSDP setting has a value HF Transformers, Accelerate or PyTorch FSDP does not accept: a sharding "
        "strategy, backward prefetch, auto-wrap policy or state-dict type that is not one of the choices, an "
        "`--fsdp` option that does not exist, an `fsdp_version` other than 1 or 2, or a flag that is not a boolean.",
        "Accelerate's FSDP plugin converts these strings to PyTorch enums when the Accelerator is built, and "
        "TrainingArguments converts each `--fsdp` word to an FSDPOption: an unknown name stops every rank "
        "with a KeyError or ValueError after the job was scheduled.",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARDED",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD",
    ),
    Rule(
        "ZM302", "fsdp-offload-alone", "error",
        "The `--fsdp` option string is just `offload`.",
        "TrainingArguments refuses it: offload only says where sharded state lives, so it needs a sharding "
        "option beside it.",
        '{"output_dir": "out", "fsdp": "offload"}',
        '{"output_dir": "out", "fsdp": "full_shard offload"}',
    ),
    Rule(
        "ZM303", "full-shard-with-shard-grad-op", "error",
        "The `--fsdp` option string names both `full_shard` and `shard_grad_op`.",
        "They are two different sharding strategies; TrainingArguments refuses the combination.",
        '{"output_dir": "out", "fsdp": "full_shard shard_grad_op auto_wrap"}',
        '{"output_dir": "out", "fsdp": "full_shard auto_wrap"}',
    ),
    Rule(
        "ZM304", "min-num-params-with-layer-classes", "error",
        "An `--fsdp_config` sets both `min_num_params` (above 0) and `transformer_layer_cls_to_wrap`.",
        "They select two different auto-wrap policies (size-based and transformer-layer-based); TrainingArguments "
        "refuses the config when FSDP is enabled.",
        '{"min_num_params": 100000000, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}',
        '{"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}',
    ),
    Rule(
        "ZM305", "cpu-ram-efficient-loading-without-sync", "error",
        "`cpu_ram_efficient_loading` is enabled while `sync_module_states` is explicitly false.",
        "Only rank 0 loads the weights; without syncing module states every other rank would train random "
        "weights, so `accelerate launch` and TrainingArguments refuse this.",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: false",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: true",
    ),
    Rule(
        "ZM306", "fsdp2-rejects-setting", "error",
        "With `fsdp_version: 2`, a setting FSDP2 rejects: `reshard_after_forward` that is not a boolean (FSDP1's "
        "strategy names), `LOCAL_STATE_DICT`, or a `--fsdp` hybrid_shard / hybrid_shard_zero2 / no_shard option "
        "under Transformers' FSDP2 (its default version).",
        "FSDP2 (`fully_shard`) takes a boolean for resharding and has no local state dict; Accelerate raises a "
        "ValueError while building the plugin, and TrainingArguments raises for an FSDP1-only sharding option.",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: FULL_SHARD",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true",
    ),
    Rule(
        "ZM307", "unknown-accelerate-key", "error",
        "An Accelerate config has a top-level key Accelerate does not know.",
        "`accelerate launch` refuses the whole file ('had unknown keys'). A `zeromem` block belongs under "
        "`fsdp_config` or `deepspeed_config`, whose keys Accelerate does not check.",
        "distributed_type: FSDP\nnum_process: 8",
        "distributed_type: FSDP\nnum_processes: 8",
        safe_fix=True,
    ),
    Rule(
        "ZM308", "invalid-accelerate-value", "error",
        "A top-level Accelerate value is refused: a missing or unknown `distributed_type` (names are "
        "case-sensitive), an unknown `compute_environment`, a `mixed_precision` other than no/fp8/fp16/bf16 "
        "(unquoted `no` is the YAML boolean false), an invalid inline DeepSpeed stage or offload device, or a "
        "`parallelism_config` Accelerate refuses (a size below 1, context with sequence parallelism, context "
        "parallelism over replication alone, sizes whose product is not `num_processes`, FSDP2 with nothing to shard).",
        "Accelerate converts these to its enums when it loads the config and stops with a ValueError.",
        "distributed_type: fsdp\nnum_processes: 8",
        "distributed_type: FSDP\nnum_processes: 8",
    ),
    Rule(
        "ZM309", "deepspeed-config-file-conflict", "error",
        "An Accelerate config names a `deepspeed_config_file` and also sets what that file owns "
        "(`zero_stage`, offload devices, gradient accumulation or clipping, `zero3_save_16bit_model`, `mixed_precision`).",
        "Accelerate refuses the mix ('the following accelerate config variables will be ignored') instead of "
        "guessing which value wins.",
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n  zero_stage: 3",
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json",
    ),
    Rule(
        "ZM310", "unknown-recipe-key", "error",
        "A LLaMA-Factory recipe has a key its argument parser does not know (names are generated from the tool's "
        "own fields; older spellings its pinned versions accept are known). The quick fix renames it only when no "
        "other tool or plugin reads the key and the new name is not set already.",
        "LLaMA-Factory parses recipes with HfArgumentParser(allow_extra_keys=False): the run stops before training "
        "starts.",
        "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\ncutof_len: 2048",
        "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\ncutoff_len: 2048",
        safe_fix=True,
    ),
    Rule(
        "ZM311", "recipe-file-missing", "error",
        "The DeepSpeed config a recipe names cannot be read where the tool would open it (the recipe's folder, "
        "then up to the project root, the directory the tools are launched from), or does not parse as a JSON object.",
        "Transformers opens `deepspeed:` as a path from the working directory; a missing file stops the launch.",
        "base_model: NousResearch/Llama-3.2-1B\ndeepspeed: deepspeed_configs/zero3.jsn",
        "base_model: NousResearch/Llama-3.2-1B\ndeepspeed: deepspeed_configs/zero3.json",
    ),
    Rule(
        "ZM312", "accelerate-config-unusable", "error",
        "The Accelerate config named by `accelerate_config` (the setting or `--accelerate-config`) cannot be read, "
        "does not parse, or is not an Accelerate config (no valid `distributed_type`).",
        "`accelerate launch --config_file` stops on a missing or broken file; without it the recipe's world size "
        "and engine are unknown, so the recipe is planned as if launched without it.",
        "base_model: NousResearch/Llama-3.2-1B\nzeromem:\n  accelerate_config: accelerate/zero3.yml",
        "base_model: NousResearch/Llama-3.2-1B\nzeromem:\n  accelerate_config: accelerate/zero3.yaml",
    ),
    Rule(
        "ZM313", "recipe-deepspeed-refused-by-accelerate", "error",
        "A recipe names its own DeepSpeed file (`deepspeed:`) while the Accelerate config it is launched with sets "
        "`deepspeed_config` keys that file owns (`zero_stage`, offload devices, ...) or `mixed_precision`.",
        "Transformers hands the recipe's file to Accelerate's DeepSpeedPlugin, which refuses the launch when the "
        "YAML also sets those values ('the following accelerate config variables will be ignored').",
        "recipe: deepspeed: ds_zero2.json; Accelerate YAML: distributed_type: DEEPSPEED, deepspeed_config: "
        "{zero_stage: 3}",
        "Keep one source: drop `deepspeed:` from the recipe, or launch with a YAML that sets only "
        "`distributed_type: DEEPSPEED` and `num_processes`.",
    ),
    Rule(
        "ZM351", "deprecated-fsdp-key", "warning",
        "An FSDP key under an old name that current Accelerate no longer reads (e.g. `fsdp_backward_prefetch_policy`).",
        "The setting is silently dropped: the default applies instead of what the file says.",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch_policy: BACKWARD_PRE",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch: BACKWARD_PRE",
        safe_fix=True,
    ),
    Rule(
        "ZM352", "ignored-fsdp-setting", "warning",
        "An FSDP setting the loader silently ignores here: FSDP1-only settings under `fsdp_version: 2`, "
        "`reshard_after_forward` under FSDP1, an unknown `fsdp_config` key, `fsdp_config` when "
        "`distributed_type` is not FSDP, a `parallelism_config` size without its `parallelism_config_` prefix "
        "(`accelerate launch` reads only the prefixed keys), or `sharding_strategy` / `offload_params` in a Transformers "
        "`--fsdp_config` (those come from the `--fsdp` option string).",
        "The run does something other than the file says, without any error.",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_sharding_strategy: SHARD_GRAD_OP",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false",
    ),
    Rule(
        "ZM353", "ignored-recipe-key", "warning",
        "An axolotl recipe has an unknown key close to one axolotl reads (a likely misspelling). Keys of axolotl's "
        "bundled plugins are known; the fix renames only when no other tool reads the key and the new name is "
        "not set already.",
        "axolotl's config models drop unknown keys without a word (pydantic's default extra='ignore'), so the "
        "run uses the default instead of what the recipe says.",
        "base_model: NousResearch/Llama-3.2-1B\nmicro_batchsize: 4",
        "base_model: NousResearch/Llama-3.2-1B\nmicro_batch_size: 4",
        safe_fix=True,
    ),
    Rule(
        "ZM357", "unknown-trl-recipe-key", "warning",
        "A TRL / alignment-handbook / open-r1 recipe has a key that none of TRL's config classes, Transformers' "
        "TrainingArguments or those projects' script classes declare; the nearest known key is suggested, and "
        "renamed by the fix only when no other tool reads the key and the new name is not set already.",
        "TrlParser fails on arguments no dataclass of the script declares (from TRL 0.19, trl/scripts/utils.py "
        "`fail_with_unknown_args`; older releases drop them silently), but each training script may add its "
        "own (open-r1's GRPOScriptArguments adds dataset_prompt_column): only the script knows, so this is a "
        "warning, not an error.",
        "model_name_or_path: Qwen/Qwen3-4B\nuse_peft: true\nlora_rnak: 16",
        "model_name_or_path: Qwen/Qwen3-4B\nuse_peft: true\nlora_r: 16",
        safe_fix=True,
    ),
    Rule(
        "ZM358", "recipe-value-type", "warning",
        "A recipe key has a value of another type than its tool's annotation admits (true or false, a whole number, "
        "a number: the key inventory's types, read from the sources; keys that also take strings or lists are not "
        "checked). axolotl's lax conversions (\"8\" for a whole number) are accepted.",
        "The dataclasses behind HfArgumentParser and TrlParser take a YAML value as it is (`learning_rate: 1e-4` is "
        "the string '1e-4' to YAML 1.1), and axolotl's pydantic refuses what it cannot convert: either way the run "
        "does not get what the file seems to say.",
        "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\nlearning_rate: 1e-4",
        "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\nlearning_rate: 1.0e-4",
    ),
    Rule(
        "ZM356", "launch-engine-overridden", "warning",
        "The recipe and the Accelerate config it is launched with name different engines or DeepSpeed files; "
        "the message says which one runs and why.",
        "The run uses one of the two without a word: a recipe's `deepspeed:` wins over the YAML's FSDP or "
        "`deepspeed_config_file` (TrainingArguments builds the plugin from it), the YAML's DeepSpeed wins over a "
        "recipe's `fsdp_config` (AcceleratorState picks DEEPSPEED before FSDP).",
        "recipe: deepspeed: ds_zero2.json; Accelerate YAML: distributed_type: FSDP",
        "Name the engine once: drop the one that does not run.",
    ),
)


def rule(code: str) -> Rule:
    return RULES[code]


def rule_named(name: str) -> Rule:
    """The rule called `name` (front ends outside rules/ refer to rules by name, not by code literal)."""
    return next(found for found in RULES.values() if found.name == name)
