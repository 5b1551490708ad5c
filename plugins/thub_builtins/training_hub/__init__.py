"""Training Hub's dialect, a built-in plugin: its parameter names (``thub_register_dialects``), its
``thub sft|osft|...`` command line (``thub_register_commands``) and its Python API (``thub.sft(...)``
and friends, its callback classes).

Registering imports nothing of it: the rules (:mod:`.rules`, applied by :mod:`.names`), the API
(:mod:`.functions`, :mod:`.api`) and the command line (:mod:`.command`, :mod:`.cli`) are named by
import string and imported only when a run uses Training Hub's names. It uses exactly the hooks a
third-party dialect uses (docs/hooks.md, ``thub_register_dialects``).
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import CommandSpec, DialectSpec

_HERE = __name__
#: Training Hub's `thub` subcommands (its console script has the same name as thub's)
SUBCOMMANDS = ("sft", "osft", "lora-sft", "lora-grpo", "grpo", "gepa", "embedding-sft")
#: the Python API it adds to the ``thub`` package face: functions, then its callback classes
FUNCTIONS = ("sft", "osft", "lora_sft", "grpo", "lora_grpo", "embedding_sft", "gepa")
CLASSES = ("TrainingHubCallback", "TrainingHubContext", "TrainingHubControl")

DIALECT = DialectSpec(
    name="training-hub",
    summary="Training Hub 0.11.2's keywords, its thub.sft(...) API and its `thub sft ...` command line",
    rules=f"{_HERE}.names",
    # thub's own names whose Training Hub values are converted too (rules.RULES' `same` rules with a converter)
    converts=frozenset({"rdzv_id", "checkpoint_storage", "loss_fn"}),
    api={**{name: f"{_HERE}.functions:{name}" for name in FUNCTIONS},
         **{name: f"{_HERE}.api:{name}" for name in CLASSES}},
    api_run=f"{_HERE}.api:api_run",
)


@hookimpl
def thub_register_dialects(register: Callable[[DialectSpec], None]) -> None:
    register(DIALECT)


@hookimpl
def thub_register_commands(register: Callable[[CommandSpec], None]) -> None:
    # one line in `thub --help` lists them all (CommandSpec.group)
    for name in SUBCOMMANDS:
        register(CommandSpec(name, f"{_HERE}.command:{name.replace('-', '_')}",
                             f"Training Hub's `thub {name}` command line, run by thub (thub train "
                             f"{name.replace('-', '_')}).", group="Training Hub's CLI"))
