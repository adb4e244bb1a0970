"""One rank's training step under each engine: the model from a config dict, torch / DDP / DeepSpeed / FSDP1 /
FSDP2, the optimizer, and a Labeller that names the storages a StorageTracker counts (needs torch).

Shared by measure.py (CPU, storage tracker) and measure_gpu.py (CUDA allocator statistics).
"""

from __future__ import annotations

import json

def _fsdp2_no_sync(module):
    import contextlib

    @contextlib.contextmanager
    def context():
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)
    return context()


def _local(tensor):
    return getattr(tensor, "_local_tensor", tensor)


def _walk(value, depth=0):
    """Tensors reachable from value through lists, tuples, dicts and a few object attributes."""
    import torch
    if isinstance(value, torch.Tensor):
        yield value
        grad = value.grad if value.is_leaf else None
        if grad is not None:
            yield grad
    elif depth < 3 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in value.values():
            yield from _walk(item, depth + 1)
    elif depth < 3 and hasattr(value, "buffer") and hasattr(value, "index"):  # DeepSpeed's IPG bucket objects
        yield from _walk(value.buffer, depth + 1)


class Labeller:
    """Names storages (by tracker serial): param, grad, master (an optimizer's own fp32 copy), master_grad,
    optimizer_state, ds.<attribute of DeepSpeed's ZeRO/bf16 optimizer>. The first name wins. Without a tracker
    (CUDA runs) it does nothing."""

    def __init__(self, tracker, model, optimizer, wrapper=None):
        self.tracker, self.model, self.optimizer, self.wrapper = tracker, model, optimizer, wrapper
        self.labels: dict[int, str] = {}

    def _name(self, tensor, label):
        serial = self.tracker.serial(_local(tensor))
        if serial is not None and serial not in self.labels:
            self.labels[serial] = label

    def collect(self):
        import torch
        if self.tracker is None:
            return
        params = list(self.model.parameters())
        for p in params:
            self._name(p, "param")
            ds_tensor = getattr(p, "ds_tensor", None)
            if ds_tensor is not None:
                self._name(ds_tensor, "param_partition")
        for p in params:
            if p.grad is not None:
                self._name(p.grad, "grad")
        inner = self.optimizer
        if inner is not None:
            for group in inner.param_groups:
                for p in group["params"]:
                    self._name(p, "master")
                    if p.grad is not None:
                        self._name(p.grad, "master_grad")
            for state in inner.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor) and value.numel() > 1:
                        self._name(value, "optimizer_state")
        if self.wrapper is not None:
            for attribute, value in sorted(vars(self.wrapper).items()):
                if attribute.startswith("__") or isinstance(value, torch.nn.Module):
                    continue
                for tensor in _walk(value):
                    self._name(tensor, "ds." + attribute.split("__")[-1])


def dtype_keyword(dtype) -> dict:
    """`dtype=` as from_config / from_pretrained of the running Transformers take it (versions_compat)."""
    import transformers
    from versions_compat import dtype_keyword as keyword
    return {keyword(transformers.__version__): dtype}


