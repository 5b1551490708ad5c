"""The parameters of ``gepa``: thub's shared ones plus Training Hub 0.11.2's gepa keywords, under
Training Hub's names (``thub gepa ...`` passes them as they are), each defined once here.

A Python object (evaluator, adapter, sampler, proposer, stop condition, callbacks) reaches the
optimisation process by import string, ``module:name`` or Training Hub's dotted ``module.name``; a
module-level function or class given as an object is turned into its import string.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from thub.backend import BaseParams, param

#: the parameters that name a Python object (imported in the optimisation process)
OBJECT_FIELDS = ("evaluator", "adapter", "batch_sampler", "custom_candidate_proposer", "stop_callbacks",
                 "predict_fn", "aggregation")
#: Training Hub's MLflow backend's own keywords (``mlflow.genai.optimize_prompts``)
MLFLOW_FIELDS = ("predict_fn", "prompt_uris", "scorers", "aggregation", "enable_tracking", "gepa_kwargs")


def import_string(value: Any) -> Any:
    """``module:qualname`` of a module-level object; strings and None as they are."""
    if value is None or isinstance(value, str):
        return value
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        raise ValueError("thub runs it in the optimisation process, which imports it by name: define it at the "
                         "top level of a module on PYTHONPATH and pass 'module:name'")
    return f"{module}:{qualname}"


def _check_examples(rows: Any, name: str) -> None:
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("input"), str) or not isinstance(row.get("answer"), str):
            raise ValueError(f"{name}[{i}]: expected an object with string 'input' and 'answer' (and an optional "
                             "'additional_context' mapping)")


class GepaParams(BaseParams):
    """GEPA prompt optimisation: evolve the texts of ``seed_candidate`` against an LLM endpoint."""

    # gepa optimises prompts for an LLM behind an API: there are no weights to load (None: the core's
    # model-path check has nothing to check; set, it is refused as not honoured)
    model_path: str | None = param(  # type: ignore[assignment]
        group="core", help="Not used by gepa (no weights): the model is task_lm.")
    output_dir: str | None = param(
        path=True, group="core",
        help="Training Hub's name for ckpt_output_dir (the run directory): give one of the two.")
    seed_candidate: dict[str, str] = param(
        ..., group="gepa", min_length=1,
        help='The prompt to optimise: component name -> text, e.g. {"system_prompt": "Answer the question."} '
             "(JSON on the command line).")
    task_lm: str | None = param(
        group="gepa", help="The model the prompt is for, as a litellm model string (openai/NAME with api_base for "
                           "an OpenAI-compatible server); required unless an adapter runs the task.")
    reflection_lm: str | None = param(
        group="gepa", help="The model that reflects on failures and proposes new texts (default: task_lm).")
    api_base: str | None = param(
        group="gepa", help="Base URL of an OpenAI-compatible endpoint (e.g. http://localhost:8000/v1) for both LMs; "
                           "checked to answer before anything starts.")
    trainset: list[dict[str, Any]] | None = param(
        group="gepa", help="Training Hub's inline examples: refused, thub reads them from data_path (JSONL rows "
                           "{input, answer, additional_context}, checked with file:line).")
    valset: list[dict[str, Any]] | None = param(
        group="gepa", help="Validation examples (JSON list of {input, answer}); default: the training rows.")
    evaluator: str | None = param(
        group="gepa", help="Scoring function by import string: (data, response) -> (score, feedback, "
                           "objective_scores); default gepa's ContainsAnswerEvaluator.")
    adapter: str | None = param(
        group="gepa", help="A GEPAAdapter (instance, or class built with no arguments) by import string, for your "
                           "own evaluation pipeline (then leave task_lm and evaluator unset).")
    max_metric_calls: int | None = param(
        group="gepa", ge=1, help="Budget: the most example evaluations (gepa typically needs 100-500).")
    candidate_selection_strategy: Literal["pareto", "current_best", "epsilon_greedy", "top_k_pareto"] | None = param(
        group="gepa", help="Which candidate is mutated next (gepa's default: pareto).")
    frontier_type: Literal["instance", "objective", "hybrid", "cartesian"] | None = param(
        group="gepa", help="The Pareto frontier gepa keeps (default: instance).")
    skip_perfect_score: bool | None = param(
        group="gepa", help="Skip reflecting on a minibatch that already scores perfect_score (gepa's default: true).")
    perfect_score: float | None = param(group="gepa", ge=0, help="The score counted as perfect (default 1.0).")
    reflection_minibatch_size: int | None = param(
        group="gepa", ge=1, help="Examples shown to the reflection LM per proposal (gepa's default: 3).")
    run_dir: str | None = param(
        path=True, group="gepa", help="gepa's state and logs (default: RUN_DIR/gepa/state; --resume continues "
                                      "from it).")
    use_wandb: bool | None = param(group="gepa", help="gepa's own Weights & Biases logging.")
    wandb_api_key: str | None = param(group="gepa", help="W&B API key for gepa's logging (prefer WANDB_API_KEY).")
    wandb_init_kwargs: dict[str, Any] | None = param(group="gepa", help="Extra wandb.init arguments (JSON).")
    use_mlflow: bool | None = param(group="gepa", help="gepa's own MLflow logging (mlflow_tracking_uri, "
                                                       "mlflow_experiment_name).")
    batch_sampler: str | None = param(
        group="gepa", help="Minibatch sampler by import string, or 'epoch_shuffled' (gepa's default).")
    reflection_prompt_template: str | dict[str, str] | None = param(
        group="gepa", help="The reflection prompt (with <curr_instructions> and <inputs_outputs_feedback>), or one "
                           "per component (JSON object).")
    custom_candidate_proposer: str | None = param(
        group="gepa", help="Your proposal function by import string, instead of reflection.")
    module_selector: Literal["round_robin", "all"] | None = param(
        group="gepa", help="Which component is mutated: round_robin (gepa's default) or all.")
    use_merge: bool | None = param(group="gepa", help="Also merge candidates from two lineages (default: false).")
    stop_callbacks: str | None = param(
        group="gepa", help="A stop condition by import string: callable(gepa_state) -> bool.")
    callbacks: list[str] | None = param(
        group="gepa", help="GEPACallback objects by import string (a class is built with no arguments).")
    display_progress_bar: bool | None = param(group="gepa", help="gepa's tqdm bar over metric calls.")
    cache_evaluation: bool | None = param(
        group="gepa", help="Reuse the score of a (candidate, example) pair seen before (default: false).")
    raise_on_exception: bool | None = param(
        group="gepa", help="Stop the run on an evaluator/proposer error (gepa's default: true).")
    # Training Hub's mlflow backend (mlflow.genai.optimize_prompts; thub's backend mlflow)
    predict_fn: str | None = param(group="gepa-mlflow", help="MLflow backend: predict function by import string.")
    prompt_uris: list[str] | None = param(group="gepa-mlflow", help="MLflow backend: prompt URIs to optimise.")
    scorers: list[str] | None = param(group="gepa-mlflow",
                                      help="MLflow backend: Scorer objects (e.g. @scorer functions) by import string.")
    aggregation: str | None = param(group="gepa-mlflow", help="MLflow backend: score aggregation by import string.")
    enable_tracking: bool | None = param(group="gepa-mlflow", help="MLflow backend: log to MLflow.")
    gepa_kwargs: dict[str, Any] | None = param(group="gepa-mlflow", help="MLflow backend: gepa.optimize() extras.")

    @model_validator(mode="before")
    @classmethod
    def _training_hub_output_dir(cls, data: Any) -> Any:
        # one run directory: Training Hub's output_dir is thub's ckpt_output_dir
        if isinstance(data, dict) and data.get("output_dir") is not None:
            given = data.get("ckpt_output_dir")
            if given is not None and str(given) != str(data["output_dir"]):
                raise ValueError(f"output_dir {data['output_dir']!r} and ckpt_output_dir {given!r} name two run "
                                 "directories: give one")
            data = {**data, "ckpt_output_dir": data["output_dir"]}
        return data

    @field_validator(*OBJECT_FIELDS, mode="before")
    @classmethod
    def _object_by_name(cls, value: Any) -> Any:
        return import_string(value)

    @field_validator("callbacks", "scorers", mode="before")
    @classmethod
    def _callbacks_by_name(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        return [import_string(v) for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _consistent(self) -> GepaParams:
        if self.model_path is not None:
            raise ValueError(f"model_path {self.model_path!r}: gepa loads no weights; the model is task_lm (a litellm "
                             "model string such as openai/NAME, with api_base for a local server)")
        if self.trainset is not None:
            raise ValueError("trainset: thub reads the examples from data_path: write them one JSON object a line "
                             '({"input": ..., "answer": ...}) and pass data_path')
        if self.valset is not None:
            _check_examples(self.valset, "valset")
        if self.adapter is not None and (self.task_lm is not None or self.evaluator is not None):
            raise ValueError("an adapter runs and scores the task itself: leave task_lm and evaluator unset")
        if self.adapter is None and self.task_lm is None:
            raise ValueError("task_lm is required (a litellm model string such as openai/NAME), unless an adapter "
                             "runs the task")
        if self.max_metric_calls is None and self.stop_callbacks is None:
            raise ValueError("max_metric_calls (or stop_callbacks) is required: gepa needs a budget to stop")
        if self.api_base is not None and not self.api_base.startswith(("http://", "https://")):
            raise ValueError(f"api_base {self.api_base!r}: expected an http:// or https:// URL")
        return self
