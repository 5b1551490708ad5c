"""The ``local`` launcher's submit: the run starts now, on this machine (moved from ``thub.cli.train``)."""

from __future__ import annotations

from typing import Any


def submit(resolved: Any, options: Any, *, dry_run: bool, as_json: bool, overwrite: bool, resume: bool,
           command_line: list[str], force_launch: bool = False) -> int:
    """Show the plan (``dry_run``) or train here (:func:`thub.runner.run_training`); the exit code."""
    from thub.ui.output import console, emit_json

    if dry_run:
        # the plan the real run builds (thub.launch.plan): the data gate without a tokenizer,
        # the translation; bad input: exit 2, nothing written
        from thub.launch.plan import plan_for
        from thub.ui.plan import show_plan

        show_plan(plan_for(resolved, options).as_dict(), as_json)
        return 0
    from thub.runner import run_training

    if not as_json:
        console().print(f"[bold]{resolved.algorithm.name}[/bold] on backend [bold]{resolved.backend.name}[/bold] "
                        f"({resolved.backend_reason}) -> {resolved.values()['ckpt_output_dir']}")
    result = run_training(resolved, overwrite=overwrite, resume=resume, command_line=command_line,
                          quiet_json=as_json, force_launch=force_launch)
    if as_json:
        emit_json(result)
    from thub.runner.poststeps import exit_code

    return exit_code(result)  # 1 also when training succeeded but a post-run step (export, eval, push) failed
