"""The first DPO steps on trl and llamafactory agree on the same data (issue 26).

With the reference model equal to the initial policy every implicit reward is 0 at step 1, so the
sigmoid loss is ln 2 on any correct implementation: both are held to ln 2 and to each other. That
alone cannot tell two implementations apart, so the test also compares what is not trivially
equal: the step-1 gradient norm (it depends on every token of the pairs and their masks) and the
rewards after the first update (step 2: same seed, so the HF Trainer's sampler draws the same
pairs in the same order on both; the same tokens, since both render each side with the model's
chat template and train the answer with its end-of-turn and newline).

Measured 2026-12-02 (tiny model, 8 pairs, batch 2, lr 1e-3, seed 7, 3 steps): trl 1.16 and
LLaMA-Factory 0.9.5 gave the same loss, grad_norm and rewards at every step to 5 decimals
(step 2: loss 0.15242, rewards/chosen 1.66409, rewards/margins 1.806).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from thub.runner.metrics import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.install]

#: stated tolerance for the first-step loss (absolute) and for the other quantities (relative)
LOSS_TOLERANCE = 1e-3
RELATIVE_TOLERANCE = 1e-3


def test_first_dpo_steps_agree_on_trl_and_llamafactory(lf_env: dict, tiny_model: Path,
                                                       preference_files: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("trl")
    metrics = {}
    for backend in ("trl", "llamafactory"):
        out = tmp_path / backend
        done = subprocess.run([sys.executable, "-m", "thub", "train", "dpo", "--backend", backend, "--model-path",
                               str(tiny_model), "--data-path", str(preference_files["dpo"]), "--ckpt-output-dir",
                               str(out), "--max-steps", "3", "--learning-rate", "1e-3", "--effective-batch-size", "2",
                               "--seed", "7"], capture_output=True, text=True, env=lf_env["environ"], timeout=900)
        assert done.returncode == 0, f"{backend}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        metrics[backend] = read_metrics(out / "training_metrics.jsonl")
        assert [line["step"] for line in metrics[backend]] == [1, 2, 3], backend
    trl, lf = metrics["trl"], metrics["llamafactory"]
    # step 1: reference = initial policy, so the sigmoid DPO loss is ln 2 on both
    assert trl[0]["loss"] == pytest.approx(math.log(2), abs=LOSS_TOLERANCE)
    assert lf[0]["loss"] == pytest.approx(math.log(2), abs=LOSS_TOLERANCE)
    assert lf[0]["loss"] == pytest.approx(trl[0]["loss"], abs=LOSS_TOLERANCE)
    # not trivially equal: the first gradient, and the rewards after one update
    assert lf[0]["grad_norm"] == pytest.approx(trl[0]["grad_norm"], rel=RELATIVE_TOLERANCE)
    assert trl[1]["rewards/chosen"] != pytest.approx(0.0, abs=1e-3)  # the update moved the policy
    for name in ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins"):
        assert lf[1][name] == pytest.approx(trl[1][name], rel=RELATIVE_TOLERANCE), name
