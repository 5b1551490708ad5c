"""Parameter counts from config.json agree exactly with real transformers models built locally."""

from __future__ import annotations

from pathlib import Path

import pytest

from thub.insight.architecture import load_facts, lora_params, model_facts

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

SMALL = dict(vocab_size=160, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2)


def _configs() -> dict[str, object]:
    t = transformers
    return {
        "llama": t.LlamaConfig(**SMALL),
        "llama_bias_tied": t.LlamaConfig(**SMALL, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
        "mistral": t.MistralConfig(**SMALL),
        "qwen2": t.Qwen2Config(**SMALL),
        "qwen2_tied": t.Qwen2Config(**SMALL, tie_word_embeddings=True),
        "qwen3": t.Qwen3Config(**SMALL, head_dim=16),
        "mixtral": t.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2),
        "qwen2_moe": t.Qwen2MoeConfig(**SMALL, moe_intermediate_size=24, shared_expert_intermediate_size=40,
                                      num_experts=4, num_experts_per_tok=2, decoder_sparse_step=2, mlp_only_layers=[]),
        "qwen3_moe": t.Qwen3MoeConfig(**SMALL, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
                                      head_dim=8, mlp_only_layers=[0]),
        "granite": t.GraniteConfig(**SMALL),
    }


CONFIGS = _configs()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameter_count_is_exact(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name]
    model = transformers.AutoModelForCausalLM.from_config(config)
    real = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    config.save_pretrained(tmp_path)  # writes config.json only: what thub reads
    facts = load_facts(tmp_path)
    assert facts.total_params == real, (name, facts.components)
    assert facts.tied_embeddings == bool(getattr(config, "tie_word_embeddings", False))


def test_moe_records_experts() -> None:
    facts = model_facts(CONFIGS["mixtral"].to_dict())
    assert facts.num_experts == 4 and facts.experts_per_token == 2
    assert facts.components["experts"] == 3 * 4 * 3 * 32 * 48


def test_lora_adapter_count_matches_peft() -> None:
    peft = pytest.importorskip("peft")
    for name in ("llama", "qwen2", "qwen3"):
        model = transformers.AutoModelForCausalLM.from_config(CONFIGS[name])
        lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
        trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
        assert lora_params(model_facts(CONFIGS[name].to_dict()), 4, None) == trainable, name
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS["llama"])
    lora = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert lora_params(model_facts(CONFIGS["llama"].to_dict()), 8, ["q_proj", "v_proj"]) == trainable


def test_example_tiny_model_config(tiny_model: Path) -> None:
    root = tiny_model
    facts = load_facts(root)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(root))
    assert facts.total_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"])
def test_hub_id_is_read_from_the_cache_training_would_use(variable: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # the same cache location as model_path's checks (thub.config.model_path.hub_cache_dir)
    from thub.config.model_path import hub_cache_dir
    from thub.insight.architecture import read_config

    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, str(tmp_path / "cache"))
    snapshot = hub_cache_dir({variable: str(tmp_path / "cache")}) / "models--org--tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "llama"}')
    monkeypatch.chdir(tmp_path)
    assert read_config("org/tiny") == ({"model_type": "llama"}, str(snapshot / "config.json"))
