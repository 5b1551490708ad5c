"""thub backend ``llamafactory``: registration only. llamafactory and torch are imported in ``runner``.

The plugin registers without LLaMA-Factory installed: its requirements are read from distribution
metadata, and ``thub backends`` / ``thub doctor`` say what to install (a managed environment:
LLaMA-Factory 0.9.5's pins conflict with the trl and mini-trainer backends).
"""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import BackendSpec, hookimpl, translation_hook
from thub_plugin_llamafactory.translate import BACKEND, DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("llamafactory==0.9.5", "transformers>=4.55,<=5.6.0", "datasets>=2.16,<=4.0.0", "torch>=2.4")
INSTALL = "thub install llamafactory --into managed   # its pins conflict with trl 1.16 and mini-trainer"
README = "thub-plugin-llamafactory/README.md"


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="LLaMA-Factory (HF Trainer): sft, lora_sft, continued pretraining (stage pt), dpo, kto; CPU or GPU.",
        algorithms=HONOURED,
        runner="thub_plugin_llamafactory.runner:run",
        # dpo/kto rows LLaMA-Factory's sharegpt preference format cannot hold: refused by every dry run
        check_rows="thub_plugin_llamafactory.preference:check_rows",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=False,
        priority=4,  # below trl (10): chosen only with --backend llamafactory
        defaults=DEFAULTS,
        launcher="torchrun",  # one run_exp per rank; LLaMA-Factory reads torchrun's environment
        docs=README,
    ))


thub_translate_params = translation_hook(BACKEND, translate)
