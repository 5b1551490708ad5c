"""``thub runs status|logs|cancel|wait RUN_DIR``: a run as the scheduler and its files see it.

Works for every run directory: local runs have only files; a run a scheduler launcher submitted
also has job ids in ``thub_run.json`` (``launch.job_ids``), asked about through the recorded
launcher's ``LauncherSpec`` (``status``, ``cancel``, ``logs``; SLURM: squeue / scontrol / scancel).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from thub.errors import UsageError
from thub.launch import JOB_ENDED as _ENDED
from thub.launch.options import DEFAULT_LAUNCHER
from thub.ui.output import console, emit_json, stdout_console, table


def _run(run_dir: str) -> tuple[Any, dict[str, Any]]:
    from thub.runner.rundir import RunDirectory, read_json

    directory = RunDirectory(Path(run_dir))
    record = read_json(directory.record)
    if record is None:
        raise UsageError(f"{run_dir}: not a thub run directory (no thub_run.json)")
    return directory, record


def _progress(directory: Any) -> dict[str, Any] | None:
    from thub.runner.metrics import is_eval_line, read_metrics

    everything = read_metrics(directory.metrics)
    # an evaluation line (eval_loss, no loss) is not where training is: the last training line is
    lines = [line for line in everything if not is_eval_line(line)]
    if not lines:
        return None
    last, first = lines[-1], lines[0]
    info: dict[str, Any] = {"step": last.get("step"), "max_steps": last.get("max_steps")}
    for key in ("loss", "reward", "mean_reward", "epoch", "learning_rate"):
        if last.get(key) is not None:
            info[key] = last[key]
    evaluations = [line for line in everything if is_eval_line(line)]
    if evaluations:
        info["eval_loss"] = evaluations[-1].get("eval_loss")
        info["eval_step"] = evaluations[-1].get("step")
    if info["max_steps"]:
        info["percent"] = round(100.0 * info["step"] / info["max_steps"], 1)
        done_steps = last["step"] - first.get("step", 0)
        elapsed = last.get("timestamp", 0) - first.get("timestamp", 0)
        if done_steps > 0 and elapsed > 0:
            info["eta_seconds"] = round(elapsed / done_steps * (info["max_steps"] - last["step"]), 1)
    return info


def status_data(run_dir: str) -> dict[str, Any]:
    """Everything ``thub runs status`` shows, as data (``--json``)."""
    from thub.runner.rundir import read_json

    directory, record = _run(run_dir)
    launch = record.get("launch") or {"launcher": DEFAULT_LAUNCHER}
    job_ids = [str(j) for j in launch.get("job_ids") or []]
    jobs = _launcher_call(launch, "status")(directory.path, job_ids) if job_ids else {}
    result = read_json(directory.result)
    status = result["status"] if result else "unknown"
    if not result and job_ids:
        states = [jobs.get(j, {}).get("state", "") for j in job_ids]
        live = [s for s in states if s and s not in _ENDED]
        status = "running" if "RUNNING" in live else "queued" if live else "ended"
    listed = [{"job_id": j, **jobs.get(j, {"state": "UNKNOWN"})} for j in job_ids]
    return {"run_dir": str(directory.path), "algorithm": record.get("algorithm"), "backend": record.get("backend"),
            "launcher": launch.get("launcher", DEFAULT_LAUNCHER), "cluster": launch.get("cluster"), "status": status,
            "jobs": listed, "progress": _progress(directory), "result": result, "trackers": _trackers(directory),
            "steps": (steps := _post_steps(record, result, listed)), "export": _export_step(steps)}


def _launcher_call(launch: dict[str, Any], what: str) -> Any:
    """The recorded launcher's ``what`` (``status``, ``cancel``: a ``LauncherSpec`` import string),
    loaded; a launcher that is not installed, or has no ``what``, is a UsageError."""
    from thub.manager import get_registry
    from thub.specs import load_object

    spec = get_registry().launcher(str(launch.get("launcher") or DEFAULT_LAUNCHER))
    target = getattr(spec, what)
    if target is None:
        raise UsageError(f"launcher {spec.name!r} ({spec.provenance.describe()}) has no {what}")
    return load_object(target)


def _post_steps(record: dict[str, Any], result: dict[str, Any] | None,
                jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's post-run steps (export, eval, push: :data:`thub.runner.poststeps.STEPS`, turned on
    by the recorded parameters), each with its SLURM job (the last jobs of the chain, one per step,
    in order: :func:`thub.launch.slurm.sbatch_commands`) and state, and its outcome (None until the
    step has recorded one)."""
    from thub.runner.poststeps import enabled

    values = {name: entry.get("value") for name, entry in (record.get("parameters") or {}).items()
              if isinstance(entry, dict)}
    steps = enabled(values)
    step_jobs: list[dict[str, Any]] = jobs[-len(steps):] if jobs and len(jobs) > len(steps) else []
    return [{"name": step.name, "param": values[step.param],
             "job_id": step_jobs[i].get("job_id") if step_jobs else None,
             "state": step_jobs[i].get("state") if step_jobs else None, "outcome": step.outcome(result)}
            for i, step in enumerate(steps)]


