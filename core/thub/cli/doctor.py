"""``thub doctor`` (find what is broken in this environment, with fixes) and ``thub env``.

Both commands import neither torch nor any training library unless a check that needs it runs
(checks tagged ``slow``), or ``thub env`` reports on torch.
"""

from __future__ import annotations

import sys
import time

import click

from thub.ui.output import JSON_SCHEMA_VERSION, console, emit_json

EXAMPLES = """
\b
Examples:
  thub doctor                         every check (slow ones last)
  thub doctor --backend trl -o out/   what a `thub train --backend trl` run needs
  thub doctor --config run.yaml       what that run needs (its trackers too)
  thub doctor --tag preflight         only the quick checks `thub train` runs first
  thub doctor core.gpu-memory core.disk
  thub doctor 'core.*' --json         machine-readable report on stdout
  thub doctor --list-checks

Exit codes: 0 no failures, 1 a check failed or crashed (or warned, with --strict),
2 usage error. Docs: docs/doctor.md
"""


@click.command(epilog=EXAMPLES)
@click.argument("check_ids", nargs=-1, metavar="[CHECK_ID|PATTERN]...")
@click.option("--backend", "-b", metavar="NAME",
              help="Run the general checks and those of this backend, as `thub train` would.")
@click.option("--tag", "-t", "tags", multiple=True, metavar="TAG",
              help="Only checks with this tag (repeatable: any of them), e.g. gpu, preflight, security.")
@click.option("--exclude-tag", "exclude_tags", multiple=True, metavar="TAG",
              help="Leave out checks with this tag, e.g. --exclude-tag slow.")
@click.option("--output-dir", "-o", metavar="DIR",
              help="The run's ckpt_output_dir: checked for free space and write access.")
@click.option("--config", "-c", "config", type=click.Path(dir_okay=False), metavar="FILE",
              help="A run's config file (as for `thub train --config`): its trackers are checked as "
                   "`thub train` checks them; its backend and ckpt_output_dir are the defaults of "
                   "--backend and --output-dir.")
@click.option("--strict", is_flag=True, help="Warnings count as failures (exit 1).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--list-checks", is_flag=True, help="List the checks (id, title, tags) and exit.")
@click.option("--timeout", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Per-check time limit, overriding each check's own.")
@click.option("--verbose", "-v", is_flag=True, help="Show details of passing checks and timings.")
def doctor(
    check_ids: tuple[str, ...],
    backend: str | None,
    tags: tuple[str, ...],
    exclude_tags: tuple[str, ...],
    output_dir: str | None,
    config: str | None,
    strict: bool,
    as_json: bool,
    list_checks: bool,
    timeout: float | None,
    verbose: bool,
) -> None:
    """One line per check (✓ ok, ! warning, ✗ failed, – skipped), grouped by the plugin that
    contributed it, then a summary and the copy-pasteable fixes.
    """
    from thub._version import __version__
    from thub.doctor import exit_code, make_context, order_checks, plugin_labels, select_checks
    from thub.doctor.render import render_list, render_report, report_dict
    from thub.manager import get_registry

    registry = get_registry()
    if config is not None:
        from thub.config.resolve import read_config_file

        values = read_config_file(config).values  # a missing or bad file: exit 2, naming file and line
        backend = backend or (str(values["backend"]) if values.get("backend") else None)
        output_dir = output_dir or (str(values["ckpt_output_dir"]) if values.get("ckpt_output_dir") else None)
    if backend is not None:
        # unknown backend -> UsageError naming the install command (exit 2); `TRL` means trl
        backend = registry.backend(backend).name
    specs = select_checks(registry.checks, ids=check_ids, tags=tags, backend=backend)
    if exclude_tags:
        specs = [spec for spec in specs if not spec.tags & set(exclude_tags)]
    specs = order_checks(specs, list(registry.plugins))
    labels = plugin_labels(registry)
    failures = [
        {"name": f.name, "distribution": f.distribution, "version": f.version, "stage": f.stage,
         "error": f.error}
        for f in registry.failures
    ]

    if list_checks:
        if as_json:
            emit_json({
                "schema_version": JSON_SCHEMA_VERSION,
                "checks": [
                    {"id": s.id, "title": s.title, "plugin": s.provenance.plugin,
                     "tags": sorted(s.tags), "backends": sorted(s.backends), "timeout": s.timeout,
                     "docs": s.docs}
                    for s in specs
                ],
            })
        else:
            render_list(specs, labels)
        return

    if not specs:
        raise click.UsageError("no check matches the given ids/tags/backend; see `thub doctor --list-checks`")

    context = make_context(backend=backend, output_dir=output_dir, config=config)
    started = time.perf_counter()
    outcomes = _run_with_progress(specs, context, timeout, show=not as_json)
    duration_ms = (time.perf_counter() - started) * 1000
    code = exit_code(outcomes, strict=strict)

    if as_json:
        emit_json(report_dict(outcomes, exit_code=code, strict=strict, thub_version=__version__,
                              backend=backend, duration_ms=duration_ms, plugin_failures=failures))
    else:
        render_report(outcomes, plugin_labels=labels, verbose=verbose, strict=strict,
                      duration_ms=duration_ms)
    sys.exit(code)


def _run_with_progress(specs, context, timeout, show):  # type: ignore[no-untyped-def]
    """Run the checks; on a terminal, a spinner counts them down (expo shows one only on a TTY)."""
    from thub.doctor import run_checks

    out = console()
    if not show or not out.is_terminal:
        return run_checks(specs, context, timeout=timeout)
    done = 0
    with out.status(f"Running {len(specs)} checks…") as status:
        def on_done(outcome) -> None:  # type: ignore[no-untyped-def]
            nonlocal done
            done += 1
            status.update(f"Running {len(specs)} checks… {done}/{len(specs)} done ({outcome.id})")

        return run_checks(specs, context, timeout=timeout, on_done=on_done)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--no-torch", is_flag=True,
              help="Do not import torch (faster; torch, CUDA and GPU details from torch are left out).")
def env(as_json: bool, no_torch: bool) -> None:
    """thub and plugin versions, Python, platform, training packages, torch/CUDA/GPUs when torch is
    installed, the NVIDIA driver, and the relevant environment variables (THUB_, HF_, CUDA_,
    NCCL_, TORCH, PYTORCH_, WANDB_, MLFLOW_, SLURM_, PET_, VLLM_, RAY_ ...). Variables whose
    name contains TOKEN, SECRET, KEY, PASSWORD (and similar) are shown as <redacted>, and
    credentials inside URLs are stripped. The report goes to stdout: `thub env > env.txt`.
    """
    from thub.doctor.envreport import collect, render_text

    data = collect(include_torch=not no_torch)
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, **data})
        return
    click.echo(render_text(data), nl=False)
