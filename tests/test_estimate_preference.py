"""thub estimate for preference tuning (issue 26): dpo and kto count the frozen reference model.

DPO and KTO hold a frozen copy of the initial policy (or ``reference_model_path``) in the
compute dtype beside the trained model; the reference-free losses (orpo, simpo) load none. A
DPO pair is two sequences (chosen and rejected) in one forward, so a micro-batch of pairs is
twice the tokens of as many SFT samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from thub.cli.main import cli
from thub.insight.architecture import model_facts
from thub.insight.estimator import GIB, estimate, setup_from_params
from thub_builtins.preference_params import LOSSES_WITHOUT_REFERENCE

LLAMA_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": True}


@pytest.fixture
def llama1b(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_1B))
    return tmp_path


def _estimate(algorithm: str, *options: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["estimate", algorithm, *options, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _part(data: dict, name: str) -> int | None:  # type: ignore[type-arg]
    return next((c["bytes"] for c in data["components"] if c["name"] == name), None)


def _api(algorithm: str, policy: object = None, config: dict | None = None,  # type: ignore[type-arg]
         **params: object) -> object:
    facts = model_facts(config or LLAMA_1B)
    setup = setup_from_params(algorithm, {"max_tokens_per_gpu": 8192, **params}, gpus=1, gpu_memory=80 * GIB,
                              precision="auto" if policy else "bf16-mixed", sharding="ddp", policy=policy,
                              facts=facts,
                              reference_model=None if algorithm == "sft" else params.get("loss_type") not in
                              LOSSES_WITHOUT_REFERENCE)
    return estimate(facts, setup, advise=False)


def _parts(result: object) -> dict[str, int]:
    return {c.name: c.bytes for c in result.components}  # type: ignore[attr-defined]


def test_dpo_is_sft_plus_one_frozen_model_in_the_compute_dtype() -> None:
    sft, dpo = _api("sft"), _api("dpo")
    params = model_facts(LLAMA_1B).total_params
    assert _parts(dpo)["reference model"] == params * 2  # bf16 compute dtype, no master copy
    assert "reference model" not in _parts(sft)
    assert dpo.expected - sft.expected == params * 2  # type: ignore[attr-defined]
    assert dpo.as_dict()["setup"]["reference_model"] is True  # type: ignore[attr-defined]


@pytest.mark.parametrize("loss", ["simpo", "orpo"])
def test_reference_free_losses_load_no_reference_model(loss: str) -> None:
    sft, free = _api("sft"), _api("dpo", loss_type=loss)
    assert "reference model" not in _parts(free)
    assert free.expected == sft.expected  # type: ignore[attr-defined]


@pytest.mark.parametrize("loss", ["simpo", "orpo"])
def test_cli_reference_free_losses_are_the_reference_model_less(llama1b: Path, loss: str) -> None:
    common = ("--model-path", str(llama1b), "--max-tokens-per-gpu", "8192", "--sharding", "ddp")
    dpo, free = _estimate("dpo", *common), _estimate("dpo", *common, "--loss-type", loss)
    assert _part(free, "reference model") is None and free["setup"]["reference_model"] is False
    gap = dpo["bytes_per_gpu"]["expected"] - free["bytes_per_gpu"]["expected"]
    assert gap == _part(dpo, "reference model") > 0 and dpo["setup"]["reference_model"] is True


def test_a_library_that_loads_the_checkpoint_dtype_loads_the_reference_so() -> None:
    from thub.manager import get_registry

    if "trl" not in get_registry().backends:
        pytest.skip("thub-plugin-trl not installed")
    policy = get_registry().backend("trl").memory
    params = model_facts(LLAMA_1B).total_params
    fp32 = _api("dpo", policy, dict(LLAMA_1B, torch_dtype="float32"))
    bf16 = _api("dpo", policy, dict(LLAMA_1B, torch_dtype="bfloat16"))
    assert _parts(fp32)["reference model"] == params * 4  # TRL loads it in the policy's dtype
    assert _parts(bf16)["reference model"] == params * 2


def test_kto_counts_the_reference_model(llama1b: Path) -> None:
    data = _estimate("kto", "--model-path", str(llama1b), "--max-seq-len", "1024", "--precision", "fp32",
                     "--sharding", "ddp")
    assert _part(data, "reference model") == data["model"]["total_params"] * 4  # fp32 compute


def test_reference_model_is_sharded_like_the_weights(tmp_path: Path) -> None:
    # a bf16 checkpoint: 16-bit whether the backend loads the checkpoint's dtype or the compute dtype
    (tmp_path / "config.json").write_text(json.dumps(dict(LLAMA_1B, torch_dtype="bfloat16")))
    data = _estimate("dpo", "--model-path", str(tmp_path), "--max-tokens-per-gpu", "8192", "--gpus", "4",
                     "--sharding", "fsdp")
    assert _part(data, "reference model") == data["model"]["total_params"] * 2 // 4


def test_a_dpo_pair_is_two_sequences_in_one_forward() -> None:
    params = {"max_seq_len": 1024, "effective_batch_size": 16}
    sft = setup_from_params("sft", params, gpus=2, gpu_memory=80 * GIB)
    dpo = setup_from_params("dpo", params, gpus=2, gpu_memory=80 * GIB)
    kto = setup_from_params("kto", params, gpus=2, gpu_memory=80 * GIB)
    assert dpo.tokens_per_gpu == 2 * sft.tokens_per_gpu and kto.tokens_per_gpu == sft.tokens_per_gpu
    assert any("chosen and rejected" in note for note in dpo.assumptions)
    # a token budget still holds one whole pair
    budget = setup_from_params("dpo", {"max_seq_len": 4096, "max_tokens_per_gpu": 4096}, gpus=1, gpu_memory=GIB)
    assert budget.tokens_per_gpu == 2 * 4096


def test_reference_model_flag_from_the_caller() -> None:
    facts = model_facts(LLAMA_1B)
    with_ref = setup_from_params("dpo", {"max_tokens_per_gpu": 4096}, gpus=1, gpu_memory=80 * GIB,
                                 reference_model=True)
    without = setup_from_params("dpo", {"max_tokens_per_gpu": 4096}, gpus=1, gpu_memory=80 * GIB,
                                reference_model=False)
    names = {c.name for c in estimate(facts, with_ref).components}
    assert "reference model" in names
    assert "reference model" not in {c.name for c in estimate(facts, without).components}
