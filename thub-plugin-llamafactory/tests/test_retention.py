"""``save_total_limit`` on a real LLaMA-Factory run in its managed environment (issue 27 item 6): the value
reaches LLaMA-Factory's own training arguments (``get_train_args`` on the run's ``train.yaml``) and its
Trainer keeps the newest two ``checkpoint-N`` beside the final model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.install]

# LLaMA-Factory's own parsing of the run's train.yaml (what its CLI does), output_dir moved aside
ARGS = textwrap.dedent("""
    import sys, yaml
    from llamafactory.hparams import get_train_args
    args = yaml.safe_load(open(sys.argv[1]))
    args.update({"output_dir": sys.argv[2], "report_to": "none"})
    print("SAVE_TOTAL_LIMIT", get_train_args(args)[2].save_total_limit)
""")


def test_llamafactory_keeps_the_newest_two_checkpoints(lf_env: dict, tiny_model: Path, demo_data: Path,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "thub", "train", "sft", "--backend", "llamafactory", "--model-path", str(tiny_model),
         "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--max-steps", "4",
         "--effective-batch-size", "2", "--save-steps", "1", "--save-total-limit", "2", "--json"],
        capture_output=True, text=True, env=lf_env["environ"], timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    checkpoints = sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-3", "checkpoint-4"]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "succeeded" and result["final_model"]["complete"], result
    parsed = subprocess.run([lf_env["python"], "-c", ARGS, str(out / "llamafactory" / "train.yaml"),
                             str(tmp_path / "aside")], capture_output=True, text=True, env=lf_env["environ"],
                            timeout=600)
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    assert "SAVE_TOTAL_LIMIT 2" in parsed.stdout
