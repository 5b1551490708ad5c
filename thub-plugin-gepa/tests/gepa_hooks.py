"""Objects the tests name by import string (the optimisation child imports them from PYTHONPATH)."""

from __future__ import annotations

from gepa.adapters.default_adapter.default_adapter import EvaluationResult


def by_length(data: dict, response: str) -> EvaluationResult:
    """A score that moves with the tiny model's answer (its length), so candidates can be accepted."""
    return EvaluationResult(score=min(len(response), 60) / 60, feedback=f"answer {data['answer']!r}",
                            objective_scores=None)


class Counter:
    """A GEPACallback class (built with no arguments): writes a marker per candidate scored."""

    def on_valset_evaluated(self, event: dict) -> None:
        import os

        with open(os.environ["GEPA_TEST_MARKER"], "a") as out:
            out.write(f"{event['candidate_idx']}\n")


def predict(input: str, additional_context: dict | None = None) -> str:  # noqa: A002 - MLflow passes inputs by name
    """An MLflow predict_fn: the registered prompt ``qa`` formatted and sent to the task LM (the test endpoint)."""
    import litellm
    import mlflow

    prompt = mlflow.genai.load_prompt("prompts:/qa/1")
    messages = [{"role": "user", "content": prompt.format(question=input)}]
    reply = litellm.completion(model="openai/tiny", messages=messages)
    return str(reply.choices[0].message.content)


def _length(outputs: str) -> float:
    return min(len(outputs or ""), 60) / 60


def _scorer():  # built on import, so that a module without mlflow still imports
    from mlflow.genai.scorers import scorer

    return scorer(name="length")(_length)


try:
    length = _scorer()
except ImportError:  # pragma: no cover - mlflow not installed
    length = None
