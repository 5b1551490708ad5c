"""thub's run metadata reaches the tracker runs that a library opens itself (the ``library`` route
without a hook in the library: verl, instructlab-training, mini-trainer, ART).

``library_tracker_environment`` runs as the backend's runner calls it (a real run directory and
``thub_run.json`` record); then the library's own tracker code opens its runs in a child process
with that environment, called as the library's trainer calls it: mini-trainer's
``wandb_wrapper``/``mlflow_wrapper``, instructlab-training's ``setup_metric_logger`` handlers,
verl's ``Tracking`` (``verl/utils/tracking.py`` from the unpacked wheel, loaded on its own: verl's
package needs Ray). The result is read back with each tracker's own reader. Training itself
(GPU-only for these libraries) is not run. ART opens its W&B run with ``wandb.init`` like the
others, but ART is not installed here: its route is the same W&B mechanism, unproven with ART's
own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from thub.runner.context import RunContext
from thub.runner.rundir import RunDirectory
from thub.trackers.library import library_tracker_environment

VERL_TRACKING = Path(__file__).parents[1] / "build" / "verl-0.9.1" / "verl" / "utils" / "tracking.py"

SCRIPTS = {
    "mini-trainer": """
        from mini_trainer import mlflow_wrapper, wandb_wrapper
        # as mini_trainer.train does on global rank 0
        run = wandb_wrapper.init(project=P["wandb_project"], name=P["wandb_run_name"], entity=None,
                                 config={"lr": 0.001}, dir=P["wandb_dir"])
        mlflow_wrapper.init(tracking_uri=P["mlflow_tracking_uri"], experiment_name=P["mlflow_experiment_name"],
                            run_name=P["mlflow_run_name"])
        mlflow_wrapper.log_params({"lr": 0.001})
        mlflow_wrapper.log({"loss": 1.5}, step=1)
        wandb_wrapper.log({"loss": 1.5})
        out = {"mlflow_run_id": mlflow_wrapper.get_active_run_id(), "wandb_dir": run.dir}
        mlflow_wrapper.finish()
        wandb_wrapper.finish()
    """,
    "instructlab-training": """
        import logging
        import wandb
        from instructlab.training.logger import setup_metric_logger
        # as instructlab.training.main_ds does (its handlers open their runs on the first record)
        setup_metric_logger(P["wandb_dir"], mlflow_tracking_uri=P["mlflow_tracking_uri"],
                            mlflow_experiment_name=P["mlflow_experiment_name"], mlflow_run_name=P["mlflow_run_name"],
                            wandb_project=P["wandb_project"], wandb_run_name=P["wandb_run_name"],
                            tensorboard_log_dir=P["tensorboard_log_dir"])
        metric_logger = logging.getLogger("instructlab.training.metrics")
        metric_logger.info({"lr": 0.001}, extra={"hparams": True})
        metric_logger.info({"step": 1, "avg_loss": 1.5}, extra={"step": 1})
        import mlflow
        out = {"mlflow_run_id": mlflow.active_run().info.run_id, "wandb_dir": wandb.run.dir}
        logging.shutdown()
    """,
    "verl": """
        import importlib.util
        sys.path.append(P["verl_root"])  # orjson, installed beside the unpacked wheel
        spec = importlib.util.spec_from_file_location("verl_tracking", P["verl_tracking"])
        tracking = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tracking)
        # as verl's RayPPOTrainer.fit does (project_name, experiment_name from trainer.*), in the
        # environment thub's verl translation sets
        os.chdir(P["wandb_dir"])
        os.environ["MLFLOW_TRACKING_URI"] = P["mlflow_tracking_uri"]
        logger = tracking.Tracking(project_name=P["mlflow_experiment_name"], experiment_name=P["mlflow_run_name"],
                                   default_backend=["wandb", "mlflow"], config={"trainer": {"lr": 0.001}})
        logger.log({"loss": 1.5}, step=1)
        import mlflow, wandb
        out = {"mlflow_run_id": mlflow.active_run().info.run_id, "wandb_dir": wandb.run.dir}
        logger.logger["wandb"].finish(exit_code=0)
        logger.logger["mlflow"].finish()
    """,
}
TRACKERS = {"mini-trainer": ("wandb", "mlflow"), "instructlab-training": ("tensorboard", "mlflow", "wandb"),
            "verl": ("mlflow", "wandb")}


@pytest.mark.slow
@pytest.mark.parametrize("backend", sorted(SCRIPTS))
def test_library_opened_runs_carry_thubs_parameters(backend: str, tmp_path: Path, mlflow_store: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    if backend == "mini-trainer":
        pytest.importorskip("mini_trainer")
    elif backend == "instructlab-training":
        pytest.importorskip("instructlab.training")
    elif not VERL_TRACKING.is_file():
        pytest.skip("verl 0.9.1 is not unpacked into build/verl-0.9.1 (see .ci/run)")
    from mlflow import MlflowClient

    from thub.testing import trackers

    # WANDB_SERVICE: left by a wandb.init earlier in this test process (an in-process training or
    # sink test); a library process inheriting it writes through that service, late. (thub's parent
    # sink drops it after its own wandb.init, so a thub child does not inherit one.)
    for name in ("MLFLOW_RUN_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_DIR", "MLFLOW_EXPERIMENT_NAME", "PET_NODE_RANK",
                 "WANDB_SERVICE"):
        monkeypatch.delenv(name, raising=False)
    run_dir = tmp_path / "my-run"
    (run_dir / "logs").mkdir(parents=True)
    store = mlflow_store
    values = {"ckpt_output_dir": str(run_dir), "learning_rate": 0.001, "mlflow_tracking_uri": store,
              "wandb_project": "thub-tests", "tensorboard_log_dir": str(tmp_path / "tb")}
    record = {"algorithm": "sft", "backend": backend, "versions": {"thub": "test"},
              "parameters": {k: {"value": v, "source": "flag --learning-rate" if k == "learning_rate" else "config"}
                             for k, v in values.items()}}
    context = RunContext("sft", backend, dict(values), RunDirectory(run_dir), record=record)
    experiment = "thub" if backend == "verl" else None  # verl: its trainer.project_name
    env = library_tracker_environment(context, TRACKERS[backend], via=backend, mlflow_experiment=experiment)
    assert set(env) == {"MLFLOW_RUN_ID", "WANDB_SWEEP_PARAM_PATH"}

    given = {**values, "mlflow_experiment_name": experiment, "mlflow_run_name": "my-run", "wandb_run_name": "my-run",
             "wandb_dir": str(tmp_path), "verl_tracking": str(VERL_TRACKING),
             "verl_root": str(VERL_TRACKING.parents[2])}
    script = "import json, os, sys\nP = json.loads(sys.argv[1])\n" + textwrap.dedent(SCRIPTS[backend]) + \
        "print('RESULT ' + json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script, json.dumps(given)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
                                            "RANK": "0", "LOCAL_RANK": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])

    # MLflow: the library logged into the run thub created, which holds thub's parameters
    record_file = json.loads((run_dir / "trackers.json").read_text())
    assert out["mlflow_run_id"] == env["MLFLOW_RUN_ID"] == record_file["mlflow"]["run_id"]
    run = MlflowClient(tracking_uri=store).get_run(out["mlflow_run_id"])
    assert run.data.params["thub.learning_rate"] == "0.001"
    assert run.data.params["thub.backend"] == backend
    assert run.info.run_name == "my-run"
    assert run.data.metrics  # the library's own metrics went to the same run
    assert record_file["mlflow"]["via"] == backend

    # W&B: thub's metadata, with sources, in the config of the run the library opened
    config = trackers.wandb_config(Path(out["wandb_dir"]).parent)
    assert config["thub"]["parameters"]["learning_rate"] == {"value": 0.001, "source": "flag --learning-rate"}
    assert config["thub"]["backend"] == backend

    if "tensorboard" in TRACKERS[backend]:
        texts = trackers.tensorboard_texts(tmp_path / "tb")
        assert "| `learning_rate` | `0.001` | flag --learning-rate |" in texts["thub/parameters/text_summary"]


def test_other_ranks_and_nodes_prepare_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {"ckpt_output_dir": str(tmp_path), "wandb_project": "p"}
    context = RunContext("sft", "x", values, RunDirectory(tmp_path), record={"parameters": {}})
    monkeypatch.setenv("PET_NODE_RANK", "1")
    assert library_tracker_environment(context, ("wandb",), via="x") == {}
    monkeypatch.setenv("PET_NODE_RANK", "0")
    monkeypatch.setenv("RANK", "2")
    assert library_tracker_environment(context, ("wandb",), via="x") == {}
    assert not (tmp_path / "trackers.json").exists()


def test_a_library_that_needs_wandb_api_key_gets_an_empty_one_offline_and_an_error_online() -> None:
    """mini-trainer refuses W&B without WANDB_API_KEY and ART leaves it out silently (ART's
    ``_get_wandb_run``), offline too; neither reads ~/.netrc."""
    from thub.errors import UsageError
    from thub_builtins.trackers_wandb import wandb_key_environment

    params = {"wandb_project": "p"}
    assert wandb_key_environment(params, "ART", {"WANDB_MODE": "offline"}) == {"WANDB_API_KEY": ""}
    assert wandb_key_environment(params, "ART", {"WANDB_API_KEY": "k"}) == {}
    assert wandb_key_environment({}, "ART", {}) == {}
    with pytest.raises(UsageError, match="ART logs to W&B only with WANDB_API_KEY set"):
        wandb_key_environment(params, "ART", {})


@pytest.mark.parametrize(("status", "mlflow_status"), [("failed", "FAILED"), ("interrupted", "KILLED"),
                                                       ("succeeded", "FINISHED")])
def test_a_run_the_library_never_attached_to_ends_with_the_runs_status(tmp_path: Path, mlflow_store: str,
                                                                       status: str, mlflow_status: str) -> None:
    """thub creates the MLflow run before the library starts; a library that fails (or is killed)
    before it attaches never ends it. The end event ends it with the run's status, not RUNNING forever;
    a run the library ended itself is left as the library left it."""
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from thub.manager import load_registry
    from thub.specs import RunEvent

    client = MlflowClient(tracking_uri=mlflow_store)
    run_ids = []
    for name in ("never-attached", "ended-by-library"):
        run_dir = tmp_path / name
        (run_dir / "logs").mkdir(parents=True)
        values = {"ckpt_output_dir": str(run_dir), "mlflow_tracking_uri": mlflow_store}
        context = RunContext("sft", "verl", dict(values), RunDirectory(run_dir),
                             record={"algorithm": "sft", "backend": "verl", "parameters": {}})
        run_id = library_tracker_environment(context, ("mlflow",), via="verl")["MLFLOW_RUN_ID"]
        assert client.get_run(run_id).info.status == "RUNNING"
        run_ids.append(run_id)
    client.set_terminated(run_ids[1], status="FINISHED")  # what mlflow.end_run() in the library does

    registry = load_registry()
    for name in ("never-attached", "ended-by-library"):
        registry.fire(RunEvent(status, str(tmp_path / name), "sft", "verl", {"status": status}))
    assert client.get_run(run_ids[0]).info.status == mlflow_status
    assert client.get_run(run_ids[1]).info.status == "FINISHED"
