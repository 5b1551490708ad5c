"""``result.json`` names the run's final model with its layout and whether it loads as it is (issue 27 item 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from thub.runner.result import write_result
from thub.runner.rundir import RunDirectory

TINY = Path(__file__).parents[1] / "examples" / "tiny"


def _run(tmp_path: Path) -> RunDirectory:
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.path.mkdir(parents=True)
    return run_dir


def test_a_full_final_model_is_listed_loadable(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    shutil.copytree(TINY, run_dir.path / "final")
    result = write_result(run_dir, {"status": "succeeded", "final_checkpoint": str(run_dir.path / "final")},
                          started=0.0, model_path=str(TINY))
    assert result["final_model"] == {"path": str(run_dir.path / "final"), "layout": "hf-model", "loadable": True,
                                     "complete": True, "problem": None, "dtype": "F32"}
    assert json.loads(run_dir.result.read_text())["final_model"] == result["final_model"]


def test_an_adapter_is_not_loadable_as_it_is_and_says_what_to_run(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    final = run_dir.path / "final"
    final.mkdir()
    (final / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(TINY), "r": 4,
                                                           "peft_type": "LORA"}))
    shutil.copy(TINY / "model.safetensors", final / "adapter_model.safetensors")  # a safetensors file: headers only
    result = write_result(run_dir, {"status": "succeeded", "final_checkpoint": str(final)}, started=0.0,
                          model_path=str(TINY))
    model = result["final_model"]
    assert (model["layout"], model["loadable"], model["complete"]) == ("peft-adapter", False, True)
    assert model["next"] == f"thub checkpoint merge {final} --out DIR"


def test_no_final_model_and_an_unknown_folder(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    assert write_result(run_dir, {"status": "failed"}, started=0.0, model_path=str(TINY))["final_model"] is None
    (run_dir.path / "odd").mkdir()
    result = write_result(run_dir, {"status": "succeeded", "final_checkpoint": str(run_dir.path / "odd")},
                          started=0.0, model_path=str(TINY))
    assert result["final_model"] == {"path": str(run_dir.path / "odd"), "layout": None, "loadable": False,
                                     "complete": False, "problem": "not a checkpoint of a known layout",
                                     "dtype": None}


def test_a_sharded_final_checkpoint_names_its_converter(tmp_path: Path) -> None:
    import torch

    run_dir = _run(tmp_path)
    actor = run_dir.path / "checkpoints" / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    torch.save({"w": torch.zeros(1)}, actor / "model_world_size_1_rank_0.pt")
    result = write_result(run_dir, {"status": "succeeded", "final_checkpoint": str(actor)}, started=0.0,
                          model_path=str(TINY))
    assert result["final_model"]["layout"] == "verl-fsdp" and result["final_model"]["loadable"] is False
    merger = f"python -m verl.model_merger merge --backend fsdp --local_dir {actor}"
    assert result["final_model"]["next"].startswith(merger)  # thub's consolidate does not read verl's shards
