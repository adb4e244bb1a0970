"""Generate zeromem_lsp/configs/key_inventory.py: every key each tool reads, with its declared default, classified.

The key sets and defaults are facts read from the tools' sources with `ast` (nothing imported from them); the
classification is the hand-written table benchmarks/recipe_keys/classes.py; benchmarks/recipe_keys/inventory.py
joins the two (pure, no sources needed: the tests re-run it on the raw sets the generated module stores).
configs/recipe_keys.py derives the recipe key sets from the generated module.

    python benchmarks/recipe_keys/generate.py \
        --axolotl /work/.mirror/axolotl-ai-cloud+axolotl/repo \
        --llamafactory /work/.mirror/hiyouga+LLaMA-Factory/repo \
        --handbook /work/.mirror/huggingface+alignment-handbook/repo \
        --open-r1 /work/.mirror/huggingface+open-r1/repo \
        --trl /tmp/wheels/trl-1.16.0 --transformers /tmp/wheels/transformers-5.24.0 \
        --accelerate /tmp/wheels/accelerate-1.16.0

The git directories are read with `git show`; TRL, Transformers and Accelerate are their PyPI wheels unpacked
(`pip download --no-deps trl==1.16.0 transformers==5.24.0 accelerate==1.16.0`, then unzip), whose
versions come from their dist-info METADATA.

Where each format's keys come from:
- axolotl: the fields (and `Field(alias=...)`) of AxolotlInputConfig and its bases (src/axolotl/utils/schemas), plus
  every class in the bundled plugins' src/axolotl/integrations/*/args.py (a plugin's keys are read when listed in
  `plugins:`);
- llamafactory: ModelArguments, DataArguments, TrainingArguments, FinetuningArguments, GeneratingArguments and their
  bases (src/llamafactory/hparams), Transformers' Seq2SeqTrainingArguments below them;
- trl: ScriptArguments, ModelConfig, the scripts' own ScriptArguments subclasses (trl/scripts/*.py) and every
  `*Config` class of trl/trainer/*_config.py and trl/experimental/**/*_config.py (their TrainingArguments base from
  Transformers), plus the alignment-handbook's and open-r1's script dataclasses (TrlParser accepts whatever the
  script's dataclasses declare);
- transformers: TrainingArguments;
- accelerate: BaseConfig, ClusterConfig and SageMakerConfig fields (commands/config/config_args.py), the two old
  spellings converted on load, and the nested `fsdp_config.*`, `deepspeed_config.*`, `parallelism_config.*` keys:
  the launch arguments of those groups (commands/launch.py), with their argparse defaults;
- deepspeed: the key paths zeromem mirrors from DeepSpeed 0.19.8 (configs/deepspeed/facts.py: top-level keys and the
  strict sections' fields, with their defaults), plus the non-strict sections' keys in DEEPSPEED_LOOSE below.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import inventory  # noqa: E402

OUT = HERE.parents[1] / "zeromem_lsp" / "configs" / "key_inventory.py"

#: Keys of DeepSpeed 0.19.8 sections that zeromem does not mirror as strict models (DeepSpeed reads them with
#: get_scalar_param and these defaults: runtime/activation_checkpointing/config.py, runtime/pipe/config via
#: runtime/config.py get_pipeline_config, runtime/config.py data types and optimizer/scheduler sections).
DEEPSPEED_LOOSE = {
    "activation_checkpointing.partition_activations": False,
    "activation_checkpointing.contiguous_memory_optimization": False,
    "activation_checkpointing.cpu_checkpointing": False,
    "activation_checkpointing.number_checkpoints": None,
    "activation_checkpointing.synchronize_checkpoint_boundary": False,
    "activation_checkpointing.profile": False,
    "pipeline.stages": "auto",
    "pipeline.partition": "best",
    "pipeline.seed_layers": False,
    "pipeline.activation_checkpoint_interval": 0,
    "pipeline.pipe_partitioned": True,
    "pipeline.grad_partitioned": True,
    "data_types.grad_accum_dtype": None,
    "optimizer.type": None,
    "optimizer.params": None,
    "scheduler.type": None,
    "scheduler.params": None,
    "expert_parallel.enabled": False,
    "expert_parallel.autoep_size": 1,
    # DeepSpeedZeroConfig fields zeromem's strict mirror (configs/deepspeed/models.py ZeroConfig) lacks
    "zero_optimization.mics_shard_size": -1,
    "zero_optimization.mics_hierarchical_params_gather": False,
}


class Source:
    """Python files of one tool: a git directory (read at HEAD) or an unpacked wheel folder."""

    def __init__(self, label: str, root: str, git: bool):
        self.label, self.root, self.git = label, root, git
        self.classes: dict[str, ast.ClassDef] = {}
        self.aliases: dict[str, str] = {}  # `Base = Other` at a file's top level (the last one written wins)

    def names(self, folder: str) -> list[str]:
        if self.git:
            out = subprocess.run(["git", "--git-dir", self.root, "ls-tree", "-r", "--name-only", "HEAD", folder],
                                 check=True, capture_output=True, text=True).stdout.split()
            return sorted(name for name in out if name.endswith(".py"))
        base = Path(self.root)
        return sorted(str(path.relative_to(base)) for path in (base / folder).rglob("*.py"))

    def read(self, name: str) -> str:
        if self.git:
            return subprocess.run(["git", "--git-dir", self.root, "show", f"HEAD:{name}"], check=True,
                                  capture_output=True, text=True).stdout
        return (Path(self.root) / name).read_text(encoding="utf-8")

    def load(self, *names: str) -> list[ast.ClassDef]:
        """Parse the files; their classes join this source's table (first definition wins). Returns them."""
        found = []
        for name in names:
            for node in ast.walk(ast.parse(self.read(name))):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                        and isinstance(node.value, ast.Name):
                    self.aliases[node.targets[0].id] = node.value.id
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)
                    found.append(node)
        return found

    def version(self) -> str:
        if self.git:
            return subprocess.run(["git", "--git-dir", self.root, "rev-parse", "HEAD"], check=True,
                                  capture_output=True, text=True).stdout.strip()
        meta = next(Path(self.root).glob("*.dist-info/METADATA"))
        return next(line.split(":", 1)[1].strip() for line in meta.read_text().splitlines()
                    if line.startswith("Version:"))


