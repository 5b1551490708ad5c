"""Training Hub's Python-side contract: callbacks in the parent, and its result keys.

``TrainingHubCallback`` objects (Training Hub's own class, or the one here, or any object with
its ``on_*`` hooks) are called in the calling process from thub's run events
(``thub_on_event``): the training child is never handed a user object, so nothing is pickled
or re-executed from source, and instance state is kept (unlike Training Hub's torchrun path).
The parent sees a step when its metrics line is written, so ``on_step_begin`` and
``on_step_end`` are both called then, in that order.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("thub.training_hub")


@dataclass
class TrainingHubControl:
    """Training Hub's control flags: ``should_training_stop`` asks the run to checkpoint and stop."""

    should_save: bool = False
    should_training_stop: bool = False


@dataclass
class TrainingHubContext:
    """The training state passed to every hook (Training Hub's fields)."""

    step: int = 0
    epoch: int = 0
    loss: float | None = None
    learning_rate: float | None = None
    is_main_process: bool = True
    output_dir: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    control: TrainingHubControl | None = None


class TrainingHubCallback:
    """Base class with Training Hub's hooks, all no-ops: override the ones you need."""

    run_on_all_ranks: bool = False

    def on_train_begin(self, context: TrainingHubContext) -> None:
        """After start-up, before the first step."""

    def on_epoch_begin(self, context: TrainingHubContext) -> None:
        """When the first metrics line of an epoch arrives."""

    def on_step_begin(self, context: TrainingHubContext) -> None:
        """When a step's metrics line arrives (before on_log)."""

    def on_log(self, context: TrainingHubContext) -> None:
        """For every metrics line."""

    def on_evaluate(self, context: TrainingHubContext) -> None:
        """For a metrics line with validation metrics (eval_* / val_*)."""

    def on_save(self, context: TrainingHubContext) -> None:
        """After a checkpoint is written (metrics['checkpoint_path'])."""

    def on_step_end(self, context: TrainingHubContext) -> None:
        """When a step's metrics line arrives (after on_log)."""

    def on_epoch_end(self, context: TrainingHubContext) -> None:
        """When the next epoch starts, or the run ends."""

    def on_train_end(self, context: TrainingHubContext) -> None:
        """After the run ended (metrics: result.json)."""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class _Dispatcher:
    """A ``thub_on_event`` plugin that calls Training Hub callbacks in this process."""

    def __init__(self, callbacks: list[Any], iteration_callback: Any) -> None:
        self.callbacks = callbacks
        self.iteration_callback = iteration_callback
        self.control = TrainingHubControl()
        self.epoch: int | None = None
        self.last: TrainingHubContext | None = None
        self.stop_requested = False

    def _call(self, hook: str, context: TrainingHubContext) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is None:
                continue
            try:
                method(context)
            except Exception:  # noqa: BLE001 - Training Hub's contract: a failing hook never stops training
                log.exception("training-hub callback %s.%s failed", type(callback).__name__, hook)

    def _context(self, run_dir: str, line: dict[str, Any]) -> TrainingHubContext:
        loss = _number(line.get("loss"))
        for key in ("eval_loss", "val_loss"):
            loss = loss if loss is not None else _number(line.get(key))
        return TrainingHubContext(step=int(line.get("step") or 0), epoch=int(_number(line.get("epoch")) or 0),
                                  loss=loss, learning_rate=_number(line.get("learning_rate")),
                                  output_dir=run_dir, metrics=dict(line), control=self.control)

    def thub_on_event(self, event: Any) -> None:
        if event.kind == "started":
            self._call("on_train_begin", TrainingHubContext(output_dir=event.run_dir, control=self.control))
        elif event.kind == "metrics":
            self._metrics(event.run_dir, dict(event.data))
        elif event.kind == "checkpoint":
            step = int(event.data.get("step") or 0)
            self._call("on_save", TrainingHubContext(step=step, epoch=self.epoch or 0, output_dir=event.run_dir,
                                                     metrics={"checkpoint_path": event.data.get("path")},
                                                     control=self.control))
        else:  # succeeded, failed, interrupted
            last = self.last or TrainingHubContext(output_dir=event.run_dir, control=self.control)
            if self.epoch is not None:
                self._call("on_epoch_end", last)
            final = TrainingHubContext(step=last.step, epoch=last.epoch, loss=last.loss,
                                       learning_rate=last.learning_rate, output_dir=event.run_dir,
                                       metrics=dict(event.data), control=self.control)
            self._call("on_train_end", final)

    def _metrics(self, run_dir: str, line: dict[str, Any]) -> None:
        context = self._context(run_dir, line)
        from thub.runner.metrics import is_eval_line

        if is_eval_line(line):  # an evaluation after its step (HF Trainer: on_evaluate alone, not another step)
            self._call("on_evaluate", context)
            self._iteration(context, line)
            return
        if self.epoch is None or context.epoch != self.epoch:
            if self.epoch is not None and self.last is not None:
                self._call("on_epoch_end", self.last)
            self.epoch = context.epoch
            self._call("on_epoch_begin", context)
        self._call("on_step_begin", context)
        self._call("on_log", context)
        if any(key.startswith(("eval_", "val_")) for key in line):
            self._call("on_evaluate", context)
        self._call("on_step_end", context)
        self.last = context
        self._iteration(context, line)

    def _iteration(self, context: TrainingHubContext, line: dict[str, Any]) -> None:
        """``iteration_callback(step, line)`` for every metrics line; a stop the callbacks asked for."""
        if self.iteration_callback is not None:
            try:
                self.iteration_callback(context.step, dict(line))
            except Exception:  # noqa: BLE001 - same contract as the callbacks
                log.exception("training-hub iteration_callback failed")
        if self.control.should_training_stop and not self.stop_requested:
            # the supervisor treats it like Ctrl-C: the backend saves a checkpoint and stops
            self.stop_requested = True
            os.kill(os.getpid(), signal.SIGINT)


