"""The keys each recipe tool's parser accepts, derived from the generated configs/key_inventory.py
(benchmarks/recipe_keys/generate.py: field names and aliases read from the tools' sources; no copy kept here).

- AXOLOTL_KEYS: AxolotlInputConfig and its bases, plus the bundled plugins' args (integrations/*/args.py);
- LLAMAFACTORY_KEYS: LLaMA-Factory's hparams dataclasses and Transformers' Seq2SeqTrainingArguments;
- TRL_KEYS: ScriptArguments, ModelConfig, every trainer's config (trl/trainer, trl/experimental), the scripts'
  own dataclasses and open-r1's, over Transformers' TrainingArguments;
- HANDBOOK_KEYS: the alignment-handbook's own fields (beside TRL's and Transformers').
"""

from __future__ import annotations

from zeromem_lsp.configs import key_inventory as _inventory

TRANSFORMERS_VERSION = _inventory.SOURCES["transformers"].split()[1]
TRL_VERSION = _inventory.SOURCES["trl"].split()[1]

AXOLOTL_KEYS = frozenset(_inventory.RAW["axolotl"])
LLAMAFACTORY_KEYS = frozenset(_inventory.RAW["llamafactory"])
HANDBOOK_KEYS = _inventory.HANDBOOK_OWN
TRL_KEYS = frozenset(_inventory.RAW["trl"]) - HANDBOOK_KEYS
