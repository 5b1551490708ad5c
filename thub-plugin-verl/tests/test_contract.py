"""thub's backend contract, the verl translation and the batch checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from thub_plugin_verl.translate import batch_layout, hydra_value

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.testing import BackendContract

BASE = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out"}


class TestVerlContract(BackendContract):
    backend = "verl"
    plugin_module = "thub_plugin_verl"
    readme = Path(__file__).parents[1] / "README.md"
    samples = {
        "grpo": {**BASE, "group_size": 4, "reward": ["math"], "nproc_per_node": 2},
        "lora_grpo": {**BASE, "group_size": 8, "prompt_batch_size": 8, "lora_r": 8, "nnodes": 2,
                      "nproc_per_node": 4},
    }
    read_samples = [("grpo", {**BASE, "group_size": 4, "reward": ["math"], "nproc_per_node": 1, "wandb_project": "p",
                              "wandb_entity": "e"}),
                    ("lora_grpo", {**BASE, "nproc_per_node": 1, "wandb_project": "p", "wandb_entity": "e"})]
    checks = frozenset({"verl.gpu-processes", "verl.ray-tmpdir", "verl.vllm-torch"})


def plan(algorithm: str = "lora_grpo", **params):
    registry = load_registry()
    resolved = resolve(registry, algorithm, backend="verl", flags={**BASE, **params}, environ={})
    return registry.translate(algorithm, "verl", resolved.values())


def overrides(p: dict) -> dict[str, str]:
    return dict(item.split("=", 1) for item in p["overrides"])


def test_argv_is_a_list_running_main_ppo() -> None:
    p = plan(nproc_per_node=2)
    assert p["argv"][:3] == ["python", "-m", "verl.trainer.main_ppo"]
    assert p["argv"][3:] == p["overrides"]
    assert all(isinstance(a, str) for a in p["argv"])


def test_grpo_mapping() -> None:
    o = overrides(plan("lora_grpo", group_size=4, prompt_batch_size=8, max_tokens=64, max_prompt_length=128,
                       temperature=0.9, beta=0.04, learning_rate=5e-6, lora_r=8, lora_alpha=16,
                       target_modules=["q_proj", "v_proj"], gpu_memory_utilization=0.3, tensor_parallel_size=2,
                       nproc_per_node=4, nnodes=2, warmup_steps=3, weight_decay=0.0, beta1=0.8, max_grad_norm=0.5,
                       wandb_project="p", wandb_run_name="r", save_steps=5, seed=7))
    expect = {
        "algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": "4", "data.train_batch_size": "8",
        "data.max_response_length": "64", "data.max_prompt_length": "128",
        "actor_rollout_ref.rollout.max_model_len": "192", "actor_rollout_ref.rollout.temperature": "0.9",
        "actor_rollout_ref.actor.use_kl_loss": "true", "actor_rollout_ref.actor.kl_loss_coef": "0.04",
        "actor_rollout_ref.actor.optim.lr": "5e-06", "actor_rollout_ref.model.lora_rank": "8",
        "actor_rollout_ref.model.lora_alpha": "16", "actor_rollout_ref.model.target_modules": "[q_proj,v_proj]",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.3",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "2", "trainer.n_gpus_per_node": "4",
        "trainer.nnodes": "2", "actor_rollout_ref.actor.ppo_mini_batch_size": "8",
        "actor_rollout_ref.actor.optim.lr_warmup_steps": "3", "actor_rollout_ref.actor.optim.weight_decay": "0.0",
        "actor_rollout_ref.actor.optim.betas.0": "0.8", "actor_rollout_ref.actor.optim.clip_grad": "0.5",
        "trainer.logger": "[console,file,wandb]", "trainer.project_name": "p", "trainer.experiment_name": "r",
        "trainer.save_freq": "5", "data.seed": "7", "actor_rollout_ref.rollout.name": "vllm",
        "reward.custom_reward_function.path": "out/verl/thub_reward.py",
        "reward.custom_reward_function.name": "compute_score", "trainer.default_local_dir": "out/checkpoints",
        "trainer.resume_mode": "disable",
    }
    assert {k: o.get(k) for k in expect} == expect


def test_full_grpo_has_no_lora_and_no_kl_by_default() -> None:
    o = overrides(plan("grpo", nproc_per_node=1))
    assert "actor_rollout_ref.model.lora_rank" not in o
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "false"
    assert "actor_rollout_ref.actor.kl_loss_coef" not in o


def test_steps_and_saving() -> None:
    p = plan(max_steps=7)
    o = overrides(p)
    assert (p["max_steps"], o["trainer.total_training_steps"], o["trainer.total_epochs"],
            o["trainer.save_freq"]) == (7, "7", "7", "7")
    assert overrides(plan(num_iterations=3))["trainer.total_training_steps"] == "3"
    with pytest.raises(UsageError, match="max_steps 2 and num_iterations 3 disagree"):
        plan(max_steps=2, num_iterations=3)
    assert overrides(plan(save_final_checkpoint=False))["trainer.save_freq"] == "-1"


def test_step_count_from_the_data_at_launch() -> None:
    from thub_plugin_verl.translate import translate

    registry = load_registry()
    values = resolve(registry, "lora_grpo", backend="verl", flags={**BASE, "num_epochs": 2}, environ={}).values()
    p = translate("lora_grpo", values, num_prompts=50)  # 50 // 16 = 3 whole batches a pass
    assert p["max_steps"] == 6 and "trainer.save_freq=6" in p["overrides"]
    resumed = translate("lora_grpo", values, num_prompts=50, resume_from="out/checkpoints/global_step_3")
    assert {"trainer.resume_mode=resume_path",
            "trainer.resume_from_path=out/checkpoints/global_step_3"} <= set(resumed["overrides"])


def test_nnodes_counts_in_the_batch_check() -> None:
    # 8 prompts x 2 = 16 completions: fine on 4 GPUs x 1 node, and on 4 x 4 = 16 GPUs
    assert batch_layout(8, 2, 4, 1)["ppo_mini_batch_size"] == 8
    with pytest.raises(UsageError, match=r"16 completions per step cannot be split over n_gpus 4 × nnodes 8 = 32 GPUs"
                                         r".*nearest valid prompt_batch_size values: 16"):
        batch_layout(8, 2, 4, 8)


def test_divisibility_errors_name_nearest_values() -> None:
    with pytest.raises(UsageError, match=r"prompt_batch_size 5 × group_size 2 = 10 .* = 8 GPUs .*; nearest valid "
                                         r"prompt_batch_size values: 4, 8"):
        plan(prompt_batch_size=5, group_size=2, nproc_per_node=4, nnodes=2)
    # group size 8 on 8 GPUs: a mini batch of 1 prompt gives each GPU one completion; 4 prompts: 4 each
    assert batch_layout(4, 8, 8, 1)["ppo_mini_batch_size"] == 4
    # 300 prompts on 8 GPUs: the largest mini batch up to 256 that divides 300 (256 would leave 44
    # prompts, which verl pads with synthetic samples to a second mini batch of 256)
    layout = batch_layout(300, 8, 8, 1)
    assert layout["ppo_mini_batch_size"] == 150 and layout["completions_per_step"] == 2400
    assert layout["log_prob_micro_batch_size_per_gpu"] == 2


def test_gpu_count_and_other_errors() -> None:
    from thub_plugin_verl.translate import gpus_per_node

    assert gpus_per_node({"nproc_per_node": "gpu"}, {"CUDA_VISIBLE_DEVICES": "0,1,2"}) == 3
    with pytest.raises(UsageError, match="set nproc_per_node to an integer"):
        gpus_per_node({"nproc_per_node": "auto"}, {})
    with pytest.raises(UsageError, match="tensor_parallel_size 3 must divide"):
        plan(nproc_per_node=4, tensor_parallel_size=3)
    with pytest.raises(UsageError, match="constant or cosine"):
        plan(lr_scheduler="linear")


@pytest.mark.parametrize("name", ["lora_dropout", "concurrency", "effective_batch_size"])
def test_unhonoured_parameter_is_rejected(name: str) -> None:
    with pytest.raises(UsageError, match=name):
        plan(**{name: 0.1 if name == "lora_dropout" else 4})


def test_hydra_values_are_quoted_when_needed() -> None:
    assert hydra_value("/data/run-1/x.parquet") == "/data/run-1/x.parquet"
    assert hydra_value("a dir/with space,comma") == "'a dir/with space,comma'"
    assert hydra_value("it's") == "'it\\'s'"
    assert hydra_value("null") == "'null'"
    assert (hydra_value(True), hydra_value(None), hydra_value(["a", 1])) == ("true", "null", "[a,1]")


def test_doctor_checks_from_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    import thub_plugin_verl as plugin

    assert plugin.ray_socket_problem({"RAY_TMPDIR": "/tmp"}) is None
    assert "AF_UNIX allows 107" in plugin.ray_socket_problem({"RAY_TMPDIR": "/mnt/nvme0n1/" + "x" * 60})
    versions = {"vllm": "0.24.0", "torch": "2.13.0+cpu"}
    monkeypatch.setattr("importlib.metadata.version", lambda name: versions[name])
    monkeypatch.setattr("importlib.metadata.requires", lambda name: ["torch==2.11.0", "numpy; extra == 'x'"])
    assert "torch==2.11.0, but torch 2.13.0+cpu" in plugin.torch_pairing_problems()[0]
    versions["torch"] = "2.11.0+cu128"
    assert plugin.torch_pairing_problems() == []


def test_gpu_and_library_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Libraries and the GPU: the core check, as `thub train --backend verl` runs it."""
    from thub.specs import CheckContext

    registry = load_registry()
    assert {c for c in registry.checks if c.startswith("verl.")} == {
        "verl.vllm-torch", "verl.ray-tmpdir", "verl.gpu-processes"}
    core = registry.checks["core.backend-requirements"]
    monkeypatch.setattr("thub.selection.cuda_visible", lambda: False)
    monkeypatch.setattr("thub.selection.requirement_problem", lambda spec: None)
    cuda = core.run(CheckContext(backend="verl"))
    assert (cuda.status, cuda.summary) == ("fail", "backend verl needs an NVIDIA GPU; none found")
    assert "--backend trl" in cuda.fix
    monkeypatch.setattr("thub.selection.requirement_problem",
                        lambda spec: f"{spec.split('>')[0]} is not installed" if spec.startswith(("verl", "vllm"))
                        else None)
    both = core.run(CheckContext(backend="verl"))
    assert both.summary == "backend verl needs an NVIDIA GPU; none found (and is missing verl>=0.9.1,<0.10, vllm)"
    assert "--backend trl" in both.fix and "thub install verl --into managed --gpu" in both.fix
    assert both.details == ("verl is not installed", "vllm is not installed")


