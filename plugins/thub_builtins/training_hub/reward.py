"""Training Hub's ``reward_fn`` as a thub reward: one completion at a time, adapted to a batch.

Training Hub 0.11.2 scores one completion per call, by keyword:
``reward_fn(data_source=..., solution_str=..., ground_truth=...)`` (its ART backend, data source
``"generic"``), and ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``
(its verl backend, data source ``"custom"`` unless ``data_source`` is given, ``extra_info`` the
row's ``{"index": i}``). thub's rewards follow TRL's batch signature
``f(prompts, completions, ground_truth, **columns) -> list[float]`` on every backend.

The adapter is reached by an import string, so every backend's training process (trl, art, verl,
a SLURM or Kubeflow worker) loads it as it loads any ``module:function`` reward, with the user's
function imported there by its dotted path (as Training Hub's command line names it)::

    thub_builtins.training_hub.reward:per_completion.my_rewards.compute_reward

Pure Python, no heavy imports.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

PREFIX = "thub_builtins.training_hub.reward:per_completion"
# The data source Training Hub's verl backend gives a custom reward when the call names none
# (lora_grpo_verl._prepare_generic_data); a row's own ``data_source`` column wins.
DEFAULT_DATA_SOURCE = "custom"
# What TRL passes a reward besides the dataset's columns: not row values, kept out of extra_info.
_TRAINER_KEYWORDS = frozenset({"completion_ids", "trainer_state", "log_extra", "log_metric"})
SIGNATURE = "reward_fn(data_source, solution_str, ground_truth, extra_info=None) -> float"


def accepts_extra_info(score: Callable[..., Any]) -> bool:
    """Whether ``score`` takes ``extra_info`` (by name, or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(score).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it as Training Hub's ART does
        return False
    return any(p.name == "extra_info" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def check_scorer(score: Any) -> None:
    """ValueError unless ``score`` can be called as Training Hub calls a ``reward_fn``."""
    if not callable(score):
        raise ValueError(f"expected a function {SIGNATURE}, found {type(score).__name__}")
    try:
        signature = inspect.signature(score)
    except (TypeError, ValueError):
        raise ValueError(f"cannot read the signature of {score!r}: expected {SIGNATURE}") from None
    try:
        signature.bind(data_source="custom", solution_str="", ground_truth="")
    except TypeError as exc:
        hint = ""
        if "completions" in signature.parameters or "prompts" in signature.parameters:
            hint = "; a batch reward f(prompts, completions, ground_truth, **columns) is thub's: pass it as reward"
        raise ValueError(f"Training Hub calls reward_fn as {SIGNATURE}, and {exc}{hint}") from None


def score_batch(score: Callable[..., Any], prompts: Sequence[Any], completions: Sequence[Any],
                ground_truth: Sequence[Any] | None = None, **columns: Any) -> list[float | None]:
    """Score each completion with ``score`` as Training Hub would: its text as ``solution_str``,
    the row's ground truth (as text, as Training Hub's data preparation stores it), the row's
    ``data_source`` column or ``"custom"``, and (when ``score`` takes it) ``extra_info``: the
    row's index in the batch, its prompt and its other columns. A None score stays None (TRL: not
    counted)."""
    from thub.rewards import completion_text

    truths = list(ground_truth) if ground_truth is not None else [""] * len(completions)
    rows = {key: list(values) for key, values in columns.items() if key not in _TRAINER_KEYWORDS
            and isinstance(values, Sequence) and not isinstance(values, str) and len(values) == len(completions)}
    sources = rows.pop("data_source", None)
    extra = accepts_extra_info(score)
    out: list[float | None] = []
    for index, completion in enumerate(completions):
        kwargs: dict[str, Any] = {
            "data_source": sources[index] if sources is not None else DEFAULT_DATA_SOURCE,
            "solution_str": completion_text(completion),
            "ground_truth": "" if truths[index] is None else str(truths[index]),
        }
        if extra:
            kwargs["extra_info"] = {"index": index, "prompt": prompts[index] if index < len(prompts) else None,
                                    **{key: values[index] for key, values in rows.items()}}
        value = score(**kwargs)
        out.append(None if value is None else float(value))
    return out


class _PerCompletion:
    """``per_completion.<dotted path>``: a batch reward over the Training Hub scorer at that path.

    Each attribute step extends the path (``load_object`` walks ``a.b.c`` by ``getattr``); the
    scorer is imported on the first call, in the training process.
    """

    def __init__(self, path: tuple[str, ...] = ()) -> None:
        self._path = path
        self._score: Callable[..., Any] | None = None
        self.__name__ = ".".join(path) or "per_completion"  # TRL logs rewards/<name>/mean

    def __getattr__(self, name: str) -> _PerCompletion:
        if name.startswith("_"):  # dunder probes (copy, pickle, inspect) are not path steps
            raise AttributeError(name)
        return _PerCompletion((*self._path, name))

    def __repr__(self) -> str:
        return f"{PREFIX}.{self.__name__}"

    def _scorer(self) -> Callable[..., Any]:
        if self._score is None:
            if not self._path:
                raise ValueError(f"name the scorer: {PREFIX}.module.function")
            from thub_builtins.training_hub.cli import resolve_dotted_path

            score = resolve_dotted_path(".".join(self._path))
            check_scorer(score)
            self._score = score
        return self._score

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], ground_truth: Sequence[Any] | None = None,
                 **columns: Any) -> list[float | None]:
        return score_batch(self._scorer(), prompts, completions, ground_truth, **columns)


per_completion = _PerCompletion()


def reward_target(value: Any) -> str:
    """thub's reward import string for a Training Hub ``reward_fn`` (a module-level function, or its
    dotted or ``module:function`` path), checked in this process; ValueError with the fix otherwise."""
    from pathlib import Path

    from thub_builtins.training_hub.cli import resolve_dotted_path
    from thub_builtins.training_hub.rules import import_string

    if isinstance(value, str):
        if value.endswith(".py") or Path(value).is_file():
            raise ValueError(f"{value!r} is a file (Training Hub's verl backend loads compute_score from it): put its "
                             "folder on PYTHONPATH and pass reward_fn='MODULE.compute_score'")
        dotted = value.replace(":", ".")
    else:
        check_scorer(value)
        dotted = import_string(value).replace(":", ".")
    check_scorer(resolve_dotted_path(dotted))  # importable here as the training process will import it
    return f"{PREFIX}.{dotted}"


def batch_reward(score: Callable[..., Any]) -> Callable[..., list[float | None]]:
    """A batch reward over ``score`` for code that calls rewards itself (thub's backends use
    :data:`per_completion` by import string)."""
    check_scorer(score)

    def reward(prompts: Sequence[Any], completions: Sequence[Any], ground_truth: Sequence[Any] | None = None,
               **columns: Any) -> list[float | None]:
        return score_batch(score, prompts, completions, ground_truth, **columns)
    return reward


__all__ = ["DEFAULT_DATA_SOURCE", "PREFIX", "SIGNATURE", "batch_reward", "check_scorer", "per_completion",
           "reward_target", "score_batch"]
