"""Pieces shared by backends built on ``transformers.Trainer`` (trl, unsloth, ...).

The mapping functions are pure Python (used by translations at ``--dry-run``); the callback
imports transformers only when a runner asks for it in the training child.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from thub.runner.context import RunContext

# thub parameter -> TrainingArguments field, passed only when the user (or backend) set it
OPTIONAL_TRAINING_ARGS = {
    "save_steps": "save_steps", "lr_scheduler_kwargs": "lr_scheduler_kwargs", "warmup_steps": "warmup_steps",
    "beta1": "adam_beta1", "beta2": "adam_beta2", "eps": "adam_epsilon", "weight_decay": "weight_decay",
    "max_grad_norm": "max_grad_norm", "save_total_limit": "save_total_limit",
}


def optional_training_args(params: Mapping[str, Any]) -> dict[str, Any]:
    """The optimizer/schedule/saving TrainingArguments of the parameters that are set."""
    return {target: params[name] for name, target in OPTIONAL_TRAINING_ARGS.items() if params.get(name) is not None}


def validation_training_args(params: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainingArguments of a run that validates (``validation_split`` or
    ``validation_data_path``): evaluate every ``validation_frequency`` steps, and track the best
    checkpoint by ``eval_loss`` (lower is better), so that the Trainer's own rotation
    (``save_total_limit``: ``transformers.trainer_utils.rotate_checkpoints``) keeps
    ``state.best_model_checkpoint`` beside the newest one. Empty when the run does not validate."""
    if not (params.get("validation_split") or params.get("validation_data_path")):
        return {}
    return {"eval_strategy": "steps", "eval_steps": params["validation_frequency"],
            "metric_for_best_model": "eval_loss", "greater_is_better": False}


def report_settings(params: Mapping[str, Any]) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """``report_to``, environment variables and extra TrainingArguments for the trackers set.

    HF Trainer's own integrations log (the ``library`` route of :mod:`thub.trackers`): each tracker
    the run turns on that HF Trainer has an integration for (``TrackerSpec.report_to``), with the
    environment its integration reads (``TrackerSpec.trainer_environment``); the run name defaults
    to the run directory's name.
    """
    from thub.specs import load_object
    from thub.trackers import enabled, hf_run_name, trackers

    report_to, env, extra = [], {}, {}
    # report_to and the environment are part of the dry-run plan: in the trackers' trainer_order
    for tracker in sorted((t for t in enabled(params) if t.report_to), key=lambda t: t.trainer_order):
        assert tracker.report_to is not None
        report_to.append(tracker.report_to)
        if tracker.trainer_environment:
            env.update(load_object(tracker.trainer_environment)(params))
    named = [t for t in trackers() if t.run_name_param]
    if any(t.report_to in report_to for t in named) or any(params.get(t.run_name_param or "") for t in named):
        extra["run_name"] = hf_run_name(params)
    return report_to or ["none"], env, extra


