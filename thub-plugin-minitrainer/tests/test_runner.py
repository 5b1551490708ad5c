"""Everything up to the GPU: thub's prepared data read by mini-trainer's own loader, and the runner
(metrics, checkpoints, interrupt -> full-state checkpoint -> resume) around a stand-in for
``mini_trainer.run_training`` (its torchrun workers need CUDA)."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from thub_plugin_minitrainer.metrics import estimate_max_steps
from thub_plugin_minitrainer.translate import TRIGGER_DIR, translate

from thub.config.resolve import resolve
from thub.errors import UsageError
from thub.manager import load_registry
from thub.runner.context import RunContext
from thub.runner.metrics import read_metrics
from thub.runner.rundir import RunDirectory

mini_trainer = pytest.importorskip("mini_trainer")

REQUIRED = ("step", "max_steps", "epoch", "loss", "learning_rate", "timestamp")


def _params(algorithm: str, model: Path, data: Path, out: Path, **extra: Any) -> dict[str, Any]:
    flags = {"model_path": str(model), "data_path": str(data), "ckpt_output_dir": str(out),
             "effective_batch_size": 8, "max_seq_len": 256, "max_tokens_per_gpu": 512, **extra}
    if algorithm == "osft":
        flags.setdefault("unfreeze_rank_ratio", 0.25)
    return resolve(load_registry(), algorithm, backend="mini-trainer", flags=flags, environ={}).values()


def test_prepared_chat_file_is_what_mini_trainer_reads(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    from mini_trainer.sampler import JsonlDataset, get_data_loader
    from thub_plugin_minitrainer.runner import prepare_data

    params = _params("osft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run", num_epochs=2)
    plan = translate("osft", params, environ={})
    items = prepare_data(_context("osft", params), plan)
    assert items == 64
    rows = [json.loads(line) for line in Path(plan["data"]["output"]).read_text().splitlines()]
    dataset = JsonlDataset(path=plan["data"]["output"])
    assert len(dataset) == len(rows) == items
    for i, row in enumerate(rows):
        sample = dataset[i]
        assert sample["input_ids"].tolist() == row["input_ids"] and sample["labels"].tolist() == row["labels"]
        assert sample["len"] == len(row["input_ids"]) <= params["max_seq_len"]
        # mini-trainer's own definition (causal shift): loss tokens among labels[1:]
        assert sample["num_loss_counted_tokens"] == sum(1 for t in row["labels"][1:] if t != -100) > 0
        assert row["labels"][0] == -100  # assistant-only masking
    loader, val = get_data_loader(plan["data"]["output"], batch_size=8, max_tokens_per_gpu=512, seed=42,
                                  rank=0, world_size=1)
    assert val is None
    t = plan["training_args"]
    assert len(loader) * t["max_epochs"] == estimate_max_steps(items, t["batch_size"], "epoch", t["max_epochs"], 0)
    batch = next(iter(loader))  # list of packed minibatches (padding-free, for flash-attn)
    assert batch and {"input_ids", "labels", "num_loss_counted_tokens",
                      "batch_num_loss_counted_tokens"} <= set(batch[0])
    assert sum(mb["num_samples"] for mb in batch) == 8


@pytest.mark.parametrize("unmask", [False, True])
@pytest.mark.parametrize("data", ["demo", "edge_cases"])
def test_mini_trainer_reads_the_template_marked_tokens(data: str, unmask: bool, tiny_model: Path, demo_data: Path,
                                                       edge_cases: Path, edge_cases_max_seq_len: int,
                                                       tmp_path: Path) -> None:
    """What mini-trainer's own loader reads from thub's prepared file is, row by row, the tokens the
    model's template marks (tool calls, odd turn orders, Unicode, unmask rows); the overlong row is
    dropped, as the plan says (``overlong: drop``)."""
    from mini_trainer.sampler import JsonlDataset
    from thub_plugin_minitrainer.runner import prepare_data
    from transformers import AutoTokenizer

    from thub.data import load_dataset_rows
    from thub.testing.masks import mask_differences

    path = (demo_data if data == "demo" else edge_cases) / "chat.jsonl"
    params = _params("sft", tiny_model, path, tmp_path / "run", max_seq_len=edge_cases_max_seq_len,
                     unmask_messages=unmask)
    plan = translate("sft", params, environ={})
    assert plan["data"]["overlong"] == "drop"
    prepare_data(_context("sft", params), plan)
    dataset = JsonlDataset(path=plan["data"]["output"])
    samples = [{"input_ids": dataset[i]["input_ids"].tolist(), "labels": dataset[i]["labels"].tolist()}
               for i in range(len(dataset))]
    assert mask_differences(load_dataset_rows(str(path)), samples, AutoTokenizer.from_pretrained(tiny_model),
                            edge_cases_max_seq_len, unmask=unmask, overlong="drop") == []


def test_prepared_documents_become_mini_trainer_blocks(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    from mini_trainer import PretrainingConfig
    from mini_trainer.sampler import get_data_loader
    from thub_plugin_minitrainer.runner import prepare_data

    params = _params("sft", tiny_model, demo_data / "documents.jsonl", tmp_path / "run", is_pretraining=True,
                     block_size=32)
    plan = translate("sft", params, environ={})
    blocks = prepare_data(_context("sft", params), plan)
    loader, _ = get_data_loader(plan["data"]["output"], batch_size=8, max_tokens_per_gpu=512, seed=42, rank=0,
                                world_size=1, pretraining_config=PretrainingConfig(block_size=32), pad_token_id=0)
    assert len(loader.dataset) == blocks > 0
    assert len(loader) == math.ceil(blocks / 8)
    assert loader.dataset[0]["labels"].tolist() == loader.dataset[0]["input_ids"].tolist()


def write_full_state(folder: Path, *, complete: bool = True) -> None:
    """What mini-trainer's FullStateCheckpointer.save writes (one rank): the model shards, the rank's
    optimizer and RNG state, then training_state.pt; ``complete=False``: killed before the shards."""
    import torch

    (folder / "distributed").mkdir(parents=True)
    if complete:
        (folder / "distributed" / ".metadata").write_bytes(b"dcp")
        torch.save({"state": {}}, folder / "optimizer_rank_0.pt")
        torch.save({"torch_rng": None}, folder / "rng_state_rank_0.pt")
    torch.save({"global_step": int(folder.name.removeprefix("step_"))}, folder / "training_state.pt")


class FakeMiniTrainer:
    """Stands in for run_training: writes what train.py writes, in the same places and formats."""

    def __init__(self, steps: int, stop_after: int | None = None) -> None:
        self.steps, self.stop_after = steps, stop_after
        self.calls: list[tuple[Any, Any]] = []

    def save(self, out: Path, samples: int) -> None:
        folder = out / "hf_format" / f"samples_{samples}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"")
        (folder / "config.json").write_text("{}")
        (folder / "tokenizer_config.json").write_text("{}")

    def __call__(self, torch_args: Any, train_args: Any) -> None:
        self.calls.append((torch_args, train_args))
        from mini_trainer.full_state_checkpoint import find_latest_full_state_checkpoint

        out = Path(train_args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        metrics = out / "training_metrics_0.jsonl"
        state = out / "full_state_checkpoints"
        # as train.py: the checkpoint it is given, else (on-demand checkpointing) the newest it finds itself
        resume = train_args.resume_from_full_state_checkpoint
        if resume is None and train_args.on_demand_checkpointing:
            resume = find_latest_full_state_checkpoint(out)
        self.resumed_from = resume
        start = int(Path(resume).name.removeprefix("step_")) if resume else 0
        per_epoch = math.ceil(64 / train_args.batch_size)
        for step in range(start + 1, self.steps + 1):
            line = {"step": step, "epoch": (step - 1) // per_epoch, "steps_per_epoch": per_epoch, "lr": 1e-5,
                    "grad_norm": 1.0, "loss": 3.0 / step, "num_samples": train_args.batch_size,
                    "total_samples_accumulated": step * train_args.batch_size, "val_loss": None,
                    "peak_memory_usage_GB": 1.0, "timestamp": "2026-11-30T12:00:00"}
            with metrics.open("a") as handle:
                handle.write(json.dumps(line) + "\n")
            time.sleep(0.05)
            if self.stop_after is not None and step == self.stop_after:
                trigger = Path(TRIGGER_DIR) / os.environ["CHECKPOINT_TRIGGER_FILENAME"]
                deadline = time.time() + 300  # a hang guard: thub asks once it has seen the signal
                while not trigger.exists() and time.time() < deadline:
                    time.sleep(0.05)
                assert trigger.exists(), "thub did not request the on-demand checkpoint"
                write_full_state(state / f"step_{step}")
                raise RuntimeError("Training failed. Please check the logs")  # torchrun got SIGTERM too
            every = train_args.min_samples_per_checkpoint
            if every and step * train_args.batch_size % every == 0:
                self.save(out, step * train_args.batch_size)
        if train_args.save_final_checkpoint:
            self.save(out, self.steps * train_args.batch_size)


def _context(algorithm: str, params: dict[str, Any]) -> RunContext:
    run_dir = RunDirectory(Path(params["ckpt_output_dir"]))
    run_dir.path.mkdir(parents=True, exist_ok=True)
    return RunContext(algorithm=algorithm, backend="mini-trainer", params=params, run_dir=run_dir)


def test_runner_converts_metrics_and_reports_checkpoints(tiny_model: Path, demo_data: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_plugin_minitrainer.runner import run

    fake = FakeMiniTrainer(steps=16)
    monkeypatch.setattr(mini_trainer, "run_training", fake)
    params = _params("osft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run", num_epochs=2, save_steps=4)
    outcome = run(_context("osft", params))
    torch_args, train_args = fake.calls[0]
    assert train_args.osft and train_args.osft_unfreeze_rank_ratio == 0.25 and train_args.on_demand_checkpointing
    assert Path(train_args.data_path).exists()
    lines = read_metrics(tmp_path / "run" / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == list(range(1, 17))
    assert all(all(k in line for k in REQUIRED) and line["max_steps"] == 16 for line in lines)
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [(Path(e["path"]).name, e["step"]) for e in events] == [
        ("samples_32", 4), ("samples_64", 8), ("samples_96", 12), ("samples_128", 16)]
    assert outcome["final_checkpoint"].endswith("checkpoints/hf_format/samples_128")
    assert outcome["summary"]["global_step"] == 16


def test_interrupt_saves_full_state_and_resume_continues(tiny_model: Path, demo_data: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_plugin_minitrainer.runner import run

    params = _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run", num_epochs=1)
    monkeypatch.setattr(mini_trainer, "run_training", FakeMiniTrainer(steps=8, stop_after=3))
    context = _context("sft", params)
    context._stop_signal = signal.SIGTERM  # as the handler thub installs would record it
    outcome = run(context)
    assert outcome["interrupted"] is True
    assert outcome["summary"]["full_state_checkpoint"].endswith("full_state_checkpoints/step_3")
    assert [line["step"] for line in read_metrics(tmp_path / "run" / "training_metrics.jsonl")] == [1, 2, 3]
    assert not (Path(TRIGGER_DIR) / translate("sft", params, environ={})["environment"]
                ["CHECKPOINT_TRIGGER_FILENAME"]).exists()

    monkeypatch.setattr(mini_trainer, "run_training", FakeMiniTrainer(steps=8))
    outcome = run(_context("sft", params))
    lines = read_metrics(tmp_path / "run" / "training_metrics.jsonl")
    assert [line["step"] for line in lines] == list(range(1, 9))  # old lines not converted twice
    assert outcome["final_checkpoint"].endswith("samples_64")


def test_resume_is_thubs_decision_not_mini_trainers_auto_detection(tiny_model: Path, demo_data: Path,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """mini-trainer resumes from the newest full_state_checkpoints/step_N holding a training_state.pt, complete
    or not (its find_latest_full_state_checkpoint); thub passes the newest complete one explicitly
    (resume_from_full_state_checkpoint) and moves a newer half-written one out of its sight."""
    from thub_plugin_minitrainer.runner import run

    params = _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run", num_epochs=1)
    state = tmp_path / "run" / "checkpoints" / "full_state_checkpoints"
    write_full_state(state / "step_3")
    write_full_state(state / "step_5", complete=False)  # killed mid-save: no model shards
    lines = [{"step": step, "max_steps": 8, "epoch": 0, "timestamp": 0.0, "learning_rate": 1e-5, "loss": 1.0}
             for step in range(1, 6)]
    (tmp_path / "run" / "training_metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    fake = FakeMiniTrainer(steps=8)
    monkeypatch.setattr(mini_trainer, "run_training", fake)
    run(_context("sft", params))
    assert fake.calls[0][1].resume_from_full_state_checkpoint == str(state / "step_3")
    assert fake.resumed_from == str(state / "step_3")
    assert not (state / "step_5").exists() and (state.with_name("full_state_checkpoints.incomplete") / "step_5"
                                                / "training_state.pt").exists()
    assert [line["step"] for line in read_metrics(tmp_path / "run" / "training_metrics.jsonl")] == list(range(1, 9))


def test_the_translation_carries_the_resume_decision(tiny_model: Path, demo_data: Path, tmp_path: Path) -> None:
    params = _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run")
    fresh = translate("sft", params, environ={})
    assert fresh["training_args"]["resume_from_full_state_checkpoint"] is None
    assert not any(arg.startswith("--resume-from") for arg in fresh["command"])
    path = "out/checkpoints/full_state_checkpoints/step_3"
    resumed = translate("sft", params, environ={}, resume_from=path)
    assert resumed["training_args"]["resume_from_full_state_checkpoint"] == path
    assert resumed["command"][-1] == f"--resume-from-full-state-checkpoint={path}"


def test_library_failure_is_raised(tiny_model: Path, demo_data: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from thub_plugin_minitrainer.runner import run

    def broken(torch_args: Any, train_args: Any) -> None:
        raise RuntimeError("Training failed. Please check the logs at x for details.")

    monkeypatch.setattr(mini_trainer, "run_training", broken)
    params = _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run")
    with pytest.raises(RuntimeError, match="Training failed"):
        run(_context("sft", params))


def test_tracker_runs_mini_trainer_opens_get_thubs_parameters(
        tiny_model: Path, demo_data: Path, tmp_path: Path, mlflow_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to the GPU boundary (``run_training``): mini-trainer starts with ``MLFLOW_RUN_ID`` naming the
    run thub created, holding thub's parameters, and ``WANDB_SWEEP_PARAM_PATH`` naming thub's W&B
    config. That mini-trainer's own wrappers attach to them: tests/test_trackers_library.py."""
    pytest.importorskip("mlflow")
    import yaml
    from mlflow import MlflowClient
    from thub_plugin_minitrainer.runner import run

    for name in ("MLFLOW_RUN_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_API_KEY"):
        monkeypatch.setenv(name, "")  # the runner sets them in os.environ: removed again after the test
    monkeypatch.setenv("WANDB_MODE", "offline")
    seen: dict[str, Any] = {}
    fake = FakeMiniTrainer(steps=2)

    def recording(torch_args: Any, train_args: Any) -> None:
        seen.update({name: os.environ.get(name) for name in ("MLFLOW_RUN_ID", "WANDB_SWEEP_PARAM_PATH")})
        fake(torch_args, train_args)

    monkeypatch.setattr(mini_trainer, "run_training", recording)
    store = mlflow_store
    params = _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run", mlflow_tracking_uri=store,
                     wandb_project="thub-tests")
    context = _context("sft", params)
    context.record = {"algorithm": "sft", "backend": "mini-trainer",
                      "parameters": {k: {"value": v, "source": "test"} for k, v in params.items()}}
    run(context)
    mlflow_run = MlflowClient(tracking_uri=store).get_run(seen["MLFLOW_RUN_ID"])
    assert mlflow_run.info.run_name == "run"
    assert mlflow_run.data.params["thub.backend"] == "mini-trainer"
    config = yaml.safe_load(Path(seen["WANDB_SWEEP_PARAM_PATH"]).read_text())
    assert config["thub"]["value"]["parameters"]["wandb_project"] == {"value": "thub-tests", "source": "test"}
    record = json.loads((tmp_path / "run" / "trackers.json").read_text())
    assert record["mlflow"] == {"route": "library", "via": "mini-trainer", "run_id": seen["MLFLOW_RUN_ID"],
                                "tracking_uri": store, "experiment": "Default"}