def _export_step(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The export step (``--export DIR``) as ``runs status --json`` has always shown it (None without one)."""
    for step in steps:
        if step["name"] == "export":
            return {"path": step["param"], "job_id": step["job_id"], "state": step["state"],
                    "outcome": step["outcome"]}
    return None


def _ended(data: dict[str, Any]) -> bool:
    """Whether ``thub runs wait`` is done: the run's jobs have ended (or it has a result and nothing
    runs any more), and every SLURM post-run step has written its outcome or its job ended without
    one (cancelled because training or an earlier step did not succeed, or killed)."""
    jobs, steps = data["jobs"], [s for s in data["steps"] if s["job_id"]]
    if steps:
        return all(s["outcome"] is not None or s["state"] in _ENDED for s in steps)
    if jobs and all(j.get("state") in _ENDED for j in jobs):
        return True
    if not jobs:
        return bool(data["result"])
    # succeeded: the restarts chained after it find the run finished; no need to wait for them to start
    return data["status"] == "succeeded" and not any(j.get("state") in ("RUNNING", "COMPLETING") for j in jobs)


def _step_line(step: dict[str, Any], status: str, earlier_failed: str | None) -> str:
    """A post-run step's outcome in one line (what ``thub train`` prints after the step)."""
    from thub.runner.poststeps import describe

    name, target = step["name"], step["param"] if step["name"] != "eval" else ", ".join(step["param"])
    if step["outcome"] is not None:
        return describe(name, step["outcome"])
    if status != "succeeded":
        return f"{name}: not run: the run's status is {status}"
    if earlier_failed:
        return f"{name}: not run: the {earlier_failed} step failed"
    if step["job_id"]:
        return (f"{name} FAILED: {target}: the {name} job {step['job_id']} ended {step['state']} without "
                f"an outcome (see logs/slurm-{name}-{step['job_id']}.out)")
    return f"{name} FAILED: {target}: result.json has no {name} outcome (the run may still be running it)"


def _step_lines(data: dict[str, Any]) -> list[tuple[bool, str]]:
    """Each post-run step's (succeeded, line), in order."""
    lines, failed = [], None
    for step in data["steps"]:
        ok = bool((step["outcome"] or {}).get("ok"))
        lines.append((ok, _step_line(step, data["status"], failed)))
        if not ok and failed is None:
            failed = step["name"]
    return lines


def _trackers(directory: Any) -> dict[str, Any]:
    from thub.trackers import read_record

    return read_record(directory.path)


@click.group()
def runs() -> None:
    pass


