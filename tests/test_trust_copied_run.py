"""A moved or copied run means itself (issue 35 item 5).

``result.json`` records the run's models as training saw them (``runs/x/final``: relative to where training
ran, or absolute). A copy read from elsewhere must score, export, list and publish its own files, never the
original's (or whatever sits at the old path now).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from thub.runner.runpaths import in_run, read_result, rebase_result

ROOT = Path(__file__).resolve().parents[1]
Run = Callable[..., subprocess.CompletedProcess[str]]


def test_paths_inside_the_recorded_run_follow_the_run(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    result = {"run_dir": "runs/demo", "final_checkpoint": "runs/demo/final", "log": "runs/demo/logs/train.log",
              "checkpoints": [{"path": "runs/demo/checkpoints/checkpoint-2", "step": 2}, "odd"],
              "best_checkpoint": {"path": "runs/demo/checkpoints/checkpoint-2", "step": 2},
              "final_model": {"path": "runs/demo/final", "layout": "hf-model"},
              "export": {"path": "/elsewhere/hf", "ok": True}}
    moved = rebase_result(copy, result, "/home/me/project")
    assert moved["final_checkpoint"] == str(copy / "final")
    assert moved["log"] == str(copy / "logs" / "train.log")
    assert moved["checkpoints"] == [{"path": str(copy / "checkpoints" / "checkpoint-2"), "step": 2}, "odd"]
    assert moved["best_checkpoint"]["path"] == str(copy / "checkpoints" / "checkpoint-2")
    assert moved["final_model"] == {"path": str(copy / "final"), "layout": "hf-model"}
    assert moved["export"]["path"] == "/elsewhere/hf"  # outside the run: where it was written
    assert moved["run_dir"] == str(copy)
    assert result["final_checkpoint"] == "runs/demo/final"  # the record itself is not changed


def test_absolute_and_relative_spellings(tmp_path: Path) -> None:
    run = tmp_path / "now"
    assert in_run(run, "/old/place/run/final", "/old/place/run") == str(run / "final")
    # recorded relative, a path spelled absolute from where training ran
    assert in_run(run, "/home/me/runs/x/final", "runs/x", "/home/me") == str(run / "final")
    # a relative path outside the run: from where training ran, not from where thub runs now
    assert in_run(run, "data/out", "runs/x", "/home/me") == "/home/me/data/out"
    assert in_run(run, "/abs/other", "runs/x", "/home/me") == "/abs/other"
    # a sibling whose name starts like the run is not inside it
    assert in_run(run, "runs/x2/final", "runs/x", None) == "runs/x2/final"


def test_read_result_of_a_damaged_run(tmp_path: Path) -> None:
    assert read_result(tmp_path) is None
    (tmp_path / "result.json").write_text("[]")
    assert read_result(tmp_path) is None
    (tmp_path / "result.json").write_text(json.dumps({"run_dir": 3, "final_checkpoint": ["x"]}))
    assert read_result(tmp_path) == {"run_dir": str(tmp_path), "final_checkpoint": ["x"]}


@pytest.fixture(scope="module")
def copied_run(thub: Run, tiny_model: Path, demo_data: Path,
               tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the folder a real trl run was trained from with a relative --ckpt-output-dir, a copy of the run
    elsewhere); the original's final model then replaced by another model (its base, untrained)."""
    work = tmp_path_factory.mktemp("trained-here")
    done = thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                str(demo_data / "chat.jsonl"), "--ckpt-output-dir", "run", "--max-steps", "2", cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((work / "run" / "result.json").read_text())["final_checkpoint"] == "run/final"
    copy = tmp_path_factory.mktemp("copied-to") / "run-copy"
    shutil.copytree(work / "run", copy)
    shutil.rmtree(work / "run" / "final")
    shutil.copytree(tiny_model, work / "run" / "final")  # the original's path now holds another model
    return work, copy


@pytest.mark.slow
@pytest.mark.needs_backend("trl")
def test_a_copied_run_evaluates_itself(copied_run: tuple[Path, Path], thub: Run) -> None:
    pytest.importorskip("lm_eval")
    work, copy = copied_run
    done = thub("eval", str(copy), "--tasks", str(ROOT / "examples" / "eval" / "capitals.jsonl"), "--dry-run",
                "--json", cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads(done.stdout)
    sources = [m["source"] for m in plan["models"]]
    assert sources == [str(copy / "final")], plan["models"]


@pytest.mark.slow
@pytest.mark.needs_backend("trl")
def test_a_copied_run_exports_and_lists_itself(copied_run: tuple[Path, Path], thub: Run, tmp_path: Path) -> None:
    import sys

    work, copy = copied_run
    out = tmp_path / "hf"
    done = subprocess.run([sys.executable, "-m", "thub.checkpoint.export", str(copy), str(out)], cwd=work,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    export = json.loads((copy / "result.json").read_text())["export"]
    assert export["source"] == str(copy / "final"), export
    from safetensors.torch import load_file

    exported, trained = load_file(str(out / "model.safetensors")), load_file(str(copy / "final" / "model.safetensors"))
    assert all((exported[k] == trained[k]).all() for k in trained)
    history = thub("history", "show", str(copy), "--json", cwd=work)
    assert history.returncode == 0, history.stderr
    assert str(copy / "final") in history.stdout and str(work / "run" / "final") not in history.stdout
