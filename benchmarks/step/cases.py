"""The measured training-step cases (pure Python: no torch, so tests can read them).

Every case is a dict with a stable `id` and everything needed to recompute it: the model config fields, the
sequence length and micro-batch, the dtype regime, the engine with its settings (the full ds_config for
DeepSpeed), the optimizer implementation, gradient checkpointing and the number of ranks.

Regimes: `bf16` = weights stored in bf16, torch AdamW on them (no fp32 master); `fp32` = everything fp32;
`autocast` = fp32 weights, forward under `torch.autocast(dtype=bfloat16)` (HF Trainer `bf16=True`);
`ds-bf16` / `ds-fp16` / `ds-fp32` = DeepSpeed's own precision handling (16-bit model, fp32 master in the
optimizer); `fsdp-mixed` = fp32 shards, bf16 gathered parameters, fp32 gradient reduction.
"""

from __future__ import annotations

import copy

# Small llama/qwen2-style shapes; the vocabularies are real ones so the logits matter.
MODELS = {
    # 2 layers, untied, 32k vocabulary (Llama-2 / Mistral tokenizer size)
    "llama-h256": {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 64, "intermediate_size": 688, "num_hidden_layers": 2, "vocab_size": 32000,
                   "tie_word_embeddings": False, "attention_dropout": 0.0},
    # 2 layers, tied, Qwen2's 151936-token vocabulary: the logits dominate
    "qwen2-h256-tied": {"model_type": "qwen2", "hidden_size": 256, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "intermediate_size": 704, "num_hidden_layers": 2,
                        "vocab_size": 151936, "tie_word_embeddings": True, "attention_dropout": 0.0},
    # 3 layers, tied, 64k vocabulary, multi-head attention
    "llama-h512-tied": {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
                        "num_key_value_heads": 8, "intermediate_size": 1376, "num_hidden_layers": 3,
                        "vocab_size": 64000, "tie_word_embeddings": True, "attention_dropout": 0.0},
    # 2 wide layers, untied: the largest single tensors are the 32000 x 1024 embedding and head
    "llama-h1024": {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16,
                    "num_key_value_heads": 4, "intermediate_size": 2816, "num_hidden_layers": 2,
                    "vocab_size": 32000, "tie_word_embeddings": False, "attention_dropout": 0.0},
    # Llama-3-8B and Qwen2.5-7B shapes, only ever run under FakeTensorMode
    "llama3-8b": {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                  "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 128256,
                  "tie_word_embeddings": False, "rope_theta": 500000.0, "attention_dropout": 0.0},
    # the smoke test's model (measure_gpu.py --smoke): one tiny layer
    "tiny": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
             "intermediate_size": 128, "num_hidden_layers": 1, "vocab_size": 1000, "tie_word_embeddings": False,
             "attention_dropout": 0.0},
    # 4 layers, untied, 8k vocabulary: the layers weigh beside the loss (LoRA cases)
    "llama-h512-v8k": {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
                       "intermediate_size": 1376, "num_hidden_layers": 4, "vocab_size": 8000,
                       "tie_word_embeddings": False, "attention_dropout": 0.0},
    # 2 MoE layers (16 experts of 256, 2 a token), 8k vocabulary: routed experts adapted beside attention (LoRA)
    "qwen3moe-h256-e16": {"model_type": "qwen3_moe", "hidden_size": 256, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512,
                          "moe_intermediate_size": 256, "num_experts": 16, "num_experts_per_tok": 2,
                          "norm_topk_prob": True, "num_hidden_layers": 2, "vocab_size": 8000,
                          "tie_word_embeddings": False, "attention_dropout": 0.0},
    "qwen2.5-7b": {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "intermediate_size": 18944, "num_hidden_layers": 28, "vocab_size": 152064,
                   "tie_word_embeddings": False, "attention_dropout": 0.0},
}

LR = 1e-4


def _case(cid, model, engine="torch", regime="bf16", impl="for-loop", seq=128, batch=2, ranks=1,
          checkpointing=False, fake=False, crosscheck=False, **extra):
    case = {"id": cid, "model": model, "config": dict(sorted(MODELS[model].items())), "engine": engine,
            "regime": regime, "optimizer": {"name": "AdamW", "impl": impl, "lr": LR}, "sequence_length": seq,
            "micro_batch": batch, "ranks": ranks, "gradient_checkpointing": checkpointing, "fake": fake,
            "attention": "sdpa", "crosscheck_memtracker": crosscheck}
    case.update(extra)
    return case


