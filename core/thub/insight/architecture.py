"""Parameter counts from a model's ``config.json`` alone: no weights, no torch, no download.

The counts are exact for the decoder-only families thub trains (Llama, Mistral, Qwen2, Qwen3,
Mixtral, Qwen2-MoE, Qwen3-MoE, Granite, Gemma-style tied embeddings): they are checked in tests
against ``sum(p.numel())`` of models built with transformers. Every linear matrix is also listed
with its shape so LoRA adapters and OSFT's SVD factors can be sized from the same facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thub.errors import UsageError

# Families whose q/k/v projections carry a bias even when the config does not say so.
_QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
# Families with a per-head RMSNorm on queries and keys (weight of size head_dim).
_QK_NORM_TYPES = frozenset({"qwen3", "qwen3_moe", "qwen3_next"})
# Families with extra norms around attention and MLP (pre + post feed-forward layernorms).
_SANDWICH_NORM_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text"})


@dataclass(frozen=True)
class Linear:
    """One kind of weight matrix in a decoder layer: ``count`` copies of ``rows x cols``."""

    name: str
    rows: int
    cols: int
    count: int = 1
    bias: bool = False
    expert: bool = False

    @property
    def numel(self) -> int:
        return self.count * (self.rows * self.cols + (self.rows if self.bias else 0))


@dataclass
class ModelFacts:
    """What the estimator needs about a model, read from ``config.json``."""

    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tied_embeddings: bool
    num_experts: int = 0
    experts_per_token: int = 0
    source: str = ""
    components: dict[str, int] = field(default_factory=dict)
    linears: list[Linear] = field(default_factory=list)
    dtype: str | None = None  # the checkpoint's stored dtype (config.json dtype/torch_dtype), if stated

    @property
    def total_params(self) -> int:
        return sum(self.components.values())

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type, "source": self.source, "hidden_size": self.hidden_size,
            "num_layers": self.num_layers, "vocab_size": self.vocab_size, "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size, "tied_embeddings": self.tied_embeddings,
            "num_experts": self.num_experts, "experts_per_token": self.experts_per_token,
            "total_params": self.total_params, "components": dict(self.components),
        }


def read_config(model_path: str | Path) -> tuple[dict[str, Any], str]:
    """The ``config.json`` of a local model directory (or the file itself), never downloading.

    A hub id is resolved only through the local Hugging Face cache
    (:func:`thub.config.model_path.hub_cache_dir`); if the config is not there the error says how
    to fetch just that file.
    """
    path = Path(model_path).expanduser()
    candidates = [path] if path.is_file() else [path / "config.json"]
    if not path.exists() and "/" in str(model_path) and not str(model_path).startswith((".", "/", "~")):
        candidates.extend(_hub_cache_candidates(str(model_path)))
    for candidate in candidates:
        if candidate.is_file():
            try:
                return json.loads(candidate.read_text()), str(candidate)
            except (OSError, json.JSONDecodeError) as exc:
                raise UsageError(f"{candidate}: not a readable JSON config: {exc}") from None
    raise UsageError(
        f"{model_path}: no config.json found (thub estimate reads only the model's config, never weights); "
        f"pass a local model directory, or fetch the config alone: "
        f"huggingface-cli download {model_path} config.json"
    )


def _hub_cache_candidates(repo_id: str) -> list[Path]:
    import os

    from thub.config.model_path import hub_cache_dir

    snapshots = hub_cache_dir(os.environ) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    if not snapshots.is_dir():
        return []
    return sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)


def _get(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def _require(config: dict[str, Any], source: str, *names: str) -> int:
    value = _get(config, *names)
    if value is None:
        raise UsageError(
            f"{source}: cannot size this architecture: none of {', '.join(names)} is set "
            f"(model_type {config.get('model_type')!r}); thub estimate supports decoder-only transformers"
        )
    return int(value)


def model_facts(config: dict[str, Any], source: str = "config.json") -> ModelFacts:
    """Count the parameters of the causal-LM model described by ``config`` (a config.json dict)."""
    top = config
    if "text_config" in config and "hidden_size" not in config:
        config = {**config["text_config"], "tie_word_embeddings": _get(
            config["text_config"], "tie_word_embeddings", default=top.get("tie_word_embeddings"))}
    model_type = str(config.get("model_type") or top.get("model_type") or "unknown")
    hidden = _require(config, source, "hidden_size", "n_embd", "d_model")
    layers = _require(config, source, "num_hidden_layers", "n_layer", "num_layers")
    vocab = _require(config, source, "vocab_size")
    heads = _require(config, source, "num_attention_heads", "n_head")
    kv_heads = int(_get(config, "num_key_value_heads", "num_kv_heads", default=heads))
    head_dim = int(_get(config, "head_dim", default=hidden // heads))
    intermediate = int(_get(config, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden))
    tied = bool(_get(config, "tie_word_embeddings", default=model_type.startswith("gemma")))

    experts = int(_get(config, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
    per_token = int(_get(config, "num_experts_per_tok", "num_experts_per_token", "top_k", default=0) or 0)
    moe_inter = int(_get(config, "moe_intermediate_size", default=intermediate))
    shared_inter = int(_get(config, "shared_expert_intermediate_size", default=0) or 0)
    sparse_step = int(_get(config, "decoder_sparse_step", default=1) or 1)
    mlp_only = set(_get(config, "mlp_only_layers", default=[]) or [])
    if experts:
        sparse_layers = [i for i in range(layers) if i not in mlp_only and (i + 1) % sparse_step == 0]
    else:
        sparse_layers = []
    dense_layers = layers - len(sparse_layers)

    attention_bias = bool(_get(config, "attention_bias", default=False))
    qkv_bias = attention_bias or bool(_get(config, "qkv_bias", default=model_type in _QKV_BIAS_TYPES))
    o_bias = attention_bias
    mlp_bias = bool(_get(config, "mlp_bias", default=False))

    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    linears = [
        Linear("self_attn.q_proj", q_dim, hidden, layers, qkv_bias),
        Linear("self_attn.k_proj", kv_dim, hidden, layers, qkv_bias),
        Linear("self_attn.v_proj", kv_dim, hidden, layers, qkv_bias),
        Linear("self_attn.o_proj", hidden, q_dim, layers, o_bias),
    ]
    if dense_layers:
        linears += [
            Linear("mlp.gate_proj", intermediate, hidden, dense_layers, mlp_bias),
            Linear("mlp.up_proj", intermediate, hidden, dense_layers, mlp_bias),
            Linear("mlp.down_proj", hidden, intermediate, dense_layers, mlp_bias),
        ]
    sparse = len(sparse_layers)
    if sparse:
        linears += [
            Linear("mlp.experts.gate", moe_inter, hidden, sparse * experts, expert=True),
            Linear("mlp.experts.up", moe_inter, hidden, sparse * experts, expert=True),
            Linear("mlp.experts.down", hidden, moe_inter, sparse * experts, expert=True),
            Linear("mlp.gate", experts, hidden, sparse),  # the router
        ]
        if shared_inter:
            linears += [
                Linear("mlp.shared_expert.gate_proj", shared_inter, hidden, sparse),
                Linear("mlp.shared_expert.up_proj", shared_inter, hidden, sparse),
                Linear("mlp.shared_expert.down_proj", hidden, shared_inter, sparse),
                Linear("mlp.shared_expert_gate", 1, hidden, sparse),
            ]

    norms_per_layer = 2 * hidden
    if model_type in _SANDWICH_NORM_TYPES:
        norms_per_layer = 4 * hidden
    if model_type in _QK_NORM_TYPES:
        norms_per_layer += 2 * head_dim
    components = {
        "embeddings": vocab * hidden,
        "attention": sum(lin.numel for lin in linears if lin.name.startswith("self_attn")),
        "mlp": sum(lin.numel for lin in linears if lin.name.startswith("mlp.") and not lin.expert
                   and lin.name != "mlp.gate"),
        "experts": sum(lin.numel for lin in linears if lin.expert),
        "router": sum(lin.numel for lin in linears if lin.name == "mlp.gate"),
        "norms": layers * norms_per_layer + hidden,
        "lm_head": 0 if tied else vocab * hidden,
    }
    return ModelFacts(
        model_type=model_type, hidden_size=hidden, num_layers=layers, vocab_size=vocab,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
        tied_embeddings=tied, num_experts=experts if sparse else 0, experts_per_token=per_token if sparse else 0,
        source=source, components={k: v for k, v in components.items() if v or k in ("embeddings", "norms")},
        linears=linears, dtype=_stored_dtype(top, config),
    )


def _stored_dtype(*configs: dict[str, Any]) -> str | None:
    """``bfloat16``/``float16``/``float32`` from ``dtype`` (transformers 5) or ``torch_dtype``."""
    for config in configs:
        value = config.get("dtype") or config.get("torch_dtype")
        if isinstance(value, str) and value:
            return value.removeprefix("torch.")
    return None


def load_facts(model_path: str | Path) -> ModelFacts:
    """Read ``config.json`` for ``model_path`` and count its parameters."""
    config, source = read_config(model_path)
    return model_facts(config, source)


def lora_targets(facts: ModelFacts, target_modules: list[str] | None) -> list[Linear]:
    """The matrices LoRA adapts: PEFT's ``all-linear`` (every linear layer but the output head,
    not the router or fused expert tensors) or those whose name ends with a given module name."""
    if not target_modules or target_modules in (["all-linear"], ["all_linear"]):
        return [lin for lin in facts.linears if not lin.expert
                and lin.name not in ("mlp.gate", "mlp.shared_expert_gate")]
    wanted = set(target_modules)
    return [lin for lin in facts.linears if lin.name.rsplit(".", 1)[-1] in wanted or lin.name in wanted]


def lora_params(facts: ModelFacts, rank: int, target_modules: list[str] | None) -> int:
    """Adapter parameters: ``r x (rows + cols)`` for every adapted matrix."""
    return sum(rank * (lin.rows + lin.cols) * lin.count for lin in lora_targets(facts, target_modules))
