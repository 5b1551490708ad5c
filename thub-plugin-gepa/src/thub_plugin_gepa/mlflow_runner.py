"""``mlflow.genai.optimize_prompts`` with ``GepaPromptOptimizer``, run inside thub's supervised child.

Writes under ``RUN_DIR/gepa/``: ``best_prompt.txt`` and ``best_candidate.json`` (the optimised
templates, registered by MLflow as new prompt versions), ``candidates.jsonl`` (every candidate gepa
scored on the validation set, from its callbacks) and ``mlflow_result.json`` (Training Hub's
``result.json`` of this backend: scores and the optimised prompt URIs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thub.backend import RunContext, UsageError, write_text_atomic
from thub_plugin_gepa.mlflow_plan import translate
from thub_plugin_gepa.runner import MetricsCallback, endpoint_environment, endpoint_failures, object_from, prompt_text
from thub_plugin_gepa.translate import load


class CandidateLog:
    """A GEPACallback keeping every candidate scored on the validation set (MLflow's result has none)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def on_valset_evaluated(self, event: Any) -> None:
        self.lines.append({"candidate": int(event["candidate_idx"]), "texts": dict(event["candidate"]),
                           "val_score": float(event["average_score"]),
                           "parents": list(event["parent_ids"]), "best": bool(event["is_best_program"])})


def mlflow_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gepa's input/answer rows in MLflow's evaluation format (Training Hub's conversion)."""
    out = []
    for row in rows:
        inputs: dict[str, Any] = {"input": row["input"]}
        if row.get("additional_context"):
            inputs["additional_context"] = row["additional_context"]
        out.append({"inputs": inputs, "expectations": {"expected_response": row.get("answer", "")}})
    return out


def run(context: RunContext) -> dict[str, Any]:
    """Optimise the registered prompts with MLflow's GEPA optimizer according to ``translate``."""
    plan = translate(context.algorithm, context.params)
    endpoint = endpoint_environment(plan["api_base"])
    from mlflow.genai import load_prompt, optimize_prompts
    from mlflow.genai.optimize.optimizers import GepaPromptOptimizer

    calls = plan["optimize_prompts"]
    for uri in calls["prompt_uris"]:  # Training Hub's seed_candidate is the registered template
        prompt = load_prompt(uri)
        seed = plan["seed_candidate"].get(prompt.name)
        if seed is not None and seed != prompt.template:
            raise UsageError(f"seed_candidate[{prompt.name!r}] is not the template registered as {uri}: register "
                             "that text as a prompt version and name it in prompt_uris")
    kwargs = dict(plan["optimizer"]["gepa_kwargs"])
    for name in ("batch_sampler", "custom_candidate_proposer", "stop_callbacks"):
        if kwargs.get(name) not in (None, "epoch_shuffled"):
            kwargs[name] = object_from(kwargs[name])
    log, metrics = CandidateLog(), MetricsCallback(context)
    kwargs["callbacks"] = [*(object_from(n) for n in kwargs.get("callbacks") or ()), metrics, log]
    stop = kwargs.get("stop_callbacks")
    kwargs["stop_callbacks"] = [*([stop] if stop else []), lambda _state: context.stop_requested]
    optimizer = GepaPromptOptimizer(reflection_model=plan["optimizer"]["reflection_model"],
                                    max_metric_calls=plan["optimizer"]["max_metric_calls"],
                                    display_progress_bar=plan["optimizer"]["display_progress_bar"],
                                    gepa_kwargs=kwargs)
    rows = [dict(row) for row in context.rows()]
    with endpoint_failures(endpoint):
        result = optimize_prompts(
            predict_fn=load(calls["predict_fn"]), train_data=mlflow_rows(rows), prompt_uris=calls["prompt_uris"],
            optimizer=optimizer, scorers=[object_from(s) for s in calls["scorers"]] if calls["scorers"] else None,
            aggregation=load(calls["aggregation"]) if calls["aggregation"] else None,
            enable_tracking=calls["enable_tracking"])
    if context.stop_requested:
        return {"interrupted": True, "final_checkpoint": None}
    folder = Path(plan["outputs"])
    folder.mkdir(parents=True, exist_ok=True)
    best = {p.name: p.template for p in result.optimized_prompts}
    write_text_atomic(folder / "best_prompt.txt", prompt_text(best))
    write_text_atomic(folder / "best_candidate.json", json.dumps(best, indent=2) + "\n")
    write_text_atomic(folder / "candidates.jsonl", "".join(json.dumps(line) + "\n" for line in log.lines))
    record = {"optimizer_name": result.optimizer_name, "initial_eval_score": result.initial_eval_score,
              "final_eval_score": result.final_eval_score,
              "initial_eval_score_per_scorer": result.initial_eval_score_per_scorer,
              "final_eval_score_per_scorer": result.final_eval_score_per_scorer,
              "optimized_prompt_uris": [p.uri for p in result.optimized_prompts]}
    write_text_atomic(folder / "mlflow_result.json", json.dumps(record, indent=2, default=str) + "\n")
    summary = {"best_score": result.final_eval_score, "seed_score": result.initial_eval_score,
               "candidates": len(log.lines), "optimized_prompt_uris": record["optimized_prompt_uris"],
               "best_prompt": str(folder / "best_prompt.txt"), "train_examples": len(rows)}
    return {"final_checkpoint": None, "summary": {k: v for k, v in summary.items() if v is not None}}
