"""thub backend ``axolotl``: registration only. axolotl and torch are imported in ``runner``.

The plugin registers without axolotl installed: requirements are read from distribution
metadata, and ``thub backends`` / ``thub doctor`` say what to install (a managed environment:
axolotl pins transformers, datasets, trl, peft and accelerate exactly).
"""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import BackendSpec, hookimpl, translation_hook
from thub_plugin_axolotl.translate import BACKEND, DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("axolotl>=0.19,<0.22", "transformers", "torch>=2.11,<=2.13")
INSTALL = "thub install axolotl --into managed --gpu   # without a GPU: --extra axolotl instead of --gpu"
README = "thub-plugin-axolotl/README.md"


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name=BACKEND,
        summary="axolotl (HF Trainer): sft, lora_sft, continued pretraining, dpo, kto; CPU or GPU (CPU runs not in "
                "CI).",
        algorithms=HONOURED,
        runner="thub_plugin_axolotl.runner:run",
        # dpo/kto rows whose prompt the chat template does not render as a prefix: refused in the parent
        check_rows="thub_plugin_axolotl.preference:check_rows",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=False,
        priority=3,  # chosen only with --backend axolotl
        defaults=DEFAULTS,
        launcher="torchrun",  # one axolotl do_train per rank; axolotl reads torchrun's environment
        docs=README,
    ))


thub_translate_params = translation_hook(BACKEND, translate)
