"""thub parameters -> ``mlflow.genai.optimize_prompts`` with MLflow's ``GepaPromptOptimizer`` (Training Hub's
``mlflow`` gepa backend). Pure Python: no mlflow or gepa import.
"""

from __future__ import annotations

from typing import Any

from thub.backend import UsageError

#: forwarded to ``gepa.optimize`` through the optimizer's ``gepa_kwargs`` (Training Hub's list)
FORWARDED = ("reflection_minibatch_size", "candidate_selection_strategy", "frontier_type", "skip_perfect_score",
             "perfect_score", "seed", "batch_sampler", "reflection_prompt_template", "custom_candidate_proposer",
             "module_selector", "use_merge", "stop_callbacks", "callbacks", "cache_evaluation", "raise_on_exception")
#: what ``gepa`` on the mlflow backend reads (anything else a user sets is refused before the run)
HONOURED: dict[str, frozenset[str]] = {"gepa": frozenset({
    *FORWARDED, "seed_candidate", "task_lm", "reflection_lm", "api_base", "max_metric_calls", "display_progress_bar",
    "predict_fn", "prompt_uris", "scorers", "aggregation", "enable_tracking", "gepa_kwargs", "output_dir",
})}
#: Training Hub's mlflow backend: a budget of 100 metric calls, gepa's seed
DEFAULTS: dict[str, dict[str, Any]] = {"gepa": {"max_metric_calls": 100, "seed": 0}}


def mlflow_uri(model: str) -> str:
    """litellm's ``provider/model`` as MLflow's ``provider:/model`` (Training Hub's ``_to_mlflow_uri``)."""
    if ":/" in model or "/" not in model:
        return model
    provider, name = model.split("/", 1)
    return f"{provider}:/{name}"


def translate(algorithm: str, params: Any) -> dict[str, Any]:
    """The plan of one ``gepa`` run on the mlflow backend (JSON-serialisable)."""
    out = str(params["ckpt_output_dir"])
    params["output_dir"]  # noqa: B018 - read: Training Hub's name of the run directory (the validator mapped it)
    if not params["predict_fn"] or not params["prompt_uris"]:
        raise UsageError("the mlflow backend needs predict_fn (a function using MLflow registered prompts) and "
                         "prompt_uris (e.g. prompts:/qa/1)")
    gepa_kwargs = dict(params["gepa_kwargs"] or {})
    for name in FORWARDED:
        if params[name] is not None:
            gepa_kwargs.setdefault(name, params[name])
    task_lm, reflection_lm = params["task_lm"], params["reflection_lm"]
    reflection = reflection_lm or task_lm  # Training Hub: the task model reflects when no other is named
    return {
        "optimizer": {"reflection_model": mlflow_uri(reflection), "max_metric_calls": params["max_metric_calls"],
                      "display_progress_bar": bool(params["display_progress_bar"]), "gepa_kwargs": gepa_kwargs},
        "optimize_prompts": {"predict_fn": params["predict_fn"], "prompt_uris": list(params["prompt_uris"]),
                             "scorers": params["scorers"], "aggregation": params["aggregation"],
                             "enable_tracking": True if params["enable_tracking"] is None
                             else params["enable_tracking"]},
        # each prompt's registered template is checked against its seed_candidate text before the run
        "seed_candidate": dict(params["seed_candidate"]),
        "api_base": params["api_base"],
        "outputs": f"{out}/gepa",
    }


def check(algorithm: str, rows: Any, locations: Any, params: Any) -> None:
    """The endpoint answers and every import string imports (as on the gepa backend)."""
    from thub_plugin_gepa.endpoint import probe
    from thub_plugin_gepa.translate import load

    if params["api_base"]:
        why = probe(params["api_base"])
        if why is not None:
            raise UsageError(f"api_base {params['api_base']!r}: {why}")
    names = [(n, params[n]) for n in ("predict_fn", "aggregation", "batch_sampler", "custom_candidate_proposer",
                                      "stop_callbacks") if params[n] not in (None, "epoch_shuffled")]
    names += [(field, n) for field in ("callbacks", "scorers") for n in params[field] or ()]
    for field, name in names:
        try:
            load(name)
        except Exception as exc:  # noqa: BLE001 - any import failure of the user's module is bad input
            raise UsageError(f"{field} {name!r}: cannot be imported ({type(exc).__name__}: {exc})") from None
