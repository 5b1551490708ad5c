"""Experiment trackers: routes per backend, the parent-side sink on a real supervised run, checks
before launch, metadata redaction, and the doctor check.

The parent-route run uses a backend registered here whose runner (a real child process) writes a
metrics stream without training: what is under test is thub's side, which is all real
(supervisor, events, tensorboard/mlflow/wandb writing files, their readers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from thub import hookimpl
from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.redact import redact_value
from thub.specs import BackendSpec
from thub.testing import imported_heavy_modules
from thub.trackers import parent_logged_params, routes, run_metadata
from thub.trackers.check import problems

LOSSES = [2.5, 1.9375123456789, 1.25, 0.8125]
RUNNER = textwrap.dedent(f"""
    LOSSES = {LOSSES!r}

    def run(context):
        for step, loss in enumerate(LOSSES, 1):
            context.metrics.log(step, max_steps=len(LOSSES), loss=loss, learning_rate=1e-3 * step, epoch=step / 4)
        return {{"final_checkpoint": None, "summary": {{}}}}
""")


class EchoBackend:
    """A backend whose library has no tracker hook: every tracker goes the ``thub`` route."""

    @hookimpl
    def thub_register_backends(self, register):  # type: ignore[no-untyped-def]
        register(BackendSpec("echo", "metrics only", {"sft": frozenset({"learning_rate", "max_steps"})},
                             "trk_echo_runner:run"))


@pytest.mark.parametrize(("backend", "algorithm", "expected"), [
    ("trl", "sft", {"tensorboard": "library", "mlflow": "library", "wandb": "library"}),
    ("unsloth", "lora_sft", {"tensorboard": "library", "mlflow": "library", "wandb": "library"}),
    ("instructlab-training", "sft", {"tensorboard": "library", "mlflow": "library", "wandb": "library"}),
    ("llamafactory", "lora_sft", {"tensorboard": "library", "mlflow": "library", "wandb": "library"}),
    ("axolotl", "sft", {"tensorboard": "library", "mlflow": "library", "wandb": "library"}),
    ("verl", "grpo", {"tensorboard": "library", "mlflow": "library", "wandb": "library"}),
    ("mini-trainer", "sft", {"tensorboard": "thub", "mlflow": "library", "wandb": "library"}),
    ("art", "lora_grpo", {"tensorboard": "thub", "mlflow": "thub", "wandb": "library"}),
])
def test_each_backend_routes_every_tracker(backend: str, algorithm: str, expected: dict[str, str]) -> None:
    """The routes the plugin READMEs state, derived from what each backend honours."""
    registry = load_registry()
    if backend not in registry.backends:
        pytest.skip(f"{backend} plugin not installed")
    assert routes(registry.backends[backend], algorithm) == expected


def test_a_tracker_the_library_does_not_log_is_accepted_and_one_it_logs_keeps_its_limits() -> None:
    registry = load_registry()
    if "art" not in registry.backends or "verl" not in registry.backends:
        pytest.skip("art/verl plugins not installed")
    base = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "out", "reward": ["math"]}
    art = resolve(registry, "lora_grpo", backend="art", flags={**base, "tensorboard_log_dir": "tb",
                                                                "mlflow_tracking_uri": "sqlite:///m.db"}, environ={})
    assert art.values()["tensorboard_log_dir"] == "tb"
    assert {"tensorboard_log_dir", "mlflow_run_name"} <= parent_logged_params(registry.backends["art"], "lora_grpo")
    # verl's own MLflow logger has no experiment name: still an error, never dropped
    with pytest.raises(UsageError, match="mlflow_experiment_name"):
        resolve(registry, "grpo", backend="verl", flags={**base, "mlflow_tracking_uri": "sqlite:///m.db",
                                                          "mlflow_experiment_name": "x"}, environ={})


@pytest.mark.slow
def test_parent_route_logs_the_metrics_stream_to_all_three(thub_plugin, thub_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            monkeypatch: pytest.MonkeyPatch, demo_data: Path,
                                                            tiny_model: Path) -> None:
    from mlflow import MlflowClient

    from thub.runner.metrics import read_metrics
    from thub.runner.supervisor import run_training
    from thub.testing import trackers

    (tmp_path / "trk_echo_runner.py").write_text(RUNNER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    registry = thub_plugin(("echo", EchoBackend()))
    out, tb, store = tmp_path / "echo-run", tmp_path / "tb", f"sqlite:///{tmp_path / 'mlflow.db'}"
    resolved = resolve(registry, "sft", backend="echo", flags={
        "model_path": str(tiny_model), "data_path": str(demo_data / "chat.jsonl"), "ckpt_output_dir": str(out),
        "tensorboard_log_dir": str(tb), "mlflow_tracking_uri": store, "wandb_project": "thub-tests",
        "learning_rate": 1e-3}, environ={})
    result = run_training(resolved, quiet_json=True)
    assert result["status"] == "succeeded", result

    losses = {line["step"]: line["loss"] for line in read_metrics(out / "training_metrics.jsonl")}
    assert losses == dict(enumerate(LOSSES, 1))
    record = json.loads((out / "trackers.json").read_text())
    assert {name: entry["route"] for name, entry in record.items()} == dict.fromkeys(
        ("tensorboard", "mlflow", "wandb"), "thub")

    assert trackers.tensorboard_scalars(tb) == pytest.approx(losses, rel=1e-6)
    assert "| `learning_rate` | `0.001` | flag --learning-rate |" in \
        trackers.tensorboard_texts(tb)["thub/parameters/text_summary"]

    run = MlflowClient(tracking_uri=store).get_run(record["mlflow"]["run_id"])
    assert trackers.mlflow_history(store, run.info.run_id) == losses
    assert (run.info.run_name, run.info.status, run.data.params["thub.backend"]) == ("echo-run", "FINISHED", "echo")
    # artifacts beside the sqlite store, never in ./mlruns of the directory the run started from
    assert run.info.artifact_uri.startswith((tmp_path / "mlartifacts").as_uri()), run.info.artifact_uri

    wandb_dir = Path(record["wandb"]["path"])
    assert wandb_dir.parent == out / "wandb"
    assert trackers.wandb_history(wandb_dir) == losses
    assert trackers.wandb_run(wandb_dir)["display_name"] == "echo-run"
    assert trackers.wandb_config(wandb_dir)["thub"]["parameters"]["learning_rate"] == {
        "value": 0.001, "source": "flag --learning-rate"}

    # where each run went, as `thub runs status` shows it
    status = thub_cli("runs", "status", str(out))
    assert f"tracker: mlflow run {run.info.run_id} {store} (logged by thub)" in status.stdout, status.stdout
    assert thub_cli("runs", "status", str(out), "--json").json()["trackers"]["wandb"]["path"] == str(wandb_dir)


@pytest.mark.parametrize("backend", ["mini-trainer", "instructlab-training"])
def test_library_runs_are_named_after_the_run_directory(backend: str) -> None:
    registry = load_registry()
    if backend not in registry.backends:
        pytest.skip(f"{backend} plugin not installed")
    base = {"model_path": "m", "data_path": "d.jsonl", "ckpt_output_dir": "runs/my-run", "wandb_project": "p",
            "mlflow_tracking_uri": "sqlite:///x.db"}
    args = registry.translate("sft", backend, resolve(registry, "sft", backend=backend, flags=base,
                                                      environ={}).values())["training_args"]
    assert (args["wandb_run_name"], args["mlflow_run_name"]) == ("my-run", "my-run")
    named = registry.translate("sft", backend, resolve(registry, "sft", backend=backend, environ={}, flags={
        **base, "wandb_run_name": "w", "mlflow_run_name": "m"}).values())["training_args"]
    assert (named["wandb_run_name"], named["mlflow_run_name"]) == ("w", "m")


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_tracker_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """thub route, --resume: MLflow logs to the same run (here a file store, allowed explicitly),
    W&B resumes the same run id, TensorBoard appends to the same directory."""
    from thub.testing import trackers
    from thub.trackers.sink import ParentSink

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    run_dir, store = tmp_path / "resumed", f"file:{tmp_path / 'mlruns'}"
    run_dir.mkdir()
    values = {"ckpt_output_dir": str(run_dir), "tensorboard_log_dir": str(tmp_path / "tb"),
              "mlflow_tracking_uri": store, "wandb_project": "thub-tests", "learning_rate": 0.001}
    record = {"algorithm": "sft", "backend": "echo",
              "parameters": {k: {"value": v, "source": "flag"} for k, v in values.items()}}
    names = ["tensorboard", "mlflow", "wandb"]
    first = ParentSink(str(run_dir), record, names, resume=False)
    for step in (1, 2):
        first.log({"step": step, "loss": LOSSES[step - 1], "timestamp": 1.0e9 + step})
    first.close("interrupted")
    before = json.loads((run_dir / "trackers.json").read_text())
    again = ParentSink(str(run_dir), record, names, resume=True)
    for step in (3, 4):
        again.log({"step": step, "loss": LOSSES[step - 1], "timestamp": 1.0e9 + step})
    again.close("succeeded")
    after = json.loads((run_dir / "trackers.json").read_text())

    losses = dict(enumerate(LOSSES, 1))
    assert after["mlflow"]["run_id"] == before["mlflow"]["run_id"]
    assert trackers.mlflow_history(store, after["mlflow"]["run_id"]) == losses
    assert trackers.tensorboard_scalars(tmp_path / "tb") == pytest.approx(losses, rel=1e-6)
    assert after["wandb"]["run_id"] == before["wandb"]["run_id"] and after["wandb"]["path"] != before["wandb"]["path"]
    assert trackers.wandb_history(before["wandb"]["path"]) == {1: LOSSES[0], 2: LOSSES[1]}
    assert trackers.wandb_history(after["wandb"]["path"]) == {3: LOSSES[2], 4: LOSSES[3]}


def test_metadata_redacts_secrets_by_word_and_urls_with_credentials() -> None:
    assert redact_value("max_tokens", 512) == 512
    assert redact_value("hf_token", "hf_abc") == "<redacted>"
    assert redact_value("api_key", "k") == "<redacted>"
    assert redact_value("mlflow_tracking_uri", "https://me:s3cret@mlflow.example/") == \
        "https://<redacted>@mlflow.example/"
    metadata = run_metadata({"algorithm": "sft", "backend": "trl", "parameters": {
        "mlflow_tracking_uri": {"value": "http://u:p@h:5000", "source": "config x.yaml:3"}}})
    assert metadata["parameters"]["mlflow_tracking_uri"] == {"value": "http://<redacted>@h:5000",
                                                            "source": "config x.yaml:3"}


def _params(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"ckpt_output_dir": str(tmp_path / "run"), **extra}


@pytest.mark.needs_module("mlflow")
def test_mlflow_store_problems_name_their_fix(tmp_path: Path) -> None:
    trl = load_registry().backends["trl"]
    # MLflow 3 refuses its file store unless asked: found before launch, with both ways out
    found = problems(_params(tmp_path, mlflow_tracking_uri=f"file:{tmp_path}/mlruns"), trl, "sft", environ={})
    assert len(found) == 1 and "MLFLOW_ALLOW_FILE_STORE" in found[0].summary and "sqlite:///" in found[0].fix
    assert problems(_params(tmp_path, mlflow_tracking_uri=f"file:{tmp_path}/mlruns"), trl, "sft",
                    environ={"MLFLOW_ALLOW_FILE_STORE": "true"}) == []
    assert problems(_params(tmp_path, mlflow_tracking_uri=f"sqlite:///{tmp_path}/m.db"), trl, "sft", environ={}) == []
    unreachable = problems(_params(tmp_path, mlflow_tracking_uri="http://127.0.0.1:9"), trl, "sft", environ={})
    assert "unreachable" in unreachable[0].summary and "mlflow server" in unreachable[0].fix
    (tmp_path / "file").write_text("")
    bad_dir = problems(_params(tmp_path, tensorboard_log_dir=str(tmp_path / "file" / "tb")), trl, "sft", environ={})
    assert "is not a directory" in bad_dir[0].summary


@pytest.mark.needs_module("wandb")
def test_wandb_online_without_a_key_is_caught_offline_is_fine(tmp_path: Path) -> None:
    trl = load_registry().backends["trl"]
    online = problems(_params(tmp_path, wandb_project="p"), trl, "sft", environ={"HOME": str(tmp_path)})
    assert "no API key" in online[0].summary and "WANDB_MODE=offline" in online[0].fix
    assert problems(_params(tmp_path, wandb_project="p"), trl, "sft",
                    environ={"HOME": str(tmp_path), "WANDB_MODE": "offline"}) == []
    assert problems(_params(tmp_path, wandb_project="p"), trl, "sft",
                    environ={"HOME": str(tmp_path), "WANDB_API_KEY": "x" * 40}) == []


def test_missing_package_in_the_backends_own_environment(tmp_path: Path) -> None:
    """A managed backend logs with its own interpreter's packages: a real bare venv lacks wandb."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    python = str(tmp_path / "env" / "bin" / "python")
    managed = BackendSpec("managed", "x", {"sft": frozenset({"wandb_project"})}, "x:run", python=python)
    found = problems(_params(tmp_path, wandb_project="p"), managed, "sft", environ={"WANDB_MODE": "offline"})
    assert len(found) == 1 and "wandb package is not installed" in found[0].summary
    assert found[0].fix == f"{python} -m pip install wandb"


