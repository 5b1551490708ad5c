"""The mini-trainer run, inside thub's supervised child process.

thub prepares the data (input_ids/labels JSONL), then ``mini_trainer.run_training`` starts
``torchrun ... mini_trainer/train.py`` in a worker thread while the main thread converts
mini-trainer's metrics to thub's stream, reports ``hf_format/samples_N`` checkpoints and turns
thub's interrupt into mini-trainer's on-demand full-state checkpoint (its trigger file).
mini_trainer (and with it torch) is imported here only.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from pathlib import Path
from typing import Any

from thub.backend import RunContext, truncate_after
from thub_plugin_minitrainer.metrics import (
    MetricsConverter,
    estimate_max_steps,
    hf_checkpoints,
    latest_full_state,
    resume_point,
)
from thub_plugin_minitrainer.translate import TRIGGER_DIR, output_dir, translate

POLL_SECONDS = 0.5


def prepare_data(context: RunContext, plan: dict[str, Any]) -> int:
    """Tokenize the run's data into the JSONL mini-trainer reads; returns training items (samples or blocks)."""
    from thub.backend import load_tokenizer

    params = context.params
    pretraining = plan["data"]["mode"] == "pretraining"
    tokenizer = load_tokenizer(params["model_path"], trust_remote_code=bool(params.get("trust_remote_code")))
    # the rows thub validated before the run, tokenized (cached by content)
    result = context.prepare(tokenizer, plan["data"]["output"], max_seq_len=plan["data"]["max_seq_len"],
                             overlong="truncate" if pretraining else "drop",
                             unmask=bool(params.get("unmask_messages")), num_proc=min(8, os.cpu_count() or 1))
    stats = result.stats
    print(f"thub: prepared {stats.samples_out} samples ({stats.tokens} tokens, {stats.trained_tokens} trained) "
          f"in {result.output}{' (cached)' if result.cached else ''}", flush=True)
    for warning in stats.warnings():
        print(f"thub: {warning}", flush=True)
    if plan["data"].get("validation_data_path"):
        _prepare_held_out(context, plan, tokenizer)
    if pretraining:
        block = params["block_size"]
        return math.ceil(stats.tokens / block)  # mini-trainer keeps the partial last block
    return stats.samples_out


def _prepare_held_out(context: RunContext, plan: dict[str, Any], tokenizer: Any) -> None:
    """``validation_data_path``'s rows tokenized as the training rows are, into the file
    mini-trainer evaluates (``training_args.validation_data_path``; it blocks documents itself)."""
    from thub.backend import UsageError

    params, pretraining = context.params, plan["data"]["mode"] == "pretraining"
    result = context.prepare_validation(tokenizer, plan["training_args"]["validation_data_path"],
                                        max_seq_len=plan["data"]["max_seq_len"],
                                        overlong="truncate" if pretraining else "drop",
                                        unmask=bool(params.get("unmask_messages")))
    assert result is not None  # validation_data_path is set
    if not result.stats.samples_out:
        raise UsageError(f"validation_data_path {params['validation_data_path']}: no example left to evaluate on "
                         "after tokenizing")
    print(f"thub: prepared {result.stats.samples_out} held-out samples in {result.output}", flush=True)


def _train_items(items: int, split: float) -> int:
    """Items left for training after datasets' ``train_test_split(test_size=split)``."""
    return items - math.ceil(items * split) if split else items


class _Training(threading.Thread):
    """``run_training`` off the main thread: its own signal handlers cannot install there, so thub's
    handlers stay in charge and the main thread writes the trigger file itself."""

    def __init__(self, torch_args: Any, train_args: Any) -> None:
        super().__init__(name="mini-trainer", daemon=True)
        self.args = (torch_args, train_args)
        self.error: BaseException | None = None

    def run(self) -> None:
        from mini_trainer import run_training

        try:
            run_training(*self.args)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


