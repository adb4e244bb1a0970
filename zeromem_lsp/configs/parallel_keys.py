"""The keys users set for N-D parallelism and long context, read into `Given`s keyed by `Parallelism`'s field names
(issue 30; configs/parallelism.py). Each value keeps the key it came from (note) and where it is written (path), so
the estimate shows its source; `parallelism.parallelism_of` turns the dict into the typed value.

What each tool reads (../shared/notes/long-context.md §1; repositories and commits there):

- axolotl (src/axolotl/utils/schemas/config.py): `tensor_parallel_size` (:1125), `context_parallel_size` (:1107; the
  deprecated `sequence_parallel_degree` when it is not set, validation.py:1634-1639), `expert_parallel_size`,
  `dp_shard_size` / `dp_replicate_size` (:1091-1100), `activation_offloading` (:623: true and disk run TRL's
  OffloadActivations, every saved tensor; legacy and hidden_states move the checkpointed layer inputs),
  `gradient_checkpointing: offload | offload_disk` (validation.py:1426-1442: activation_offloading true / disk),
  `tiled_mlp` + `tiled_mlp_num_shards` (:1009-1021; default ceil(local sequence / 32768),
  monkeypatch/tiled_mlp/patch.py:52-68, where the local sequence is what the rank holds: sequence_len / cp).
- Accelerate YAML `parallelism_config:` keys with their `parallelism_config_` prefix (commands/launch.py:894-975);
  the launcher copies the block's entries verbatim (launch.py:1259-1271), so an unprefixed key is never read.
- TRL `activation_offloading` (trl/trainer/sft_config.py:296-299: OffloadActivations).
- LLaMA-Factory `use_unsloth_gc` (hparams/model_args.py:133: unsloth's CPU-offloaded checkpointing of the layer
  inputs); v1 `cp_size` with `cp_mode` (default and only registered mode `ulysses`, v1/config/training_args.py:85-92).
- DeepSpeed: `tensor_parallel.autotp_size` (0 = off, runtime/tensor_parallel/config.py:45), `sequence_parallel_size`
  (the Ulysses degree, runtime/config.py:719-722), `zero_optimization.zero_hpz_partition_size` (zero/config.py:309),
  `zero_optimization.mics_shard_size` (-1 = off; removed from current DeepSpeed, which the config check reports).
"""

from __future__ import annotations

from typing import Any, cast

from zeromem_lsp.configs.parallelism import AXOLOTL_TILE_TOKENS, axolotl_shards
from zeromem_lsp.configs.training import positive_int, read_flag
from zeromem_lsp.provenance import Given, Path

#: axolotl's `activation_offloading` values -> Parallelism.activation_offload (config.py:623-634).
AXOLOTL_OFFLOAD = {True: "cpu_all", "disk": "cpu_all", "legacy": "cpu", "hidden_states": "cpu", False: "none"}
#: axolotl's deprecated `gradient_checkpointing` offload values -> what they become (validation.py:1426-1442).
AXOLOTL_CHECKPOINT_OFFLOAD = {"offload": "activation_offloading: true", "offload_disk": "activation_offloading: disk"}
#: Accelerate's `parallelism_config_*` sizes -> Parallelism's fields (sp_backend deepspeed is Ulysses).
ACCELERATE_SIZES = {"tp_size": "tensor", "cp_size": "context", "sp_size": "ulysses"}
ACCELERATE_PREFIX = "parallelism_config_"
#: The data-parallel sizes beside the degrees (not Parallelism's: they set the world the degrees must fill).
DATA_PARALLEL = ("dp_shard_size", "dp_replicate_size")


def _at(root: Path | None, *keys: str) -> Path | None:
    return None if root is None else (*root, *keys)


def _degree(data: dict[str, Any], key: str, field: str, out: dict[str, Given], note: str = "",
            root: Path | None = ()) -> None:
    """`data[key]` as the degree of `field` when it is a positive integer (anything else is the tool's refusal)."""
    value = positive_int(data.get(key)) if not isinstance(data.get(key), bool) else None
    if value is not None and field not in out:
        out[field] = Given(value, note or key, _at(root, key))