@runs.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(run_dir: str, as_json: bool) -> None:
    """Scheduler state of each job, progress from the metrics file, and the result."""
    data = status_data(run_dir)
    if as_json:
        emit_json(data)
        return
    out = stdout_console()
    out.print(f"[bold]{data['run_dir']}[/bold]: {data['algorithm']} on {data['backend']} "
              f"({data['launcher']}{', ' + data['cluster'] if data['cluster'] else ''}) - {data['status']}",
              highlight=False)
    if data["jobs"]:
        table(None, ["job", "state", "elapsed", "limit", "reason / exit"],
              [[j["job_id"], j.get("state", ""), j.get("elapsed", ""), j.get("time_limit", ""),
                j.get("exit_code") or j.get("reason", "")] for j in data["jobs"]])
    progress = data["progress"]
    if progress:
        parts = [f"step {progress['step']}/{progress.get('max_steps') or '?'}"]
        if "percent" in progress:
            parts.append(f"{progress['percent']}%")
        for key in ("loss", "reward", "mean_reward"):
            if key in progress:
                parts.append(f"{key} {progress[key]:.4g}")
        if isinstance(progress.get("eval_loss"), (int, float)):
            parts.append(f"eval_loss {progress['eval_loss']:.4g} (step {progress.get('eval_step')})")
        if "eta_seconds" in progress:
            parts.append(f"ETA {progress['eta_seconds']:.0f} s")
        out.print("progress: " + ", ".join(parts), highlight=False)
    from thub.trackers import describe

    for name, info in data["trackers"].items():
        out.print(f"tracker: {describe(name, info)}", markup=False, highlight=False)
    if data["result"] and data["result"].get("error"):
        out.print(f"[red]error:[/red] {data['result']['error']}", highlight=False)
    for step, (_ok, line) in zip(data["steps"], _step_lines(data), strict=True):
        pending = step["outcome"] is None and not (step["job_id"] and step["state"] in _ENDED)
        where = f" (job {step['job_id']}: {step['state']})" if step["job_id"] else ""
        out.print(f"{step['name']}: not done yet{where}" if pending and data["status"] != "failed" else line,
                  markup=False, highlight=False)


@runs.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("-n", "--lines", default=50, show_default=True, help="Last N lines of each log.")
@click.option("--all", "whole", is_flag=True, help="Whole logs.")
def logs(run_dir: str, lines: int, whole: bool) -> None:
    """The training log(s) and the scheduler's job output."""
    from thub.manager import get_registry

    directory, _record = _run(run_dir)
    # every registered launcher's job output (a push job may write beside a run of another launcher)
    patterns = dict.fromkeys(pattern for spec in get_registry().launchers.values() for pattern in spec.logs)
    files = sorted(directory.logs.glob("*.log")) + [path for pattern in patterns
                                                    for path in sorted(directory.logs.glob(pattern))]
    if not files:
        raise UsageError(f"{run_dir}: no logs yet")
    for path in files:
        text = path.read_text(errors="replace").splitlines()
        click.echo(f"==> {path} <==")
        click.echo("\n".join(text if whole else text[-lines:]))


@runs.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--dry-run", is_flag=True, help="Show the launcher's cancel command (e.g. scancel); cancel nothing.")
def cancel(run_dir: str, dry_run: bool) -> None:
    """Cancel every job of the run's chain (restarts included)."""
    directory, record = _run(run_dir)
    launch = record.get("launch") or {}
    job_ids = [str(j) for j in launch.get("job_ids") or []]
    if not job_ids:
        raise UsageError(f"{run_dir}: no scheduler jobs recorded (a local run stops with Ctrl-C)")
    command = _launcher_call(launch, "cancel")(directory.path, job_ids, dry_run)
    if dry_run:
        click.echo("$ " + command)
        return
    console().print(f"cancelled {', '.join(job_ids)}", highlight=False)


@runs.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds (exit 124).")
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
def wait(run_dir: str, timeout: float | None, as_json: bool) -> None:
    """Wait until the run's jobs, and its post-run steps (export, eval, push), have ended; exit 0 only
    if the run succeeded and every step it has did too."""
    started = time.time()
    while True:
        data = status_data(run_dir)
        if _ended(data):
            break
        if timeout is not None and time.time() - started > timeout:
            if as_json:
                emit_json(data)
            sys.exit(124)
        time.sleep(1.0)
    lines = _step_lines(data)
    ok = data["status"] == "succeeded" and all(passed for passed, _line in lines)
    if as_json:
        emit_json(data)
    else:
        console().print(f"{data['run_dir']}: {data['status']}", highlight=False)
        for _passed, line in lines:
            console().print(line, markup=False, highlight=False)
    sys.exit(0 if ok else 1)
