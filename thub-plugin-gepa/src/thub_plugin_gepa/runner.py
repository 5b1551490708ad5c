"""The gepa optimisation, run inside thub's supervised child process.

gepa and litellm are imported here only. The run writes, under ``RUN_DIR/gepa/``:
``best_prompt.txt`` (the best candidate's text), ``best_candidate.json`` (all its components),
``candidates.jsonl`` (every accepted candidate: index, texts, validation score, parents, metric
calls when found) and ``gepa_result.json`` (gepa's ``GEPAResult.to_dict()``); one metrics line per
candidate evaluated on the validation set goes to ``training_metrics.jsonl``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.backend import RunContext, UsageError, write_text_atomic
from thub_plugin_gepa.translate import load, translate

if TYPE_CHECKING:
    from thub_plugin_gepa.client import Endpoint


class MetricsCallback:
    """A GEPACallback writing one thub metrics line per candidate scored on the validation set:
    ``step`` (the candidate's number, the seed is 1), ``reward`` (its mean validation score),
    ``best_reward`` (the best so far), ``candidate``, ``iteration`` (gepa's, the seed's is 0) and
    ``val_examples`` (how many validation examples scored it)."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.best: float | None = None

    def on_valset_evaluated(self, event: Any) -> None:
        score = float(event["average_score"])
        self.best = score if self.best is None else max(self.best, score)
        self.context.metrics.log(int(event["candidate_idx"]) + 1, max_steps=None, epoch=None, reward=score,
                                 best_reward=self.best, candidate=int(event["candidate_idx"]),
                                 iteration=int(event["iteration"]), val_examples=int(event["num_examples_evaluated"]))


def object_from(name: str) -> Any:
    """The imported object; a class is built with no arguments (an adapter, a callback)."""
    obj = load(name)
    return obj() if isinstance(obj, type) else obj


def prompt_text(candidate: dict[str, str]) -> str:
    if len(candidate) == 1:
        return next(iter(candidate.values())).rstrip("\n") + "\n"
    return "".join(f"[{name}]\n{text.rstrip()}\n\n" for name, text in candidate.items())


def write_outputs(folder: Path, result: Any) -> dict[str, Any]:
    """The files of the run's ``gepa/`` folder; returns ``result.json``'s summary."""
    folder.mkdir(parents=True, exist_ok=True)
    best = dict(result.best_candidate)
    write_text_atomic(folder / "best_prompt.txt", prompt_text(best))
    write_text_atomic(folder / "best_candidate.json", json.dumps(best, indent=2) + "\n")
    lines = []
    for i, candidate in enumerate(result.candidates):
        lines.append(json.dumps({
            "candidate": i, "texts": dict(candidate), "val_score": result.val_aggregate_scores[i],
            "parents": list(result.parents[i]), "discovered_at_metric_calls": result.discovery_eval_counts[i],
            "best": i == result.best_idx}) + "\n")
    write_text_atomic(folder / "candidates.jsonl", "".join(lines))
    write_text_atomic(folder / "gepa_result.json", json.dumps(result.to_dict(), indent=2, default=str) + "\n")
    return {
        "best_score": result.val_aggregate_scores[result.best_idx],
        "seed_score": result.val_aggregate_scores[0],
        "best_candidate": result.best_idx,
        "candidates": len(result.candidates),
        "metric_calls": result.total_metric_calls,
        "full_val_evals": result.num_full_val_evals,
        "best_prompt": str(folder / "best_prompt.txt"),
    }


def endpoint_environment(api_base: str | None) -> Endpoint:
    """litellm reads the endpoint from the environment (Training Hub's way: both LMs use it); it needs
    a key even for a local server, and its cost map is read from its own copy, not fetched. Its HTTP
    client is thub's bounded one (:mod:`thub_plugin_gepa.client`), returned."""
    if api_base:
        os.environ["OPENAI_API_BASE"] = api_base
        os.environ.setdefault("OPENAI_API_KEY", "dummy")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from thub_plugin_gepa.client import install

    return install(api_base)


@contextmanager
def endpoint_failures(endpoint: Endpoint) -> Iterator[None]:
    """An error the libraries raise after the endpoint failed (litellm and gepa wrap it, or trip over
    the missing answer) is that failure: a UsageError naming api_base (exit 2), no traceback."""
    try:
        yield
    except Exception:
        if endpoint.failure is not None:
            raise UsageError(str(endpoint.failure)) from None
        raise
    finally:
        endpoint.close()


def run(context: RunContext) -> dict[str, Any]:
    """Optimise with ``gepa.optimize`` according to ``translate``; return the outcome."""
    plan = translate(context.algorithm, context.params)
    endpoint = endpoint_environment(plan["api_base"])
    import gepa

    kwargs = dict(plan["optimize"])
    for name in plan["objects"]:
        kwargs[name] = [object_from(n) for n in kwargs[name]] if name == "callbacks" else object_from(kwargs[name])
    metrics = MetricsCallback(context)
    kwargs["callbacks"] = [*kwargs.get("callbacks", []), metrics]
    stops = kwargs.get("stop_callbacks")
    # SIGTERM / Ctrl-C: gepa stops after the current step and saves its state in run_dir (--resume)
    kwargs["stop_callbacks"] = [*(stops if isinstance(stops, list) else [stops] if stops else []),
                                lambda _state: context.stop_requested]
    trainset = [dict(row) for row in context.rows()]
    with endpoint_failures(endpoint):
        result = gepa.optimize(trainset=trainset, valset=plan["valset"], **kwargs)
    if context.stop_requested:
        return {"interrupted": True, "final_checkpoint": None}
    summary = write_outputs(Path(plan["outputs"]), result)
    summary["train_examples"] = len(trainset)
    return {"final_checkpoint": None, "summary": summary}
