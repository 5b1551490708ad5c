"""Every batch layout thub accepts passes verl 0.9.1's own checks; every one verl rejects, thub rejects.

verl's checks run in a helper process (verl_own_checks.py) from the wheel ``.ci/run`` unpacks into
``build/verl-0.9.1``: ``validate_config`` and the first step's ``chunk_tensordict``,
``make_iterator`` and ``prepare_micro_batches`` on real TensorDicts.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from thub_plugin_verl.translate import batch_layout, translate

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry

ROOT = Path(__file__).parents[2] / "build" / "verl-0.9.1"
CONFIG_DIR = ROOT / "verl" / "trainer" / "config"
HELPER = Path(__file__).with_name("verl_own_checks.py")

# only the tests that run verl's own checks need the unpacked wheel (and hydra); the others test thub alone
needs_verl = pytest.mark.skipif(
    importlib.util.find_spec("hydra") is None or not (CONFIG_DIR / "ppo_trainer.yaml").exists()
    or not (ROOT / "tensordict").exists(),
    reason="hydra, or verl 0.9.1 and tensordict unpacked into build/verl-0.9.1, missing: see .ci/run")


def base_overrides(tmp_path: Path, **params) -> list[str]:
    registry = load_registry()
    flags = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": str(tmp_path), "group_size": 4,
             "prompt_batch_size": 8, "nproc_per_node": 2, **params}
    return translate("grpo", resolve(registry, "grpo", backend="verl", flags=flags, environ={}).values(),
                     num_prompts=64)["overrides"]


def verl_verdicts(overrides: list[str], layouts: list[dict]) -> list[str | None]:
    """verl's verdict per layout: None (accepted) or its error message."""
    done = subprocess.run([sys.executable, str(HELPER), str(ROOT), str(CONFIG_DIR)], capture_output=True, text=True,
                          input=json.dumps({"overrides": overrides, "layouts": layouts}), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert len(verdicts) == len(layouts), done.stderr[-3000:]
    return verdicts


def verl_layout(pbs: int, group: int, gpus: int, nodes: int, mini: int, micro: int, log_prob_micro: int) -> dict:
    return {"train_batch_size": pbs, "n": group, "ppo_mini_batch_size": mini, "ppo_micro_batch_size_per_gpu": micro,
            "log_prob_micro_batch_size_per_gpu": log_prob_micro, "n_gpus_per_node": gpus, "nnodes": nodes}


def index(layouts: list[dict], layout: dict) -> int:
    """``layout``'s position in ``layouts``, appended when new (verl checks each distinct layout once)."""
    if layout not in layouts:
        layouts.append(layout)
    return layouts.index(layout)


def divisors(value: int) -> list[int]:
    return [d for d in range(1, value + 1) if value % d == 0]


# (prompt_batch_size, group_size, GPUs per node, nodes, micro_batch_size, ppo_mini_batch_size or None);
# verl takes ~0.1 s a layout here, so the matrix is chosen, not exhaustive: odd and even group sizes,
# 1-16 GPUs over 1-2 nodes, micro batches 1-2, thub's derived mini batch and user-given ones
GPUS = [(1, 1), (2, 1), (8, 1), (4, 2), (8, 2)]
DERIVED = [(p, n, g, nodes, m, None) for p, n, (g, nodes), m in
           itertools.product([1, 3, 4, 6, 12, 300, 320], [2, 3, 5, 8], GPUS, [1, 2])]
GIVEN = [(p, n, g, nodes, m, mini) for p, n, (g, nodes), m, mini in
         itertools.product([8, 12], [2, 3, 4], GPUS[:4], [1, 2], [1, 3, 4, 6, 8, 16])]


@needs_verl
@pytest.mark.slow
def test_thub_accepts_exactly_what_verl_accepts(tmp_path: Path) -> None:
    layouts: list[dict] = []
    cases: list[tuple[tuple, dict | str, list[int]]] = []
    for case in DERIVED + GIVEN:
        pbs, group, gpus, nodes, micro, mini = case
        try:
            plan = batch_layout(pbs, group, gpus, nodes, micro_batch_size=micro, ppo_mini_batch_size=mini)
        except UsageError as error:
            # verl must reject the given mini batch, or (derived) every mini batch: the log-prob
            # micro batch is 1 here, which always divides, so only the layout itself can fail
            candidates = [mini] if mini is not None else divisors(pbs)
            asked = [verl_layout(pbs, group, gpus, nodes, m, micro, 1) for m in candidates]
            cases.append((case, str(error), [index(layouts, layout) for layout in asked]))
        else:
            asked = verl_layout(pbs, group, gpus, nodes, plan["ppo_mini_batch_size"],
                                plan["ppo_micro_batch_size_per_gpu"], plan["log_prob_micro_batch_size_per_gpu"])
            cases.append((case, plan, [index(layouts, asked)]))
    verdicts = verl_verdicts(base_overrides(tmp_path), layouts)
    accepted_but_failing = [(case, verdicts[where[0]]) for case, plan, where in cases
                            if isinstance(plan, dict) and verdicts[where[0]] is not None]
    rejected_but_valid = [(case, error, [layouts[i]["ppo_mini_batch_size"] for i in where if verdicts[i] is None])
                          for case, error, where in cases
                          if isinstance(error, str) and any(verdicts[i] is None for i in where)]
    assert not accepted_but_failing, \
        f"{len(accepted_but_failing)} accepted layouts fail in verl: {accepted_but_failing[:5]}"
    assert not rejected_but_valid, f"{len(rejected_but_valid)} rejected layouts verl runs: {rejected_but_valid[:5]}"
    accepted = sum(isinstance(plan, dict) for _case, plan, _where in cases)
    assert 0 < accepted < len(cases)  # the matrix holds both kinds


@pytest.mark.parametrize("case", [(301, 2, 8, 1, 1, None), (7, 3, 2, 1, 2, None), (5, 2, 4, 2, 1, None),
                                  (16, 2, 4, 1, 4, 4), (16, 2, 4, 1, 1, 6), (12, 3, 2, 1, 2, 8), (24, 1, 8, 1, 1, 16)])
def test_errors_name_values_that_pass(case: tuple) -> None:
    """The nearest valid values an error names are values thub accepts (and so verl runs)."""
    pbs, group, gpus, nodes, micro, mini = case
    with pytest.raises(UsageError) as raised:
        batch_layout(pbs, group, gpus, nodes, micro_batch_size=micro, ppo_mini_batch_size=mini)
    message = str(raised.value)
    named = re.findall(r"nearest valid (prompt_batch_size|ppo_mini_batch_size) values: ([\d, ]+)", message)
    micro_named = re.findall(r"or micro_batch_size ([\d, ]+)", message)
    assert named, message
    for name, values in named:
        for value in (int(v) for v in values.split(",")):
            if name == "prompt_batch_size":
                batch_layout(value, group, gpus, nodes, micro_batch_size=micro, ppo_mini_batch_size=mini)
            else:
                batch_layout(pbs, group, gpus, nodes, micro_batch_size=micro, ppo_mini_batch_size=value)
    for values in micro_named:
        for value in (int(v) for v in values.split(",")):
            batch_layout(pbs, group, gpus, nodes, micro_batch_size=value)


@needs_verl
def test_log_prob_micro_batch_divides_the_completions_per_gpu(tmp_path: Path) -> None:
    """3 prompts × 5 completions on 1 GPU: 15 completions, scored in log-prob micro batches of 1 (not 2)."""
    overrides = base_overrides(tmp_path, prompt_batch_size=3, group_size=5, nproc_per_node=1, beta=0.01)
    values = dict(item.split("=", 1) for item in overrides)
    layout = verl_layout(3, 5, 1, 1, int(values["actor_rollout_ref.actor.ppo_mini_batch_size"]),
                         int(values["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]),
                         int(values["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"]))
    assert values["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == str(
        layout["log_prob_micro_batch_size_per_gpu"])
    assert verl_verdicts(overrides, [layout]) == [None]


@needs_verl
def test_the_restated_verl_assert_is_still_verls() -> None:
    """verl_own_checks.py restates one inline assert of TrainingWorker.train_mini_batch and the mini-batch
    size of the v1 trainer's _update_actor: both must still read so in the unpacked wheel."""
    workers = (ROOT / "verl" / "workers" / "engine_workers.py").read_text()
    assert "assert mini_batch_size % self.engine.get_data_parallel_size() == 0" in workers
    assert "mini_batch_size_per_gpu = mini_batch_size // self.engine.get_data_parallel_size()" in workers
    trainer = (ROOT / "verl" / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    assert ("ppo_mini_batch_size = ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n"
            in trainer.split("def _update_actor", 1)[1])
