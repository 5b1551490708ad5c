"""Evaluation (``thub eval``): what core hands an evaluator plugin and what it gets back.

An evaluator (``thub_register_evaluators``, :class:`thub.specs.EvaluatorSpec`) is a function
``evaluate(request: EvalRequest) -> list[TaskScore]`` named by import string. Core resolves the
models (a run's final model, its checkpoints, its base), the tasks and the serving settings the
run trained with (chat template, ``max_seq_len``, generation config); the evaluator only runs its
harness on one model and reports one :class:`TaskScore` per task. Core writes the results
(``RUN_DIR/eval/<task>.json``) and the summary in ``result.json``.

These types are plain dataclasses importing nothing heavy, so a plugin can build and test its
requests without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EvalTask:
    """One task: a harness's own named task (``path`` None) or a local task file.

    ``name`` is what results are filed under (``RUN_DIR/eval/<name>.json``): the harness's task
    name, or a local file's stem.
    """

    name: str
    path: str | None = None


@dataclass(frozen=True)
class EvalRequest:
    """One model to score on ``tasks``, as it will be served.

    Attributes:
        model_path: a loadable HF model folder (a merged or consolidated checkpoint, the base).
        label: what the results call this model: ``final``, ``base``, ``checkpoint-40``, ...
        tasks: the tasks to run, in order.
        apply_chat_template: wrap prompts in the model's saved chat template (True when the model
            was trained on chat rows and has a template).
        max_seq_len: the longest context the run trained with; None: the model's own limit.
        generation_config: path of the ``generation_config.json`` saved with the model, if any.
        batch_size: examples per forward pass.
        limit: at most this many examples per task (None: all).
        device: ``cpu``, ``cuda``, ``cuda:0``, ... (None: the evaluator decides).
        seed: random seed for the harness.
        work_dir: a folder the evaluator may write to (generated task configs, per-sample logs).
        options: evaluator-specific settings (``--option KEY=VALUE``), passed through.
    """

    model_path: str
    label: str
    tasks: tuple[EvalTask, ...]
    apply_chat_template: bool = False
    max_seq_len: int | None = None
    generation_config: str | None = None
    batch_size: int = 1
    limit: int | None = None
    device: str | None = None
    seed: int = 0
    work_dir: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskScore:
    """What one task scored on one model.

    Attributes:
        task: the :attr:`EvalTask.name` it answers.
        metrics: metric name -> value (``acc``, ``exact_match``, ``perplexity``, ...).
        stderr: metric name -> its standard error, where the harness reports one.
        higher_is_better: metric name -> whether a larger value is better.
        samples: how many examples were scored.
        harness: the harness and its exact version, ``{"name": "lm-eval", "version": "0.4.9"}``.
        arguments: the exact arguments the harness ran with (enough to rerun it by hand).
    """

    task: str
    metrics: dict[str, float]
    stderr: dict[str, float] = field(default_factory=dict)
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    samples: int = 0
    harness: dict[str, str] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)


__all__ = ["EvalRequest", "EvalTask", "TaskScore"]
