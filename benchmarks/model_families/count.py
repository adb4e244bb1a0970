"""Record Transformers' own parameter inventory for the model families added in issue 29 (needs torch + transformers).

    /work/venv-fam/bin/python benchmarks/model_families/count.py          # print the totals
    /work/venv-fam/bin/python benchmarks/model_families/count.py --write  # refresh tests/data/model_families/counts.json

Each tests/data/model_families/configs/<name>.json is loaded the way a fine-tune loads it (`AutoConfig.from_pretrained`
on a folder holding it as config.json), and `AutoModelForCausalLM.from_config` builds the model on the meta device
(no memory, no weights); a vision-language config (VISION_LANGUAGE) is built by `AutoModelForImageTextToText`, the
class a fine-tune of it loads (…ForConditionalGeneration: vision tower, projector, language model, head), and its
total is also recorded per part (`parts`: the parameters under each child of the inner model, and the head). Recorded per config: the total of `model.parameters()` (a tied head counted once), every
`named_parameters()` name and shape in registration order, and every `named_modules()` name (what PEFT's
target_modules match against). tests/unit/test_model_families.py checks zeromem's count, weights inventory and
module tree against the record without torch.
`from_config` applies no `quantization_config`: a gpt-oss config (mxfp4) is built, and counted, in its dequantized
(bf16) layout, the one a fine-tune trains. The configs' sources: tests/data/model_families/SOURCES.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "model_families"


#: composite model_types built as image-text-to-text models (their parts counted apart)
VISION_LANGUAGE = {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "llava", "llava_next", "mistral3", "llama4"}


def parts(model) -> dict[str, int]:
    """Parameters per part: each child of the inner `model` (visual / vision_tower, multi_modal_projector,
    language_model, image_newline ...) and the untied head, counted once each as model.parameters() does."""
    found: dict[str, int] = {}
    seen: set[int] = set()
    for name, parameter in model.named_parameters():
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        pieces = name.split(".")
        key = pieces[1] if pieces[0] == "model" and len(pieces) > 2 else pieces[0] if pieces[0] != "model" else name
        found[key] = found.get(key, 0) + parameter.numel()
    return found


def measure(config_path: Path) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(config_path.read_text(encoding="utf-8"), encoding="utf-8")
        config = AutoConfig.from_pretrained(folder)
    composite = config.model_type in VISION_LANGUAGE
    with torch.device("meta"):
        model = (AutoModelForImageTextToText if composite else AutoModelForCausalLM).from_config(config)
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    return {
        "model_type": config.model_type,
        "class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tied": head is not None and head.weight is embedding.weight,
        **({"parts": parts(model)} if composite else {}),
        "named_parameters": [[name, list(p.shape)] for name, p in model.named_parameters()],
        "named_modules": [name for name, _ in model.named_modules() if name],
    }


def collect() -> dict:
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
            "models": {path.stem: measure(path) for path in sorted((DATA / "configs").glob("*.json"))}}


def render(record: dict) -> str:
    """JSON with one parameter or module per line."""
    lines = ["{", f' "transformers": {json.dumps(record["transformers"])}, "torch": {json.dumps(record["torch"])},',
             ' "models": {']
    for index, (name, found) in enumerate(record["models"].items()):
        head = {key: value for key, value in found.items() if not key.startswith("named_")}
        lines.append(f"  {json.dumps(name)}: {{{json.dumps(head)[1:-1]},")
        for key in ("named_parameters", "named_modules"):
            items = [json.dumps(item) for item in found[key]]
            lines.append(f'   "{key}": [\n    ' + ",\n    ".join(items) + "]" + ("," if key == "named_parameters" else ""))
        lines.append("  }" + ("," if index < len(record["models"]) - 1 else ""))
    return "\n".join(lines + [" }", "}"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write tests/data/model_families/counts.json")
    args = parser.parse_args()
    record = collect()
    for name, found in record["models"].items():
        print(f"{name:32} {found['model_type']:11} {found['parameters']:>16,} {'tied' if found['tied'] else 'untied'}")
    if args.write:
        (DATA / "counts.json").write_text(render(record), encoding="utf-8")
        print(f"wrote {(DATA / 'counts.json').relative_to(ROOT)} (Transformers {record['transformers']})")


if __name__ == "__main__":
    main()