def ds_config(stage, batch, precision="bf16", overlap=False, reduce_bucket=5_000_000, allgather_bucket=5_000_000,
              optimizer_section=None, **zero):
    """A complete ds_config; the stage-3 knobs come as keyword arguments (their DeepSpeed names)."""
    config = {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
              "gradient_clipping": 0.0, "steps_per_print": 1_000_000, "wall_clock_breakdown": False,
              "zero_optimization": {"stage": stage, "overlap_comm": overlap, "contiguous_gradients": True,
                                    "reduce_scatter": True, "reduce_bucket_size": reduce_bucket,
                                    "allgather_bucket_size": allgather_bucket, **zero},
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False}
    if precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 8}
    if optimizer_section is not None:
        config["optimizer"] = optimizer_section
    return config


def _ds(cid, model="llama-h256", stage=0, ranks=1, precision="bf16", impl="for-loop", batch=2, seq=128,
        checkpointing=False, crosscheck=False, optimizer_section=None, **knobs):
    config = ds_config(stage, batch, precision, optimizer_section=optimizer_section, **knobs)
    case = _case(cid, model, engine="deepspeed", regime=f"ds-{precision}", impl=impl, seq=seq, batch=batch,
                 ranks=ranks, checkpointing=checkpointing, crosscheck=crosscheck, ds_config=config)
    if optimizer_section is not None:
        case["optimizer"] = {"name": optimizer_section["type"], "impl": impl, "lr": LR, "source": "ds_config"}
    return case


def _fsdp(cid, version, model="llama-h256", ranks=2, regime="fp32", impl="foreach", batch=2, seq=128,
          checkpointing=False, **settings):
    return _case(cid, model, engine=f"fsdp{version}", regime=regime, impl=impl, seq=seq, batch=batch, ranks=ranks,
                 checkpointing=checkpointing, fsdp=settings)