def test_scale_parameters_map_to_verl() -> None:
    o = overrides(plan("lora_grpo", nproc_per_node=4, prompt_batch_size=16, group_size=4, micro_batch_size=2,
                       ppo_mini_batch_size=8, load_format="safetensors", layered_summon=True, language_model_only=True,
                       update_weights_bucket_megabytes=4096, param_offload=True, optimizer_offload=False,
                       use_fused_kernels=True, use_dr_grpo=True, enforce_eager=True))
    arr = "actor_rollout_ref"
    expect = {
        f"{arr}.actor.ppo_micro_batch_size_per_gpu": "2", f"{arr}.actor.ppo_mini_batch_size": "8",
        f"{arr}.rollout.load_format": "safetensors", f"{arr}.rollout.layered_summon": "true",
        f"+{arr}.rollout.engine_kwargs.vllm.language_model_only": "true",
        f"{arr}.rollout.checkpoint_engine.update_weights_bucket_megabytes": "4096",
        f"{arr}.actor.fsdp_config.param_offload": "true", f"{arr}.actor.fsdp_config.optimizer_offload": "false",
        f"{arr}.model.use_fused_kernels": "true", f"{arr}.rollout.enforce_eager": "true",
        "algorithm.norm_adv_by_std_in_grpo": "false", f"{arr}.actor.loss_agg_mode": "seq-mean-token-sum-norm",
    }
    assert {k: o.get(k) for k in expect} == expect


