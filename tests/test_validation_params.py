"""Held-out data (issue 28 item 4): ``validation_data_path`` beside ``validation_split``, refused when
it would change nothing, checked by the data gate as ``data_path`` is; each backend's translation;
Training Hub's ``eval_data_path``/``eval_steps``; the best checkpoint and thub's retention. No training
here (tests/test_validation_runs.py trains)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import thub
from thub.errors import UsageError
from thub.runner.best import best_checkpoint
from thub.runner.context import RunContext
from thub.runner.metrics import EVAL_FIELDS, DivergenceWatch, MetricsWriter, is_eval_line, read_metrics
from thub.runner.retention import thub_retention
from thub.runner.rundir import RunDirectory

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "examples" / "data" / "chat.jsonl"


@pytest.fixture
def held_out(tmp_path: Path) -> Path:
    path = tmp_path / "held_out.jsonl"
    path.write_text("".join(line + "\n" for line in CHAT.read_text().splitlines()[:4]))
    return path


def plan(backend: str = "trl", algorithm: str = "sft", **params: Any) -> dict[str, Any]:
    params.setdefault("data_path", str(CHAT))
    return thub.dry_run(algorithm, backend=backend, model_path="m", ckpt_output_dir="/tmp/thub-validation-plan",
                        **params)


# --- the parameters ---------------------------------------------------------------------------------------

def test_validation_split_and_data_path_are_exclusive(held_out: Path) -> None:
    with pytest.raises(UsageError, match="validation_split and validation_data_path cannot be combined"):
        plan(validation_split=0.1, validation_data_path=str(held_out), validation_frequency=2)


@pytest.mark.parametrize("held", [{"validation_split": 0.1}, {"validation_data_path": "HELD"}])
def test_validation_frequency_is_required_with_held_out_data(held: dict[str, Any], held_out: Path) -> None:
    held = {k: str(held_out) if v == "HELD" else v for k, v in held.items()}
    with pytest.raises(UsageError, match=f"validation_frequency is required with {next(iter(held))}"):
        plan(**held)


def test_validation_frequency_without_held_out_data_is_refused() -> None:
    with pytest.raises(UsageError, match=r"validation_frequency \(5\) needs validation_split > 0 or "
                                         "validation_data_path"):
        plan(validation_frequency=5)


def test_the_cli_refuses_both_with_exit_2(held_out: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "thub", "train", "sft", "--backend", "trl", "--model-path", "m",
                           "--data-path", str(CHAT), "--ckpt-output-dir", str(tmp_path / "out"),
                           "--validation-split", "0.1", "--validation-data-path", str(held_out),
                           "--validation-frequency", "2", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot be combined" in done.stderr and "Traceback" not in done.stderr


# --- the data gate ----------------------------------------------------------------------------------------

def test_a_bad_held_out_row_is_named_by_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(CHAT.read_text().splitlines()[0] + "\n" + '{"messages": [{"role": "user"}]}\n')
    with pytest.raises(UsageError, match=rf"validation_data_path: .*{bad.name}:2"):
        plan(validation_data_path=str(bad), validation_frequency=2)


def test_a_missing_held_out_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="validation_data_path: .*nothing.jsonl"):
        plan(validation_data_path=str(tmp_path / "nothing.jsonl"), validation_frequency=2)


def test_held_out_rows_of_another_kind_are_refused() -> None:
    documents = ROOT / "examples" / "data" / "grpo.jsonl"
    with pytest.raises(UsageError, match=r"validation_data_path: sft expects .*grpo\.jsonl:1"):
        plan(validation_data_path=str(documents), validation_frequency=2)
    with pytest.raises(UsageError, match="the held-out rows must be of the same kind"):
        plan(validation_data_path=str(CHAT), validation_frequency=2, is_pretraining=True, block_size=64,
             data_path=str(ROOT / "examples" / "data" / "documents.jsonl"))


# --- each backend -----------------------------------------------------------------------------------------

def test_trl_evaluates_the_held_out_file_and_tracks_the_best_checkpoint(held_out: Path) -> None:
    translation = plan(validation_data_path=str(held_out), validation_frequency=3)["translation"]
    config = translation["config"]
    assert (config["eval_strategy"], config["eval_steps"]) == ("steps", 3)
    # the Trainer's rotation keeps state.best_model_checkpoint (transformers.trainer_utils.rotate_checkpoints)
    assert (config["metric_for_best_model"], config["greater_is_better"]) == ("eval_loss", False)
    assert translation["data"]["validation_data_path"] == str(held_out)
    assert "metric_for_best_model" not in plan()["translation"]["config"]


@pytest.mark.needs_backend("llamafactory")
def test_llamafactory_names_an_eval_dataset_for_the_held_out_file(held_out: Path) -> None:
    translation = plan("llamafactory", validation_data_path=str(held_out), validation_frequency=3)["translation"]
    args = translation["args"]
    assert args["eval_dataset"] == "thub_validation" and "val_size" not in args
    assert (args["eval_strategy"], args["eval_steps"], args["metric_for_best_model"]) == ("steps", 3, "eval_loss")
    assert translation["data"]["validation_data_path"] == str(held_out)
    split = plan("llamafactory", validation_split=0.25, validation_frequency=3)["translation"]["args"]
    assert split["val_size"] == 0.25 and "eval_dataset" not in split


@pytest.mark.needs_backend("axolotl")
def test_axolotl_tracks_the_best_checkpoint_of_its_validation_split(held_out: Path) -> None:
    config = plan("axolotl", validation_split=0.25, validation_frequency=3)["translation"]["config"]
    assert (config["val_set_size"], config["eval_steps"], config["metric_for_best_model"],
            config["greater_is_better"]) == (0.25, 3, "eval_loss", False)
    assert "test_datasets" not in config
    translation = plan("axolotl", validation_data_path=str(held_out), validation_frequency=3)["translation"]
    config = translation["config"]
    assert config["val_set_size"] == 0.0 and config["metric_for_best_model"] == "eval_loss"
    assert config["test_datasets"] == [{"path": translation["data"]["validation_file"], "ds_type": "json"}]


@pytest.mark.needs_backend("axolotl")
def test_axolotl_writes_the_held_out_examples_as_the_training_ones(tiny_model: Path, held_out: Path,
                                                                     tmp_path: Path) -> None:
    """runner.write_inputs: validation.jsonl (thub's tokens and masks, as train.jsonl), the config's
    prepared-data folder keyed by both files."""
    import yaml
    from thub_plugin_axolotl.runner import write_inputs
    from thub_plugin_axolotl.translate import translate

    from thub.config.resolve import resolve
    from thub.manager import load_registry

    params = resolve(load_registry(), "sft", backend="axolotl", environ={}, flags={
        "model_path": str(tiny_model), "data_path": str(CHAT), "ckpt_output_dir": str(tmp_path / "run"),
        "max_seq_len": 256, "validation_data_path": str(held_out), "validation_frequency": 2}).values()
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.path.mkdir(parents=True)
    translation = translate("sft", params)
    write_inputs(RunContext(algorithm="sft", backend="axolotl", params=params, run_dir=run_dir), translation)
    rows = [json.loads(line) for line in Path(translation["data"]["validation_file"]).read_text().splitlines()]
    train = [json.loads(line) for line in Path(translation["data"]["file"]).read_text().splitlines()]
    assert len(rows) == 4 and rows == train[:4]  # the held-out file is the first 4 training rows
    config = yaml.safe_load(Path(translation["config_file"]).read_text())
    assert config["test_datasets"][0]["path"] == translation["data"]["validation_file"]


@pytest.mark.parametrize("backend", [
    pytest.param("instructlab-training", marks=pytest.mark.needs_backend("instructlab-training")),
])
def test_backends_without_a_separate_held_out_file_refuse_it(backend: str, held_out: Path) -> None:
    with pytest.raises(UsageError, match=f"(?s)backend '{backend}' does not honour .*validation_data_path"):
        plan(backend, validation_data_path=str(held_out), validation_frequency=2)


def test_preference_tuning_refuses_held_out_data(held_out: Path) -> None:
    preference = ROOT / "examples" / "data" / "preference.jsonl"
    with pytest.raises(UsageError, match="validation_data_path"):
        thub.dry_run("dpo", backend="trl", model_path="m", data_path=str(preference), ckpt_output_dir="/tmp/x",
                     validation_data_path=str(held_out), validation_frequency=2)


# --- Training Hub -----------------------------------------------------------------------------------------

def test_training_hub_eval_data_path_and_eval_steps_map(held_out: Path) -> None:
    shown = thub.dry_run("lora_sft", backend="trl", model_path="m", data_path=str(CHAT),
                         ckpt_output_dir="/tmp/thub-th", eval_data_path=str(held_out), eval_steps=4)
    params = shown["parameters"]
    assert params["validation_data_path"]["value"] == str(held_out)
    assert "training-hub name eval_data_path → validation_data_path" in params["validation_data_path"]["source"]
    assert params["validation_frequency"]["value"] == 4
    assert "training-hub name eval_steps → validation_frequency" in params["validation_frequency"]["source"]
    assert shown["translation"]["config"]["eval_steps"] == 4


def test_training_hub_other_eval_keywords_stay_refused() -> None:
    from thub_builtins.training_hub.rules import RULES

    for name in ("save_best_val_loss", "validate_at_epoch", "validate_at_final", "per_device_eval_batch_size"):
        assert RULES[name].kind == "refused", name
    assert RULES["eval_data_path"].thub == "validation_data_path" and RULES["eval_steps"].thub == "validation_frequency"


# --- the metrics line, the best checkpoint and retention --------------------------------------------------

def test_an_evaluation_line_has_the_eval_fields(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path / "m.jsonl", max_steps=10)
    line = writer.log_eval(4, 1.25, epoch=0.5, runtime=0.1, eval_samples_per_second=3.0, flag=True)
    assert all(field in line for field in EVAL_FIELDS) and is_eval_line(line)
    assert (line["eval_loss"], line["eval_runtime"], line["eval_samples_per_second"]) == (1.25, 0.1, 3.0)
    assert "flag" not in line and "eval_flag" not in line and "loss" not in line
    assert read_metrics(tmp_path / "m.jsonl") == [line]


def test_an_evaluation_line_does_not_break_a_divergence_streak() -> None:
    watch = DivergenceWatch(2)
    assert watch.update({"step": 1, "loss": float("nan")}) is None
    assert watch.update({"step": 1, "eval_loss": 2.0}) is None
    assert watch.update({"step": 2, "loss": float("nan")}) is not None


def test_the_best_checkpoint_is_the_lowest_eval_loss_at_a_saved_step() -> None:
    lines = [{"step": 1, "loss": 0.1}, {"step": 2, "eval_loss": 3.0}, {"step": 4, "eval_loss": 1.0},
             {"step": 5, "eval_loss": 0.5}, {"step": 6, "eval_loss": 2.0}, {"step": 6, "loss": 0.01}]
    checkpoints = [{"path": "c2", "step": 2}, {"path": "c3", "step": 3}, {"path": "c4", "step": 4},
                   {"path": "c6", "step": 6}, {"path": "final", "step": 6}]
    best = best_checkpoint(lines, checkpoints, check_files=False)
    assert best == {"path": "c4", "step": 4, "metric": "eval_loss", "value": 1.0}  # step 5 saved nothing
    assert best_checkpoint([{"step": 1, "loss": 1.0}], checkpoints, check_files=False) is None
    assert best_checkpoint(lines, [], check_files=False) is None
    # a deleted checkpoint is never named
    assert best_checkpoint(lines, checkpoints) is None


@pytest.fixture(scope="module")
def saved_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("saved") / "model"
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(out)
    return out


def test_thub_retention_never_deletes_the_best_checkpoint(saved_model: Path, tmp_path: Path) -> None:
    """mini-trainer/instructlab: thub prunes (save_total_limit 1); the lowest eval_loss so far stays."""
    context = RunContext(algorithm="sft", backend="mini-trainer", params={"save_total_limit": 1},
                         run_dir=RunDirectory(tmp_path), retention=thub_retention({"save_total_limit": 1}))
    root = tmp_path / "checkpoints" / "hf_format"
    for step, (samples, loss) in enumerate(((8, 2.0), (16, 1.0), (24, 3.0), (32, 4.0)), start=1):
        context.metrics.log_eval(step, loss, epoch=step / 4, max_steps=4)
        shutil.copytree(saved_model, root / f"samples_{samples}")
        context.checkpoint(root / f"samples_{samples}", step)
    assert sorted(p.name for p in root.iterdir()) == ["samples_16", "samples_32"]
    assert context.best_checkpoint() == {"path": str(root / "samples_16"), "step": 2, "metric": "eval_loss",
                                         "value": 1.0}
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events] == [1, 2, 3, 4]


def test_a_separate_held_out_file_holds_nothing_out_of_the_training_rows() -> None:
    """What the library built is compared with every validated training row (built.json: as validated)."""
    from thub.runner.built import held_out

    assert held_out({"validation_data_path": "held.jsonl", "validation_frequency": 2}, 64) == 0
    assert held_out({"validation_split": 0.1}, 64) == 7


@pytest.mark.needs_backend("unsloth")
def test_unsloth_evaluates_the_held_out_file(held_out: Path) -> None:
    translation = thub.dry_run("lora_sft", backend="unsloth", model_path="m", data_path=str(CHAT),
                               ckpt_output_dir="/tmp/thub-unsloth", validation_data_path=str(held_out),
                               validation_frequency=3)["translation"]
    assert (translation["config"]["eval_steps"], translation["config"]["metric_for_best_model"]) == (3, "eval_loss")
    assert translation["data"]["validation_data_path"] == str(held_out)



def test_training_hub_callbacks_get_an_evaluation_line_as_on_evaluate_alone() -> None:
    """An evaluation line (its own, after its step's training line) is on_evaluate with eval_loss as the
    loss, not another step; iteration_callback still sees every line."""
    from thub.specs import RunEvent
    from thub_builtins.training_hub.api import _Dispatcher

    calls: list[tuple[str, int, Any]] = []

    class Recorder(thub.TrainingHubCallback):
        def __getattribute__(self, hook: str) -> Any:
            if hook.startswith("on_"):
                return lambda context: calls.append((hook, context.step, context.loss))
            return super().__getattribute__(hook)

    seen: list[int] = []
    dispatcher = _Dispatcher([Recorder()], lambda step, line: seen.append(step))
    for kind, data in (("metrics", {"step": 2, "epoch": 0.5, "loss": 1.5, "learning_rate": 1e-4}),
                       ("metrics", {"step": 2, "epoch": 0.5, "max_steps": 4, "eval_loss": 1.7}),
                       ("succeeded", {"status": "succeeded"})):
        dispatcher.thub_on_event(RunEvent(kind, "/runs/x", "sft", "trl", data))  # type: ignore[arg-type]
    assert [c[0] for c in calls] == ["on_epoch_begin", "on_step_begin", "on_log", "on_step_end", "on_evaluate",
                                     "on_epoch_end", "on_train_end"]
    assert calls[4] == ("on_evaluate", 2, 1.7) and calls[-1] == ("on_train_end", 2, 1.5)
    assert seen == [2, 2]


def test_the_thub_route_logs_an_evaluation_as_hf_trainer_does(tmp_path: Path) -> None:
    """TensorBoard on the thub route (mini-trainer): eval_loss as eval/loss, as HF Trainer's own
    TensorBoardCallback writes it (rewrite_logs), training numbers as train/<name>."""
    pytest.importorskip("tensorboard")
    from thub.testing.trackers import tensorboard_scalars
    from thub.trackers.sink import hf_tag, numeric_metrics
    from thub_builtins.trackers_tensorboard import TensorBoardWriter

    writer = TensorBoardWriter(str(tmp_path))
    writer.log(2, numeric_metrics({"step": 2, "max_steps": 4, "epoch": 0.5, "loss": 1.5, "learning_rate": 1e-4}))
    writer.log(2, numeric_metrics({"step": 2, "max_steps": 4, "epoch": 0.5, "eval_loss": 1.7, "eval_runtime": 0.1}))
    writer.close("succeeded")
    assert tensorboard_scalars(tmp_path, "eval/loss") == {2: pytest.approx(1.7)}
    assert tensorboard_scalars(tmp_path, "train/loss") == {2: pytest.approx(1.5)}
    assert (hf_tag("eval_runtime"), hf_tag("grad_norm")) == ("eval/runtime", "train/grad_norm")
