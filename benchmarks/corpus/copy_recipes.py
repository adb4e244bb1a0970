"""Copy recipe files byte for byte from the fetched mirrors into tests/data/recipes/<project>/<path>."""
import subprocess, sys
from pathlib import Path
M = Path("/work/.mirror")
REPOS = {"axolotl": "axolotl-ai-cloud+axolotl", "llamafactory": "hiyouga+LLaMA-Factory",
         "alignment-handbook": "huggingface+alignment-handbook", "open-r1": "huggingface+open-r1"}
FILES = {
 "axolotl": ["examples/alst/llama3-8b-deepspeed-alst.yaml", "examples/alst/llama3-8b-fsdp2-alst.yaml",
             "deepspeed_configs/zero3_bf16_cpuoffload_all.json",
             "examples/distributed-parallel/llama-3_1-8b-hsdp-tp.yaml", "examples/distributed-parallel/qwen3-8b-fsdp-tp-cp.yaml",
             "examples/expert_parallel/qwen3_30ba3b_ep_lora_4gpu.yaml", "examples/expert_parallel/qwen3_30ba3b_ep_fft_4gpu.yaml",
             "examples/llama-3/lora-8b.yml", "examples/llama-3/fft-8b.yaml", "examples/llama-3/instruct-dpo-lora-8b.yml",
             "examples/gpt-oss/gpt-oss-20b-fft-deepspeed-zero3.yaml", "deepspeed_configs/zero3_bf16.json"],
 "llamafactory": ["examples/extras/galore/llama3_full_sft.yaml", "examples/extras/badam/llama3_full_sft.yaml",
                  "examples/extras/apollo/llama3_full_sft.yaml", "examples/extras/fsdp_qlora/llama3_lora_sft.yaml",
                  "examples/train_lora/qwen3_lora_kto.yaml", "examples/train_lora/qwen3_lora_pretrain.yaml",
                  "examples/extras/loraplus/llama3_lora_sft.yaml", "examples/accelerate/fsdp_config_offload.yaml"],
 "alignment-handbook": ["recipes/zephyr-141b-A35b/orpo/config_full.yaml", "recipes/smollm3/sft/sft.yaml",
                        "recipes/smollm3/dpo/apo.yaml", "recipes/zephyr-7b-gemma/sft/config_full.yaml",
                        "recipes/starchat2-15b/dpo/config_v0.1.yaml", "recipes/constitutional-ai/dpo/config_anthropic.yaml"],
 "open-r1": ["recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo.yaml", "recipes/DeepSeek-R1-Distill-Qwen-1.5B/grpo/config_demo.yaml",
             "recipes/OpenR1-Distill-7B/sft/config_distill.yaml", "recipes/OlympicCoder-7B/sft/config_v00.00.yaml",
             "recipes/Qwen2.5-Coder-7B-Instruct/grpo/config_codeforces.yaml",
             "recipes/accelerate_configs/zero2.yaml", "recipes/accelerate_configs/zero3.yaml",
             "recipes/accelerate_configs/ddp.yaml"],
}
def git_dir(name):
    d = M / name / "repo"
    return d / ".git" if (d / ".git").is_dir() else d
for project, files in FILES.items():
    g = git_dir(REPOS[project])
    commit = subprocess.run(["git", "--git-dir", str(g), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for f in files:
        out = Path("tests/data/recipes") / project / f
        if out.exists():
            print("exists", out); continue
        data = subprocess.run(["git", "--git-dir", str(g), "show", f"HEAD:{f}"], capture_output=True)
        if data.returncode:
            print("MISSING", project, f, data.stderr.decode()[:100]); continue
        blob = subprocess.run(["git", "--git-dir", str(g), "rev-parse", f"HEAD:{f}"], capture_output=True, text=True).stdout.strip()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data.stdout)
        check = subprocess.run(["git", "hash-object", str(out)], capture_output=True, text=True).stdout.strip()
        assert check == blob, (f, check, blob)
        print(project, commit[:12], f, blob[:12])