def cases() -> list[dict]:
    out = []
    # --- plain torch, one process: regimes x AdamW implementations x models ---
    for model in ("llama-h256", "qwen2-h256-tied"):
        for regime in ("bf16", "fp32", "autocast"):
            for impl in ("foreach", "for-loop"):
                out.append(_case(f"torch-{model}-{regime}-{impl}", model, regime=regime, impl=impl,
                                 crosscheck=(regime == "bf16")))
    for regime, impl in (("bf16", "foreach"), ("bf16", "for-loop"), ("fp32", "foreach"), ("autocast", "for-loop")):
        out.append(_case(f"torch-llama-h512-tied-{regime}-{impl}", "llama-h512-tied", regime=regime, impl=impl))
    out.append(_case("torch-llama-h1024-bf16-foreach", "llama-h1024", regime="bf16", impl="foreach", seq=64))
    out.append(_case("torch-llama-h1024-fp32-for-loop", "llama-h1024", regime="fp32", impl="for-loop", seq=64))
    out.append(_case("torch-llama-h256-bf16-fused", "llama-h256", regime="bf16", impl="fused"))
    out.append(_case("torch-qwen2-h256-tied-fp32-fused", "qwen2-h256-tied", regime="fp32", impl="fused"))
    out.append(_case("torch-llama-h256-bf16-foreach-s512b1", "llama-h256", regime="bf16", impl="foreach", seq=512,
                     batch=1))
    out.append(_case("torch-qwen2-h256-tied-bf16-for-loop-s64b4", "qwen2-h256-tied", regime="bf16",
                     impl="for-loop", seq=64, batch=4))
    # few tokens with a tied 152k vocabulary: the embedding's gradient accumulation at the end of backward
    for regime in ("bf16", "fp32"):
        out.append(_case(f"torch-qwen2-h256-tied-{regime}-foreach-s32b1", "qwen2-h256-tied", regime=regime,
                         impl="foreach", seq=32, batch=1))
    out.append(_case("torch-llama-h256-bf16-foreach-s32b1", "llama-h256", regime="bf16", impl="foreach", seq=32,
                     batch=1))
    # gradient checkpointing (use_reentrant=False, as HF Trainer's default kwargs in recent versions)
    out.append(_case("torch-llama-h256-bf16-foreach-gc", "llama-h256", regime="bf16", impl="foreach",
                     checkpointing=True))
    out.append(_case("torch-qwen2-h256-tied-autocast-foreach-gc", "qwen2-h256-tied", regime="autocast",
                     impl="foreach", checkpointing=True))
    out.append(_case("torch-llama-h512-tied-fp32-for-loop-gc", "llama-h512-tied", regime="fp32", impl="for-loop",
                     checkpointing=True))
    # --- DDP (torch DistributedDataParallel over gloo, default 25 MiB buckets) ---
    out.append(_case("ddp-llama-h256-fp32-foreach-r2", "llama-h256", engine="ddp", regime="fp32", impl="foreach",
                     ranks=2, ddp={"bucket_cap_mb": 25, "gradient_as_bucket_view": False}))
    out.append(_case("ddp-llama-h256-bf16-for-loop-r2-view", "llama-h256", engine="ddp", regime="bf16",
                     impl="for-loop", ranks=2, ddp={"bucket_cap_mb": 25, "gradient_as_bucket_view": True}))
    out.append(_case("ddp-qwen2-h256-tied-autocast-foreach-r2", "qwen2-h256-tied", engine="ddp",
                     regime="autocast", impl="foreach", ranks=2,
                     ddp={"bucket_cap_mb": 5, "gradient_as_bucket_view": False}))
    # --- DeepSpeed ZeRO 0-3 at 1, 2 and 4 ranks (bf16, torch AdamW as client optimizer) ---
    for stage in (0, 1, 2, 3):
        for ranks in (1, 2, 4):
            out.append(_ds(f"ds-z{stage}-r{ranks}", stage=stage, ranks=ranks, crosscheck=(ranks == 2)))
    for stage in (1, 2, 3):
        out.append(_ds(f"ds-z{stage}-r2-overlap", stage=stage, ranks=2, overlap=True))
    for stage in (1, 2):  # reduce bucket sizes, with and without overlap_comm
        for bucket in (1_000_000, 20_000_000):
            for overlap in (False, True):
                tag = "overlap" if overlap else "nooverlap"
                out.append(_ds(f"ds-z{stage}-r2-rb{bucket:.0e}-{tag}".replace("+0", ""), stage=stage, ranks=2,
                               overlap=overlap, reduce_bucket=bucket))
    for bucket in (1_000_000, 50_000_000):
        out.append(_ds(f"ds-z2-r2-agb{bucket:.0e}".replace("+0", ""), stage=2, ranks=2, allgather_bucket=bucket))
    # ZeRO-3 knobs
    stage3 = [("pf0", {"stage3_prefetch_bucket_size": 0}), ("pf1e6", {"stage3_prefetch_bucket_size": 1_000_000}),
              ("pf2e7", {"stage3_prefetch_bucket_size": 20_000_000}),
              ("ml1e6", {"stage3_max_live_parameters": 1_000_000}),
              ("rd0", {"stage3_max_reuse_distance": 0}),
              ("rd0-ml1e6", {"stage3_max_reuse_distance": 0, "stage3_max_live_parameters": 1_000_000}),
              ("pt0", {"stage3_param_persistence_threshold": 0}),
              ("pt1e7", {"stage3_param_persistence_threshold": 10_000_000}),
              ("rb1e6-overlap", {"reduce_bucket": 1_000_000, "overlap": True}),
              ("rb2e7-nooverlap", {"reduce_bucket": 20_000_000, "overlap": False})]
    for tag, knobs in stage3:
        out.append(_ds(f"ds-z3-r2-{tag}", stage=3, ranks=2, **knobs))
    # 16 tokens: activations too small to hide the reduce buckets and gathered parameters at the peaks
    for stage, bucket, overlap, knobs, suffix in (
            (2, 5_000_000, False, {}, ""), (2, 5_000_000, True, {}, ""), (2, 20_000_000, False, {}, ""),
            (2, 20_000_000, True, {}, ""), (3, 20_000_000, False, {}, ""), (3, 20_000_000, True, {}, ""),
            (3, 5_000_000, False, {"stage3_max_reuse_distance": 0}, "-rd0"),
            (3, 5_000_000, False, {"stage3_prefetch_bucket_size": 0}, "-pf0")):
        tag = f"rb{bucket:.0e}".replace("+0", "") + ("-overlap" if overlap else "-nooverlap") + suffix
        out.append(_ds(f"ds-z{stage}-r2-s16-{tag}", stage=stage, ranks=2, seq=16, batch=1, overlap=overlap,
                       reduce_bucket=bucket, **knobs))
    # other precisions, optimizer implementations, checkpointing, models
    # fp16 is refused on CPU by DeepSpeed 0.19.8 ("Type fp16 is not supported on your device."): no fp16 cases
    out.append(_ds("ds-z2-r2-fp32", stage=2, ranks=2, precision="fp32"))
    out.append(_ds("ds-z1-r2-foreach", stage=1, ranks=2, impl="foreach"))
    out.append(_ds("ds-z3-r2-foreach", stage=3, ranks=2, impl="foreach"))
    torch_adam = {"type": "AdamW", "params": {"lr": LR, "torch_adam": True}}
    fused = {"type": "AdamW", "params": {"lr": LR}}
    out.append(_ds("ds-z2-r2-cfg-torch-adam", stage=2, ranks=2, impl="for-loop", optimizer_section=torch_adam))
    out.append(_ds("ds-z0-r1-cfg-fusedadam", stage=0, ranks=1, impl="ds-fused", optimizer_section=fused))
    out.append(_ds("ds-z2-r2-cfg-fusedadam", stage=2, ranks=2, impl="ds-fused", optimizer_section=fused))
    for stage in (2, 3):
        out.append(_ds(f"ds-z{stage}-r2-gc", stage=stage, ranks=2, checkpointing=True))
    for stage, ranks in ((0, 1), (1, 2), (2, 2), (3, 2)):
        out.append(_ds(f"ds-qwen2-h256-tied-z{stage}-r{ranks}", model="qwen2-h256-tied", stage=stage, ranks=ranks))
    out.append(_ds("ds-llama-h512-tied-z2-r4", model="llama-h512-tied", stage=2, ranks=4, batch=1))
    out.append(_ds("ds-llama-h512-tied-z3-r4", model="llama-h512-tied", stage=3, ranks=4, batch=1))
    # bf16 + data_types.grad_accum_dtype fp32 at ZeRO-1 selects DeepSpeed's BF16_Optimizer (engine.py
    # _do_optimizer_sanity_check); at ZeRO-0 that mix raises NotImplementedError, so only ZeRO-1
    for ranks in (1, 2):
        case = _ds(f"ds-z1-r{ranks}-gradfp32", stage=1, ranks=ranks)
        case["ds_config"]["data_types"] = {"grad_accum_dtype": "fp32"}
        out.append(case)
    # --- FSDP2 (fully_shard) and FSDP1 over gloo ---
    out.append(_fsdp("fsdp2-r2-fp32", 2))
    out.append(_fsdp("fsdp2-r2-mixed", 2, regime="fsdp-mixed"))
    out.append(_fsdp("fsdp2-r2-fp32-noreshard", 2, reshard_after_forward=False))
    out.append(_fsdp("fsdp2-r4-mixed", 2, ranks=4, regime="fsdp-mixed", batch=1))
    out.append(_fsdp("fsdp2-r1-fp32", 2, ranks=1))
    out.append(_fsdp("fsdp2-r2-mixed-for-loop", 2, regime="fsdp-mixed", impl="for-loop"))
    out.append(_fsdp("fsdp2-r2-fp32-gc", 2, checkpointing=True))
    out.append(_fsdp("fsdp2-qwen2-h256-tied-r2-mixed", 2, model="qwen2-h256-tied", regime="fsdp-mixed"))
    for strategy in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"):
        out.append(_fsdp(f"fsdp1-r2-fp32-{strategy.lower().replace('_', '-')}", 1, sharding_strategy=strategy))
    out.append(_fsdp("fsdp1-r2-mixed-full-shard", 1, regime="fsdp-mixed", sharding_strategy="FULL_SHARD"))
    # --- FakeTensorMode: 7-8B shapes at 4096 tokens, and a small twin of a real case ---
    for regime, impl, checkpointing in (("bf16", "foreach", False), ("bf16", "for-loop", False),
                                        ("autocast", "foreach", False), ("bf16", "foreach", True),
                                        ("fp32", "for-loop", True)):
        tag = f"{regime}-{impl}" + ("-gc" if checkpointing else "")
        out.append(_case(f"fake-llama3-8b-{tag}", "llama3-8b", regime=regime, impl=impl, seq=4096, batch=1,
                         checkpointing=checkpointing, fake=True))
    out.append(_case("fake-qwen2.5-7b-bf16-foreach", "qwen2.5-7b", regime="bf16", impl="foreach", seq=4096,
                     batch=1, fake=True))
    out.append(_case("fake-twin-llama-h256-bf16-foreach", "llama-h256", regime="bf16", impl="foreach", fake=True))
    out.append(_case("fake-twin-llama-h256-bf16-foreach-gc", "llama-h256", regime="bf16", impl="foreach",
                     checkpointing=True, fake=True))
    return copy.deepcopy(out)


