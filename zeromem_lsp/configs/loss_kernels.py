"""Which cross-entropy kernel a recipe's keys ask for, and whether the tool applies it to the model type (pure).

Each tool's rule, from its code (docs/adapters.md, "Fused and chunked cross-entropy"):
- axolotl `chunked_cross_entropy` (loaders/patch_manager.py `_apply_chunked_cross_entropy_patch`): replaces
  Transformers' ForCausalLM loss for every model (LOSS_MAPPING); `chunked_cross_entropy_num_chunks`, default 8.
- axolotl `liger_fused_linear_cross_entropy` with `axolotl.integrations.liger.LigerPlugin` in `plugins`
  (integrations/liger/plugin.py): liger's MODEL_TYPE_TO_APPLY_LIGER_FN, else a generic patch of the
  `<Prefix>ForCausalLM` class; gpt2 (GPT2LMHeadModel) and gpt_neox (`gpt_neox` body, `embed_out` head) get none.
  Without the plugin the key is not a field axolotl reads.
- axolotl `cut_cross_entropy` with `axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin`
  (integrations/cut_cross_entropy/__init__.py `pre_model_load`): `cce_patch`, or llama's forward on other
  `<Prefix>ForCausalLM` classes; the same two families get none. `cut_cross_entropy` defaults to true once the
  plugin is listed (integrations/cut_cross_entropy/args.py).
- LLaMA-Factory `enable_liger_kernel` (model/model_utils/liger_kernel.py `apply_liger_kernel`): the model types
  it lists; fused linear cross-entropy only at `stage` pt or sft (its default), other stages need logits and get
  Liger's plain cross_entropy (logits made, as Transformers' loss).
- Transformers' Trainer `use_liger_kernel` (TRL recipes, TrainingArguments; integrations/liger.py →
  liger's `_apply_liger_kernel_to_instance`): liger's MODEL_TYPE_TO_APPLY_LIGER_FN, fused linear cross-entropy
  on (each apply function's default) unless `liger_kernel_config` sets `fused_linear_cross_entropy: false`.
Model types are those zeromem's activation model covers (liger-kernel 0.8.5, LLaMA-Factory 0.9.5, axolotl 0.21.0).
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.families import FAMILIES
from zeromem_lsp.configs.workload import read_flag
from zeromem_lsp.provenance import Given

#: liger_kernel/transformers/monkey_patch.py MODEL_TYPE_TO_APPLY_LIGER_FN (and LLaMA-Factory's list), among the
#: families (`Family.liger`); axolotl's plugins patch the same ones
LIGER_TYPES = frozenset(name for name, family in FAMILIES.items() if family.liger)
LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"
CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
AXOLOTL_CHUNKS = 8  # patch_chunked_ce_loss_fn's default num_output_chunks


class LossRequest(NamedTuple):
    """A kernel a recipe asks for (its value credited to the key) and the model types the tool gives it to
    (None: every model type)."""

    kernel: Given
    model_types: frozenset[str] | None
    who: str


def _plugin(data: dict, name: str) -> bool:
    plugins = data.get("plugins")
    return isinstance(plugins, list) and name in plugins


def _axolotl(data: dict) -> LossRequest | None:
    if read_flag(data.get("chunked_cross_entropy")):
        chunks = data.get("chunked_cross_entropy_num_chunks")
        count = chunks if isinstance(chunks, int) and not isinstance(chunks, bool) and chunks > 0 else AXOLOTL_CHUNKS
        note = f"chunked_cross_entropy ({count} chunks{'' if count != AXOLOTL_CHUNKS or chunks else ', the default'})"
        return LossRequest(Given("chunked_ce", note, ("chunked_cross_entropy",)), None, "axolotl")
    for key, plugin, kernel, default in (("liger_fused_linear_cross_entropy", LIGER_PLUGIN, "liger_flce", False),
                                         ("cut_cross_entropy", CCE_PLUGIN, "cut_cross_entropy", True)):
        name, flag = plugin.rsplit(".", 1)[1], read_flag(data.get(key))
        if flag and not _plugin(data, plugin):
            return LossRequest(Given("hf", f"{key} without {plugin} in plugins: axolotl does not read it, "
                                     "Transformers' loss runs", (key,)), None, "axolotl")
        if _plugin(data, plugin) and (flag or (default and key not in data)):
            given = (Given(kernel, f"{key} ({name})", (key,)) if flag else
                     Given(kernel, f"plugins: {name} ({key} defaults to true)", ("plugins",)))
            return LossRequest(given, LIGER_TYPES, f"axolotl's {name}")
    return None


def _llamafactory(data: dict) -> LossRequest | None:
    if not read_flag(data.get("enable_liger_kernel")):
        return None
    stage = data.get("stage", "sft")
    if stage not in ("pt", "sft"):
        return LossRequest(Given("hf", f"enable_liger_kernel at stage {stage}: LLaMA-Factory applies Liger's "
                                 "plain cross_entropy (the stage needs logits), the logits are made as by "
                                 "Transformers' loss", ("enable_liger_kernel",)), None, "LLaMA-Factory")
    return LossRequest(Given("liger_flce", "enable_liger_kernel", ("enable_liger_kernel",)), LIGER_TYPES,
                       "LLaMA-Factory's apply_liger_kernel")


def trainer_loss(data: dict) -> LossRequest | None:
    """Transformers' Trainer (TrainingArguments, TRL configs): `use_liger_kernel` and `liger_kernel_config`."""
    if not read_flag(data.get("use_liger_kernel")):
        return None
    config = data.get("liger_kernel_config")
    if isinstance(config, dict) and read_flag(config.get("fused_linear_cross_entropy")) is False:
        return LossRequest(Given("hf", "use_liger_kernel with liger_kernel_config.fused_linear_cross_entropy: "
                                 "false", ("liger_kernel_config", "fused_linear_cross_entropy")), None, "Transformers")
    return LossRequest(Given("liger_flce", "use_liger_kernel (fused linear cross-entropy: Liger's default)",
                             ("use_liger_kernel",)), LIGER_TYPES, "Liger's _apply_liger_kernel_to_instance")


def recipe_loss(tool: str, data: dict) -> LossRequest | None:
    """The kernel a recipe of `tool` (axolotl, llamafactory, trl) asks for, or None (Transformers' loss)."""
    return {"axolotl": _axolotl, "llamafactory": _llamafactory, "trl": trainer_loss}[tool](data)


def applied(request: LossRequest, model_type: str | None) -> Given:
    """The kernel that runs for `model_type`: the request, or Transformers' loss with why."""
    if request.model_types is None or model_type is None or model_type in request.model_types:
        return request.kernel
    kernel = request.kernel
    return Given("hf", f"{kernel.note} asks for {kernel.value}, but {request.who} has none for model type "
                 f"{model_type}: Transformers' loss", kernel.path)
