"""thub evaluator ``lmeval``: registration only. lm-eval, torch and transformers are imported by
``runner`` when ``thub eval`` runs."""

from __future__ import annotations

from collections.abc import Callable

from thub.hookspecs import hookimpl
from thub.specs import EvaluatorSpec

# The harness first: its version is what every result records (TaskScore.harness).
REQUIREMENTS = ("lm-eval>=0.4.9,<0.5", "transformers>=4.56", "torch>=2.4", "accelerate>=0.26", "datasets>=2.16")
INSTALL = "thub install lmeval   # --gpu adds lm-eval's vLLM model"
#: Local task files it reads: prompts/answers (or chat rows) as JSONL, a harness task YAML as-is.
TASK_FILES = (".jsonl", ".yaml", ".yml")


@hookimpl
def thub_register_evaluators(register: Callable[[EvaluatorSpec], None]) -> None:
    register(EvaluatorSpec(
        name="lmeval",
        summary="EleutherAI lm-evaluation-harness: its named tasks or local JSONL/YAML tasks; "
                "HF model on CPU/GPU, vLLM on a GPU (--option backend=vllm).",
        runner="thub_plugin_lmeval.runner:evaluate",
        requirements=REQUIREMENTS,
        install=INSTALL,
        task_files=TASK_FILES,
        docs="thub-plugin-lmeval/README.md",
    ))