QV, ALL = ["q_proj", "v_proj"], "all-linear"
NF4 = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}


def _lora(cid, model, targets, rank, quantization=None, modules_to_save=None, autocast_adapter_dtype=True,
          target_parameters=None, **kwargs):
    """A PEFT LoRA case: get_peft_model(LoraConfig(r, lora_alpha 2r, targets, lora_dropout 0)) on the model built
    from config (fp32 adapters, PEFT's autocast_adapter_dtype default); the optimizer over the trainable
    parameters only (HF Trainer's param groups); with checkpointing, enabled after get_peft_model as HF Trainer
    does (transformers' activation_checkpointing_enable calls enable_input_require_grads). quantization: a
    BitsAndBytesConfig's fields (the base saved and loaded back quantized on the CPU, then
    prepare_model_for_kbit_training). autocast_adapter_dtype=False: get_peft_model keeps the adapters in the base's
    dtype (as every PEFT before 0.12 did). target_parameters: parameters adapted directly (routed experts)."""
    lora = {"r": rank, "lora_alpha": 2 * rank, "target_modules": targets, "lora_dropout": 0.0,
            "modules_to_save": modules_to_save, "quantization": quantization,
            **({"target_parameters": target_parameters} if target_parameters else {}),
            **({} if autocast_adapter_dtype else {"autocast_adapter_dtype": False})}
    if kwargs.get("engine") == "deepspeed":
        stage, ranks = kwargs.pop("stage"), kwargs["ranks"]
        kwargs["ds_config"] = ds_config(stage, kwargs.get("batch", 2))
        kwargs["regime"] = "ds-bf16"
    return _case(cid, model, lora=lora, **kwargs)


