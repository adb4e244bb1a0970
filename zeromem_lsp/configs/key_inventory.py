"""PLACEHOLDER until benchmarks/recipe_keys/generate.py writes the full inventory (issue 26): the keys of each
format that change per-GPU memory but that zeromem does not model, with their defaults and what they do.
The interface (`FORMATS`, `classify`, `not_modelled`) is what the generated module keeps."""

from __future__ import annotations

FORMATS = ("axolotl", "llamafactory", "trl", "transformers", "accelerate", "deepspeed")

_NOT_MODELLED: dict[str, dict[str, tuple[object, str]]] = {
    "axolotl": {
        "context_parallel_size": (1, "ring attention splits activations and logits over the CP ranks"),
        "tensor_parallel_size": (1, "tensor parallelism divides the weights and activations"),
        "expert_parallel_size": (1, "expert parallelism divides the routed experts"),
        "activation_offloading": (False, "checkpointed activations are moved to host memory"),
        "tiled_mlp": (None, "the MLP runs in tiles over the sequence"),
    },
    "llamafactory": {"use_galore": (False, "GaLore projects the optimizer state to a low rank")},
    "trl": {"padding_free": (False, "padding-free batches change the tokens per micro-batch")},
    "transformers": {},
    "accelerate": {"parallelism_config.parallelism_config_cp_size": (1, "context parallelism")},
    "deepspeed": {"tensor_parallel.autotp_size": (0, "AutoTP divides the weights")},
}


def classify(fmt: str, key: str) -> tuple[str, object, str] | None:
    found = _NOT_MODELLED.get(fmt, {}).get(key)
    return ("not_modelled", *found) if found is not None else None


def _unset(value: object, default: object) -> bool:
    return value == default or (value in (None, False) and default in (None, False))


def not_modelled(fmt: str, data: dict) -> list[tuple[tuple[str, ...], object, str]]:
    out = []
    for key, (default, why) in _NOT_MODELLED.get(fmt, {}).items():
        container: object = data
        path = tuple(key.split("."))
        for step in path:
            container = container.get(step) if isinstance(container, dict) else None
        if container is not None and not _unset(container, default):
            out.append((path, container, why))
    return out