def test_scale_defaults_are_backend_defaults_and_unset_switches_stay_verls() -> None:
    registry = load_registry()
    resolved = resolve(registry, "grpo", backend="verl", flags={**BASE, "nproc_per_node": 1}, environ={})
    for name, value in (("micro_batch_size", 1), ("update_weights_bucket_megabytes", 3072), ("load_format", "dummy")):
        assert resolved.values()[name] == value and resolved.sources[name] == "backend verl", name
    assert resolved.sources["ppo_mini_batch_size"] == "default" and resolved.values()["ppo_mini_batch_size"] is None
    o = overrides(registry.translate("grpo", "verl", resolved.values()))
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "1"
    assert o["actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"] == "3072"
    assert o["actor_rollout_ref.rollout.load_format"] == "dummy"
    for key in ("actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.actor.fsdp_config.param_offload",
                "actor_rollout_ref.model.use_fused_kernels", "algorithm.norm_adv_by_std_in_grpo",
                "actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.rollout.layered_summon"):
        assert key not in o, key
    assert not any("language_model_only" in k for k in o)


def test_layered_summon_is_lora_only() -> None:
    with pytest.raises(UsageError, match=r"grpo parameters:\n  layered_summon .*no installed backend honours it"):
        plan("grpo", layered_summon=True, nproc_per_node=1)


