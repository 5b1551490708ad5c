"""``thub runs wait`` reports a run's export step (``--export DIR``) and exits 1 when it failed;
with ``--json`` the status's ``export`` entry holds the step. The SLURM case, where it also waits
for the export job, runs on a real cluster: tests/test_slurm_cluster.py::
test_runs_wait_waits_for_the_export_job_and_reports_its_failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FAILED = {"ok": False, "error": "copy: disk full", "checks": [], "failed": None, "action": "copy", "source": "final"}
PASSED = {"ok": True, "error": None, "checks": [{"check": "loads", "ok": True}], "failed": None, "action": "copy",
          "source": "final"}


def _run_dir(tmp_path: Path, export: dict[str, Any] | None, requested: bool = True) -> Path:
    """A finished local run's record and result, as `thub train --export DIR` leaves them."""
    run, hf = tmp_path / "run", tmp_path / "hf"
    run.mkdir()
    parameters = {"model_path": {"value": "m", "source": "flag"}}
    if requested:
        parameters["export"] = {"value": str(hf), "source": "flag"}
    (run / "thub_run.json").write_text(json.dumps({"schema_version": 1, "algorithm": "sft", "backend": "trl",
                                                   "parameters": parameters}))
    result: dict[str, Any] = {"status": "succeeded", "algorithm": "sft", "backend": "trl"}
    if export is not None:
        result["export"] = {"path": str(hf), **export}
    (run / "result.json").write_text(json.dumps(result))
    return run


@pytest.mark.parametrize(("export", "code", "said"), [
    (FAILED, 1, "export FAILED: {hf}: copy: disk full"),
    (PASSED, 0, "export: {hf}: copy of final, verified (loads)"),
    (None, 1, "export FAILED: {hf}: result.json has no export outcome"),
], ids=["failed", "verified", "no outcome"])
def test_wait_reports_the_export_and_fails_with_it(thub_cli, tmp_path: Path, export: dict[str, Any] | None,
                                                   code: int, said: str) -> None:
    run = _run_dir(tmp_path, export)
    done = thub_cli("runs", "wait", str(run), "--timeout", "60")
    assert done.exit_code == code, (done.stdout, done.stderr)
    assert said.format(hf=tmp_path / "hf") in done.stderr
    data = thub_cli("runs", "wait", str(run), "--timeout", "60", "--json").json()
    assert data["export"] == {"path": str(tmp_path / "hf"), "job_id": None, "state": None,
                              "outcome": None if export is None else {"path": str(tmp_path / "hf"), **export}}


def test_a_run_without_export_is_unchanged(thub_cli, tmp_path: Path) -> None:
    run = _run_dir(tmp_path, None, requested=False)
    done = thub_cli("runs", "wait", str(run), "--timeout", "60")
    assert done.exit_code == 0 and "export" not in done.stderr.replace(str(tmp_path), ""), done.stderr
    assert thub_cli("runs", "status", str(run), "--json").json()["export"] is None
