"""Run verl 0.9.1's own batch checks on batch layouts (a helper process for test_batch_matrix.py).

Reads JSON from stdin: ``{"overrides": [...], "layouts": [{...}, ...]}``. ``overrides`` is a full
thub override list (composed once with verl's Hydra config, as ``main_ppo`` does). Without
``layouts`` the composed config itself is checked (and converted to verl's optimizer dataclass,
which validates its fields; the rollout's imports Ray workers); each layout sets the batch keys
(``train_batch_size``, ``n``, ``ppo_mini_batch_size``, ``ppo_micro_batch_size_per_gpu``,
``log_prob_micro_batch_size_per_gpu``, ``n_gpus_per_node``, ``nnodes``) on that config. Writes one
JSON line per layout: ``null`` when every check passed, else the first failure's message.

The checks are verl's own code, from the wheel ``.ci/run`` unpacks into ``build/verl-0.9.1``
(with tensordict 0.10.0, cloudpickle, pyvers, codetiming and orjson next to it):

* launch: ``verl.utils.config.validate_config`` (with it ``ActorConfig.__post_init__``/``validate``);
* the first step, per data-parallel rank, in the order verl's v1 trainer runs it on real
  TensorDicts: ``tensordict_utils.chunk_tensordict`` (dispatch to the ranks),
  ``engine.utils.prepare_micro_batches`` with the log-prob micro batch (old and reference
  log-probs), the mini-batch size check of ``TrainingWorker.train_mini_batch`` (an inline assert,
  restated here; test_batch_matrix.py checks it still reads so in the wheel),
  ``tensordict_utils.make_iterator`` over the rank's batch *unpadded* (verl's v1 trainer would
  otherwise pad the step with synthetic samples), and ``prepare_micro_batches`` per mini batch.

Ray is not installed here: verl's ``protocol`` module only names ``ray.ObjectRef`` in a type
annotation, so a stand-in module with that one name is placed in ``sys.modules``; the package
``__init__`` files of ``verl``, ``verl.workers`` and ``verl.workers.engine`` (which import Ray
workers, vLLM and FSDP engines) are skipped. Nothing else is replaced.
"""

from __future__ import annotations

import contextlib
import json
import sys
import types
import warnings
from pathlib import Path


def load_verl(root: Path) -> dict:
    sys.path.insert(0, str(root))
    for name in ("verl", "verl.workers", "verl.workers.engine"):
        package = types.ModuleType(name)
        package.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = package
    ray = types.ModuleType("ray")
    ray.ObjectRef = object  # only a type annotation in verl.protocol
    sys.modules["ray"] = ray
    from verl.protocol import DataProto

    sys.modules["verl"].DataProto = DataProto  # what verl/__init__ exports (modules import it from there)
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.engine.utils import prepare_micro_batches

    return {"tu": tu, "validate_config": validate_config, "prepare_micro_batches": prepare_micro_batches,
            "need_reference_policy": need_reference_policy, "omega_conf_to_dataclass": omega_conf_to_dataclass}


# verl's config copies some batch values by interpolation; the config is resolved once (resolving
# it per layout costs 0.1 s), so each layout sets the copies too, checked against the raw config.
COPIES = {
    "actor_rollout_ref.actor.rollout_n": "${oc.select:actor_rollout_ref.rollout.n,1}",
    "actor_rollout_ref.ref.rollout_n": "${oc.select:actor_rollout_ref.rollout.n,1}",
    "actor_rollout_ref.rollout.n_gpus_per_node": "${oc.select:trainer.n_gpus_per_node,8}",
}
ARR = "actor_rollout_ref"
KEYS = {"train_batch_size": ["data.train_batch_size"],
        "n": [f"{ARR}.rollout.n", f"{ARR}.actor.rollout_n", f"{ARR}.ref.rollout_n"],
        "ppo_mini_batch_size": [f"{ARR}.actor.ppo_mini_batch_size"],
        "ppo_micro_batch_size_per_gpu": [f"{ARR}.actor.ppo_micro_batch_size_per_gpu"],
        "log_prob_micro_batch_size_per_gpu": [f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu",
                                              f"{ARR}.ref.log_prob_micro_batch_size_per_gpu"],
        "n_gpus_per_node": ["trainer.n_gpus_per_node", f"{ARR}.rollout.n_gpus_per_node"],
        "nnodes": ["trainer.nnodes"]}


