"""The Python API speaks Python (issue 24 item 8): it shows progress unless told not to, and its
messages name the keywords a caller types (``overwrite=True``), never the CLI's flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import thub
from thub.errors import UsageError

CLI_SPELLINGS = re.compile(r"--(resume|overwrite|allow-ignored|force-launch|set|backend)\b")


def _run_args(model: Path, data: Path, out: Path) -> dict[str, object]:
    return {"backend": "trl", "model_path": str(model), "data_path": str(data / "chat.jsonl"),
            "ckpt_output_dir": str(out)}


@pytest.mark.slow
def test_api_shows_progress_by_default_and_its_refusals_name_keywords(
        tiny_model: Path, demo_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "api"
    result = thub.sft(**_run_args(tiny_model, demo_data, out), max_steps=2)
    assert result["status"] == "succeeded", result
    err = capsys.readouterr().err
    assert "step 1/2" in err and "step 2/2" in err and "run succeeded" in err, err

    with pytest.raises(UsageError) as refused:  # a finished run is there
        thub.sft(**_run_args(tiny_model, demo_data, out), max_steps=2)
    message = str(refused.value)
    assert "overwrite=True" in message and not CLI_SPELLINGS.search(message), message

    (out / "result.json").unlink()  # as a run killed before its end leaves it
    with pytest.raises(UsageError) as unfinished:
        thub.train("sft", **_run_args(tiny_model, demo_data, out), max_steps=2)  # type: ignore[arg-type]
    message = str(unfinished.value)
    assert "resume=True" in message and "overwrite=True" in message and not CLI_SPELLINGS.search(message), message

    again = thub.train("sft", **_run_args(tiny_model, demo_data, out), max_steps=1,  # type: ignore[arg-type]
                       overwrite=True, progress=False)
    assert again["status"] == "succeeded", again
    assert "step 1/1" not in capsys.readouterr().err  # progress=False: quiet


def test_api_messages_name_keywords(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as ignored:  # a parameter trl does not honour
        thub.dry_run("sft", **_run_args(tiny_model, demo_data, tmp_path / "x"), save_samples=100)  # type: ignore[arg-type]
    message = str(ignored.value)
    assert "allow_ignored=True" in message and 'backend="' in message, message
    assert not CLI_SPELLINGS.search(message), message

    with pytest.raises(UsageError) as nothing:
        thub.train("sft", **_run_args(tiny_model, demo_data, tmp_path / "never"), resume=True)  # type: ignore[arg-type]
    message = str(nothing.value)
    assert "call without resume=True" in message and not CLI_SPELLINGS.search(message), message
    assert not (tmp_path / "never").exists()


def test_the_command_line_keeps_its_flags(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    # the same refusals through `thub train`: the flags, as before
    args = [sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", str(tiny_model),
            "--data-path", str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(tmp_path / "cli")]
    done = subprocess.run([*args, "--save-samples", "100"], capture_output=True, text=True)
    assert done.returncode == 2 and "--allow-ignored" in done.stderr and "--backend NAME" in done.stderr, done.stderr
    done = subprocess.run([*args, "--resume"], capture_output=True, text=True)
    assert done.returncode == 2 and "run without --resume" in done.stderr, done.stderr


def test_messages_from_a_python_caller_inside_the_cli_process_stay_python() -> None:
    # the surface is per call (a context variable), not a process-wide switch
    from thub.surface import option, python_api

    assert option("overwrite") == "--overwrite"
    with python_api():
        assert option("overwrite") == "overwrite=True" and option("backend", "NAME") == 'backend="NAME"'
    assert option("backend", "NAME") == "--backend NAME"
    assert json.dumps(option("resume")) == '"--resume"'
