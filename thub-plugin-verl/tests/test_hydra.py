"""The generated overrides composed with verl 0.9.1's own Hydra config (no verl/torch import).

``.ci/run`` unpacks the verl wheel (pure Python, no dependencies) with
``pip install --no-deps --target build/verl-0.9.1 verl==0.9.1``; Hydra composes
``verl/trainer/config/ppo_trainer.yaml`` from that directory exactly as ``main_ppo`` does
(``config_name=ppo_trainer``). A key that does not exist in verl's schema fails composition.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from thub_plugin_verl.translate import translate

from thub.config.resolve import resolve
from thub.manager import load_registry

pytest.importorskip("hydra")


def config_dir() -> Path | None:
    candidates = [os.environ.get("THUB_VERL_CONFIG_DIR"),
                  str(Path(__file__).parents[2] / "build" / "verl-0.9.1" / "verl" / "trainer" / "config")]
    spec = importlib.util.find_spec("verl")
    if spec and spec.submodule_search_locations:
        candidates.append(str(Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"))
    for candidate in candidates:
        if candidate and (Path(candidate) / "ppo_trainer.yaml").exists():
            return Path(candidate)
    return None


CONFIG_DIR = config_dir()
pytestmark = pytest.mark.skipif(CONFIG_DIR is None, reason="verl's config not unpacked: see .ci/run (build/verl-0.9.1)")


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(config)  # every interpolation resolves; '???' left anywhere would raise on access
    return config


def native(algorithm: str, tmp_path: Path, num_prompts: int | None = 64, **params):
    registry = load_registry()
    flags = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": str(tmp_path / "run dir"), **params}
    values = resolve(registry, algorithm, backend="verl", flags=flags, environ={}).values()
    return translate(algorithm, values, num_prompts=num_prompts)


def check_like_verl(overrides: list[str]) -> None:
    """verl's own checks on the composed config: ``validate_config``, its optimizer dataclass, and
    the first step's batch arithmetic (see verl_own_checks.py). They need the
    tensordict .ci/run unpacks next to verl; without it only the composition is checked."""
    import json
    import subprocess
    import sys

    root = CONFIG_DIR.parents[2]
    if not (root / "tensordict").exists():
        return
    helper = Path(__file__).with_name("verl_own_checks.py")
    done = subprocess.run([sys.executable, str(helper), str(root), str(CONFIG_DIR)], capture_output=True, text=True,
                          input=json.dumps({"overrides": overrides}), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) is None, json.loads(done.stdout)


@pytest.mark.parametrize("algorithm", ["grpo", "lora_grpo"])
def test_overrides_compose_into_verls_config(algorithm: str, tmp_path: Path) -> None:
    plan = native(algorithm, tmp_path, group_size=4, prompt_batch_size=8, nproc_per_node=2, nnodes=2, beta=0.01,
                  max_tokens=32, max_prompt_length=64, temperature=0.8, warmup_steps=2, beta1=0.85,
                  wandb_project="proj", tensorboard_log_dir=str(tmp_path / "tb"), save_steps=2)
    config = compose(plan["overrides"])
    check_like_verl(plan["overrides"])
    arr = config.actor_rollout_ref
    assert config.algorithm.adv_estimator == "grpo"
    assert (arr.rollout.n, config.data.train_batch_size, arr.actor.ppo_mini_batch_size) == (4, 8, 8)
    assert (config.trainer.n_gpus_per_node, config.trainer.nnodes) == (2, 2)
    assert arr.rollout.max_model_len == 96 and arr.rollout.prompt_length == 64 and arr.rollout.response_length == 32
    assert arr.rollout.temperature == 0.8 and list(arr.actor.optim.betas) == [0.85, 0.999]
    assert arr.actor.use_kl_loss is True and arr.actor.kl_loss_coef == 0.01
    assert arr.rollout.checkpoint_engine.update_weights_bucket_megabytes == 3072
    assert list(config.trainer.logger) == ["console", "file", "wandb", "tensorboard"]
    assert config.reward.custom_reward_function.path == plan["files"]["reward_module"]
    assert config.reward.custom_reward_function.name == "compute_score"
    assert config.data.train_files == plan["files"]["train"]  # the path with a space survives quoting
    assert config.trainer.default_local_dir == str(tmp_path / "run dir" / "checkpoints")
    assert config.trainer.save_freq == 2 and config.trainer.resume_mode == "disable"
    assert arr.model.lora_rank == (16 if algorithm == "lora_grpo" else 0)
    if algorithm == "lora_grpo":
        assert arr.model.lora_alpha == 32 and arr.model.target_modules == "all-linear"


def test_steps_resume_and_lists_compose(tmp_path: Path) -> None:
    registry = load_registry()
    flags = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": str(tmp_path), "max_steps": 5,
             "target_modules": ["q_proj", "k_proj"], "lr_scheduler": "cosine", "nproc_per_node": 1}
    values = resolve(registry, "lora_grpo", backend="verl", flags=flags, environ={}).values()
    plan = translate("lora_grpo", values, num_prompts=40, resume_from=str(tmp_path / "checkpoints" / "global_step_2"))
    config = compose(plan["overrides"])
    check_like_verl(plan["overrides"])
    assert (config.trainer.total_training_steps, config.trainer.total_epochs, config.trainer.save_freq) == (5, 5, 5)
    assert config.trainer.resume_mode == "resume_path"
    assert config.trainer.resume_from_path.endswith("global_step_2")
    assert list(config.actor_rollout_ref.model.target_modules) == ["q_proj", "k_proj"]
    assert config.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"


def test_a_key_verl_does_not_have_fails_composition(tmp_path: Path) -> None:
    from hydra.errors import ConfigCompositionException

    plan = native("grpo", tmp_path)
    with pytest.raises(ConfigCompositionException, match="nosuchkey"):
        compose([*plan["overrides"], "trainer.nosuchkey=1"])


@pytest.mark.parametrize("algorithm", ["grpo", "lora_grpo"])
def test_scale_parameters_compose_into_verls_config(algorithm: str, tmp_path: Path) -> None:
    lora_only = {"layered_summon": True} if algorithm == "lora_grpo" else {}
    plan = native(algorithm, tmp_path, num_prompts=100, nproc_per_node=4, prompt_batch_size=16, group_size=4,
                  micro_batch_size=2, ppo_mini_batch_size=8, load_format="safetensors", language_model_only=True,
                  update_weights_bucket_megabytes=4096, param_offload=True, optimizer_offload=True,
                  saves_per_epoch=2, use_dr_grpo=True, use_fused_kernels=True, enforce_eager=True, **lora_only)
    config = compose(plan["overrides"])
    check_like_verl(plan["overrides"])
    arr = config.actor_rollout_ref
    assert (arr.actor.ppo_micro_batch_size_per_gpu, arr.actor.ppo_mini_batch_size) == (2, 8)
    assert arr.rollout.load_format == "safetensors" and arr.rollout.enforce_eager is True
    assert arr.rollout.layered_summon is (algorithm == "lora_grpo")
    assert arr.rollout.engine_kwargs.vllm.language_model_only is True
    assert arr.rollout.checkpoint_engine.update_weights_bucket_megabytes == 4096
    assert arr.actor.fsdp_config.param_offload is True and arr.actor.fsdp_config.optimizer_offload is True
    assert arr.model.use_fused_kernels is True and arr.actor.use_fused_kernels is True  # the actor reads the model's
    assert config.algorithm.norm_adv_by_std_in_grpo is False
    assert arr.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert config.trainer.save_freq == 3  # 100 // 16 = 6 prompt batches a pass, 2 saves a pass


def test_backend_defaults_compose_to_verls_own_switches(tmp_path: Path) -> None:
    config = compose(native("lora_grpo", tmp_path, nproc_per_node=1)["overrides"])
    arr = config.actor_rollout_ref
    assert arr.rollout.load_format == "dummy" and arr.actor.ppo_micro_batch_size_per_gpu == 1
    assert arr.rollout.checkpoint_engine.update_weights_bucket_megabytes == 3072
    assert arr.rollout.enforce_eager is False and arr.rollout.layered_summon is False
    assert arr.actor.fsdp_config.param_offload is False and arr.model.use_fused_kernels is False
    assert config.algorithm.norm_adv_by_std_in_grpo is True and arr.actor.loss_agg_mode == "token-mean"
    assert dict(arr.rollout.engine_kwargs.vllm) == {}


# What a required-only grpo translation sets to something other than verl's own composed default,
# and why. Anything else differing would be thub silently changing verl's meaning.
SET_ON_PURPOSE = {
    "algorithm.adv_estimator": "GRPO", "data.train_files": "the run's data", "data.val_files": "the run's data",
    "data.train_batch_size": "prompt_batch_size (declared backend default 16)",
    "data.max_prompt_length": "max_prompt_length (declared backend default 1024)",
    "data.filter_overlong_prompts": "fixed: long prompts are filtered, not an error mid-run", "data.seed": "seed 42",
    "actor_rollout_ref.model.path": "model_path",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "derived: divides prompt_batch_size (batch_layout)",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "micro_batch_size (declared backend default 1)",
    "actor_rollout_ref.rollout.name": "fixed: vLLM", "actor_rollout_ref.rollout.n": "group_size (declared default 8)",
    "actor_rollout_ref.rollout.temperature": "temperature (declared default 0.7)",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "tensor_parallel_size (declared backend default 1)",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "declared backend default 0.35",
    "actor_rollout_ref.rollout.max_model_len": "max_prompt_length + max_tokens",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "derived (batch_layout)",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "derived (batch_layout)",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": "declared backend default 3072",
    "actor_rollout_ref.ref.fsdp_config.param_offload": "fixed: the reference model waits on the CPU",
    "reward.custom_reward_function.path": "thub's reward module", "trainer.n_gpus_per_node": "nproc_per_node",
    "trainer.total_epochs": "num_epochs (declared backend default 1)", "trainer.save_freq": "save at the last step",
    "trainer.val_before_train": "fixed: no validation pass", "trainer.project_name": "thub",
    "trainer.experiment_name": "the run directory's name", "trainer.logger": "thub's file logger, no W&B unless asked",
    "trainer.default_local_dir": "the run's checkpoints", "trainer.resume_mode": "--resume decides",
}


def test_unset_parameters_leave_verls_defaults(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    overrides = native("grpo", tmp_path, nproc_per_node=1, reward=["math"])["overrides"]
    defaults, ours = compose([]), compose(overrides)
    keys = [item.split("=", 1)[0].lstrip("+") for item in overrides]
    differing = {key for key in keys
                 if OmegaConf.select(ours, key) != OmegaConf.select(defaults, key, default="<absent>")}
    assert differing == set(SET_ON_PURPOSE), (sorted(differing - set(SET_ON_PURPOSE)),
                                              sorted(set(SET_ON_PURPOSE) - differing))