def with_legacy_logging_dir(config_class: type, config: Mapping[str, Any],
                            environment: Mapping[str, str]) -> dict[str, Any]:
    """``config`` plus the ``TrainingArguments`` fields older transformers read instead of a tracker's
    environment variable (``TrackerSpec.trainer_legacy_args``), where the installed TrainingArguments
    still has them."""
    import dataclasses

    from thub.trackers import trackers

    config = dict(config)
    names = {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()
    for tracker in trackers():
        for variable, name in tracker.trainer_legacy_args.items():
            if environment.get(variable) and name in names:
                config[name] = environment[variable]
    return config


def measure_trainer_data(context: RunContext, train_dataloader: Any, reason: str | None = None,
                         args: Any = None) -> dict[str, Any]:
    """Report what a Trainer will train on (:meth:`RunContext.report_built`): every example of its
    own train dataset put through its own data collator, so packing, truncation and the
    collator's masking are what is counted."""
    library = (context.record.get("versions") or {}).get("library") or {}
    collate = train_dataloader.collate_fn
    by = f"{library.get('name') or context.backend} {library.get('version') or ''}".strip()
    by += f" ({type(collate).__name__} over the Trainer's train dataset)"
    from thub.runner.built import collated_labels

    labels = collated_labels(train_dataloader.dataset, collate)
    per_step = None
    if args is not None:  # the Trainer's own batch arithmetic: per device x accumulation x processes
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    if labels is None:
        return context.report_built(examples=len(train_dataloader.dataset), by=by, reason=reason,
                                    samples_per_step=per_step)
    return context.report_built(labels, by=by, reason=reason, samples_per_step=per_step)


def metrics_callback(context: RunContext, *, reason: str | None = None) -> Any:
    """A ``TrainerCallback`` that writes thub's metrics stream, reports checkpoints and stops at
    the next step boundary after SIGTERM/SIGINT (saving first, so ``--resume`` continues).

    At ``on_train_begin`` (before step 1) it measures what the Trainer built
    (:func:`measure_trainer_data`); ``reason`` is the library's known word on a difference.
    """
    from transformers import TrainerCallback

    from thub.runner.metrics import PREFERENCE_FIELDS
    from thub.runner.tracker_guard import guard_reporting_integrations

    guard_reporting_integrations()  # a tracker failing mid-run is a warning, not the run's status

    class ThubCallback(TrainerCallback):
        def __init__(self) -> None:
            self.last_tokens: float | None = None
            self.last_eval_step: int | None = None
            self.last_time = time.time()

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if not state.is_world_process_zero or not logs or "train_runtime" in logs:
                return
            if "eval_loss" in logs and "loss" not in logs:
                # Trainer.evaluate's line (the held-out loss after this step): an evaluation line of
                # its own (thub.runner.metrics.EVAL_FIELDS); the report_to integrations log it themselves.
                # Once per step: LLaMA-Factory evaluates again after training, on the same weights
                if state.global_step == self.last_eval_step:
                    return
                self.last_eval_step = state.global_step
                extra = {k: v for k, v in logs.items() if k.startswith("eval_") and k != "eval_loss"}
                context.metrics.log_eval(state.global_step, logs["eval_loss"], epoch=state.epoch,
                                         max_steps=state.max_steps, **extra)
                return
            if "loss" not in logs and "reward" not in logs:
                return  # other library lines (another evaluation's metrics) stay out of the stream
            line = {k: v for k, v in logs.items()
                    if isinstance(v, (int, float)) and ("/" not in k or k in PREFERENCE_FIELDS)}
            line["epoch"] = state.epoch
            now, tokens = time.time(), logs.get("num_tokens")
            if tokens is not None and self.last_tokens is not None and now > self.last_time:
                line["tokens_per_second"] = (tokens - self.last_tokens) / (now - self.last_time)
            self.last_tokens, self.last_time = tokens, now
            context.metrics.log(state.global_step, max_steps=state.max_steps, **line)

        def on_init_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            # before the report_to integrations open their runs (on_train_begin): each tracker's
            # own preparation in this process (TrackerSpec.trainer_init)
            if not state.is_world_process_zero:
                return
            from thub.specs import load_object
            from thub.trackers import trackers

            for tracker in trackers():
                if tracker.trainer_init and tracker.report_to in (args.report_to or []):
                    load_object(tracker.trainer_init)()

        def on_train_begin(self, args: Any, state: Any, control: Any, train_dataloader: Any = None,
                           **_: Any) -> None:
            if state.is_world_process_zero and train_dataloader is not None:
                measure_trainer_data(context, train_dataloader, reason, args)  # a mismatch stops here: exit 2
            # after the report_to integrations opened their runs (they come first in the callback list)
            report_to = [r for r in (args.report_to or []) if r != "none"]
            if state.is_world_process_zero and report_to:
                from thub.trackers.library import annotate_library_runs

                annotate_library_runs(context, report_to, via="HF Trainer")

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if context.stop_requested:
                control.should_save = True
                control.should_training_stop = True

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            context.checkpoint(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step)

    return ThubCallback()