def build_model(case, torch):
    from transformers import AutoConfig, AutoModelForCausalLM
    fields = dict(case["config"])
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    config._attn_implementation = case["attention"]
    dtype = torch.bfloat16 if case["regime"] == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_config(config, **dtype_keyword(dtype))
    if "lora" in case:
        model = _peft_model(case, model, torch)
    model.train()
    case.setdefault("_model_numel", sum(p.numel() for p in model.parameters()))
    if case["gradient_checkpointing"]:  # after get_peft_model, as HF Trainer (it enables input gradients too)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _peft_model(case, model, torch):
    """get_peft_model with the case's LoraConfig; a quantized base is saved and loaded back through bitsandbytes
    (as transformers loads a QLoRA base) and prepared with prepare_model_for_kbit_training."""
    import tempfile
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    lora = dict(case["lora"])
    quantization, autocast = lora.pop("quantization"), lora.pop("autocast_adapter_dtype", True)
    if quantization:
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig
        fields = dict(quantization)
        if "bnb_4bit_compute_dtype" in fields:
            fields["bnb_4bit_compute_dtype"] = getattr(torch, fields["bnb_4bit_compute_dtype"])
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            del model
            model = AutoModelForCausalLM.from_pretrained(folder, **dtype_keyword(torch.bfloat16), device_map="cpu",
                                                         attn_implementation=case["attention"],
                                                         quantization_config=BitsAndBytesConfig(**fields))
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model = get_peft_model(model, LoraConfig(**{key: value for key, value in lora.items() if value is not None}),
                           autocast_adapter_dtype=autocast)
    case.setdefault("_trainable_numel", sum(p.numel() for p in model.parameters() if p.requires_grad))
    return model


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def torch_optimizer(case, params, torch):
    """The case's optimizer as HF Trainer builds it (transformers/trainer_optimizer.py): torch AdamW, SGD (its
    `momentum`), Adagrad, Transformers' Adafactor with `scale_parameter=False, relative_step=False`, or torchao's
    AdamW8bit (its per-parameter step compiled by torch.compile)."""
    settings = case["optimizer"]
    name, impl, lr = settings["name"], settings["impl"], settings["lr"]
    if name == "AdamW8bit":  # `adamw_torch_8bit`: torchao's, block_size 256 (`_get_torchao_optimizer`)
        from torchao.optim import AdamW8bit
        return AdamW8bit(params, lr=lr, block_size=256, bf16_stochastic_round=False)
    if name == "Adafactor":  # one implementation: a Python loop over the parameters
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=lr, scale_parameter=False, relative_step=False)
    flags = {"foreach": {"foreach": True}, "for-loop": {"foreach": False}, "fused": {"fused": True}}[impl]
    if name == "SGD":
        return torch.optim.SGD(params, lr=lr, momentum=settings.get("momentum", 0.0), **flags)
    if name == "Adagrad":
        return torch.optim.Adagrad(params, lr=lr, **flags)
    return torch.optim.AdamW(params, lr=lr, **flags)


