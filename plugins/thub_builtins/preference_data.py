"""thub's preference data kinds, registered like any plugin's (``thub_register_data_kinds``).

Only names and import strings here: the functions live in ``thub_builtins.preference_formats``,
imported when preference data is read.

* ``preference`` (dpo): ``{"prompt": [messages], "chosen": [assistant messages], "rejected":
  [assistant messages]}``, from TRL's paired rows (``preference``) or LLaMA-Factory's ranking
  rows (``sharegpt_preference``);
* ``unpaired_preference`` (kto): ``{"prompt": [messages], "completion": [assistant messages],
  "label": bool}``, from TRL's unpaired rows (``kto``).
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import DataFormatSpec, DataKindSpec

_FUNCTIONS = "thub_builtins.preference_formats"


def _format(name: str, summary: str, priority: int = 0) -> DataFormatSpec:
    return DataFormatSpec(name, f"{_FUNCTIONS}:is_{name}", f"{_FUNCTIONS}:normalise_{name}", summary, priority)


DATA_KINDS = (
    DataKindSpec("preference", "prompt + chosen + rejected",
                 # ranking rows hold `conversations`: recognised before sharegpt chats
                 (_format("preference", "prompt/chosen/rejected", priority=5),
                  _format("sharegpt_preference", "conversations+chosen/rejected", priority=5)),
                 chat_template=True, preview=f"{_FUNCTIONS}:preview", gate=f"{_FUNCTIONS}:gate",
                 expected=f"{_FUNCTIONS}:expected"),
    DataKindSpec("unpaired_preference", "prompt + completion + label",
                 (_format("kto", "prompt/completion/label", priority=5),),
                 chat_template=True, preview=f"{_FUNCTIONS}:preview", gate=f"{_FUNCTIONS}:gate",
                 expected=f"{_FUNCTIONS}:expected"),
)


@hookimpl
def thub_register_data_kinds(register: Callable[[DataKindSpec], None]) -> None:
    for spec in DATA_KINDS:
        register(spec)