def _literal(node: ast.AST | None) -> object:
    """The default as written when it is a plain literal (sets, which have no stable repr, count as not literal)."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return None if isinstance(value, (set, frozenset, complex, bytes)) else value


def _field_default(value: ast.AST | None) -> tuple[object, list[str], bool]:
    """(default, aliases, init) of a class-body assignment's value (dataclasses.field / pydantic.Field or a literal)."""
    if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in ("field", "Field"):
        keywords = {keyword.arg: keyword.value for keyword in value.keywords if keyword.arg}
        aliases = [keywords[name].value for name in ("alias", "validation_alias")
                   if isinstance(keywords.get(name), ast.Constant) and isinstance(keywords[name].value, str)]
        init = not (isinstance(keywords.get("init"), ast.Constant) and keywords["init"].value is False)
        if "default" in keywords:
            return _literal(keywords["default"]), aliases, init
        if value.args and not (isinstance(value.args[0], ast.Constant) and value.args[0].value is Ellipsis):
            return _literal(value.args[0]), aliases, init
        return None, aliases, init
    return _literal(value), [], True


#: Field name -> its annotation as written, most derived first (ANNOTATIONS[id(found)] for one `fields` result).
ANNOTATIONS: dict[int, dict[str, str]] = {}


def fields(root: str, source: Source, fallbacks: tuple[Source, ...], outside: set[str]) -> dict[str, object]:
    """Field name (and alias) -> default of `root` and its bases; the most derived declaration wins. Each field's
    annotation is kept in ANNOTATIONS[id(result)]."""
    found: dict[str, object] = {}
    annotations = ANNOTATIONS.setdefault(id(found), {})
    todo, seen = [(source, root, None)], set()
    while todo:
        where, name, child = todo.pop(0)
        short = name.split(".")[-1]
        short = where.aliases.get(short, short) if short not in where.classes else short
        node, home = None, where
        for candidate in (where, *fallbacks):
            if (candidate, short) == (where, child) and candidate is where:  # class X(trl.X): not itself
                continue
            if short in candidate.classes:
                node, home = candidate.classes[short], candidate
                break
        if node is None:
            outside.add(name)
            continue
        if (home.label, short) in seen:
            continue
        seen.add((home.label, short))
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            if item.target.id.startswith("_") or "ClassVar" in ast.unparse(item.annotation):
                continue
            default, aliases, init = _field_default(item.value)
            if not init:
                continue
            for key in (item.target.id, *aliases):
                found.setdefault(key, default)
                annotations.setdefault(key, ast.unparse(item.annotation))
        for base in node.bases:
            text = ast.unparse(base)
            if text not in ("object", "BaseModel", "ABC", "Generic") and not text.startswith(("Generic[", "Enum")):
                todo.append((home, text, short))
    return found