def _thub(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("THUB_", "WANDB_", "MLFLOW_"))}
    return subprocess.run([sys.executable, "-m", "thub", *args], capture_output=True, text=True,
                          env={**environ, **env}, timeout=600)  # a hang guard


@pytest.mark.needs_module("mlflow")
def test_unreachable_store_stops_the_launch_with_exit_2(tmp_path: Path, demo_data: Path, tiny_model: Path) -> None:
    out = tmp_path / "never"
    done = _thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                 str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out),
                 "--mlflow-tracking-uri", "http://127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "MLflow server http://127.0.0.1:9 is unreachable" in done.stderr and "fix:" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()




def test_missing_tracker_package_stops_the_launch_with_the_install(tmp_path: Path, demo_data: Path,
                                                                   tiny_model: Path, without_wandb: Path) -> None:
    """wandb made unimportable for the whole interpreter (a sitecustomize on PYTHONPATH): the
    launch is refused before anything is written, naming the install."""
    out = tmp_path / "never"
    done = _thub("train", "sft", "--backend", "trl", "--model-path", str(tiny_model), "--data-path",
                 str(demo_data / "chat.jsonl"), "--ckpt-output-dir", str(out), "--wandb-project", "p",
                 PYTHONPATH=str(without_wandb), WANDB_MODE="offline")
    assert done.returncode == 2, done.stderr
    assert "Weights & Biases is on (wandb_project) but the wandb package is not installed" in done.stderr
    assert "fix: pip install wandb" in done.stderr and not out.exists()