def compose(config_dir: Path, overrides: list[str]):
    """verl's config as ``main_ppo`` composes it, resolved once."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=overrides)
    for key, interpolation in COPIES.items():
        parent, leaf = key.rsplit(".", 1)
        raw = OmegaConf.select(config, parent)._get_node(leaf)._value()
        assert raw == interpolation, f"verl's {key} is now {raw!r}, not {interpolation!r}: update COPIES"
    OmegaConf.resolve(config)
    return config


def apply(config, layout: dict) -> None:
    from omegaconf import OmegaConf

    for name, keys in KEYS.items():
        for key in keys:
            OmegaConf.update(config, key, layout[name], merge=False)


def first_step(verl: dict, config) -> None:
    """The batch arithmetic of verl's first GRPO step, on real TensorDicts (FSDP: dp = all GPUs)."""
    import torch
    from tensordict import TensorDict

    tu, prepare = verl["tu"], verl["prepare_micro_batches"]
    arr = config.actor_rollout_ref
    dp = config.trainer.n_gpus_per_node * config.trainer.nnodes
    completions = config.data.train_batch_size * arr.rollout.n
    batch = TensorDict({"input_ids": torch.arange(completions).unsqueeze(1)}, batch_size=[completions])
    rank_batch = tu.chunk_tensordict(batch, dp)[0]

    def micro_batches(data, micro: int) -> None:
        data = data.clone()
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro)
        prepare(data)

    # old (and reference) log-probs: infer_batch with log_prob_micro_batch_size_per_gpu
    micro_batches(rank_batch, arr.rollout.log_prob_micro_batch_size_per_gpu)
    if verl["need_reference_policy"](config):
        micro_batches(rank_batch, arr.ref.log_prob_micro_batch_size_per_gpu)
    # update_actor -> TrainingWorker.train_mini_batch (engine_workers.py): mini_batch_size is
    # ppo_mini_batch_size x n (trainer_base._update_actor), then the rank's share of it
    mini_batch_size = arr.actor.ppo_mini_batch_size * arr.rollout.n
    assert mini_batch_size % dp == 0, f"Got {mini_batch_size=} and data_parallel_size={dp}"
    for mini_batch in tu.make_iterator(rank_batch, mini_batch_size=mini_batch_size // dp, epochs=1, seed=42):
        micro_batches(mini_batch, arr.actor.ppo_micro_batch_size_per_gpu)


def main() -> None:
    root, config_dir = Path(sys.argv[1]), Path(sys.argv[2])
    verl = load_verl(root)
    from hydra.errors import InstantiationException
    request = json.load(sys.stdin)
    config = compose(config_dir, request["overrides"])
    warnings.simplefilter("ignore")
    out = sys.stdout
    # validate_config's last check (vLLM's largest LoRA rank) imports vllm, absent here: it is left
    # out by checking LoRA plans with lora_rank 0 (nothing else in the checks reads the rank)
    from omegaconf import OmegaConf

    OmegaConf.update(config, "actor_rollout_ref.model.lora_rank", 0, merge=False)
    # no "layouts": the composed config itself, also through verl's rollout and optimizer dataclasses
    whole = request.get("layouts") is None
    for layout in [None] if whole else request["layouts"]:
        if layout is not None:
            apply(config, layout)
        try:
            with contextlib.redirect_stdout(sys.stderr):  # verl prints its own progress
                verl["validate_config"](config=config, use_reference_policy=verl["need_reference_policy"](config),
                                        use_critic=False)
                first_step(verl, config)
                if whole:
                    verl["omega_conf_to_dataclass"](config.actor_rollout_ref.actor.optim)
        except (AssertionError, ValueError, InstantiationException) as error:
            out.write(json.dumps(f"{type(error).__name__}: {error}") + "\n")
        else:
            out.write(json.dumps(None) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