def run(context: RunContext) -> dict[str, Any]:
    """Prepare data, run mini-trainer, follow it; return the outcome for result.json."""
    params = context.params
    # thub decides where mini-trainer resumes (only a --resume finds a checkpoint here: an unfinished
    # run is refused without it, and --overwrite clears checkpoints/); passed explicitly, so
    # mini-trainer's own auto-detection never picks a half-written one
    resumed = resume_point(output_dir(params))
    plan = translate(context.algorithm, params, resume_from=str(resumed[0]) if resumed else None)
    os.environ.update(plan["environment"])  # before mini_trainer is imported: it reads the trigger name then
    from thub.backend import wandb_key_environment

    # mini-trainer refuses W&B without WANDB_API_KEY: before the data, an online run without one stops here
    os.environ.update(wandb_key_environment(params, "mini-trainer"))
    # run_training starts `torchrun` by name: use the one next to this interpreter
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    train = plan["training_args"]
    out = Path(train["output_dir"])
    trigger = Path(TRIGGER_DIR) / plan["environment"]["CHECKPOINT_TRIGGER_FILENAME"]
    trigger.unlink(missing_ok=True)  # a stale request would stop this run at its first step

    items = prepare_data(context, plan)
    max_steps = estimate_max_steps(_train_items(items, train["validation_split"]), train["batch_size"],
                                   train["training_mode"], train["max_epochs"], train["max_steps"])
    print(f"thub: mini-trainer plan:\n{json.dumps(plan, indent=2)}", flush=True)

    source = out / f"training_metrics_{plan['torchrun_args']['node_rank']}.jsonl"
    offset = 0
    if resumed:  # passed as resume_from_full_state_checkpoint
        truncate_after(context.run_dir.metrics, resumed[1])
        offset = source.stat().st_size if source.exists() else 0
        print(f"thub: resuming from mini-trainer full-state checkpoint {resumed[0]}", flush=True)
    converter = MetricsConverter(source, context.metrics, max_steps=max_steps, training_mode=train["training_mode"],
                                 max_epochs=train["max_epochs"], logging_steps=plan["logging_steps"],
                                 start_offset=offset)

    from thub.backend import library_tracker_environment
    from thub_plugin_minitrainer.native import build

    # thub's parameters (with their sources) into the W&B / MLflow runs mini-trainer opens itself
    os.environ.update(library_tracker_environment(context, ("wandb", "mlflow"), via="mini-trainer"))
    worker = _Training(*build(plan))
    context.retention = plan["retention"]  # thub's save_total_limit: applied as each save is reported
    reported: set[Path] = {path for path, _, _ in hf_checkpoints(out)}
    requested = False

    def follow() -> None:
        converter.poll()
        for path, samples, _best in hf_checkpoints(out):
            if path not in reported:
                reported.add(path)
                step = converter.samples_to_step.get(samples) or math.ceil(samples / train["batch_size"])
                context.checkpoint(path, step)

    worker.start()
    while worker.is_alive():
        follow()
        if context.stop_requested and not requested:
            requested = True
            print("thub: stop requested: asking mini-trainer for a full-state checkpoint", flush=True)
            trigger.touch()
        worker.join(POLL_SECONDS)
    follow()
    trigger.unlink(missing_ok=True)

    saved = latest_full_state(out)
    if context.stop_requested or requested:
        if saved and (not resumed or saved[0] != resumed[0]):
            return {"interrupted": True, "final_checkpoint": None,
                    "summary": {"full_state_checkpoint": str(saved[0]), "global_step": saved[1]}}
        if worker.error is not None:
            raise RuntimeError("mini-trainer was interrupted before it could save a full-state checkpoint") \
                from worker.error
    if worker.error is not None:
        raise worker.error
    models = [(path, samples) for path, samples, best in hf_checkpoints(out) if not best]
    final = str(models[-1][0]) if models and train["save_final_checkpoint"] else None
    summary: dict[str, Any] = {"global_step": converter.last["step"] if converter.last else 0}
    if converter.last:
        summary.update({k: converter.last[k] for k in ("loss", "learning_rate", "epoch") if k in converter.last})
    return {"final_checkpoint": final, "summary": summary}