def test_user_micro_and_mini_batches_in_the_checks() -> None:
    # 8 prompts x 2 = 16 completions over 4 GPUs: micro batch 4 fits, 8 does not
    assert batch_layout(8, 2, 4, 1, micro_batch_size=4)["ppo_micro_batch_size_per_gpu"] == 4
    with pytest.raises(UsageError, match=r"= 16 completions per step cannot be split over n_gpus 4 × nnodes 1 = 4 "
                                         r"GPUs in whole micro batches of micro_batch_size 8.* nearest valid "
                                         r"prompt_batch_size values: 16; or micro_batch_size 4"):
        plan(prompt_batch_size=8, group_size=2, nproc_per_node=4, micro_batch_size=8)
    with pytest.raises(UsageError, match=r"ppo_mini_batch_size 6 does not divide prompt_batch_size 16 .*; "
                                         r"nearest valid ppo_mini_batch_size values: 4, 8"):
        plan(prompt_batch_size=16, group_size=2, nproc_per_node=4, ppo_mini_batch_size=6)
    with pytest.raises(UsageError, match=r"ppo_mini_batch_size 3 × group_size 1 = 3 completions cannot be split over "
                                         r"n_gpus 4 × nnodes 1 = 4 GPUs; nearest valid ppo_mini_batch_size values: 4"):
        batch_layout(16, 1, 4, 1, ppo_mini_batch_size=3)
    with pytest.raises(UsageError, match=r"ppo_mini_batch_size 32 is larger than prompt_batch_size 16; "
                                         r"nearest valid ppo_mini_batch_size values: 16"):
        plan(prompt_batch_size=16, group_size=2, nproc_per_node=4, ppo_mini_batch_size=32)
    # 4 prompts x 2 / 4 GPUs = 2 completions per GPU: not whole micro batches of 4
    with pytest.raises(UsageError, match=r"ppo_mini_batch_size 4 gives 2 completions per GPU .* not a multiple of "
                                         r"micro_batch_size 4; nearest valid ppo_mini_batch_size values: 8"):
        plan(prompt_batch_size=16, group_size=2, nproc_per_node=4, micro_batch_size=4, ppo_mini_batch_size=4)
    # nnodes counts for the user's mini batch too
    with pytest.raises(UsageError, match=r"ppo_mini_batch_size 2 × group_size 2 = 4 completions cannot be split over "
                                         r"n_gpus 4 × nnodes 2 = 8 GPUs"):
        plan(prompt_batch_size=16, group_size=2, nproc_per_node=4, nnodes=2, ppo_mini_batch_size=2)
    # derived mini batch: a multiple of 16 prompts (8 GPUs x micro 2 / gcd(16, 3)) that divides 320, up to 256
    assert batch_layout(320, 3, 8, 1, micro_batch_size=2)["ppo_mini_batch_size"] == 160


