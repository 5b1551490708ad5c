"""Hook implementations only: nothing heavy is imported when thub loads this plugin."""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import BackendSpec, DataFormatSpec, DataKindSpec, hookimpl
from thub.specs import AlgorithmSpec

HONOURED = frozenset({"beta", "max_seq_len", "max_steps", "learning_rate", "effective_batch_size", "seed",
                      "logging_steps", "save_steps", "save_final_checkpoint"})


@hookimpl
def thub_register_data_kinds(register: Callable[[DataKindSpec], None]) -> None:
    register(DataKindSpec(
        "pairs", "prompt + better + worse answers",
        (DataFormatSpec("pairs", "thub_plugin_pairs.data:is_pairs", "thub_plugin_pairs.data:normalise_pairs",
                        "prompt/better/worse"),),
        chat_template=True, preview="thub_plugin_pairs.data:preview_pairs"))


@hookimpl
def thub_register_algorithms(register: Callable[[AlgorithmSpec], None]) -> None:
    register(AlgorithmSpec("pairs_dpo", "DPO on better/worse pairs (example outside plugin).",
                           "thub_plugin_pairs.params:PairsParams", data_kinds=("pairs",)))


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name="pairs-trl",
        summary="TRL's DPOTrainer on better/worse pairs (example outside plugin).",
        algorithms={"pairs_dpo": HONOURED},
        runner="thub_plugin_pairs.runner:run",
        translate="thub_plugin_pairs.runner:translate",
        requirements=("trl>=1.16,<2", "datasets>=3"),
        needs_cuda=False,
        defaults={"pairs_dpo": {"learning_rate": 1e-5, "max_seq_len": 256, "effective_batch_size": 2}},
    ))
