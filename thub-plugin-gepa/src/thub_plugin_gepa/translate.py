"""thub parameters -> the ``gepa.optimize`` call. Pure Python: no gepa or litellm import.

The runner calls ``gepa.optimize`` with exactly this plan (import strings resolved there), so
``--dry-run`` shows what will be used. Every honoured parameter is in the README.
"""

from __future__ import annotations

import importlib
from typing import Any

from thub.backend import UsageError
from thub_plugin_gepa.endpoint import probe

#: passed to ``gepa.optimize`` under the same name when set (None: gepa's own default)
OPTIMIZE = ("task_lm", "evaluator", "max_metric_calls", "candidate_selection_strategy", "frontier_type",
            "skip_perfect_score", "perfect_score", "reflection_minibatch_size", "adapter", "use_wandb",
            "wandb_api_key", "wandb_init_kwargs", "use_mlflow", "batch_sampler", "reflection_prompt_template",
            "custom_candidate_proposer", "module_selector", "use_merge", "stop_callbacks", "callbacks",
            "display_progress_bar", "cache_evaluation", "raise_on_exception")
#: the ones naming Python objects (the runner imports them)
OBJECTS = ("evaluator", "adapter", "batch_sampler", "custom_candidate_proposer", "stop_callbacks")

#: what ``gepa`` on this backend reads (anything else a user sets is refused before the run)
HONOURED: dict[str, frozenset[str]] = {"gepa": frozenset({
    *OPTIMIZE, "seed_candidate", "reflection_lm", "api_base", "valset", "seed", "run_dir", "output_dir",
})}
#: Training Hub's gepa leaves the seed to gepa (0)
DEFAULTS: dict[str, dict[str, Any]] = {"gepa": {"seed": 0}}


def translate(algorithm: str, params: Any) -> dict[str, Any]:
    """The plan of one ``gepa`` run (JSON-serialisable)."""
    out = str(params["ckpt_output_dir"])
    params["output_dir"]  # noqa: B018 - read: Training Hub's name of the run directory (the validator mapped it)
    optimize: dict[str, Any] = {name: params[name] for name in OPTIMIZE if params[name] is not None}
    if optimize.get("batch_sampler") == "epoch_shuffled":
        optimize["batch_sampler"] = "epoch_shuffled"  # gepa's own name, not an import string
    optimize["seed_candidate"] = dict(params["seed_candidate"])
    # Training Hub: the reflection model defaults to the task model
    reflection_lm = params["reflection_lm"]
    optimize["reflection_lm"] = reflection_lm or params["task_lm"]
    optimize["seed"] = params["seed"]
    optimize["run_dir"] = params["run_dir"] or f"{out}/gepa/state"
    if params["use_mlflow"]:
        optimize["mlflow_tracking_uri"] = params["mlflow_tracking_uri"]
        optimize["mlflow_experiment_name"] = params["mlflow_experiment_name"]
    return {
        "optimize": optimize,
        "objects": [name for name in OBJECTS if optimize.get(name) not in (None, "epoch_shuffled")]
                   + (["callbacks"] if optimize.get("callbacks") else []),
        "valset": params["valset"],
        "api_base": params["api_base"],
        "outputs": f"{out}/gepa",
    }


def load(name: str) -> Any:
    """The object an import string names: ``module:attr`` or Training Hub's dotted ``module.attr``."""
    if ":" in name:
        module, _, attribute = name.partition(":")
    else:
        module, _, attribute = name.rpartition(".")
    if not module or not attribute:
        raise ImportError(f"{name!r}: expected 'module:name' or 'module.name'")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def check(algorithm: str, rows: Any, locations: Any, params: Any) -> None:
    """Before anything starts (every dry run and run): the endpoint answers as an OpenAI-compatible
    server (:func:`thub_plugin_gepa.endpoint.probe`) and every import string imports; each failure is a
    :class:`UsageError` (exit 2)."""
    if params["api_base"]:
        why = probe(params["api_base"])  # bounded: THUB_GEPA_TIMEOUT, progress on stderr while it waits
        if why is not None:
            raise UsageError(f"api_base {params['api_base']!r}: {why}")
    names = [(n, params[n]) for n in OBJECTS if params[n] not in (None, "epoch_shuffled")]
    names += [("callbacks", c) for c in params["callbacks"] or ()]
    for field, name in names:
        try:
            load(name)
        except Exception as exc:  # noqa: BLE001 - any import failure of the user's module is bad input
            raise UsageError(f"{field} {name!r}: cannot be imported ({type(exc).__name__}: {exc})") from None