def axolotl_parallel(data: dict[str, Any]) -> dict[str, Given]:
    out: dict[str, Given] = {}
    _degree(data, "tensor_parallel_size", "tensor", out)
    _degree(data, "context_parallel_size", "context", out)
    _degree(data, "sequence_parallel_degree", "context", out,
            "sequence_parallel_degree (axolotl's deprecated name of context_parallel_size)")
    _degree(data, "expert_parallel_size", "expert", out)
    checkpointing = data.get("gradient_checkpointing")
    offload = data.get("activation_offloading")
    if checkpointing in AXOLOTL_CHECKPOINT_OFFLOAD:
        out["activation_offload"] = Given("cpu_all", f"gradient_checkpointing: {checkpointing} (axolotl runs "
                                          f"{AXOLOTL_CHECKPOINT_OFFLOAD[checkpointing]}: every saved tensor)",
                                          ("gradient_checkpointing",))
    else:
        flag = read_flag(offload)
        key = flag if flag is not None else offload
        if isinstance(key, (bool, str)) and key in AXOLOTL_OFFLOAD:
            what = {"cpu": "the checkpointed layer inputs", "cpu_all": "every saved tensor", "none": "off"}
            found = AXOLOTL_OFFLOAD[key]
            out["activation_offload"] = Given(found, f"activation_offloading: {offload} ({what[found]})",
                                              ("activation_offloading",))
    if read_flag(data.get("tiled_mlp")):
        shards = positive_int(data.get("tiled_mlp_num_shards"))
        if shards is not None and not isinstance(data.get("tiled_mlp_num_shards"), bool):
            out["tiled_mlp_shards"] = Given(shards, "tiled_mlp_num_shards", ("tiled_mlp_num_shards",))
        else:
            sequence = positive_int(data.get("sequence_len")) or 512
            context = out.get("context")
            local = sequence // (cast(int, context.value) if context is not None else 1)
            out["tiled_mlp_shards"] = Given(axolotl_shards(local), f"tiled_mlp: true, tiled_mlp_num_shards absent: "
                                            f"axolotl's ceil({local:,} tokens per rank / {AXOLOTL_TILE_TOKENS})",
                                            ("tiled_mlp",))
    return out


def axolotl_data_parallel(data: dict[str, Any]) -> dict[str, Given]:
    """axolotl's `dp_shard_size` / `dp_replicate_size` as written (positive integers)."""
    out: dict[str, Given] = {}
    for key in DATA_PARALLEL:
        _degree(data, key, key, out)
    return out


def accelerate_parallel(block: object, root: Path = ("parallelism_config",)) -> dict[str, Given]:
    """An Accelerate `parallelism_config:` block: its prefixed sizes (an unprefixed key is not read by the launcher)."""
    out: dict[str, Given] = {}
    if isinstance(block, dict):
        for name, field in ACCELERATE_SIZES.items():
            _degree(block, ACCELERATE_PREFIX + name, field, out, f"parallelism_config.{ACCELERATE_PREFIX}{name}", root)
    return out


def trl_parallel(data: dict[str, Any]) -> dict[str, Given]:
    """TRL's `activation_offloading` (SFTConfig): OffloadActivations moves every saved tensor."""
    flag = read_flag(data.get("activation_offloading"))
    if flag is None:
        return {}
    return {"activation_offload": Given("cpu_all" if flag else "none", "activation_offloading (TRL's "
                                       "OffloadActivations: every saved tensor)" if flag else "activation_offloading",
                                       ("activation_offloading",))}


def llamafactory_parallel(data: dict[str, Any]) -> dict[str, Given]:
    out: dict[str, Given] = {}
    if read_flag(data.get("use_unsloth_gc")):
        out["activation_offload"] = Given("cpu", "use_unsloth_gc (unsloth's checkpointing: the layer inputs to host "
                                          "memory)", ("use_unsloth_gc",))
    mode = data.get("cp_mode", "ulysses")
    if mode == "ulysses":
        _degree(data, "cp_size", "ulysses", out, "cp_size (LLaMA-Factory v1, cp_mode " +
                ("ulysses)" if "cp_mode" in data else "absent: ulysses)"))
    return out


def deepspeed_parallel(config: object, root: Path | None, where: str = "") -> dict[str, Given]:
    """A ds_config's AutoTP, Ulysses, ZeRO++ hpZ and MiCS sizes; `root` None: the config is another file `where`."""
    out: dict[str, Given] = {}
    if not isinstance(config, dict):
        return out
    suffix = f" (in {where})" if where else ""
    tensor = config.get("tensor_parallel")
    if isinstance(tensor, dict):
        _degree(tensor, "autotp_size", "tensor", out, f"tensor_parallel.autotp_size{suffix}",
                _at(root, "tensor_parallel"))
    _degree(config, "sequence_parallel_size", "ulysses", out, f"sequence_parallel_size{suffix}", root)
    zero = config.get("zero_optimization")
    if isinstance(zero, dict):
        _degree(zero, "zero_hpz_partition_size", "hpz_partition", out, f"zero_optimization.zero_hpz_partition_size"
                f"{suffix}", _at(root, "zero_optimization"))
        _degree(zero, "mics_shard_size", "mics_shard", out, f"zero_optimization.mics_shard_size{suffix}",
                _at(root, "zero_optimization"))
    return out


__all__ = ["accelerate_parallel", "axolotl_data_parallel", "axolotl_parallel", "deepspeed_parallel",
           "llamafactory_parallel", "trl_parallel"]
