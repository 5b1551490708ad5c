"""A Training Hub script, import line changed, trains end to end on the trl backend on a CPU.

The script is the worked example of docs/migrating-from-training-hub.md, run as written in a
real Python process (its callbacks are called in that process from thub's run events).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
GUIDE = ROOT / "docs" / "migrating-from-training-hub.md"
WHEEL_INIT = ROOT / "build" / "training-hub-0.11.2" / "training_hub" / "__init__.py"


def worked_example() -> str:
    text = GUIDE.read_text().split("## Worked example", 1)[1]
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_example_differs_from_a_training_hub_script_only_in_the_import() -> None:
    script = worked_example()
    imports = [line for line in script.splitlines() if "import" in line and "thub" in line]
    assert imports == ["from thub import TrainingHubCallback, lora_sft  # was: from training_hub import "
                       "TrainingHubCallback, lora_sft"]
    rest = script.replace(imports[0], "")
    assert "thub" not in rest
    if WHEEL_INIT.exists():  # the names it imports are Training Hub's public names
        exported = ast.literal_eval(re.search(r"__all__ = (\[.*?\])", WHEEL_INIT.read_text(), re.S).group(1))
        assert {"TrainingHubCallback", "lora_sft"} <= set(exported)


@pytest.mark.slow
def test_training_hub_script_runs_on_trl_on_cpu(tiny_model: Path, tmp_path: Path) -> None:
    script = tmp_path / "lora_sft_example.py"
    script.write_text(worked_example())
    run_dir = tmp_path / "run"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, str(script), "--model-path", str(tiny_model),
         "--data-path", str(ROOT / "examples" / "data" / "chat.jsonl"), "--ckpt-output-dir", str(run_dir)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    metrics = [json.loads(line) for line in (run_dir / "training_metrics.jsonl").read_text().splitlines()]
    steps = [line["step"] for line in metrics if "loss" in line]
    assert len(steps) >= 2
    # the callback ran in the script's process, once per metrics line, then at the end
    printed = re.findall(r"^step (\d+): loss [\d.]+$", done.stdout, re.M)
    assert [int(s) for s in printed] == steps
    assert f"training ended at step {steps[-1]}" in done.stdout
    assert f"model: {run_dir / 'final'}" in done.stdout
    assert (run_dir / "final" / "adapter_config.json").exists()

    record = json.loads((run_dir / "thub_run.json").read_text())
    assert record["backend"] == "trl"
    params = record["parameters"]
    assert params["effective_batch_size"]["value"] == 2
    assert "training-hub name micro_batch_size → effective_batch_size" in params["effective_batch_size"]["source"]
    assert params["packing"]["value"] is True
    assert params["rdzv_id"]["value"] == "100"
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "succeeded"
