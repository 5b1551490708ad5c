"""``thub compare`` (issue 25): two real TRL-run backends side by side (a twin of trl registered in
this process with another default), and the table / first-difference naming on recorded runs."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from thub.cli.main import cli
from thub.insight.comparison import LOSS_TOLERANCE, backend_record, differences, render, table
from thub.manager import get_registry

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

TINY = Path(__file__).parents[1] / "examples" / "tiny"


@pytest.fixture()
def twin(monkeypatch: pytest.MonkeyPatch) -> str:
    """A second backend that is trl with another default learning rate and a declared difference."""
    pytest.importorskip("trl")
    registry = get_registry()
    spec = registry.backends["trl"]
    defaults = {**spec.defaults, "sft": {**spec.defaults_for("sft"), "learning_rate": 1e-4}}
    monkeypatch.setitem(registry.backends, "trl-twin", dataclasses.replace(
        spec, name="trl-twin", defaults=defaults,
        known_differences={"learning_rate": "its default learning rate is 1e-4"}))
    return "trl-twin"


def test_compare_two_backends_names_the_first_difference_and_why(twin: str, demo_data: Path,
                                                                 tmp_path: Path) -> None:
    args = ["sft", "--backends", f"trl,{twin}", "--steps", "2", "--out", str(tmp_path / "cmp"),
            "--set", f"model_path={TINY}", "--set", f"data_path={demo_data / 'chat.jsonl'}",
            "--set", "save_final_checkpoint=false"]
    done = CliRunner().invoke(cli, ["compare", *args, "--json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert [b["backend"] for b in document["backends"]] == ["trl", twin]
    trl, other = document["backends"]
    for record in (trl, other):
        assert record["status"] == "succeeded" and record["examples"] == 64 and record["as_validated"] is True
        assert record["samples_per_step"] and len(record["steps"]) == 2 and record["steps"][0]["loss"] > 0
        assert record["masks_hash_count"] == 64 and record["time_to_first_step"] > 0
        assert Path(record["run_dir"]).parent == tmp_path / "cmp"
    assert trl["trained_tokens"] == other["trained_tokens"]
    first = document["first_difference"]
    assert first["quantity"] == "learning_rate" and first["text"].startswith("learning_rate at step 1: trl ")
    assert f"{twin}: its default learning rate is 1e-4" in first["why"]
    assert f"learning_rate is 2e-05 (backend trl) on trl, 0.0001 (backend {twin}) on {twin}" in first["why"]
    # the same model and batch before any update: the first-step loss agrees within the tolerance
    assert not any(d["quantity"] in ("examples", "masks", "loss") for d in document["differences"])
    assert trl["steps"][0]["loss"] == pytest.approx(other["steps"][0]["loss"], rel=LOSS_TOLERANCE)
    assert document["tolerances"]["loss"] == LOSS_TOLERANCE

    shown = CliRunner().invoke(cli, ["compare", *args], catch_exceptions=False)  # the same runs again, as a table
    assert shown.exit_code == 0, shown.output
    assert "first difference: learning_rate at step 1" in shown.stdout
    assert "masks" in shown.stdout and "same as trl, as validated" in shown.stdout


def test_compare_refuses_before_running_anything(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    one = CliRunner().invoke(cli, ["compare", "sft", "--backends", "trl", "--out", str(out)])
    assert one.exit_code == 2 and "two or more different backends" in one.output
    steps = CliRunner().invoke(cli, ["compare", "sft", "--backends", "trl,mini-trainer", "--out", str(out),
                                     "--set", "max_steps=3"])
    assert steps.exit_code == 2 and "use --steps" in steps.output
    assert not out.exists()


def test_compare_refuses_one_export_folder_for_every_backend(tmp_path: Path, demo_data: Path) -> None:
    out = tmp_path / "cmp"
    shared = CliRunner().invoke(cli, ["compare", "sft", "--backends", "trl,llamafactory", "--out", str(out),
                                      "--set", f"model_path={ROOT / 'examples' / 'tiny'}",
                                      "--set", f"data_path={demo_data / 'chat.jsonl'}",
                                      "--set", f"export={tmp_path / 'model'}"])
    assert shared.exit_code == 2, shared.output
    assert "expected no export folder in thub compare" in shared.output
    assert not out.exists() and not (tmp_path / "model").exists()


def test_compare_plans_every_backend_before_running_any(monkeypatch: pytest.MonkeyPatch, demo_data: Path,
                                                       tmp_path: Path) -> None:
    """The second backend's translation refuses the batch (5 over its 2 processes): the compare
    stops there, exit 2, before the first backend trained (one plan per backend, built first)."""
    pytest.importorskip("trl")
    registry = get_registry()
    spec = registry.backends["trl"]
    defaults = {**spec.defaults, "sft": {**spec.defaults_for("sft"), "nproc_per_node": 2}}
    # its translation is trl's own (spec.translate: trl answers through its hook for "trl" only)
    monkeypatch.setitem(registry.backends, "trl-2procs", dataclasses.replace(
        spec, name="trl-2procs", defaults=defaults, translate="thub_plugin_trl.translate:translate"))
    out = tmp_path / "cmp"
    done = CliRunner().invoke(cli, ["compare", "sft", "--backends", "trl,trl-2procs", "--steps", "1", "--out",
                                    str(out), "--set", f"model_path={TINY}", "--set",
                                    f"data_path={demo_data / 'chat.jsonl'}", "--set", "effective_batch_size=5"])
    assert done.exit_code == 2, done.output
    assert "nearest valid values: 4, 6" in done.output
    assert not out.exists()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real 2-step trl run, recorded (its run directory)."""
    pytest.importorskip("trl")
    from thub.api import train

    out = tmp_path_factory.mktemp("recorded") / "trl"
    data = Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl"
    result = train("sft", backend="trl", model_path=str(TINY), data_path=str(data), ckpt_output_dir=str(out),
                   max_steps=2, save_final_checkpoint=False, progress=False)
    assert result["status"] == "succeeded"
    return out


