"""thub backend ``gepa`` and its algorithm ``gepa`` (GEPA prompt optimisation): registration only.

gepa and litellm are imported in ``runner`` (the optimisation child).
"""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import AlgorithmSpec, BackendSpec, DataFormatSpec, DataKindSpec, hookimpl

# The optimisation library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("gepa>=0.1.1,<0.2", "litellm>=1.71.1")
INSTALL = "thub install gepa --into current  # gepa and litellm; no torch"
_DATA = "thub_plugin_gepa.data"


@hookimpl
def thub_register_data_kinds(register: Callable[[DataKindSpec], None]) -> None:
    register(DataKindSpec(
        "gepa_example", "input + answer",
        (DataFormatSpec("gepa_example", f"{_DATA}:is_example", f"{_DATA}:normalise_example", "input/answer",
                        priority=15),),
        preview=f"{_DATA}:preview_example"))


@hookimpl
def thub_register_algorithms(register: Callable[[AlgorithmSpec], None]) -> None:
    register(AlgorithmSpec(
        "gepa", "GEPA prompt optimisation (gradient-free): evolve a prompt's texts by LLM reflection against an "
        "LLM endpoint, scored on input/answer rows; writes the best prompt, no weights.",
        "thub_plugin_gepa.params:GepaParams", data_kinds=("gepa_example",)))


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    from thub_plugin_gepa.translate import DEFAULTS, HONOURED

    register(BackendSpec(
        name="gepa",
        summary="gepa's optimize(): GEPA prompt optimisation against a litellm model (any OpenAI-compatible "
                "endpoint via api_base); CPU only.",
        algorithms=HONOURED,
        runner="thub_plugin_gepa.runner:run",
        translate="thub_plugin_gepa.translate:translate",
        check_rows="thub_plugin_gepa.translate:check",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=False,
        priority=10,
        defaults=DEFAULTS,
        docs="thub-plugin-gepa/README.md",
    ))
    from thub_plugin_gepa import mlflow_plan

    register(BackendSpec(
        name="mlflow",
        summary="MLflow's optimize_prompts with its GepaPromptOptimizer: gepa on prompts of MLflow's prompt "
                "registry, scored by MLflow scorers (Training Hub's mlflow gepa backend); CPU only.",
        algorithms=mlflow_plan.HONOURED,
        runner="thub_plugin_gepa.mlflow_runner:run",
        translate="thub_plugin_gepa.mlflow_plan:translate",
        check_rows="thub_plugin_gepa.mlflow_plan:check",
        requirements=(*REQUIREMENTS, "mlflow-skinny>=3.5"),
        install="pip install 'gepa>=0.1.1,<0.2' 'litellm>=1.71.1' 'mlflow>=3.5'  # no torch",
        needs_cuda=False,
        priority=0,
        defaults=mlflow_plan.DEFAULTS,
        docs="thub-plugin-gepa/README.md",
    ))
