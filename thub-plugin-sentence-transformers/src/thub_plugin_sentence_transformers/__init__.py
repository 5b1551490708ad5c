"""thub backend ``sentence-transformers`` and its algorithm ``embedding_sft``: registration only.

sentence-transformers, transformers and torch are imported in ``runner`` (the training child).
"""

from __future__ import annotations

from collections.abc import Callable

from thub.backend import AlgorithmSpec, BackendSpec, DataFormatSpec, DataKindSpec, hookimpl, translation_hook
from thub_plugin_sentence_transformers.translate import DEFAULTS, HONOURED, translate

# The training library first (its version is recorded in thub_run.json).
REQUIREMENTS = ("sentence-transformers>=5.4,<7", "transformers>=4.56", "datasets>=3", "torch>=2.4")
INSTALL = "thub install sentence-transformers --into current"
_DATA = "thub_plugin_sentence_transformers.data"


@hookimpl
def thub_register_data_kinds(register: Callable[[DataKindSpec], None]) -> None:
    # before `document` (which also reads a `text` column): a row with a label is a labelled text
    register(DataKindSpec(
        "text_label", "text + label",
        (DataFormatSpec("text_label", f"{_DATA}:is_text_label", f"{_DATA}:normalise_text_label", "text/label",
                        priority=15),),
        preview=f"{_DATA}:preview_text_label", expected=f"{_DATA}:expected_text_label"))


@hookimpl
def thub_register_algorithms(register: Callable[[AlgorithmSpec], None]) -> None:
    register(AlgorithmSpec(
        "embedding_sft", "Contrastive fine-tuning of a sentence embedding model on text/label rows (classifiers, "
        "routers); losses batch_all_triplet, batch_hard_triplet, mnrl, or a custom one.",
        "thub_plugin_sentence_transformers.params:EmbeddingSFTParams", data_kinds=("text_label",)))


@hookimpl
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    register(BackendSpec(
        name="sentence-transformers",
        summary="sentence-transformers' SentenceTransformerTrainer: embedding_sft on CPU or GPU.",
        algorithms=HONOURED,
        runner="thub_plugin_sentence_transformers.runner:run",
        requirements=REQUIREMENTS,
        install=INSTALL,
        needs_cuda=False,
        priority=10,
        defaults=DEFAULTS,
        docs="thub-plugin-sentence-transformers/README.md",
    ))


thub_translate_params = translation_hook("sentence-transformers", translate)
