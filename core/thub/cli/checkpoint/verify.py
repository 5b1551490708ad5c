"""``thub checkpoint verify DIR [--base MODEL] [--source SRC]``: check a model before serving or uploading it."""

from __future__ import annotations

import click

from thub.cli.checkpoint import dry_run_option, emit, json_option
from thub.errors import ThubError

SUMMARY = ("Verify an HF model folder: self-contained, complete, config, shapes, finite weights, tokenizer and "
           "chat template as the base's, logits as the source's.")


@click.command("verify", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", type=click.Path())
@click.option("--base", default=None, help="The model whose tokenizer and chat template it must have "
                                           "(default: a merge output's base, or the run's training input).")
@click.option("--source", default=None, help="What it was made from, for the logits check: an adapter, an HF "
                                             "model or a sharded checkpoint (default: a merge output's adapter).")
@json_option
@dry_run_option
def verify(directory: str, base: str | None, source: str | None, as_json: bool, dry_run: bool) -> None:
    """Loads on the CPU (shapes on the meta device), one tensor at a time for the finite check.
    Exit 1 with the first failing check; --json lists every check. The logits tolerance is
    docs/checkpoints.md's (printed with the check)."""
    from thub.checkpoint.verify import plan_verify
    from thub.checkpoint.verify import verify as run_checks
    from thub.ui.output import emit_json, stdout_console, table

    if dry_run:
        plan = plan_verify(directory, base, source)
        tolerance = plan["tolerance"]
        emit(plan, f"would check {plan['model']} ({plan['dtype']}): {', '.join(plan['checks'])}; tokenizer against "
                   f"{plan['base'] or '(no base: skipped)'}; logits against {plan['source'] or '(no source: skipped)'} "
                   f"within {tolerance['value']:g} ({tolerance['metric']}); nothing loaded (--dry-run)",
             as_json=as_json, dry_run=True)
        return
    report = run_checks(directory, base, source)
    if as_json:
        emit_json({"schema_version": 1, "dry_run": False, **report})
    else:
        marks = {True: "ok", False: "FAILED", None: "skipped"}
        rows = [[c["check"], marks[c["ok"]], c["message"]] for c in report["checks"]]
        table(None, ["check", "result", "detail"], rows)
    if report["failed"]:
        raise ThubError(f"{directory}: check {report['failed']['check']} failed: {report['failed']['message']}")
    if not as_json:
        stdout_console().print(f"{directory}: verified")