class Run:
    """One rank's engine: forward(ids) -> loss, backward(loss), step() (optimizer step + zero_grad)."""

    def __init__(self, case, rank, world, torch, tracker, device="cpu"):
        self.case, self.rank, self.world, self.torch, self.device = case, rank, world, torch, device
        backend = "gloo" if device == "cpu" else "nccl"
        self.extra: dict = {}
        engine = case["engine"]
        self.autocast = case["regime"] == "autocast" or case.get("autocast", False)  # (Accelerate's bf16 forward)
        if engine == "deepspeed":
            import deepspeed
            deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)
            model = build_model(case, torch)
            # HF Trainer: its optimizer over the trainable parameters, and those as model_parameters
            params = trainable(model)
            client = None if "optimizer" in case["ds_config"] else torch_optimizer(case, params, torch)
            self.engine, self.wrapper, _, _ = deepspeed.initialize(model=model, optimizer=client,
                                                                   model_parameters=params,
                                                                   config=dict(case["ds_config"]))
            self.model = self.engine.module
            inner = getattr(self.wrapper, "optimizer", self.wrapper)
            self.inner = inner
            self.extra["optimizer_class"] = f"{type(inner).__module__}.{type(inner).__name__}"
            self.extra["zero_optimizer_class"] = type(self.wrapper).__name__
            self.extra["foreach"] = inner.defaults.get("foreach") if hasattr(inner, "defaults") else None
            self.extra["effective_zero_config"] = json.loads(self.engine._config.zero_config.model_dump_json())
            self.labeller = Labeller(tracker, self.model, inner, wrapper=self.wrapper)
            return
        if world > 1:
            torch.distributed.init_process_group(backend, rank=rank, world_size=world)
        model = build_model(case, torch)
        if device != "cpu":  # (moving a FakeTensorMode model, even to where it is, fails)
            model = model.to(device)
        self.model = model
        if engine == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            self.module = DistributedDataParallel(model, **case["ddp"])
        elif engine == "fsdp2":
            self.module = self._fsdp2(model)
        elif engine == "fsdp1":
            self.module = self._fsdp1(model)
        else:
            self.module = model
        self.inner = torch_optimizer(case, trainable(self.module), torch)
        self.labeller = Labeller(tracker, self.module, self.inner)

    def _layers(self, model):
        if "lora" in self.case:  # PeftModel -> LoraModel -> the causal LM
            return list(model.base_model.model.model.layers)
        return list(model.model.layers)

    def _fsdp2(self, model):
        torch = self.torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        settings = dict(self.case["fsdp"])
        if settings.get("replicate"):  # no sharding: HSDP over a (replicate R, shard 1) mesh
            mesh = init_device_mesh(torch.device(self.device).type, (self.world, 1),
                                    mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(torch.device(self.device).type, (self.world,))
        kwargs = {"mesh": mesh, "reshard_after_forward": settings.get("reshard_after_forward", True)}
        if self.case["regime"] == "fsdp-mixed":
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in self._layers(model):
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        return model

    def _fsdp1(self, model):
        torch = self.torch
        import functools
        from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        layer_class = type(self._layers(model)[0])
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer_class})
        if "lora" in self.case:  # PEFT's policy: every trainable leaf (lora_A / lora_B) its own unit, so no flat
            from peft.utils.other import fsdp_auto_wrap_policy  # parameter mixes frozen bf16 and fp32 adapters
            policy = fsdp_auto_wrap_policy(model)
        kwargs = {"auto_wrap_policy": policy, "device_id": torch.device(self.device), "use_orig_params": True,
                  "sharding_strategy": getattr(ShardingStrategy, self.case["fsdp"]["sharding_strategy"])}
        if self.case["regime"] == "fsdp-mixed":
            kwargs["mixed_precision"] = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                                       buffer_dtype=torch.bfloat16)
        return FullyShardedDataParallel(model, **kwargs)

    def forward(self, ids):
        torch = self.torch
        target = self.engine if self.case["engine"] == "deepspeed" else self.module
        if self.autocast:
            with torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16):
                return target(input_ids=ids, labels=ids).loss
        return target(input_ids=ids, labels=ids).loss

    def backward(self, loss, boundary=True):
        if self.case["engine"] == "deepspeed":  # Accelerate's DeepSpeedEngineWrapper.backward
            if self.case.get("gradient_accumulation_steps", 1) > 1:
                self.engine.set_gradient_accumulation_boundary(is_boundary=boundary)
            self.engine.backward(loss)
        else:
            loss.backward()

    def accumulating(self, last):
        """The context a micro-batch runs in, as Accelerate's `Accelerator.no_sync` (entered by `accumulate`, which
        HF Trainer wraps each training step in) chooses it: for every micro-batch but the last, DDP's and FSDP1's
        `no_sync()`, FSDP2's `set_requires_gradient_sync(False)`, DeepSpeed's `engine.no_sync()` below ZeRO-2;
        nothing on the last or on one process."""
        import contextlib
        engine = self.case["engine"]
        if last or self.world == 1 and engine != "deepspeed":
            return contextlib.nullcontext()
        if engine == "fsdp2":
            return _fsdp2_no_sync(self.module)
        if engine == "deepspeed":
            partitioned = self.engine.zero_optimization_partition_gradients()
            return contextlib.nullcontext() if partitioned or self.world == 1 else self.engine.no_sync()
        return self.module.no_sync()

    def step(self):
        if self.case["engine"] == "deepspeed":
            self.engine.step()
        else:
            self.inner.step()
            self.inner.zero_grad(set_to_none=True)
