"""``thub checkpoint push DIR --to URI``: publish a verified model folder with its model card."""

from __future__ import annotations

from typing import Any

import click

from thub.cli.checkpoint import dry_run_option, json_option
from thub.errors import UsageError
from thub.launch.choice import DEFAULT_LAUNCHER, LauncherChoice

SUMMARY = ("Push a verified model folder with a model card from its run to the Hub (private unless --public), "
           "an MLflow registry, S3, GCS or a folder; never training state or secrets.")


class _TargetOption(click.Option):
    """``--to``, whose help lists the registered storage schemes' URI shapes (``thub_register_storage``),
    read when the help is shown, not when the command is imported."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from thub.checkpoint.storage import shapes

        self.help = f"{shapes('push')}."
        return super().get_help_record(ctx)


@click.command("push", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", type=click.Path())
@click.option("--to", "to", required=True, metavar="URI", cls=_TargetOption)
@click.option("--public", is_flag=True, help="Make a new Hub repo public (default: private).")
@click.option("--force", is_flag=True, help="Push a folder that has not passed thub checkpoint verify.")
@click.option("--run", "run", default=None, type=click.Path(),
              help="The thub run the model came from, for the card and result.json's push entry "
                   "(default: the run DIR is in).")
@click.option("--launcher", type=LauncherChoice(pushes=True), default=DEFAULT_LAUNCHER, show_default=True,
              help="slurm: submit the push as a CPU job on the cluster profile's push_partition (where the "
                   "network is) instead of pushing from here.")
@click.option("--cluster", default=None, help="With --launcher slurm: the cluster profile (default: local).")
@click.option("--cluster-file", default=None, type=click.Path(), help="With --launcher slurm: extra cluster profiles.")
@click.option("--after", default=None, metavar="JOB_ID",
              help="With --launcher slurm: run after this job succeeded (afterok), e.g. training or "
                   "thub checkpoint consolidate; DIR may not exist yet.")
@click.option("--time", "wall_time", default=None, help="With --launcher slurm: the job's time limit.")
@click.option("--job-dir", default=None, type=click.Path(),
              help="With --launcher slurm: where the job's script and log go (default: --run's directory).")
@json_option
@dry_run_option
def push(directory: str, to: str, public: bool, force: bool, run: str | None, launcher: str, cluster: str | None,
         cluster_file: str | None, after: str | None, wall_time: str | None, job_dir: str | None, as_json: bool,
         dry_run: bool) -> None:
    """Sends every file of DIR but the trainer's resume state (optimizer, scheduler, RNG, trainer
    state), hidden folders, links that leave DIR (never followed) and files that look like secrets by
    name or content (private keys, tokens; each left out is named), plus README.md:
    the model card built from the run. DIR must have passed thub checkpoint verify (the run's
    export record, else verify runs now): exit 2 otherwise, unless --force. Docs: docs/checkpoints.md#push"""
    from thub.checkpoint import push as engine
    from thub.manager import get_registry
    from thub.ui.output import emit_json

    job = get_registry().launcher(launcher).push_job
    if job is not None:  # the push as a job of the launcher's (LauncherSpec.push_job): shown with --dry-run
        from thub.specs import load_object

        load_object(job)(directory, to, public=public, force=force, run=run, cluster=cluster,
                         cluster_file=cluster_file, after=after, time=wall_time, job_dir=job_dir, as_json=as_json,
                         dry_run=dry_run)
        return
    used = [flag for flag, value in (("--cluster", cluster), ("--cluster-file", cluster_file), ("--after", after),
                                     ("--time", wall_time), ("--job-dir", job_dir)) if value]
    if used:
        takers = [name for name, spec in get_registry().launchers.items() if spec.push_job is not None]
        raise UsageError(f"{', '.join(used)}: only with --launcher {' or '.join(takers) or '(none installed)'} "
                         f"(a {launcher} push runs now, here)")
    plan = engine.plan_push(directory, to, public=public, force=force, run=run, dry_run=dry_run)
    if dry_run:
        if as_json:
            emit_json({"schema_version": 1, "dry_run": True, **engine.public_part(plan)})
        else:
            _print(engine.public_part(plan), "would push")
            click.echo("\n--- README.md (the model card) ---\n" + plan["card"])
            click.echo("nothing sent (--dry-run)")
        return
    done = engine.push(plan)
    engine.record(done)
    engine.notify(done)
    if as_json:
        emit_json({"schema_version": 1, "dry_run": False, **done})
    else:
        _print(done, "pushed")


def _print(data: dict[str, Any], verb: str) -> None:
    lines = [f"{verb} {data['source']} to {data['to']}"
             + (f" (revision {data['revision']})" if data.get("revision") else "")
             + (" as a private repo" if data.get("private") else " as a public repo" if data.get("private") is False
                else ""),
             f"  verify: {data['verify']['by']}: "
             + {True: "passed", False: "NOT passed (--force)", None: "runs when pushed"}[data["verify"]["ok"]]]
    lines += [f"  send {f['path']} ({f['bytes']:,} bytes)" for f in data["files"]]
    lines += [f"  send {name} (written by thub)" for name in data["generated"]]
    lines += [f"  left out {s['path']}: {s['why']}" for s in data["skipped"]]
    if data.get("url"):
        lines.append(f"  at {data['url']}")
    click.echo("\n".join(lines))
