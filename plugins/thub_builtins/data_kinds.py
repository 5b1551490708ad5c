"""thub's own data kinds, registered like any plugin's (``thub_register_data_kinds``).

Only names and import strings here: the functions live in ``thub_builtins.data_formats``
(recognising and normalising rows) and ``thub_builtins.data_processing`` (tokenizing,
expected counts, preview), imported when data is read.
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import DataFormatSpec, DataKindSpec

_FORMATS = "thub_builtins.data_formats"
_PROCESSING = "thub_builtins.data_processing"


def _format(name: str, summary: str, priority: int = 0) -> DataFormatSpec:
    return DataFormatSpec(name, f"{_FORMATS}:is_{name}", f"{_FORMATS}:normalise_{name}", summary, priority)


def _kind(name: str, summary: str, formats: tuple[DataFormatSpec, ...], *, chat_template: bool = False,
          functions: str | None = None, preview: str | None = None) -> DataKindSpec:
    """A kind whose preview/tokenize/expected are ``data_processing``'s ``*_<functions>``; ``functions=None``:
    none of them but ``preview`` (rows not tokenized ahead, only their number compared)."""
    if functions is None:
        return DataKindSpec(name, summary, formats, chat_template, preview and f"{_PROCESSING}:{preview}")
    return DataKindSpec(name, summary, formats, chat_template, f"{_PROCESSING}:preview_{functions}",
                        f"{_PROCESSING}:tokenize_{functions}", f"{_PROCESSING}:expected_{functions}")


DATA_KINDS = (
    _kind("chat", "messages", (_format("messages", "messages"), _format("sharegpt", "conversations"),
                               _format("alpaca", "instruction/output")), chat_template=True, functions="chat"),
    _kind("document", "document text", (_format("document", "document/text"),), functions="documents"),
    # a prompt with a reference answer may hold `messages`: recognised before the chat formats
    _kind("grpo", "prompt + ground_truth", (_format("grpo", "prompt+ground_truth", priority=10),),
          chat_template=True, preview="preview_prompt"),
    # a tokenized row may hold anything else too: recognised first
    _kind("processed", "input_ids + labels", (_format("processed", "input_ids", priority=20),), functions="processed"),
)


@hookimpl
def thub_register_data_kinds(register: Callable[[DataKindSpec], None]) -> None:
    for spec in DATA_KINDS:
        register(spec)
