"""The editor snippets stay in step with the server: every setting they pass is one it accepts."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from zeromem_lsp.assist.settings import resolve_settings, snake_case
from zeromem_lsp.configs.settings import SETTING_NAMES

EDITORS = Path(__file__).resolve().parents[2] / "editors"
SERVER_SETTINGS = {"gpu_memory", "parameters", "world_size", "precision", "optimizer", "warn_fraction"}
#: The peak's settings (issue 12), so far only in the VS Code extension's manifest.
PEAK_SETTINGS = {"sequence_length", "micro_batch", "gradient_checkpointing", "attention", "reserved",
                 "gradient_accumulation_steps"}
#: The training step the peak follows (issue 19).
STEP_SETTINGS = {"engine", "fsdp_version", "param_dtype", "optimizer_impl", "loss_kernel", "transformers_version"}
#: A LoRA / QLoRA run (issue 20).
ADAPTER_SETTINGS = {"lora_rank", "lora_targets", "modules_to_save", "dora", "quantization", "double_quant",
                    "kbit_prepare", "lora_dropout"}
#: Which modules LoRA adapts, as PEFT matches them (issue 20): lists, a {regex: rank} object, a boolean.
MATCHING_SETTINGS = {"exclude_modules", "layers_to_transform", "layers_pattern", "lora_rank_pattern",
                     "lora_target_linear", "target_parameters"}
#: What the extension sends nothing for (src/config.ts): the dropdowns' "default", empty text, lists and objects.
UNSET = ("", "default", [], {})
#: The Accelerate config a recipe is launched with (issue 20).
LAUNCH_SETTINGS = {"accelerate_config"}
#: A preference trainer (issue 20): TRL's reference model and loss.
TRAINER_SETTINGS = {"trainer", "precompute_ref_log_probs"}
#: N-D parallelism and long context (issue 30).
PARALLEL_SETTINGS = {"tensor_parallel", "context_parallel", "ulysses", "expert_parallel", "activation_offload",
                     "tiled_mlp"}


def test_the_six_editor_settings_are_server_settings():
    assert SERVER_SETTINGS <= set(SETTING_NAMES)


def test_helix_languages_toml():
    config = tomllib.loads((EDITORS / "helix" / "languages.toml").read_text(encoding="utf-8"))
    server = config["language-server"]["zeromem"]
    assert [server["command"], *server["args"]] == ["zeromem", "serve"]
    settings = server["config"]["zeromem"]  # initializationOptions {"zeromem": {...}} and the "zeromem" section
    assert resolve_settings(server["config"])[1] == [] and resolve_settings(settings)[1] == []
    assert resolve_settings(server["config"])[0].gpu_memory is not None
    commented = re.findall(r"^# (\w+) = ", (EDITORS / "helix" / "languages.toml").read_text(encoding="utf-8"), re.M)
    assert SERVER_SETTINGS <= set(commented) | set(settings)
    for language in config["language"]:
        assert "zeromem" in language["language-servers"]


def test_vscode_settings_mirror_the_server():
    manifest = json.loads((EDITORS / "vscode" / "package.json").read_text(encoding="utf-8"))
    properties = manifest["contributes"]["configuration"]["properties"]
    server_keys = {snake_case(key.removeprefix("zeromem.")) for key in properties} & set(SETTING_NAMES)
    assert server_keys == (SERVER_SETTINGS | PEAK_SETTINGS | STEP_SETTINGS | ADAPTER_SETTINGS | MATCHING_SETTINGS
                           | LAUNCH_SETTINGS | TRAINER_SETTINGS | PARALLEL_SETTINGS)
    sample = {"gpuMemory": "24GiB", "parameters": "7B", "worldSize": 8, "precision": "bf16", "optimizer": "adamw",
              "warnFraction": 0.8, "sequenceLength": 4096, "microBatch": 2, "gradientAccumulationSteps": 4,
              "gradientCheckpointing": True,
              "attention": "eager", "reserved": "1GiB", "engine": "torch", "fsdpVersion": 1, "paramDtype": "fp32",
              "optimizerImpl": "for-loop", "loraRank": 16, "loraTargets": "q_proj, v_proj", "modulesToSave": "lm_head",
              "dora": True, "quantization": "nf4", "doubleQuant": True,
              "accelerateConfig": "recipes/accelerate_configs/zero3.yaml",
              "lossKernel": "chunked_ce", "trainer": "dpo",
              "precomputeRefLogProbs": True, "excludeModules": {"regex": ".*mlp.*"}, "layersToTransform": [0, 2],
              "layersPattern": ["layers"], "loraRankPattern": {"v_proj": 32}, "loraTargetLinear": True,
              "targetParameters": ["mlp.experts.down_proj"], "tensorParallel": 2, "contextParallel": 4, "ulysses": 2,
              "expertParallel": 8, "activationOffload": "cpu", "tiledMlp": True}
    settings, problems = resolve_settings(sample)
    assert problems == [] and settings.world_size == 8
    assert (settings.lora_rank, settings.lora_targets, settings.modules_to_save) == (16, ("q_proj", "v_proj"), ("lm_head",))
    assert (settings.dora, settings.quantization, settings.double_quant) == (True, "nf4", True)
    assert settings.accelerate_config == "recipes/accelerate_configs/zero3.yaml"
    assert (settings.engine, settings.param_dtype, settings.optimizer_impl) == ("torch", "fp32", "for-loop")
    assert settings.fsdp_version == 1
    assert settings.loss_kernel == "chunked_ce"
    assert (settings.trainer, settings.precompute_ref_log_probs) == ("dpo", True)
    assert (settings.sequence_length, settings.micro_batch, settings.reserved) == (4096, 2, 2**30)
    assert settings.gradient_accumulation_steps == 4
    assert (settings.exclude_modules.regex, settings.layers_to_transform, settings.layers_pattern) == (
        ".*mlp.*", (0, 2), ("layers",))
    assert (settings.lora_rank_pattern, settings.lora_target_linear, settings.target_parameters) == (
        (("v_proj", 32),), True, ("mlp.experts.down_proj",))
    assert (settings.tensor_parallel, settings.context_parallel, settings.ulysses, settings.expert_parallel,
            settings.activation_offload, settings.tiled_mlp) == (2, 4, 2, 8, "cpu", True)
    booleans = ("gradientCheckpointing", "dora", "doubleQuant", "precomputeRefLogProbs", "loraTargetLinear", "tiledMlp")
    for key, value in sample.items():  # the examples and defaults in package.json are accepted too
        prop = properties[f"zeromem.{key}"]
        # the unset values (a dropdown's "default", "", [] and {}): the extension sends nothing (src/config.ts)
        assert prop["default"] in UNSET or resolve_settings({key: prop["default"]})[1] == [], key
        for example in prop.get("examples", []) + [v for v in prop.get("enum", []) if v != "default"]:
            sent = {"true": True, "false": False}.get(example, example) if key in booleans else example
            sent = int(sent) if key == "fsdpVersion" else sent  # a NUMBER_SETTINGS dropdown: sent as a number
            assert resolve_settings({key: sent})[1] == [], (key, example)  # as src/config.ts sends it


#: Values for the adapter-matching settings, valid and not: package.json's schema and the server must agree on
#: each (what VS Code marks valid in settings.json the server takes, and the reverse).
MATCHING_VALUES = {
    "loraTargets": ["q_proj,v_proj", "all-linear", ["q_proj"], {"regex": ".*q_proj"}, [""], [1], {"regex": ""},
                    {"regex": ".*", "extra": 1}, {"pattern": ".*"}, True, 16],
    "excludeModules": ["o_proj", "o_proj, down_proj", ["o_proj", "down_proj"], {"regex": ".*mlp.*"}, [""], [3],
                       {"regex": ""}, {}, {"names": ["o_proj"]}, False, 2],
    "layersToTransform": [[0], [0, 1, 31], [10**6], [-1], [10**6 + 1], [1.5], ["0"], [True]],
    "layersPattern": [["layers"], ["layers", "h"], [""], [0], ["layers", 1]],
    "loraRankPattern": [{"v_proj": 16}, {"q_proj": 1, "o_proj": 10**9}, {"v_proj": 0}, {"v_proj": 10**9 + 1},
                        {"v_proj": 1.5}, {"v_proj": "16"}, {"v_proj": True}, {"": 8}],
    "targetParameters": [["mlp.experts.down_proj"], [""], [7]],
}
#: Spellings the server also takes that the Settings UI's list editors do not offer: one item for a list of one.
SERVER_ONLY = {"layersToTransform": 2, "layersPattern": "layers", "targetParameters": "mlp.experts.gate_up_proj"}


def test_vscode_schema_of_the_matching_settings_is_the_servers():
    import jsonschema

    properties = json.loads((EDITORS / "vscode" / "package.json").read_text(encoding="utf-8"))[
        "contributes"]["configuration"]["properties"]
    for key, values in MATCHING_VALUES.items():
        schema = properties[f"zeromem.{key}"]
        validator = jsonschema.Draft7Validator(schema)
        for value in values:
            in_vscode = validator.is_valid(value)
            on_server = resolve_settings({key: value})[1] == []
            assert in_vscode == on_server, (key, value, in_vscode, on_server)
        assert validator.is_valid(schema["default"]) and schema["default"] in UNSET, key
    for key, value in SERVER_ONLY.items():  # the same setting written as the list of one VS Code offers
        validator = jsonschema.Draft7Validator(properties[f"zeromem.{key}"])
        assert not validator.is_valid(value) and validator.is_valid([value]), key
        assert resolve_settings({key: value}) == resolve_settings({key: [value]}), key


def test_neovim_and_emacs_name_the_settings():
    lua = (EDITORS / "neovim" / "lsp" / "zeromem.lua").read_text(encoding="utf-8")
    elisp = (EDITORS / "emacs" / "zeromem.el").read_text(encoding="utf-8")
    for name in SERVER_SETTINGS:
        assert f"{name} =" in lua
        assert f":{name}" in elisp


def test_emacs_lisp_is_balanced():
    text = (EDITORS / "emacs" / "zeromem.el").read_text(encoding="utf-8")
    depth, in_string, escaped, comment = 0, False, False, False
    for char in text:
        if comment:
            comment = char != "\n"
        elif in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == ";":
            comment = True
        elif char == '"':
            in_string = True
        elif char in "(":
            depth += 1
        elif char == ")":
            depth -= 1
            assert depth >= 0
    assert depth == 0 and not in_string