def _merge(*parts: dict[str, object]) -> dict[str, object]:
    merged: dict[str, object] = {}
    annotations = ANNOTATIONS.setdefault(id(merged), {})
    for part in parts:
        for key, default in part.items():
            merged.setdefault(key, default)
            if key in ANNOTATIONS.get(id(part), {}):
                annotations.setdefault(key, ANNOTATIONS[id(part)][key])
    return merged


def _launch_groups(source: Source) -> dict[str, dict[str, object]]:
    """accelerate launch's argument groups -> {option name without dashes: argparse default}."""
    groups: dict[str, dict[str, object]] = {}
    for node in ast.walk(ast.parse(source.read("accelerate/commands/launch.py"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and isinstance(node.func.value, ast.Name) and node.args and isinstance(node.args[0], ast.Constant)):
            keywords = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
            default = _literal(keywords.get("default"))
            action = keywords.get("action")
            if default is None and isinstance(action, ast.Constant) and action.value == "store_true":
                default = False
            groups.setdefault(node.func.value.id, {})[str(node.args[0].value).lstrip("-")] = default
    return groups


def accelerate_keys(source: Source) -> dict[str, object]:
    source.load("accelerate/commands/config/config_args.py")
    outside: set[str] = set()
    top = _merge(*(fields(name, source, (), outside) for name in ("ClusterConfig", "SageMakerConfig")))
    top.update({"fp16": None, "dynamo_backend": None})  # old spellings process_config converts on load
    groups = _launch_groups(source)
    nested = {}
    for block, group in (("fsdp_config", "fsdp_args"), ("deepspeed_config", "deepspeed_args"),
                         ("parallelism_config", "parallelism_config_args")):
        for key, default in groups[group].items():
            if block == "fsdp_config" and not key.startswith("fsdp_"):
                continue
            nested[f"{block}.{key}"] = default
    return {**top, **nested}


def deepspeed_keys() -> dict[str, object]:
    import enum

    from zeromem_lsp.configs.deepspeed import catalog, facts

    def plain(value: object) -> object:
        value = value.value if isinstance(value, enum.Enum) else value
        return value if isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)) else None

    found: dict[str, object] = {key: None for key in facts.KNOWN_TOP_LEVEL_KEYS}
    for path, model in catalog.STRICT_SECTION_NAMES.items():
        section = facts.SECTIONS[model]
        for alias, name in section["keys"].items():
            how, value = section["fields"][name][4] if name in section["fields"] else ("", None)
            found[".".join((*path, alias))] = plain(value) if how in ("value", "copy") else None
    for key, default in DEEPSPEED_LOOSE.items():
        found.setdefault(key, default)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("axolotl", "llamafactory", "handbook", "open-r1", "trl", "transformers", "accelerate"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    axolotl = Source("axolotl", args.axolotl, True)
    factory = Source("LLaMA-Factory", args.llamafactory, True)
    handbook = Source("alignment-handbook", args.handbook, True)
    open_r1 = Source("open-r1", getattr(args, "open_r1"), True)
    trl = Source("TRL", args.trl, False)
    transformers = Source("transformers", args.transformers, False)
    accelerate = Source("accelerate", args.accelerate, False)
    outside: set[str] = set()

    transformers.load("transformers/training_args.py", "transformers/training_args_seq2seq.py")
    training_arguments = fields("TrainingArguments", transformers, (), outside)

    axolotl.load(*axolotl.names("src/axolotl/utils/schemas"))
    plugin_files = [name for name in axolotl.names("src/axolotl/integrations") if name.endswith("/args.py")]
    plugins = [node.name for node in axolotl.load(*plugin_files)]
    axolotl_keys = _merge(fields("AxolotlInputConfig", axolotl, (), outside),
                          *(fields(name, axolotl, (), outside) for name in plugins))

    factory.load(*factory.names("src/llamafactory/hparams"))
    factory_keys = _merge(*(fields(name, factory, (transformers,), outside) for name in (
        "ModelArguments", "DataArguments", "TrainingArguments", "FinetuningArguments", "GeneratingArguments")))

    trl_files = [name for name in trl.names("trl") if name.startswith(("trl/trainer/", "trl/experimental/"))
                 and name.endswith("_config.py")]
    script_files = [name for name in trl.names("trl/scripts") if name != "trl/scripts/vllm_serve.py"]
    trl.load("trl/trainer/base_config.py", "trl/trainer/model_config.py", *script_files)
    configs = sorted(node.name for node in trl.load(*trl_files)
                     if node.name.endswith("Config") and not node.name.startswith("_") and node.name != "ModelConfig")
    scripts = sorted(name for name in trl.classes if name.endswith("ScriptArguments") and name != "ScriptArguments")
    first = [name for name in ("SFTConfig", "DPOConfig", "GRPOConfig") if name in configs]
    trl_roots = ["ScriptArguments", "ModelConfig", *first, *(c for c in configs if c not in first), *scripts]
    trl_library = _merge(*(fields(name, trl, (transformers,), outside) for name in trl_roots))
    handbook.load("src/alignment/configs.py")
    open_r1.load("src/open_r1/configs.py")
    handbook_keys = _merge(*(fields(name, handbook, (trl, transformers), outside)
                             for name in ("ScriptArguments", "SFTConfig", "DPOConfig", "ORPOConfig")))
    open_r1_keys = _merge(*(fields(name, open_r1, (trl, transformers), outside)
                            for name in ("ScriptArguments", "SFTConfig", "GRPOConfig", "GRPOScriptArguments")))
    trl_keys = _merge(trl_library, open_r1_keys, handbook_keys)

    raw = {
        "axolotl": axolotl_keys, "llamafactory": factory_keys, "trl": trl_keys,
        "transformers": training_arguments, "accelerate": accelerate_keys(accelerate), "deepspeed": deepspeed_keys(),
    }
    sources = {
        "axolotl": f"axolotl {axolotl.version()} (src/axolotl/utils/schemas AxolotlInputConfig and bases; "
                   f"plugins: {', '.join(sorted({name.split('/')[-2] for name in plugin_files}))})",
        "llamafactory": f"LLaMA-Factory {factory.version()} (src/llamafactory/hparams) + transformers "
                        f"{transformers.version()} Seq2SeqTrainingArguments",
        "trl": f"TRL {trl.version()} ({', '.join(trl_roots)}) + transformers {transformers.version()} "
               f"TrainingArguments + alignment-handbook {handbook.version()} (src/alignment/configs.py) + open-r1 "
               f"{open_r1.version()} (src/open_r1/configs.py)",
        "transformers": f"transformers {transformers.version()} (training_args.py TrainingArguments)",
        "accelerate": f"accelerate {accelerate.version()} (commands/config/config_args.py, commands/launch.py)",
        "deepspeed": "DeepSpeed 0.19.8 as zeromem mirrors it (zeromem_lsp/configs/deepspeed/facts.py, catalog.py) "
                     "+ benchmarks/recipe_keys/generate.py DEEPSPEED_LOOSE",
    }
    handbook_own = frozenset(set(handbook_keys) - set(trl_library))
    types = {fmt: {key: kind for key, text in ANNOTATIONS.get(id(raw[fmt]), {}).items()
                   if key in raw[fmt] and (kind := inventory.simple_type(text)) is not None}
             for fmt in ("axolotl", "llamafactory", "trl")}
    OUT.write_text(inventory.render(sources, raw, handbook_own, types), encoding="utf-8")
    counts = {fmt: len(keys) for fmt, keys in raw.items()}
    print(f"wrote {OUT}: {counts}; bases outside the sources: {sorted(outside)}")


if __name__ == "__main__":
    main()