def test_wandb_offline_starts_without_an_api_key(tiny_model: Path, demo_data: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """mini-trainer's train.py refuses W&B unless WANDB_API_KEY is set, offline too (the fake repeats
    its check at the GPU boundary); online without the variable is refused before the data is prepared."""
    from thub_plugin_minitrainer.runner import run

    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.delenv("WANDB_API_KEY")  # unset, and restored after the test (the runner may set it)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", "")
    fake = FakeMiniTrainer(steps=2)

    def as_mini_trainer(torch_args: Any, train_args: Any) -> None:
        if train_args.wandb_project and os.environ.get("WANDB_API_KEY") is None:  # mini_trainer/train.py
            raise ValueError("WANDB_API_KEY is not set. Please set the WANDB_API_KEY environment variable.")
        fake(torch_args, train_args)

    monkeypatch.setattr(mini_trainer, "run_training", as_mini_trainer)
    params = _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "run", wandb_project="thub-tests")
    run(_context("sft", params))
    assert fake.calls

    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(UsageError, match="WANDB_API_KEY"):
        run(_context("sft", _params("sft", tiny_model, demo_data / "chat.jsonl", tmp_path / "online",
                                    wandb_project="thub-tests")))
    assert not list((tmp_path / "online").rglob("*.jsonl"))  # refused before the data was prepared
