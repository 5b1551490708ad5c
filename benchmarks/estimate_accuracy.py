"""How close ``thub estimate`` is to reality.

1. Parameter counts from config.json vs ``sum(p.numel())`` of models built locally (no download).
2. CPU: weights + gradients + AdamW states vs the real tensors of a tiny model after one step.
3. GPU (when CUDA is available): expected estimate vs ``torch.cuda.max_memory_allocated`` for a
   few configurations (target within +-15 %); otherwise prints "skipped: no CUDA".

Run: python benchmarks/estimate_accuracy.py
"""

from __future__ import annotations

import time

import torch
import transformers

from thub.insight.architecture import model_facts
from thub.insight.estimator import Setup, estimate, format_bytes

SMALL = dict(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=2)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**SMALL),
    "llama tied": lambda: transformers.LlamaConfig(**SMALL, tie_word_embeddings=True),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL),
    "qwen3": lambda: transformers.Qwen3Config(**SMALL, head_dim=32),
    "mixtral": lambda: transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(**SMALL, moe_intermediate_size=64,
                                                     shared_expert_intermediate_size=128,
                                                     num_experts=8, num_experts_per_tok=2),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**SMALL, moe_intermediate_size=64, num_experts=8,
                                                     num_experts_per_tok=2, head_dim=32),
}


def parameter_counts() -> None:
    print("1. parameter counts (config.json vs real model)")
    for name, make in CONFIGS.items():
        config = make()
        model = transformers.AutoModelForCausalLM.from_config(config)
        real = sum(p.numel() for p in model.parameters())
        counted = model_facts(config.to_dict()).total_params
        print(f"   {name:<11} real {real:>10,}  estimate {counted:>10,}  {'exact' if real == counted else 'MISMATCH'}")


def static_bytes() -> None:
    print("2. CPU static memory after one AdamW step (fp32)")
    for name in ("llama", "mixtral"):
        config = CONFIGS[name]()
        model = transformers.AutoModelForCausalLM.from_config(config)
        optimizer = torch.optim.AdamW(model.parameters())
        ids = torch.randint(0, 1000, (2, 32))
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        real = {
            "weights": sum(p.numel() * p.element_size() for p in model.parameters()),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None),
            "optimizer states": sum(t.numel() * t.element_size() for s in optimizer.state.values()
                                    for k, t in s.items() if k != "step"),
        }
        parts = {c.name: c.bytes for c in estimate(model_facts(config.to_dict()),
                                                   Setup("sft", precision="fp32", tokens_per_gpu=64)).components}
        for key, value in real.items():
            print(f"   {name:<8} {key:<17} real {format_bytes(value):>10}  estimate {format_bytes(parts[key]):>10}"
                  f"  {'exact' if value == parts[key] else f'{parts[key] / value - 1:+.2%}'}")


def gpu_peaks() -> None:
    print("3. GPU peak memory (expected estimate vs torch.cuda.max_memory_allocated)")
    if not torch.cuda.is_available():
        print("   skipped: no CUDA")
        return
    big = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
               num_attention_heads=16, num_key_value_heads=4)
    for tokens, checkpointing in ((2048, False), (8192, False), (8192, True)):
        config = transformers.LlamaConfig(**big)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").cuda()
        if checkpointing:
            model.gradient_checkpointing_enable()
        optimizer = torch.optim.AdamW(model.parameters())
        ids = torch.randint(0, 32000, (1, tokens), device="cuda")
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
        peak = torch.cuda.max_memory_allocated()
        result = estimate(model_facts(config.to_dict()),
                          Setup("sft", tokens_per_gpu=tokens, gradient_checkpointing=checkpointing))
        print(f"   tokens {tokens:>5} ckpt {checkpointing!s:<5} real {format_bytes(peak):>10}  expected "
              f"{format_bytes(result.expected):>10}  ({result.expected / peak - 1:+.1%}; low "
              f"{format_bytes(result.low)}, "
              f"high {format_bytes(result.high)})")
        del model, optimizer


# The one real-backend peak recorded (shared/docs/performance-anchors.md, one H200, 2026-12-01):
# mini-trainer, 0.504 B Llama (hidden 1536, 16 layers, vocab 32k; MHA and a 3456-wide MLP assumed:
# they give the 0.504 B count), 32,768 tokens on one GPU, peak_memory_usage_GB 22.9.
RECORDED = {"mini-trainer": 22.9e9}
RECORDED_MODEL = {"model_type": "llama", "hidden_size": 1536, "intermediate_size": 3456, "num_hidden_layers": 16,
                  "num_attention_heads": 12, "num_key_value_heads": 12, "vocab_size": 32000,
                  "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def backend_policies() -> None:
    """Generic loop vs the backend's memory policy, against the recorded real peak (no GPU needed)."""
    from thub.insight.estimator import GIB, setup_from_params
    from thub.manager import get_registry

    print("4. recorded real-backend peaks vs the estimate (generic loop / the backend's memory policy)")
    facts = model_facts(RECORDED_MODEL)
    for backend, peak in RECORDED.items():
        spec = get_registry().backends.get(backend)
        if spec is None:
            print(f"   {backend}: plugin not installed, skipped")
            continue
        for label, policy in (("generic loop", None), ("policy", spec.memory)):
            setup = setup_from_params("sft", {"max_tokens_per_gpu": 32768}, gpus=1, gpu_memory=141 * GIB,
                                      policy=policy, facts=facts)
            result = estimate(facts, setup, advise=False)
            inside = "inside" if result.low <= peak <= result.high else "OUTSIDE"
            print(f"   {backend:<13} {label:<13} expected {format_bytes(result.expected):>10} vs real "
                  f"{format_bytes(peak):>10}: {result.expected / peak - 1:+.1%} (target +-15 %), {inside} [low, high]")


if __name__ == "__main__":
    started = time.perf_counter()
    parameter_counts()
    static_bytes()
    gpu_peaks()
    backend_policies()
    print(f"done in {time.perf_counter() - started:.1f} s")
