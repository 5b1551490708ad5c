"""thub.testing.smoke, the assertions every GPU smoke script makes, on run directories built here
(the scripts themselves need a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thub.testing.smoke import main


def _run(tmp_path: Path, steps: list[int], status: str = "succeeded", checkpoint: Path | None = None,
         loss: float = 1.0) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"status": status,
                                                 "final_checkpoint": str(checkpoint) if checkpoint else None,
                                                 "checkpoints": []}))
    (run / "training_metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "max_steps": len(steps), "loss": loss}) + "\n" for s in steps))
    return run


def test_a_good_run_passes_and_reloads_its_model(tiny_model: Path, tmp_path: Path, capsys) -> None:
    run = _run(tmp_path, [1, 2, 3], checkpoint=tiny_model)
    assert main([str(run), "--steps", "3"]) == 0
    assert "OK run: succeeded, steps 1..3" in capsys.readouterr().out


@pytest.mark.parametrize(("steps", "status", "loss", "args", "message"), [
    ([1, 2, 3], "failed", 1.0, ["--steps", "3"], "status 'failed', expected 'succeeded'"),
    ([1, 2, 2, 3], "succeeded", 1.0, ["--steps", "3"], "expected 1..3 each once"),
    ([1, 3], "succeeded", 1.0, [], "have a gap or a repeat"),
    ([1, 2], "succeeded", float("nan"), ["--steps", "2"], "loss is nan, not a finite number"),
])
def test_each_broken_promise_fails(tmp_path: Path, capsys, steps, status, loss, args, message) -> None:
    run = _run(tmp_path, steps, status=status, loss=loss)
    assert main([str(run), *args, "--reload", "none"]) == 1
    assert message in capsys.readouterr().err


def test_a_checkpoint_that_does_not_load_fails(tmp_path: Path, capsys) -> None:
    broken = tmp_path / "ckpt"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    run = _run(tmp_path, [1], checkpoint=broken)
    assert main([str(run), "--steps", "1"]) == 1
    assert "does not load as a model" in capsys.readouterr().err


SCRIPTS = sorted(Path(__file__).parents[1].glob("thub-plugin-*/scripts/gpu_smoke.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.parts[-3])
def test_gpu_smoke_scripts_parse_and_assert(script: Path) -> None:
    """The scripts need a GPU; here: bash parses them (shellcheck: the next test), and each one
    checks its runs with thub.testing.smoke (status, steps, finite metric, reload)."""
    import subprocess

    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert "-m thub.testing.smoke" in text and "--status interrupted" in text and "--resume" in text


@pytest.mark.needs_system("shellcheck")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.parts[-3])
def test_gpu_smoke_scripts_pass_shellcheck(script: Path) -> None:
    import subprocess

    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_every_gpu_backend_has_a_smoke_script() -> None:
    assert {p.parts[-3] for p in SCRIPTS} >= {"thub-plugin-trl", "thub-plugin-verl", "thub-plugin-minitrainer",
                                              "thub-plugin-instructlab", "thub-plugin-unsloth", "thub-plugin-art"}
