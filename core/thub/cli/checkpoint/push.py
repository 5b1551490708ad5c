"""``thub checkpoint push DIR --to URI``: publish a verified model folder with its model card."""

from __future__ import annotations

from typing import Any

import click

from thub.cli.checkpoint import dry_run_option, json_option

SUMMARY = ("Push a verified model folder with a model card from its run to the Hub (private unless --public), "
           "an MLflow registry, S3, GCS or a folder; never training state or secrets.")


@click.command("push", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", type=click.Path())
@click.option("--to", "to", required=True, metavar="URI",
              help="hf://ORG/NAME[@BRANCH], mlflow://MODEL_NAME[?tracking_uri=URI], s3://BUCKET/PREFIX, "
                   "gs://BUCKET/PREFIX or file:///PATH.")
@click.option("--public", is_flag=True, help="Make a new Hub repo public (default: private).")
@click.option("--force", is_flag=True, help="Push a folder that has not passed thub checkpoint verify.")
@click.option("--run", "run", default=None, type=click.Path(),
              help="The thub run the model came from, for the card and result.json's push entry "
                   "(default: the run DIR is in).")
@json_option
@dry_run_option
def push(directory: str, to: str, public: bool, force: bool, run: str | None, as_json: bool, dry_run: bool) -> None:
    """Sends every file of DIR but the trainer's resume state (optimizer, scheduler, RNG, trainer
    state), hidden folders and files that look like secrets (each left out is named), plus README.md:
    the model card built from the run. DIR must have passed thub checkpoint verify (the run's
    export record, else verify runs now): exit 2 otherwise, unless --force. Docs: docs/checkpoints.md#push"""
    from thub.checkpoint import push as engine
    from thub.ui.output import emit_json

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