def test_saves_per_epoch_sets_the_save_frequency_from_the_data() -> None:
    from thub_plugin_verl.translate import translate

    registry = load_registry()
    values = resolve(registry, "lora_grpo", backend="verl", flags={**BASE, "saves_per_epoch": 2, "num_epochs": 3},
                     environ={}).values()
    dry = translate("lora_grpo", values)  # no data yet: the frequency is set at launch
    assert "trainer.save_freq=-1" in dry["overrides"] and "saves_per_epoch 2" in dry["notes"][0]
    p = translate("lora_grpo", values, num_prompts=100)  # 100 // 16 = 6 batches a pass, 2 saves a pass
    assert "trainer.save_freq=3" in p["overrides"]
    assert "trainer.save_freq=1" in translate("lora_grpo", {**values, "saves_per_epoch": 10},
                                              num_prompts=100)["overrides"]
    with pytest.raises(UsageError, match="save_steps and saves_per_epoch"):
        plan(saves_per_epoch=2, save_steps=5)


def test_num_iterations_means_grpo_steps_like_max_steps() -> None:
    a, b = overrides(plan(num_iterations=4)), overrides(plan(max_steps=4))
    assert a["trainer.total_training_steps"] == b["trainer.total_training_steps"] == "4"
    assert overrides(plan(num_iterations=4, max_steps=4))["trainer.total_training_steps"] == "4"
    # thub's default lora_alpha (32) always reaches verl, whose own default is 16
    assert overrides(plan())["actor_rollout_ref.model.lora_alpha"] == "32"


def test_differing_run_names_are_an_error_not_a_silent_pick() -> None:
    # verl has one trainer.experiment_name for W&B and MLflow: a second, different name would be dropped
    with pytest.raises(UsageError, match="wandb_run_name and mlflow_run_name differ"):
        plan(wandb_project="p", wandb_run_name="a", mlflow_tracking_uri="file:///tmp/ml", mlflow_run_name="b")
    assert overrides(plan(mlflow_tracking_uri="file:///tmp/ml", mlflow_run_name="b"))["trainer.experiment_name"] == "b"
    same = plan(wandb_project="p", wandb_run_name="b", mlflow_tracking_uri="file:///tmp/ml", mlflow_run_name="b")
    assert overrides(same)["trainer.experiment_name"] == "b"
    assert overrides(plan())["trainer.experiment_name"] == "out"  # the run directory's name


def test_an_unset_beta_is_left_to_verl_and_zero_is_kept() -> None:
    # verl's optimizer default is betas [0.9, 0.999]: an unset beta must not be spelled out by thub
    o = overrides(plan(beta1=0.8))
    assert o["actor_rollout_ref.actor.optim.betas.0"] == "0.8"
    assert not {"actor_rollout_ref.actor.optim.betas", "actor_rollout_ref.actor.optim.betas.1"} & set(o)
    o = overrides(plan(beta2=0.95))
    assert o["actor_rollout_ref.actor.optim.betas.1"] == "0.95" and "actor_rollout_ref.actor.optim.betas.0" not in o
    assert not any(k.startswith("actor_rollout_ref.actor.optim.betas") for k in overrides(plan()))
    # an explicit 0.0 (torch's AdamW accepts 0 <= beta < 1; thub's field is stricter) is passed as 0.0,
    # never turned into the default by a truthiness test
    from thub_plugin_verl.translate import translate

    values = resolve(load_registry(), "grpo", backend="verl", flags=BASE, environ={}).values()
    o = overrides(translate("grpo", {**values, "beta1": 0.0, "beta2": 0.0}, num_prompts=64))
    assert (o["actor_rollout_ref.actor.optim.betas.0"], o["actor_rollout_ref.actor.optim.betas.1"]) == ("0.0", "0.0")
