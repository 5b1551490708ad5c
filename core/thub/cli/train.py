"""``thub train ALGO``: one subcommand per registered algorithm, options generated from its
parameter model (never written by hand)."""

from __future__ import annotations

import sys
from typing import Any

import click

from thub.cli.param_options import AlgorithmGroup, flag_values, honoured_somewhere, option_for
from thub.config.fields import param_infos
from thub.launch.choice import DEFAULT_LAUNCHER, LauncherChoice
from thub.manager import get_registry
from thub.ui.output import console


def _make_command(algorithm: str) -> click.Command:
    registry = get_registry()
    spec = registry.algorithm(algorithm)
    infos = param_infos(spec.load_parameters())
    honoured = honoured_somewhere(registry, algorithm)  # once, not once per parameter

    def callback(**kwargs: Any) -> None:
        control = {k: kwargs.pop(k) for k in ("backend", "config", "overrides", "dry_run", "as_json",
                                              "allow_ignored", "overwrite", "resume", "force_launch")}
        from thub.config.resolve import resolve
        from thub.launch.options import LaunchOptions

        launch = LaunchOptions.pop_from(kwargs)  # --launcher/--cluster/--nodes/...: see thub.launch
        launch.check()
        # --nodes/--gpus-per-node and (local launcher) PET_* are layers of resolve(), as for thub.train()
        resolved = resolve(
            registry,
            algorithm,
            backend=control["backend"],
            config_file=control["config"],
            flags=flag_values(infos, kwargs),
            overrides=list(control["overrides"]),
            allow_ignored=control["allow_ignored"],
            launch=launch,
        )
        for problem in resolved.ignored:
            console().print(f"[yellow]warning:[/yellow] ignored by {resolved.backend.name}: {problem}")
        for note in resolved.notes if not control["dry_run"] else ():  # the dry run's plan lists them
            console().print(f"training-hub name {note}", markup=False)
        _warn_unknown_variables()
        from thub.specs import load_object

        # the launcher's submit (LauncherSpec): the plan (thub.launch.plan), then the dry run or the run;
        # 1 also when training succeeded but a post-run step (export, eval, push) failed
        sys.exit(load_object(launch.spec().submit)(
            resolved, launch, dry_run=control["dry_run"], as_json=control["as_json"], overwrite=control["overwrite"],
            resume=control["resume"], command_line=["thub", *sys.argv[1:]], force_launch=control["force_launch"]))

    params: list[click.Parameter] = [
        click.Option(["--backend", "-b"],
                     help="Backend to run on (default: the best installed one that can run here)."),
        click.Option(["--config", "-c"], type=click.Path(dir_okay=False), help="YAML file of parameters."),
        click.Option(["--set", "overrides"], multiple=True, metavar="KEY=VALUE",
                     help="Override any parameter (highest precedence)."),
        click.Option(["--dry-run"], is_flag=True,
                     help="Show every value with its source and the backend-native config; run nothing."),
        click.Option(["--json", "as_json"], is_flag=True, help="Print the plan (dry run) or result.json on stdout."),
        click.Option(["--allow-ignored"], is_flag=True,
                     help="Warn instead of failing on parameters the backend does not honour."),
        click.Option(["--overwrite"], is_flag=True, help="Reuse a run directory that holds a finished run."),
        click.Option(["--force-launch"], is_flag=True,
                     help="Launch even when preflight checks fail (to see the library's own error)."),
        click.Option(["--resume"], is_flag=True,
                     help="Continue the run in ckpt_output_dir from its latest checkpoint."),
        click.Option(["--launcher"], type=LauncherChoice(), default=None,
                     help=f"{LauncherChoice.describe()} [default: {DEFAULT_LAUNCHER}]"),
        click.Option(["--cluster"],
                     help="Cluster profile for --launcher slurm (see `thub clusters`). [default: local]"),
        click.Option(["--cluster-file"], type=click.Path(dir_okay=False), help="Extra YAML file of cluster profiles."),
        click.Option(["--nodes"], type=click.IntRange(min=1),
                     help="Nodes (sets nnodes; effective_batch_size stays fixed)."),
        click.Option(["--gpus-per-node"], type=click.IntRange(min=1),
                     help="GPUs (processes) per node (sets nproc_per_node)."),
        click.Option(["--time", "time_limit"], metavar="D-HH:MM:SS",
                     help="Wall time of each SLURM job (default: the profile's)."),
        click.Option(["--max-restarts"], type=click.IntRange(min=0),
                     help="Chain K more jobs (afterany) that resume from the latest checkpoint."),
        *(option_for(info, name in honoured) for name, info in infos.items()),
    ]
    return click.Command(
        algorithm,
        params=params,
        callback=callback,
        help=f"{spec.summary}\n\nEvery option can also come from --config, THUB_<NAME> or --set.",
        short_help=spec.summary,
        context_settings={"help_option_names": ["-h", "--help"], "show_default": False},
    )


def _warn_unknown_variables() -> None:
    """A mistyped ``THUB_*`` variable (``THUB_LEARNNG_RATE``) is named, never silently ignored."""
    import os

    from thub.envnames import describe, unknown_variables

    for line in describe(unknown_variables(os.environ)):
        console().print(f"[yellow]warning:[/yellow] {line}", markup=True, highlight=False)


@click.group(cls=AlgorithmGroup, make_command=_make_command, context_settings={"help_option_names": ["-h", "--help"]})
def train() -> None:
    """\b
    Examples:
      thub train sft --backend trl --config examples/configs/sft.yaml
      thub train lora_sft --model-path m --data-path d.jsonl --ckpt-output-dir out --dry-run
    """