@pytest.mark.needs_module("mlflow")
@pytest.mark.needs_backend("mini-trainer")
def test_doctor_reports_tracker_packages_and_checks_env_configured_ones() -> None:
    ok = _thub("doctor", "--backend", "mini-trainer", "core.trackers", "--json", "--timeout", "600")  # hang guard
    report = json.loads(ok.stdout)
    check = next(c for c in report["checks"] if c["id"] == "core.trackers")
    assert check["status"] == "ok", check
    details = "\n".join(check["details"])
    assert "TensorBoard:" in details and "logged by thub (parent process)" in details
    assert "MLflow:" in details and "logged by mini-trainer's library" in details
    bad = _thub("doctor", "--backend", "trl", "core.trackers", "--timeout", "600",
                THUB_MLFLOW_TRACKING_URI="http://127.0.0.1:9")
    assert bad.returncode == 1 and "unreachable" in bad.stdout + bad.stderr


def test_help_and_dry_run_import_no_tracker_package() -> None:
    probe = ("import sys\nsys.argv = ['thub', 'train', 'sft', '--dry-run', '--model-path', 'm', '--data-path', "
             "'d.jsonl', '--ckpt-output-dir', 'o', '--tensorboard-log-dir', 'tb', '--wandb-project', 'p']\n"
             "from thub.cli.main import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n")
    assert imported_heavy_modules(probe) == []
