"""thub's backend contract, and the translation checked against TRL/PEFT's own types."""

from __future__ import annotations

from pathlib import Path

import pytest

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


class TestTrlContract(BackendContract):
    backend = "trl"
    plugin_module = "thub_plugin_trl"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {
        "sft": {**BASE, "learning_rate": 1e-4, "packing": True},
        "lora_sft": {**BASE, "lora_r": 4, "target_modules": ["q_proj"]},
        "grpo": {**BASE, "group_size": 4, "reward": ["math"]},
        "lora_grpo": {**BASE, "group_size": 2, "prompt_batch_size": 3},
        "dpo": {**BASE, "beta": 0.2, "loss_type": "ipo"},
        "kto": {**BASE, "desirable_weight": 1.5},
    }
    # conditional reads: pretraining blocks, validation, trackers' second names, 4-bit settings
    _MORE = {"is_pretraining": True, "block_size": 64, "validation_split": 0.1, "validation_frequency": 5,
             "wandb_project": "p", "wandb_entity": "e", "mlflow_tracking_uri": "file:///tmp/m",
             "mlflow_experiment_name": "x"}
    _TRACK = {"wandb_project": "p", "wandb_entity": "e", "mlflow_tracking_uri": "file:///tmp/m",
              "mlflow_experiment_name": "x"}
    _4BIT = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16",
             "bnb_4bit_use_double_quant": True}
    read_samples = [("sft", {**BASE, **_MORE}), ("lora_sft", {**BASE, **_MORE, **_4BIT}),
                    ("grpo", {**BASE, **_TRACK}), ("lora_grpo", {**BASE, **_TRACK, **_4BIT}),
                    ("dpo", {**BASE, **_TRACK, "reference_model_path": "ref"}),
                    ("kto", {**BASE, **_TRACK, "reference_model_path": "ref"})]
    checks = frozenset()


def _plan(algorithm: str, **params):
    registry = load_registry()
    resolved = resolve(registry, algorithm, backend="trl", flags={**BASE, **params}, environ={})
    return registry.translate(algorithm, "trl", resolved.values())


@pytest.mark.parametrize("algorithm", ["sft", "lora_sft", "grpo", "lora_grpo"])
def test_translation_builds_real_trl_configs(algorithm: str, tmp_path: Path) -> None:
    import trl
    from peft import LoraConfig

    plan = _plan(algorithm, ckpt_output_dir=str(tmp_path), warmup_steps=2, weight_decay=0.1, beta1=0.8,
                 wandb_project="p", wandb_run_name="r1")  # a run name needs its tracker
    config = getattr(trl, plan["config_class"])(**plan["config"])
    assert config.output_dir == f"{tmp_path}/checkpoints"
    assert (config.warmup_steps, config.weight_decay, config.adam_beta1, config.run_name) == (2, 0.1, 0.8, "r1")
    assert config.use_cpu is True and config.bf16 is False
    if plan["peft"]:
        lora = LoraConfig(**plan["peft"])
        assert lora.r == 16 and lora.lora_alpha == 32


def test_sft_batch_split_and_masking_choice() -> None:
    plan = _plan("sft", effective_batch_size=32, nproc_per_node=2)
    assert (plan["config"]["per_device_train_batch_size"], plan["config"]["gradient_accumulation_steps"]) == (8, 2)
    assert plan["world_size"] == 2
    assert plan["data"]["loss_on"] == "assistant tokens"
    assert _plan("sft", unmask_messages=True)["data"]["loss_on"] == "all tokens"
    pre = _plan("sft", is_pretraining=True, block_size=64)
    assert pre["data"]["mode"] == "pretraining" and pre["config"]["max_length"] == 64


def test_batch_that_cannot_be_met_names_nearest_values() -> None:
    with pytest.raises(UsageError, match="effective_batch_size 10 is not a multiple of the world size 4.*8, 12"):
        _plan("sft", effective_batch_size=10, nproc_per_node=4)


