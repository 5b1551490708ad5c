"""The thub plugin API: every hook a plugin may implement.

Hooks follow the register-callback style of llm and datasette: the core passes a ``register``
function and the plugin calls it once per thing it provides. Registering must import nothing
heavy (no torch, transformers, trl, ...); heavy code is named by import string and loaded only
where training runs. Every hook is documented in ``docs/hooks.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from thub.specs import (
        AlgorithmSpec,
        BackendSpec,
        CheckSpec,
        CommandSpec,
        DataKindSpec,
        DialectSpec,
        EvaluatorSpec,
        LauncherSpec,
        RewardSpec,
        RunEvent,
        StorageSpec,
        TrackerSpec,
    )

hookspec = pluggy.HookspecMarker("thub")
hookimpl = pluggy.HookimplMarker("thub")


@hookspec
def thub_register_algorithms(register: Callable[[AlgorithmSpec], None]) -> None:
    """Register training algorithms (``AlgorithmSpec``: name, summary, parameter model)."""


@hookspec
def thub_register_data_kinds(register: Callable[[DataKindSpec], None]) -> None:
    """Register data kinds (``DataKindSpec``: name, its formats with how a row is recognised,
    validated and normalised, chat template or not, mask preview); core names none itself."""


@hookspec
def thub_register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Register backends (``BackendSpec``: algorithms it runs, parameters it honours, runner)."""


@hookspec(firstresult=True)
def thub_translate_params(algorithm: str, backend: str, params: dict[str, Any]) -> Any | None:
    """Return the backend-native configuration for validated ``params``, or None if not yours.

    The first non-None result wins. A plugin may wrap another's translation with
    ``@hookimpl(wrapper=True)`` and ``result = yield``.
    """


@hookspec
def thub_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    """Register GRPO reward functions by name (``RewardSpec``: name, import string)."""


@hookspec
def thub_register_evaluators(register: Callable[[EvaluatorSpec], None]) -> None:
    """Register evaluation harnesses (``EvaluatorSpec``: name, runner import string, requirements)
    that ``thub eval`` runs on a trained model."""


@hookspec
def thub_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    """Register experiment trackers (``TrackerSpec``: name, the parameters it owns, its package, the
    import strings of its writer and checks, HF Trainer's ``report_to`` name); core names none itself
    (TensorBoard, MLflow and W&B come from ``thub_builtins.trackers``)."""


@hookspec
def thub_register_checks(register: Callable[[CheckSpec], None]) -> None:
    """Register ``thub doctor`` checks (``CheckSpec``: id, title, tags, applies(), run())."""


@hookspec
def thub_register_commands(register: Callable[[CommandSpec], None]) -> None:
    """Register ``thub`` subcommands (``CommandSpec``: name, import string of the click command,
    short help); a command is imported only when it runs."""


@hookspec
def thub_register_storage(register: Callable[[StorageSpec], None]) -> None:
    """Register storage URI schemes (``StorageSpec``: scheme, URI shape, ``push`` and/or ``mirror``,
    driver packages, import string of its push); ``thub checkpoint push --to`` and
    ``checkpoint_storage`` take the registered ones and core names none itself (``hf``, ``mlflow``,
    ``s3``, ``gs`` and ``file`` come from ``thub_builtins.storage``)."""


@hookspec
def thub_register_launchers(register: Callable[[LauncherSpec], None]) -> None:
    """Register launchers (``LauncherSpec``: name, its ``thub train`` options, import strings of
    ``plan``, ``submit``, ``status``, ``cancel``); ``--launcher`` offers the registered ones and
    core names none itself (``local`` and ``slurm`` come from ``thub_builtins.launchers``)."""


@hookspec
def thub_register_dialects(register: Callable[[DialectSpec], None]) -> None:
    """Register parameter dialects (``DialectSpec``: another tool's parameter names, by import
    string of the rules that rename, refuse or translate them into thub's; its Python API names);
    core names none itself (Training Hub's comes from ``thub_builtins.training_hub``)."""


@hookspec
def thub_on_event(event: RunEvent) -> None:
    """Observe a run's lifecycle in the parent process: started, metrics, checkpoint, end."""