def lora_cases() -> list[dict]:
    """Whole LoRA / QLoRA training steps (measured into tests/data/step/measured_lora.json)."""
    out = []
    for model in ("llama-h256", "llama-h512-v8k"):
        for targets, tag, rank in ((QV, "qv", 8), (ALL, "all", 64)):
            for impl in ("foreach", "for-loop", "fused"):
                out.append(_lora(f"lora-{model}-{tag}-r{rank}-{impl}", model, targets, rank, impl=impl))
    for model in ("llama-h256", "llama-h512-v8k", "qwen2-h256-tied"):
        out.append(_lora(f"lora-{model}-all-r8-foreach-gc", model, ALL, 8, impl="foreach", checkpointing=True))
    out.append(_lora("lora-qwen2-h256-tied-qv-r64-for-loop", "qwen2-h256-tied", QV, 64, impl="for-loop"))
    out.append(_lora("lora-llama-h512-v8k-qv-r8-foreach-gc", "llama-h512-v8k", QV, 8, impl="foreach",
                     checkpointing=True))
    out.append(_lora("lora-llama-h512-v8k-all-r8-foreach-s512b1", "llama-h512-v8k", ALL, 8, impl="foreach",
                     seq=512, batch=1))
    out.append(_lora("lora-llama-h512-v8k-qv-r8-foreach-mts", "llama-h512-v8k", QV, 8, impl="foreach",
                     modules_to_save=["lm_head"]))
    # the input embedding in modules_to_save (its copy trained, every layer's input carrying a gradient), alone and
    # with the head; the tied qwen2's head keeps the frozen original weight (PEFT copies each module apart)
    for model, saved, tag, regime, checkpointing, impl in (
            ("llama-h512-v8k", ["embed_tokens"], "embed", "bf16", False, "foreach"),
            ("llama-h512-v8k", ["embed_tokens", "lm_head"], "both", "bf16", False, "foreach"),
            ("llama-h512-v8k", ["embed_tokens", "lm_head"], "both", "bf16", True, "for-loop"),
            ("llama-h512-v8k", ["embed_tokens", "lm_head"], "both", "fp32", False, "foreach"),
            ("qwen2-h256-tied", ["embed_tokens"], "embed", "bf16", False, "foreach"),
            ("qwen2-h256-tied", ["embed_tokens", "lm_head"], "both", "fp32", True, "foreach")):
        name = f"lora-{model}-qv-r8-{impl}-mts-{tag}" + ("-fp32" if regime == "fp32" else "") + (
            "-gc" if checkpointing else "")
        out.append(_lora(name, model, QV, 8, impl=impl, regime=regime, checkpointing=checkpointing,
                         modules_to_save=saved))
    # a MoE model with frozen experts, and with its routed experts adapted through target_parameters (PEFT's
    # ParamWrapper folds each stack anew every forward)
    experts = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    out.append(_lora("lora-qwen3moe-h256-e16-qv-r8-foreach", "qwen3moe-h256-e16", QV, 8, impl="foreach"))
    out.append(_lora("lora-qwen3moe-h256-e16-qv-experts-r8-foreach", "qwen3moe-h256-e16", QV, 8, impl="foreach",
                     target_parameters=experts))
    out.append(_lora("lora-qwen3moe-h256-e16-qv-experts-r8-foreach-gc", "qwen3moe-h256-e16", QV, 8, impl="foreach",
                     target_parameters=experts, checkpointing=True))
    # QLoRA: NF4 base on bitsandbytes' CPU backend, prepare_model_for_kbit_training (fp32 non-4-bit parameters)
    out.append(_lora("qlora-llama-h512-v8k-nf4-qv-r8-foreach", "llama-h512-v8k", QV, 8, quantization=NF4,
                     impl="foreach"))
    out.append(_lora("qlora-llama-h512-v8k-nf4-all-r8-foreach-gc", "llama-h512-v8k", ALL, 8, quantization=NF4,
                     impl="foreach", checkpointing=True))
    # DeepSpeed ZeRO-2 / ZeRO-3 at 2 ranks, bf16: the PEFT model as HF Trainer hands it to deepspeed.initialize
    for stage in (2, 3):
        for model, targets, tag, rank in (("llama-h512-v8k", QV, "qv", 8), ("llama-h512-v8k", ALL, "all", 64),
                                          ("qwen2-h256-tied", ALL, "all", 8)):
            out.append(_lora(f"lora-ds-z{stage}-r2-{model}-{tag}-r{rank}", model, targets, rank, engine="deepspeed",
                             stage=stage, ranks=2, impl="for-loop"))
        out.append(_lora(f"lora-ds-z{stage}-r2-llama-h512-v8k-all-r8-gc", "llama-h512-v8k", ALL, 8,
                         engine="deepspeed", stage=stage, ranks=2, impl="for-loop", checkpointing=True))
    # FSDP2: fully_shard per decoder layer and the root, bf16 base, fp32 adapters
    out.append(_lora("lora-fsdp2-r2-llama-h512-v8k-all-r8", "llama-h512-v8k", ALL, 8, engine="fsdp2", ranks=2,
                     impl="foreach", fsdp={}))
    out.append(_lora("lora-fsdp2-r2-llama-h512-v8k-all-r8-gc", "llama-h512-v8k", ALL, 8, engine="fsdp2", ranks=2,
                     impl="foreach", checkpointing=True, fsdp={}))
    out.append(_lora("lora-fsdp2-r2-llama-h512-v8k-all-r8-noreshard", "llama-h512-v8k", ALL, 8, engine="fsdp2",
                     ranks=2, impl="foreach", fsdp={"reshard_after_forward": False}))
    # FSDP2 mixed precision: fp32 base and adapters sharded, bf16 gathered parameters and compute, fp32 reduction
    out.append(_lora("lora-fsdp2-r2-llama-h512-v8k-all-r8-mixed", "llama-h512-v8k", ALL, 8, engine="fsdp2", ranks=2,
                     impl="foreach", regime="fsdp-mixed", fsdp={}))
    # FSDP1 (use_orig_params=True, FULL_SHARD) with PEFT's fsdp_auto_wrap_policy: adapters in units of their own
    out.append(_lora("lora-fsdp1-r2-llama-h512-v8k-all-r8", "llama-h512-v8k", ALL, 8, engine="fsdp1", ranks=2,
                     impl="foreach", fsdp={"sharding_strategy": "FULL_SHARD"}))
    # adapters in the base's bf16 (autocast_adapter_dtype=False, every PEFT before 0.12): one rank, and FSDP1 as
    # Answer.AI's fsdp_qlora train.py ran it (bf16 weights, no mixed precision, checkpointing; tests/data/gpu_published)
    out.append(_lora("lora-llama-h512-v8k-all-r64-foreach-bf16-adapters", "llama-h512-v8k", ALL, 64, impl="foreach",
                     autocast_adapter_dtype=False))
    out.append(_lora("lora-fsdp1-r2-llama-h512-v8k-all-r8-gc-bf16-adapters", "llama-h512-v8k", ALL, 8, engine="fsdp1",
                     ranks=2, impl="foreach", checkpointing=True, autocast_adapter_dtype=False,
                     fsdp={"sharding_strategy": "FULL_SHARD"}))
    out.append(_lora("lora-fsdp2-r2-qwen2-h256-tied-qv-r64-for-loop", "qwen2-h256-tied", QV, 64, engine="fsdp2",
                     ranks=2, impl="for-loop", fsdp={}))
    # FSDP1 under bf16 mixed precision (fp32 base and adapters), without resharding, and without sharding. Under
    # FSDP1's policy the adapters' units get PEFT's fp32-cast input (it reads the fp32 orig weight outside the unit)
    # and their bf16 weight: it runs only under autocast, which Accelerate's bf16 wraps every forward in
    out.append(_lora("lora-fsdp1-r2-llama-h512-v8k-all-r8-mixed", "llama-h512-v8k", ALL, 8, engine="fsdp1", ranks=2,
                     impl="foreach", regime="fsdp-mixed", autocast=True, fsdp={"sharding_strategy": "FULL_SHARD"}))
    for strategy in ("SHARD_GRAD_OP", "NO_SHARD"):
        out.append(_lora(f"lora-fsdp1-r2-llama-h512-v8k-all-r8-{strategy.lower().replace('_', '-')}", "llama-h512-v8k",
                         ALL, 8, engine="fsdp1", ranks=2, impl="foreach", fsdp={"sharding_strategy": strategy}))
    # FSDP2 without sharding: fully_shard over a (replicate 2, shard 1) mesh
    out.append(_lora("lora-fsdp2-r2-llama-h512-v8k-all-r8-replicate", "llama-h512-v8k", ALL, 8, engine="fsdp2",
                     ranks=2, impl="foreach", fsdp={"replicate": True}))
    # DeepSpeed ZeRO-1 at 2 ranks, bf16
    for model, targets, tag, rank in (("llama-h512-v8k", QV, "qv", 8), ("llama-h512-v8k", ALL, "all", 64),
                                      ("qwen2-h256-tied", ALL, "all", 8)):
        out.append(_lora(f"lora-ds-z1-r2-{model}-{tag}-r{rank}", model, targets, rank, engine="deepspeed", stage=1,
                         ranks=2, impl="for-loop"))
    # DeepSpeed ZeRO-0 (bf16: its FP16_UnfusedOptimizer / BF16 path over the trainable parameters) at 1 and 2 ranks
    for ranks in (1, 2):
        out.append(_lora(f"lora-ds-z0-r{ranks}-llama-h512-v8k-all-r64", "llama-h512-v8k", ALL, 64, engine="deepspeed",
                         stage=0, ranks=ranks, impl="for-loop"))
    return copy.deepcopy(out)