def test_grpo_translation() -> None:
    plan = _plan("grpo", group_size=4, prompt_batch_size=2, max_tokens=16, temperature=0.9, beta=0.04,
                 reward=["math", "binary"])
    config = plan["config"]
    assert (config["num_generations"], config["per_device_train_batch_size"],
            config["max_completion_length"]) == (4, 8, 16)
    assert (config["temperature"], config["beta"], plan["rewards"]) == (0.9, 0.04, ["math", "binary"])
    with pytest.raises(UsageError, match="cannot be split evenly over 3 processes"):
        _plan("grpo", group_size=4, prompt_batch_size=2, nproc_per_node=3)


def test_loggers_map_to_report_to_and_environment() -> None:
    plan = _plan("sft", wandb_project="p", wandb_entity="e", tensorboard_log_dir="tb", mlflow_tracking_uri="file:///x")
    assert plan["config"]["report_to"] == ["wandb", "tensorboard", "mlflow"]
    assert "logging_dir" not in plan["config"]  # transformers 5 has no such TrainingArguments field
    assert plan["config"]["run_name"] == "out"  # the run directory's name
    assert plan["environment"] == {"WANDB_PROJECT": "p", "WANDB_ENTITY": "e", "WANDB_DIR": "out",
                                   "TENSORBOARD_LOGGING_DIR": "tb", "MLFLOW_TRACKING_URI": "file:///x"}


def test_unhonoured_parameter_is_rejected() -> None:
    with pytest.raises(UsageError, match="num_iterations"):
        _plan("grpo", num_iterations=3)


def test_rewards_resolve_by_name_and_import_string() -> None:
    from thub_plugin_trl.runner import load_rewards

    by_name, by_path = load_rewards(["math", "thub_builtins.reward_functions:binary"])
    assert by_name(["q"], ["so the answer is 5"], ["5"]) == [1.0]
    assert by_path(["q"], ["Paris"], ["paris"]) == [1.0]


def test_save_merged_plan_and_meaning() -> None:
    plan = _plan("lora_sft", save_merged=True)
    assert plan["merged"]["dir"] == "out/merged" and plan["merged"]["from_adapter"] == "final"
    assert _plan("lora_sft")["merged"] is None
    with pytest.raises(UsageError, match="save_merged exports the final model"):
        _plan("lora_sft", save_merged=True, save_final_checkpoint=False)
    # a full sft run saves the whole model already: save_merged is a LoRA SFT parameter only
    from thub_builtins.params import LoRAGRPOParams, SFTParams

    assert "save_merged" not in SFTParams.model_fields and "save_merged" not in LoRAGRPOParams.model_fields


@pytest.mark.needs_backend("verl")  # named as the backend that has num_iterations
def test_num_iterations_is_not_trls_num_iterations() -> None:
    # thub's num_iterations means GRPO steps (= max_steps); TRL's own means updates per batch
    with pytest.raises(UsageError, match=r"num_iterations \(from flag --num-iterations\): backends that do: .*verl"):
        _plan("lora_grpo", num_iterations=3)
    assert _plan("grpo", max_steps=3)["config"]["max_steps"] == 3
    assert "num_iterations" not in _plan("grpo", max_steps=3)["config"]


def test_a_zero_beta_is_accepted_as_torchs_adamw_accepts_it(tmp_path: Path) -> None:
    """AdamW takes 0 <= beta < 1 (beta1=0 is momentum-free Adam); thub's bounds are the optimizer's."""
    import torch

    plan = _plan("sft", ckpt_output_dir=str(tmp_path), beta1=0.0)
    assert plan["config"]["adam_beta1"] == 0.0
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)], betas=(plan["config"]["adam_beta1"], 0.999))
    with pytest.raises(UsageError, match="beta1"):
        _plan("sft", beta1=1.0)
