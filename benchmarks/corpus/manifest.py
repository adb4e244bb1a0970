import json
from pathlib import Path
H8 = "8 x 80 GiB"
def e(recipe, tool, world, mem, source, accel=None):
    return {"recipe": recipe, "tool": tool, "accelerate_config": accel, "world_size": world, "gpu_memory": mem,
            "hardware_source": source}
HB = "alignment-handbook README: 'a node of 8 x A100s (80GB)' / recipes tested on 8 GPUs of 80 GB"
OR = "open-r1 README: 'configured for a node of 8 x H100s (80GB)'"
ASSUMED8 = "assumed: the example names no hardware; a multi-GPU launch file, so 8 x 80 GiB"
ASSUMED1 = "assumed: the example names no hardware and no multi-GPU engine, so 1 x 80 GiB"
LF1 = "assumed: LLaMA-Factory's examples README runs them with llamafactory-cli on one GPU; 1 x 80 GiB"
LFM = "assumed: LLaMA-Factory's multi-GPU example (FORCE_TORCHRUN), 8 x 80 GiB"
entries = [
 e("alignment-handbook/recipes/zephyr-7b-beta/sft/config_full.yaml", "trl", 8, "80GiB", HB, "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/zephyr-7b-beta/sft/config_qlora.yaml", "trl", 1, "80GiB", HB + "; README: --num_processes=1 with ddp.yaml", "alignment-handbook/recipes/accelerate_configs/ddp.yaml"),
 e("alignment-handbook/recipes/zephyr-7b-beta/dpo/config_full.yaml", "trl", 8, "80GiB", HB, "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/zephyr-7b-beta/dpo/config_qlora.yaml", "trl", 1, "80GiB", HB + "; README: --num_processes=1 with ddp.yaml", "alignment-handbook/recipes/accelerate_configs/ddp.yaml"),
 e("alignment-handbook/recipes/smollm2/sft/config.yaml", "trl", 8, "80GiB", HB, "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/smollm3/sft/sft.yaml", "trl", 8, "80GiB", "smollm3 README: 'tested the training setup with 8 GPUs (80GB of VRAM)'", "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/smollm3/dpo/apo.yaml", "trl", 8, "80GiB", "smollm3 README: 'tested the training setup with 8 GPUs (80GB of VRAM)'", "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/zephyr-141b-A35b/orpo/config_full.yaml", "trl", 32, "80GiB", "zephyr-141b README: '4 nodes of 8 GPUs (80GB of VRAM)', launched with fsdp", "alignment-handbook/recipes/accelerate_configs/fsdp.yaml"),
 e("alignment-handbook/recipes/zephyr-7b-gemma/sft/config_full.yaml", "trl", 8, "80GiB", HB, "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/starchat2-15b/dpo/config_v0.1.yaml", "trl", 8, "80GiB", HB, "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("alignment-handbook/recipes/constitutional-ai/dpo/config_anthropic.yaml", "trl", 8, "80GiB", HB, "alignment-handbook/recipes/accelerate_configs/zero3.yaml"),
 e("open-r1/recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml", "trl", 8, "80GiB", OR, "open-r1/recipes/accelerate_configs/zero2.yaml"),
 e("open-r1/recipes/DeepSeek-R1-Distill-Qwen-1.5B/grpo/config_demo.yaml", "trl", 8, "80GiB", OR, "open-r1/recipes/accelerate_configs/zero2.yaml"),
 e("open-r1/recipes/Qwen2.5-Coder-7B-Instruct/grpo/config_codeforces.yaml", "trl", 8, "80GiB", OR, "open-r1/recipes/accelerate_configs/zero3.yaml"),
 e("open-r1/recipes/OpenR1-Distill-7B/sft/config_distill.yaml", "trl", 8, "80GiB", OR, "open-r1/recipes/accelerate_configs/zero3.yaml"),
 e("open-r1/recipes/OlympicCoder-7B/sft/config_v00.00.yaml", "trl", 8, "80GiB", OR, "open-r1/recipes/accelerate_configs/zero3.yaml"),
 e("axolotl/examples/alst/llama3-8b-deepspeed-alst.yaml", "axolotl", 8, "80GiB", "axolotl ALST example: context_parallel_size 8 (one 8-GPU node); issue 26: runs on 8 x 80 GiB"),
 e("axolotl/examples/alst/llama3-8b-fsdp2-alst.yaml", "axolotl", 8, "80GiB", "axolotl ALST example: context_parallel_size 8 (one 8-GPU node)"),
 e("axolotl/examples/distributed-parallel/qwen3-8b-fsdp-tp-cp.yaml", "axolotl", 8, "80GiB", "distributed-parallel README: 'FSDP + TP + CP on a single 8-GPU node'"),
 e("axolotl/examples/distributed-parallel/llama-3_1-8b-hsdp-tp.yaml", "axolotl", 16, "80GiB", "distributed-parallel README: 'HSDP + TP on 2 nodes (16 GPUs total)'"),
 e("axolotl/examples/expert_parallel/qwen3_30ba3b_ep_lora_4gpu.yaml", "axolotl", 4, "80GiB", "the file: 'expert_parallel_size: 4 # world size 4'; GPU memory assumed 80 GiB"),
 e("axolotl/examples/expert_parallel/qwen3_30ba3b_ep_fft_4gpu.yaml", "axolotl", 4, "80GiB", "the file name: 4 GPUs; GPU memory assumed 80 GiB"),
 e("axolotl/examples/llama-3/fft-8b.yaml", "axolotl", 1, "48GiB", "examples/llama-3/README.md: 'Full Fine Tune - Single GPU @ 48GB VRAM'"),
 e("axolotl/examples/llama-3/lora-8b.yml", "axolotl", 1, "80GiB", "examples/llama-3/README.md says 'LoRA - Single GPU @ 11GB VRAM', which this file cannot meet: its int8 base (7.0 GB), bf16 embedding and head (2.1 GB) and their trainable copies (lora_modules_to_save, 2.1 GB) hold 11.2 GB before any activation, and micro_batch_size 2 x sequence_len 4096 over the 128,256-token vocabulary make each fp32 tensor of Transformers' loss 4.2 GB; so 1 x 80 GiB assumed (issue 29)"),
 e("axolotl/examples/llama-3/qlora-fsdp-70b.yaml", "axolotl", 2, "24GiB", "examples/llama-3/README.md: 'QLORA+FSDP - Dual GPU @ 21GB VRAM' (24 GiB GPUs)"),
 e("axolotl/examples/llama-3/instruct-dpo-lora-8b.yml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/llama-3/fft-8b-liger-fsdp.yaml", "axolotl", 8, "80GiB", ASSUMED8),
 e("axolotl/examples/llama-3/lora-1b.yml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/llama-3/lora-1b-ray.yml", "axolotl", 8, "80GiB", ASSUMED8),
 e("axolotl/examples/llama-3/qlora-1b.yml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/llama-3/qlora-1b-kto.yaml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/gemma3/gemma-3-4b-qlora.yml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/qwen3/32b-qlora.yaml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/qwen2/dpo.yaml", "axolotl", 1, "80GiB", ASSUMED1),
 e("axolotl/examples/mistral/mixtral/mixtral.yml", "axolotl", 8, "80GiB", ASSUMED8),
 e("axolotl/examples/mistral/bigstral/bigstral-ds-zero3.yaml", "axolotl", 8, "80GiB", ASSUMED8),
 e("axolotl/examples/jamba/qlora_deepspeed.yaml", "axolotl", 8, "80GiB", ASSUMED8),
 e("axolotl/examples/gpt-oss/gpt-oss-20b-fft-deepspeed-zero3.yaml", "axolotl", 8, "80GiB", ASSUMED8),
 e("llamafactory/examples/train_lora/qwen3_lora_sft.yaml", "llamafactory", 1, "80GiB", LF1),
 e("llamafactory/examples/train_lora/qwen3_lora_sft_ds3.yaml", "llamafactory", 8, "80GiB", LFM),
 e("llamafactory/examples/train_lora/qwen3_lora_dpo.yaml", "llamafactory", 1, "80GiB", LF1),
 e("llamafactory/examples/train_lora/qwen3_lora_kto.yaml", "llamafactory", 1, "80GiB", LF1),
 e("llamafactory/examples/train_lora/qwen3_lora_pretrain.yaml", "llamafactory", 1, "80GiB", LF1),
 e("llamafactory/examples/train_qlora/qwen3_lora_sft_otfq.yaml", "llamafactory", 1, "80GiB", LF1),
 e("llamafactory/examples/train_full/qwen3_full_sft.yaml", "llamafactory", 8, "80GiB", LFM),
 e("llamafactory/examples/extras/galore/llama3_full_sft.yaml", "llamafactory", 1, "80GiB", LF1 + " (GaLore: single-GPU memory saving)"),
 e("llamafactory/examples/extras/badam/llama3_full_sft.yaml", "llamafactory", 1, "80GiB", LF1 + " (BAdam: single-GPU memory saving)"),
 e("llamafactory/examples/extras/apollo/llama3_full_sft.yaml", "llamafactory", 1, "80GiB", LF1 + " (APOLLO: single-GPU memory saving)"),
 e("llamafactory/examples/extras/fsdp_qlora/llama3_lora_sft.yaml", "llamafactory", 2, "24GiB", "its train.sh: accelerate launch with examples/accelerate/fsdp_config.yaml (2 processes); FSDP+QLoRA on 24 GiB GPUs assumed", "llamafactory/examples/accelerate/fsdp_config.yaml"),
 e("llamafactory/examples/extras/loraplus/llama3_lora_sft.yaml", "llamafactory", 1, "80GiB", LF1),
]
from zeromem_lsp.document.yaml_document import parse_yaml_document
for entry in entries:
    data = parse_yaml_document(Path("tests/data/recipes", entry["recipe"]).read_text()).to_python()
    entry["model"] = data.get("base_model") or data.get("model_name_or_path")
    revision = data.get("model_revision") or data.get("revision_of_model")
    entry["revision"] = revision if revision not in (None, "main") else None
assert len({e["recipe"] for e in entries}) == len(entries)
Path("tests/data/recipes/corpus.json").write_text(json.dumps(entries, indent=1) + "\n")
print(len(entries))
