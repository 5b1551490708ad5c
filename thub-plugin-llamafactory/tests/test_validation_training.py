"""Held-out loss on a real LLaMA-Factory run in its managed environment (issue 28): a separate
``validation_data_path`` is tokenized by thub as the training rows are and saved as the tokenized
``validation`` split, LLaMA-Factory's Trainer evaluates it (eval_loss lines in training_metrics.jsonl,
once per step though LLaMA-Factory evaluates again after training) and keeps the best checkpoint
(metric_for_best_model) through save_total_limit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from thub.testing.validation import assert_best_checkpoint_kept, validating_run

pytestmark = [pytest.mark.slow, pytest.mark.install]


def test_llamafactory_eval_loss_lines_and_the_best_checkpoint(lf_env: dict, tiny_model: Path,
                                                              tmp_path: Path) -> None:
    done, out = validating_run("llamafactory", tiny_model, tmp_path, lf_env["environ"])
    assert done.returncode == 0, done.stderr[-4000:]
    result = assert_best_checkpoint_kept(out)
    assert result["final_checkpoint"] == str(out / "checkpoints")
    args = yaml.safe_load((out / "llamafactory" / "train.yaml").read_text())
    assert (args["eval_dataset"], args["metric_for_best_model"], args["greater_is_better"]) == (
        "thub_validation", "eval_loss", False)
