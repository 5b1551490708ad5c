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
