"""instructlab-training run inside thub's supervised child process.

1. thub validates and normalises the data, runs instructlab's own data processing (CPU) and
   reports the samples it drops, before anything is launched;
2. ``instructlab.training.run_training`` starts torchrun on its ``main_ds.py`` (needs CUDA);
3. meanwhile a thread turns ``training_params_and_metrics_global0.jsonl`` into thub's
   ``training_metrics.jsonl`` and reports each ``hf_format/samples_N`` checkpoint.

Heavy imports (instructlab, torch, datasets) happen here only.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from thub.backend import RunContext, library_resume_point, root_cause_from_file, saved_file_problem
from thub_plugin_instructlab.data import DataReport, prepare
from thub_plugin_instructlab.outputs import MetricsConverter, OutputFollower, checkpoint_dirs, expected_max_steps
from thub_plugin_instructlab.translate import translate


def say(message: str) -> None:
    print(f"thub: {message}", flush=True)


def build_args(plan: dict[str, Any]) -> tuple[Any, Any]:
    """instructlab-training's own ``TorchrunArgs`` and ``TrainingArgs`` for a translation."""
    from instructlab.training import PretrainingConfig, TorchrunArgs, TrainingArgs

    training = dict(plan["training_args"])
    if training.get("pretraining_config") is not None:
        training["pretraining_config"] = PretrainingConfig(**training["pretraining_config"])
    if "adamw_betas" in training:
        training["adamw_betas"] = tuple(training["adamw_betas"])
    return TorchrunArgs(**plan["torchrun_args"]), TrainingArgs(**training)


def max_steps_for(report: DataReport, args: dict[str, Any]) -> int:
    return expected_max_steps(report.train_units, args["effective_batch_size"], args["num_epochs"],
                              args.get("validation_split") or 0.0)


def failure_message(ckpt_output_dir: str | Path, node_rank: int) -> str | None:
    """The root cause from instructlab's worker log (``full_logs_global{node_rank}.log``)."""
    cause = root_cause_from_file(Path(ckpt_output_dir) / f"full_logs_global{node_rank}.log")
    return cause[-1] if cause else None


def _full_state_step(name: str) -> int | None:
    number = name.rsplit("_", 1)[-1]  # epoch_E, or samples_N of an on-demand save: instructlab's own sort key
    return int(number) if number.isdigit() else None


def resume_point(ckpt_output_dir: str | Path) -> tuple[Path, int] | None:
    """thub's decision for instructlab-training, which resumes by itself from the ``full_state/`` entry
    with the largest number (``load_latest_full_state``), complete or not: the newest complete one
    (its ``training_metadata.json``, written last, opens), newer half-written ones moved aside."""
    return library_resume_point(Path(ckpt_output_dir) / "full_state", _full_state_step,
                                lambda path: saved_file_problem(path / "training_metadata.json"),
                                "instructlab-training")


def _launch_environment() -> None:
    # run_training calls a bare `torchrun`: make it this interpreter's one
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def run(context: RunContext) -> dict[str, Any]:
    """Train with instructlab-training according to ``translate("sft", params)``."""
    params = context.params
    plan = translate(context.algorithm, params)
    for note in plan["notes"]:
        say(note)
    args = plan["training_args"]

    report = prepare(plan, context)
    say(f"data: {report.kept_samples} of {report.input_samples} samples kept in {report.processed_file}")
    for warning in report.warnings():
        say(f"WARNING: {warning}")
    if report.kept_samples == 0:
        raise ValueError(
            f"no training samples left after instructlab-training's data processing "
            f"({report.dropped_short} shorter than {report.min_tokens} tokens, "
            f"{report.dropped_long} of max_seq_len {report.max_seq_len} tokens or more)"
        )

    torch_args, train_args = build_args(plan)
    node_rank = plan["torchrun_args"]["node_rank"]
    # only a --resume finds one (an unfinished run is refused without it; --overwrite clears it)
    resumed = resume_point(args["ckpt_output_dir"])
    if resumed:
        say(f"instructlab-training resumes from {resumed[0]}, the newest complete full_state/ checkpoint")

    converter = MetricsConverter(max_steps_for(report, args), args["num_epochs"])
    context.retention = plan["retention"]  # thub's save_total_limit: applied as each save is reported
    follower = OutputFollower(
        args["ckpt_output_dir"], converter,
        emit=lambda line: context.metrics.log(line.pop("step"), **line),
        on_checkpoint=lambda path, step: context.checkpoint(path, step),
        rank=node_rank * (torch_args.nproc_per_node if isinstance(torch_args.nproc_per_node, int) else 1),
    )
    _launch_environment()
    from thub.backend import library_tracker_environment

    # thub's parameters (with their sources) into the tracker runs instructlab-training opens itself
    os.environ.update(library_tracker_environment(context, ("tensorboard", "mlflow", "wandb"),
                                                  via="instructlab-training"))
    from instructlab.training import run_training

    follower.start()
    try:
        run_training(torch_args=torch_args, train_args=train_args)
    except KeyboardInterrupt:
        follower.stop()
        return _outcome(context, converter, report, interrupted=True)
    except Exception as exc:
        follower.stop()
        if context.stop_requested:
            # thub forwarded SIGINT/SIGTERM to the whole process group: torchrun stopped the workers
            say("stopped on request; instructlab-training keeps the checkpoints it saved so far")
            return _outcome(context, converter, report, interrupted=True)
        cause = failure_message(args["ckpt_output_dir"], node_rank)
        if cause:
            raise RuntimeError(f"instructlab-training failed: {cause}") from exc
        raise
    follower.stop()
    return _outcome(context, converter, report, interrupted=context.stop_requested)


def _outcome(context: RunContext, converter: MetricsConverter, report: DataReport, interrupted: bool) -> dict[str, Any]:
    checkpoints = checkpoint_dirs(context.params["ckpt_output_dir"])
    summary: dict[str, Any] = {k: v for k, v in (converter.last or {}).items()
                               if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))}
    summary.update({f"data_{k}": v for k, v in report.as_dict().items() if isinstance(v, int)})
    return {"interrupted": interrupted, "final_checkpoint": str(checkpoints[-1]) if checkpoints else None,
            "summary": summary}