def _accumulated(case: dict, steps: int = 2) -> dict:
    """The case with `steps` micro-batches per optimizer step (a ds_config's own gradient_accumulation_steps)."""
    case = copy.deepcopy(case)
    case["id"] += f"-ga{steps}"
    case["gradient_accumulation_steps"] = steps
    if "ds_config" in case:
        case["ds_config"]["gradient_accumulation_steps"] = steps
    return case


def accumulation_cases() -> list[dict]:
    """Gradient accumulation (measured into tests/data/step/gradient_accumulation.json): twins of measured cases
    with two micro-batches per step, run as HF Trainer + Accelerate run them (measure.py, engines.Run.accumulating)."""
    full = {case["id"]: case for case in cases()}
    lora = {case["id"]: case for case in lora_cases()}
    out = [_accumulated(full[cid]) for cid in (
        "torch-llama-h256-bf16-foreach", "torch-qwen2-h256-tied-bf16-foreach-s32b1", "ddp-llama-h256-fp32-foreach-r2",
        "ds-z0-r1", "ds-z1-r2", "ds-z2-r2", "ds-z3-r2", "ds-qwen2-h256-tied-z2-r2", "ds-z2-r2-s16-rb5e6-nooverlap",
        "fsdp2-r2-fp32", "fsdp2-r2-mixed", "fsdp1-r2-fp32-full-shard", "ddp-llama-h256-bf16-for-loop-r2-view",
        "ds-z1-r2-overlap", "fsdp2-r2-fp32-noreshard", "fsdp1-r2-mixed-full-shard", "fsdp1-r2-fp32-no-shard")]
    out += [_accumulated(lora[cid]) for cid in (
        "lora-llama-h256-all-r64-foreach", "lora-ds-z2-r2-llama-h512-v8k-all-r64", "lora-fsdp2-r2-llama-h512-v8k-all-r8",
        "lora-ds-z3-r2-llama-h512-v8k-all-r64")]
    # ZeRO-1 on one process (Accelerate enters no no_sync there), FSDP2 without sharding (a replicate x shard mesh of
    # R x 1: HSDP with shards of one rank), LoRA under FSDP1 and ZeRO-1
    out.append(_accumulated(full["ds-z1-r1"]))
    out.append(_accumulated(_fsdp("fsdp2-r2-fp32-replicate", 2, replicate=True)))
    out += [_accumulated(lora[cid]) for cid in (
        "lora-fsdp1-r2-llama-h512-v8k-all-r8", "lora-fsdp1-r2-llama-h512-v8k-all-r8-no-shard",
        "lora-fsdp1-r2-llama-h512-v8k-all-r8-mixed", "lora-fsdp1-r2-llama-h512-v8k-all-r8-shard-grad-op",
        "lora-fsdp2-r2-llama-h512-v8k-all-r8-replicate", "lora-ds-z1-r2-llama-h512-v8k-all-r64",
        "lora-ds-z0-r2-llama-h512-v8k-all-r64")]
    return out