@contextmanager
def observe(callbacks: Any, iteration_callback: Any = None) -> Iterator[None]:
    """Register the callbacks as a ``thub_on_event`` plugin for the duration of one run."""
    if callbacks is None:
        callbacks = []
    elif not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    if not callbacks and iteration_callback is None:
        yield
        return
    from thub.hookspecs import hookimpl
    from thub.manager import get_registry

    dispatcher = _Dispatcher(list(callbacks), iteration_callback)

    class _Plugin:
        @hookimpl
        def thub_on_event(self, event: Any) -> None:
            dispatcher.thub_on_event(event)

    pm = get_registry().pm
    plugin = _Plugin()
    pm.register(plugin, name=f"training-hub-callbacks-{id(plugin)}")
    try:
        yield
    finally:
        pm.unregister(plugin)


def _rewards(run_dir: Path) -> list[float]:
    from thub.runner.metrics import read_metrics

    return [float(line["reward"]) for line in read_metrics(run_dir / "training_metrics.jsonl")
            if _number(line.get("reward")) is not None]


def result_with_training_hub_keys(resolved: Any, result: dict[str, Any]) -> dict[str, Any]:
    """thub's ``result.json`` plus the keys Training Hub's docs name for the backend it would use.

    thub's own keys win (``status`` is thub's ``succeeded``/``failed``); the training ran in a
    child process, so models are returned as paths (load them with from_pretrained).
    """
    algorithm, values = resolved.algorithm.name, resolved.values()
    final = result.get("final_checkpoint")
    run_dir = Path(result.get("run_dir") or values["ckpt_output_dir"])
    extra: dict[str, Any] = {}
    if algorithm == "lora_sft":  # unsloth: {model, tokenizer, trainer}
        extra = {"model": final, "tokenizer": final, "trainer": None}
    elif algorithm in ("lora_grpo", "grpo"):  # ART and verl result dicts
        rewards = _rewards(run_dir)
        steps = len(rewards)
        extra = {
            "checkpoint_path": final or str(run_dir / "checkpoints"),
            "adapter_checkpoints": [c["path"] for c in result.get("checkpoints") or []],
            "reward_history": rewards,
            "full_match_history": [],
            "timing_history": [],
            "total_time_seconds": result.get("wall_seconds"),
            "total_rollouts": steps * (values.get("prompt_batch_size") or 0) * values["group_size"],
            "final_mean_reward": rewards[-1] if rewards else 0.0,
            "model_path": values["model_path"],
            "n_gpus": values.get("nproc_per_node") or 1,
            "lora_r": values.get("lora_r", 0),
            "num_iterations": values.get("num_iterations") or values.get("max_steps") or steps,
        }
    if getattr(resolved, "notes", None):  # Training Hub switches accepted as thub behaves (never dropped unseen)
        extra["training_hub_notes"] = list(resolved.notes)
    for key, value in extra.items():
        result.setdefault(key, value)
    return result


class ApiRun:
    """One Python API run as Training Hub's callers see it (``DialectSpec.api_run``): its
    ``callbacks`` and ``iteration_callback`` taken from the keywords and observed around the run,
    its result keys added at the end."""

    def __init__(self, params: dict[str, Any], own: frozenset[str]) -> None:
        # an algorithm with a ``callbacks`` parameter of its own (gepa: GEPACallbacks, run in the child) keeps it
        self.callbacks = None if "callbacks" in own else params.pop("callbacks", None)
        self.iteration_callback = params.pop("iteration_callback", None)
        self._observing: Any = None

    def __enter__(self) -> ApiRun:
        self._observing = observe(self.callbacks, self.iteration_callback)
        self._observing.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return bool(self._observing.__exit__(*exc))

    def finish(self, resolved: Any, result: dict[str, Any]) -> dict[str, Any]:
        return result_with_training_hub_keys(resolved, result)


def api_run(params: dict[str, Any], own: frozenset[str]) -> ApiRun:
    """``DialectSpec.api_run`` of Training Hub's dialect."""
    return ApiRun(params, own)
