import hashlib, json
from pathlib import Path
ROOT = Path("tests/data/hf_cache")
def llama(h, i, L, q, kv, V, tie, pos, extra=None, mt="llama", arch="LlamaForCausalLM"):
    c = {"architectures": [arch], "model_type": mt, "hidden_size": h, "intermediate_size": i, "num_hidden_layers": L,
         "num_attention_heads": q, "num_key_value_heads": kv, "vocab_size": V, "tie_word_embeddings": tie,
         "max_position_embeddings": pos, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16"}
    c.update(extra or {})
    return c
L31 = llama(4096, 14336, 32, 32, 8, 128256, False, 131072, {"rope_theta": 500000.0, "rope_scaling": {
    "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
    "rope_type": "llama3"}})
L3 = json.loads(Path("tests/data/models/Meta-Llama-3-8B/config.json").read_text())
L32 = llama(2048, 8192, 16, 32, 8, 128256, True, 131072, {"head_dim": 64, "rope_theta": 500000.0})
L70 = llama(8192, 28672, 80, 64, 8, 128256, False, 8192, {"rope_theta": 500000.0})
def qwen3(h, i, L, q, kv, tie, extra=None, mt="qwen3", arch="Qwen3ForCausalLM"):
    return llama(h, i, L, q, kv, 151936, tie, 40960, {"head_dim": 128, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                                                      **(extra or {})}, mt, arch)
def qwen2(h, i, L, q, kv, V, tie, pos=32768, extra=None):
    return llama(h, i, L, q, kv, V, tie, pos, {"rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "use_sliding_window": False,
                                               **(extra or {})}, "qwen2", "Qwen2ForCausalLM")
MISTRAL = llama(4096, 14336, 32, 32, 8, 32000, False, 32768, {"sliding_window": 4096, "rope_theta": 10000.0},
                "mistral", "MistralForCausalLM")
MODELS = {
    "meta-llama/Llama-3.1-8B": L31, "NousResearch/Meta-Llama-3.1-8B": L31,
    "NousResearch/Meta-Llama-3-8B": L3, "meta-llama/Meta-Llama-3-8B-Instruct": L3,
    "NousResearch/Llama-3.2-1B": L32, "meta-llama/Llama-3.2-1B": L32, "casperhansen/llama-3-70b-fp16": L70,
    "Qwen/Qwen3-8B": qwen3(4096, 12288, 36, 32, 8, False),
    "Qwen/Qwen3-32B": qwen3(5120, 25600, 64, 64, 8, False),
    "Qwen/Qwen3-4B-Instruct-2507": qwen3(2560, 9728, 36, 32, 8, True, {"max_position_embeddings": 262144}),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": qwen3(2048, 6144, 48, 32, 4, False, {
        "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 262144}, "qwen3_moe",
        "Qwen3MoeForCausalLM"),
    "Qwen/Qwen2.5-0.5B": qwen2(896, 4864, 24, 14, 2, 151936, True),
    "Qwen/Qwen2.5-1.5B-Instruct": qwen2(1536, 8960, 28, 12, 2, 151936, True),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": qwen2(1536, 8960, 28, 12, 2, 151936, False, 131072,
                                                      {"rope_theta": 10000.0}),
    "Qwen/Qwen2.5-Coder-7B-Instruct": qwen2(3584, 18944, 28, 28, 4, 152064, False),
    "open-r1/Qwen2.5-Math-7B-RoPE-300k": qwen2(3584, 18944, 28, 28, 4, 152064, False, 32768, {"rope_theta": 300000.0}),
    "mistralai/Mistral-7B-v0.1": MISTRAL, "alignment-handbook/zephyr-7b-sft-full": MISTRAL,
    "alignment-handbook/mistral-7b-sft-constitutional-ai": MISTRAL,
    "mistralai/Mixtral-8x7B-v0.1": llama(4096, 14336, 32, 32, 8, 32000, False, 32768, {
        "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1000000.0}, "mixtral", "MixtralForCausalLM"),
    "mistral-community/Mixtral-8x22B-v0.1": llama(6144, 16384, 56, 48, 8, 32000, False, 65536, {
        "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1000000.0}, "mixtral", "MixtralForCausalLM"),
    "google/gemma-3-4b-it": json.loads(Path("tests/data/models/gemma-3-4b-it/config.json").read_text()),
    "google/gemma-7b": llama(3072, 24576, 28, 16, 16, 256000, True, 8192, {"head_dim": 256, "rms_norm_eps": 1e-06,
                                                                         "hidden_activation": "gelu_pytorch_tanh"},
                             "gemma", "GemmaForCausalLM"),
    "HuggingFaceTB/SmolLM2-1.7B": llama(2048, 8192, 24, 32, 32, 49152, True, 8192, {"rope_theta": 130000.0}),
    "Qwen/Qwen2.5-7B": json.loads(Path("tests/data/models/Qwen2.5-7B/config.json").read_text()),
}
FAMILIES = Path("tests/data/model_families/configs")
for name in ("Qwen2-VL-7B-Instruct", "Qwen2.5-VL-7B-Instruct", "Qwen3-VL-8B-Instruct"):  # the VL models tests name
    MODELS["Qwen/" + name] = json.loads((FAMILIES / f"{name}.json").read_text())
#: the image processor configs a run loads beside a composite's config.json, copied as vendored (SOURCES.md)
PROCESSORS = {"google/gemma-3-4b-it": "gemma-3-4b-it", "Qwen/Qwen2-VL-7B-Instruct": "Qwen2-VL-7B-Instruct",
              "Qwen/Qwen2.5-VL-7B-Instruct": "Qwen2.5-VL-7B-Instruct",
              "Qwen/Qwen3-VL-8B-Instruct": "Qwen3-VL-8B-Instruct"}
for repo_id, config in MODELS.items():
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    commit = hashlib.sha1(f"{repo_id}\n{text}".encode()).hexdigest()  # a fixed, invented commit hash
    folder = ROOT / ("models--" + repo_id.replace("/", "--"))
    (folder / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
    (folder / "snapshots" / commit / "config.json").write_text(text)
    if repo_id in PROCESSORS:
        vendored = Path("tests/data/models") / PROCESSORS[repo_id] / "preprocessor_config.json"
        (folder / "snapshots" / commit / "preprocessor_config.json").write_bytes(vendored.read_bytes())
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
print(len(MODELS))
