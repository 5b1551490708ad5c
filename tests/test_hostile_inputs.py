"""Hostile files (issue 23 items 10-12): rows and parameter files nested too deeply, one corrupt
file among many, huge rows. Each is bad input named at its file (and line), never a traceback,
and never a reason to fail what the other, good files hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GOOD = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}


def thub(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)  # a hang guard


def _nested(depth: int) -> str:
    """JSON text of a list ``depth`` deep (as text: json.dumps itself cannot write it under pytest)."""
    return "[" * depth + '"x"' + "]" * depth


# item 11: deep nesting ---------------------------------------------------------------------------

def test_a_row_nested_too_deeply_is_named_at_its_line(tmp_path: Path) -> None:
    data = tmp_path / "deep.jsonl"
    deep = ('{"messages": [{"role": "user", "content": "hi", "meta": ' + _nested(990) + '}, '
            '{"role": "assistant", "content": "yo"}]}')
    data.write_text(json.dumps(GOOD) + "\n" + deep + "\n")
    done = thub("data", "check", str(data))
    assert done.returncode == 2, done.stderr
    assert f"{data}:2: nested too deeply" in done.stderr and "Traceback" not in done.stderr + done.stdout
    array = tmp_path / "deep.json"
    array.write_text(f"[{json.dumps(GOOD)},\n{deep}]")
    done = thub("data", "check", str(array))
    assert done.returncode == 2 and f"{array}:2: nested too deeply" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_nested_too_deeply_is_named_at_its_line(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text("algorithm: sft\nmodel_path: " + "[" * 100_000 + "]" * 100_000 + "\n")
    block = tmp_path / "block.yaml"
    block.write_text("algorithm: sft\nextra:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 400)))
    for config, line in ((flow, 2), (block, None)):
        done = thub("train", "sft", "--backend", "trl", "--config", str(config), "--dry-run")
        assert done.returncode == 2, done.stderr
        assert "nested too deeply" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert f"{config}:{line or ''}" in done.stderr
    shallow = tmp_path / "shallow.yaml"  # what a real file nests: accepted as before
    shallow.write_text("algorithm: sft\nmodel_path: m\ndata_path: d.jsonl\nckpt_output_dir: o\n"
                       "lora_target_modules: [[[q_proj]]]\n")
    from thub.config.yamlfile import load_yaml

    assert load_yaml(shallow)[0]["lora_target_modules"] == [[["q_proj"]]]


# item 12: one corrupt file never breaks a listing ------------------------------------------------

def _run(directory: Path, loss_lines: str, created: float = 1.0) -> Path:
    directory.mkdir(parents=True)
    (directory / "thub_run.json").write_text(json.dumps({"algorithm": "sft", "backend": "trl", "created": created,
                                                         "parameters": {}}))
    (directory / "training_metrics.jsonl").write_text(loss_lines)
    return directory


def test_history_list_skips_and_names_a_corrupt_run(tmp_path: Path) -> None:
    good = _run(tmp_path / "good", '{"step": 1, "max_steps": 1, "loss": 2.5}\n')
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "thub_run.json").write_bytes(b"\xff\xfe{\x00\x9c")  # not UTF-8
    odd = _run(tmp_path / "odd", "[1, 2]\n", created="yesterday")  # type: ignore[arg-type]
    (odd / "result.json").write_text('{"status": "succeeded", "last_metrics": [1]}')
    for extra in ((), ("--json",)):
        done = thub("history", "list", str(tmp_path), *extra)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert f"warning: skipped {binary}" in done.stderr and "not UTF-8" in done.stderr, done.stderr
        assert str(good) in done.stdout and str(odd) in done.stdout
    listed = json.loads(thub("history", "list", str(tmp_path), "--json").stdout)["runs"]
    assert {r["path"] for r in listed} == {str(odd), str(good)}
    assert next(r for r in listed if r["path"] == str(odd))["started"] is None  # "yesterday" is not a time


def test_plot_skips_non_finite_values_and_names_them(tmp_path: Path) -> None:
    run = _run(tmp_path / "nan", '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": NaN}\n{"step": 3, "loss": 1.0}\n'
                                 '{"step": 4, "loss": Infinity}\n')
    other = _run(tmp_path / "fine", '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n')
    for extra in (("--ascii",), ("--json",), ("--ema", "0.5")):
        done = thub("plot", str(run), str(other), *extra)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        metrics = run / "training_metrics.jsonl"
        assert f"warning: {metrics}: loss is not a finite number at step 2, 4; skipped" in done.stderr, done.stderr
    summary = json.loads(thub("plot", str(run), str(other), "--json").stdout)  # strict JSON: no NaN in it
    first = summary["runs"][0]
    assert first["points"] == 2 and first["last"] == 1.0