def _edit(path: Path, change: Any) -> None:
    if path.suffix == ".jsonl":
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        path.write_text("".join(json.dumps(change(x)) + "\n" for x in lines))
    else:
        path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_differences_on_recorded_runs_name_examples_masks_and_loss(recorded: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(recorded, a)
    shutil.copytree(recorded, b)
    same = [backend_record("a", a), backend_record("b", b)]
    assert differences(same, {}) == []

    def one_mask_other(built: dict[str, Any]) -> dict[str, Any]:
        built["per_example"]["hashes"][3] = "0" * 16
        built.update(matches=False, first_location="chat.jsonl:4", difference="trains other tokens")
        return built

    _edit(b / "built.json", one_mask_other)
    _edit(b / "training_metrics.jsonl", lambda line: {**line, "loss": line["loss"] * 1.5})
    found = differences([backend_record("a", a), backend_record("b", b)], {"b": {"masks": "b trains the newline"}})
    assert [d["quantity"] for d in found] == ["masks", "loss"]
    assert found[0]["text"] == "trained-token masks differ: b first at chat.jsonl:4"
    assert found[0]["why"] == "b trains other tokens; b: b trains the newline"
    assert found[1]["text"].startswith("loss at step 1: a ") and "more than 2% apart" in found[1]["text"]

    _edit(b / "built.json", lambda built: {**built, "examples": 63})
    assert differences([backend_record("a", a), backend_record("b", b)], {})[0]["text"] == "examples: a 64, b 63"


def test_table_is_side_by_side_per_backend(recorded: Path, tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(recorded, b)
    _edit(b / "built.json", lambda built: {**built, "per_example": {**built["per_example"], "hashes": ["x"]}})
    rows = table([backend_record("trl", recorded), backend_record("other", b)], 2)
    text = render(rows)
    labels = [row[0] for row in rows]
    assert labels[:7] == ["", "status", "examples", "trained tokens", "tokens", "masks", "samples/step"]
    assert {"lr step 1", "loss step 2", "grad norm step 1", "tokens/s", "first step after (s)"} <= set(labels)
    assert rows[0] == ["", "trl", "other"]
    assert rows[labels.index("masks")][1:] == ["reference, as validated", "DIFFER from trl, as validated"]
    assert text.splitlines()[0].split() == ["trl", "other"]


def test_a_failed_run_is_named_and_left_out_of_the_other_comparisons(recorded: Path, tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(recorded, b)
    _edit(b / "result.json", lambda result: {**result, "status": "failed", "error": "boom"})
    found = differences([backend_record("a", recorded), backend_record("b", b)], {})
    assert found == [{"quantity": "status", "backends": ["b"], "text": "b failed: boom", "why": None}]