#: (tag, optimizer name, extra settings) of the optimizers other than AdamW that run on CPU
OTHER_OPTIMIZERS = {"sgd": ("SGD", {}), "sgdm": ("SGD", {"momentum": 0.9}), "adagrad": ("Adagrad", {}),
                    "adafactor": ("Adafactor", {}), "adam8bit-ao": ("AdamW8bit", {})}


def _other(cid, tag, impl="for-loop", **kwargs):
    """A case stepped by another optimizer than AdamW (engines.torch_optimizer): a client optimizer under
    DeepSpeed, torch's over the shards under FSDP."""
    name, settings = OTHER_OPTIMIZERS[tag]
    maker = _ds if kwargs.pop("engine", None) == "deepspeed" else (_fsdp if "version" in kwargs else _case)
    case = maker(cid, **kwargs, impl=impl)
    case["optimizer"] = {"name": name, "impl": "for-loop" if tag == "adafactor" else impl, "lr": LR, **settings}
    return case


def optimizer_cases() -> list[dict]:
    """Whole steps with SGD (with and without momentum), Adagrad and Adafactor (measured into
    tests/data/step/measured_optimizers.json): plain torch, DeepSpeed ZeRO-2 / ZeRO-3 with a client optimizer,
    FSDP2."""
    out = []
    for tag, impls in (("sgd", ("for-loop", "foreach")), ("sgdm", ("for-loop", "foreach")),
                       ("adagrad", ("for-loop", "foreach", "fused")), ("adafactor", ("for-loop",))):
        for impl in impls:
            out.append(_other(f"opt-torch-llama-h256-bf16-{tag}-{impl}", tag, impl, model="llama-h256"))
    out.append(_other("opt-torch-llama-h256-fp32-adafactor", "adafactor", model="llama-h256", regime="fp32"))
    out.append(_other("opt-torch-qwen2-h256-tied-fp32-adagrad-foreach", "adagrad", "foreach", model="qwen2-h256-tied",
                      regime="fp32"))
    # few tokens on the wide model: the optimizer step holds the peak
    for tag, impl, regime in (("adagrad", "foreach", "bf16"), ("adafactor", "for-loop", "bf16"),
                              ("sgdm", "for-loop", "fp32"), ("adafactor", "for-loop", "fp32")):
        out.append(_other(f"opt-torch-llama-h1024-{regime}-{tag}-{impl}-s64", tag, impl, model="llama-h1024",
                          regime=regime, seq=64))
    out.append(_other("opt-ds-z2-r2-sgdm", "sgdm", engine="deepspeed", stage=2, ranks=2))
    out.append(_other("opt-ds-z2-r2-adagrad", "adagrad", engine="deepspeed", stage=2, ranks=2))
    out.append(_other("opt-ds-z3-r2-sgdm", "sgdm", engine="deepspeed", stage=3, ranks=2))
    out.append(_other("opt-ds-z1-r2-adagrad-foreach", "adagrad", "foreach", engine="deepspeed", stage=1, ranks=2))
    # Adafactor as a client optimizer: DeepSpeed hands it one flat fp32 partition (1-D: not factored)
    out.append(_other("opt-ds-z2-r2-adafactor", "adafactor", engine="deepspeed", stage=2, ranks=2))
    out.append(_other("opt-fsdp2-r2-fp32-sgdm", "sgdm", "foreach", version=2))
    out.append(_other("opt-fsdp2-r2-fp32-adagrad", "adagrad", "foreach", version=2))
    # `adamw_torch_8bit`: torchao's AdamW8bit, its per-parameter step compiled (counted by the profiler: Dynamo
    # compiles nothing under the tracker); the wide model at few tokens, and FSDP2's local shards
    out.append(_other("opt-torch-llama-h1024-bf16-adam8bit-ao-s64", "adam8bit-ao", "compiled", model="llama-h1024",
                      seq=64))
    out.append(_other("opt-fsdp2-r2-fp32-adam8bit-ao", "adam8bit-ao", "compiled", version=2))
    for case in out[-2:]:
        case["counter"] = "profiler"
    return copy.deepcopy(out)


def smoke_case() -> dict:
    """A tiny plain-torch case for a quick check that the loop runs (not part of the measured record)."""
    return _case("smoke-tiny-bf16-foreach", "tiny", regime="bf16", impl="foreach", seq=16, batch=1)


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in [*cases(), *lora_cases(), *accumulation_cases(), *optimizer_cases(),
                                          smoke_case()]}
