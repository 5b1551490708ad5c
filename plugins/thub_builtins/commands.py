"""Built-in ``thub`` commands, registered through ``thub_register_commands`` like a plugin's.

Each is a name, the import string of its click command (in :mod:`thub.cli`, one module per
command, imported only when the command runs) and its one-line help, the one definition of the
command's summary: ``thub --help`` lists it without importing the command, and ``thub NAME
--help`` shows it first (the command's docstring holds only what follows).
"""

from __future__ import annotations

from collections.abc import Callable

from thub import hookimpl
from thub.specs import CommandSpec

COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("train", "thub.cli.train:train",
                "Train: thub train ALGORITHM [--backend B] [--config F] [--PARAM VALUE ...]."),
    CommandSpec("plugins", "thub.cli.listing:plugins",
                "List loaded plugins, what each registered, and plugins that failed to load."),
    CommandSpec("algorithms", "thub.cli.listing:algorithms", "List algorithms and the backends that run them."),
    CommandSpec("backends", "thub.cli.listing:backends",
                "List backends, the algorithms they run and whether they can run here."),
    CommandSpec("config", "thub.cli.config_cmd:config", "Configuration helpers (JSON Schema, YAML template)."),
    CommandSpec("doctor", "thub.cli.doctor:doctor",
                "Check this environment for everything known to break training, with the fix for each."),
    CommandSpec("env", "thub.cli.doctor:env", "Print a copy-paste report of this environment for bug reports."),
    CommandSpec("data", "thub.cli.data:data", "Validate, preview, measure and prepare training data."),
    CommandSpec("runs", "thub.cli.runs:runs",
                "Inspect, follow and cancel runs (local or SLURM) by their run directory."),
    CommandSpec("estimate", "thub.cli.estimate:estimate",
                "Memory per GPU before a run: thub estimate ALGORITHM --model-path PATH [--gpus N] "
                "[--PARAM VALUE ...]."),
    CommandSpec("compare", "thub.cli.compare:compare",
                "Run one config on two or more backends for a few steps and show what differs, side by side."),
    CommandSpec("plot", "thub.cli.plot:plot",
                "Plot loss (or reward, or any metric) against the step for one or more runs."),
    CommandSpec("history", "thub.cli.history:history", "Run history: list runs under a directory, show one, diff two."),
    CommandSpec("install", "thub.cli.install:install", "Install backend plugins and their training libraries."),
    CommandSpec("uninstall", "thub.cli.install:uninstall",
                "Remove a backend: its managed environment, or its plugin from the current environment."),
    CommandSpec("envs", "thub.cli.install:envs", "Managed environments: list, show, remove, export a lock."),
    CommandSpec("checkpoint", "thub.cli.checkpoint:checkpoint",
                "After training: list checkpoints of every layout, consolidate, merge an adapter, verify a model."),
    CommandSpec("eval", "thub.cli.eval:eval_command",
                "Score a run's models (final, checkpoints, base) or a model folder on tasks: thub eval RUN --tasks T."),
    CommandSpec("evaluators", "thub.cli.eval:evaluators",
                "List evaluators (evaluation harnesses), whether each can run here and how to install it."),
    CommandSpec("clusters", "thub.cli.clusters:clusters",
                "List cluster profiles and where each came from; exit 2 if a profile file is invalid."),
)


@hookimpl
def thub_register_commands(register: Callable[[CommandSpec], None]) -> None:
    for spec in COMMANDS:
        register(spec)
