"""Make a run directory ready under its lock: the sequence every launch shares.

:func:`prepared_run` locks the directory (one live run per directory), prepares it (``--overwrite``
/ ``--resume``), writes ``thub_run.json`` (:func:`build_record`) and keeps the validated rows for
the child. A local run (:mod:`thub.runner.supervisor`) and a SLURM submission
(:mod:`thub.launch.submit`) both start here.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement

from thub._version import __version__
from thub.config.resolve import ResolvedConfig
from thub.errors import Interrupted, ThubError, UsageError
from thub.redact import record_values, redact
from thub.runner.lock import RunLock
from thub.runner.metrics import read_metrics, truncate_after
from thub.runner.rundir import RunDirectory, new_run_id, read_json, write_json_atomic
from thub.runner.signals import stopped_while_preparing
from thub.selection import installed_version

if TYPE_CHECKING:
    from thub.data.training import TrainingData


def build_record(resolved: ResolvedConfig, command_line: list[str], resume_from: str | None) -> dict[str, Any]:
    backend = resolved.backend
    # the first requirement is the training library by convention (e.g. "trl>=1.16")
    library_name = Requirement(backend.requirements[0]).name if backend.requirements else None
    values = resolved.values()
    record: dict[str, Any] = {
        "schema_version": 1,
        "algorithm": resolved.algorithm.name,
        "backend": backend.name,
        "runner": backend.runner,
        # record_values: each value as stored (redacted under its name); this process keeps the
        # real values for the child (thub.redact)
        "parameters": {k: {"value": v, "source": resolved.sources[k]}
                       for k, v in record_values(values, values["ckpt_output_dir"]).items()},
        "ignored": resolved.ignored,
        "versions": {
            "thub": __version__,
            "plugin": {"name": backend.provenance.distribution, "version": backend.provenance.version},
            "library": {"name": library_name, "version": installed_version(library_name)},
            "python": sys.version.split()[0],
        },
        "command_line": command_line,
        # the folder relative paths in the parameters mean something in (thub eval --base, the model card)
        "working_dir": os.getcwd(),
        "resume_from": resume_from,
        "created": time.time(),
    }
    from thub.envs.record import environment_record

    # which environment runs the child (a managed one: its interpreter, library and lock)
    record["environment"] = environment = environment_record(backend)
    if environment["kind"] == "managed":
        record["versions"]["library"] = environment["library"] or record["versions"]["library"]
        record["versions"]["python"] = environment["python_version"] or record["versions"]["python"]
    return redact(record)  # once, over everything: an ignored value or the command line may quote a secret



def _keep_data(data: TrainingData, run_dir: RunDirectory, params: dict[str, Any]) -> None:
    """The validated rows where the child reads them back (thub_data/): validated once per run;
    with them what thub trains of them, per example (thub.data.expected), for the child to
    compare with what the library builds."""
    from thub.data.expected import save_expected
    from thub.data.training import DATA_DIR, save_training_data

    save_training_data(data, run_dir.path / DATA_DIR)
    save_expected(params, data, run_dir.path / DATA_DIR)



@dataclass
class PreparedRun:
    """A run directory made ready under its lock (what :func:`prepared_run` yields)."""

    record: dict[str, Any]  # as written to thub_run.json
    resume_from: str | None
    lock: RunLock | None  # None on a node that does not own the directory


@contextlib.contextmanager
def prepared_run(resolved: ResolvedConfig, run_dir: RunDirectory, data: TrainingData, *, overwrite: bool,
                 resume: bool, command_line: list[str], head: bool = True,
                 launch: dict[str, Any] | None = None) -> Iterator[PreparedRun]:
    """Lock the run directory, prepare it, write ``thub_run.json`` and keep the validated rows:
    the sequence every launch shares (a local run; a SLURM submission, :mod:`thub.launch.submit`).

    The lock is held until the ``with`` block ends (a local run: until it ends; a submission:
    until the jobs are queued); a live run in the directory refuses us (exit 2), as does a
    finished one unless ``overwrite``, and a directory made only to be refused is removed again.
    ``resume`` starts from the newest complete checkpoint. ``launch`` becomes the record's
    ``launch`` section before the first write. ``head=False`` (a node of a multi-node job other
    than node 0) takes no lock.
    """
    run_dir.check_not_foreign()  # before the lock file is created in someone else's directory
    created = not run_dir.path.exists()
    try:
        with RunLock(run_dir.path) if head else contextlib.nullcontext() as lock:
            resume_from = None
            try:
                try:
                    user_entries = run_dir.prepare(overwrite=overwrite, resume=resume)  # what --overwrite must keep
                except UsageError:
                    if created:  # refused: leave no directory behind that we made only to lock it
                        import shutil

                        shutil.rmtree(run_dir.path, ignore_errors=True)
                    raise
                # the run's id (its checkpoint_storage prefix): made once, kept by --resume (None: an
                # older thub started the run, thub.runner.rundir.new_run_id)
                run_id = run_dir.run_id() if resume else new_run_id(run_dir.path)
                trail: dict[str, Any] = {}  # where --resume took its checkpoint from, what it passed over
                resume_from = _resume_point(run_dir, resolved, run_id, trail) if resume else None
                record = build_record(resolved, command_line, resume_from)
                if run_id is not None:
                    record["run_id"] = run_id
                record.update(trail)
                record["user_entries"] = user_entries
                # the rows validated now, kept in thub_data/: every attempt re-checks them (data.trained_on)
                record["data"] = {"key": data.key, "rows": len(data.rows), "files": data.files,
                                  "sha256": data.sha256, "validated": time.time()}
                if launch is not None:
                    record["launch"] = launch
                try:
                    write_json_atomic(run_dir.record, record)
                    _keep_data(data, run_dir, resolved.values())  # the child reads these rows back (thub_data/)
                except OSError as exc:  # a full disk before the run began: nothing of it may refuse a rerun
                    _unprepare(run_dir, created, resumed=resume)
                    raise ThubError(f"cannot prepare {run_dir.path}: {exc.strerror or exc}; nothing was kept "
                                    "there (free space, or choose another ckpt_output_dir)") from None
                yield PreparedRun(record, resume_from, lock)
            except Interrupted as stop:  # a signal before the supervisor took over (thub.runner.signals)
                stop.result = stopped_while_preparing(resolved, run_dir, created, stop.signum, resume_from)
                raise
    except Interrupted:
        if created and not run_dir.record.exists():  # stopped while taking the lock: nothing of ours stays
            import shutil

            shutil.rmtree(run_dir.path, ignore_errors=True)
        raise


def _unprepare(run_dir: RunDirectory, created: bool, resumed: bool) -> None:
    """Undo a preparation that failed (a full disk): the directory made for it, or what it wrote
    (a resumed run keeps its record: its checkpoints are still there to resume from)."""
    import shutil

    if created:
        shutil.rmtree(run_dir.path, ignore_errors=True)
        return
    from thub.data.training import DATA_DIR

    shutil.rmtree(run_dir.path / DATA_DIR, ignore_errors=True)
    if not resumed:
        run_dir.record.unlink(missing_ok=True)


def _resume_point(run_dir: RunDirectory, resolved: ResolvedConfig, run_id: str | None,
                  trail: dict[str, Any]) -> str | None:
    """The newest complete checkpoint, saying which newer ones were passed over and where the
    run continues ("resuming from checkpoint-9 (step 9 of 32)"); with ``checkpoint_storage`` the
    newest complete one local or remote (this run's, ``run_id``), a remote one fetched into
    ``checkpoints/`` first and said (:mod:`thub.runner.mirror_resume`). ``trail`` gets the record's
    ``resume_skipped`` (each copy passed over, with why) and ``resume_fetched_from``. The metrics
    lines logged after it (all of them without a checkpoint) are dropped, so each step is logged once."""
    from thub.ui.output import console

    found, skipped = run_dir.resume_point()
    out = console()
    passed = [{"checkpoint": str(path), "reason": problem} for path, problem in skipped]
    for path, problem in skipped:
        out.print(f"warning: {path} is not a complete checkpoint ({problem}); skipped", markup=False,
                  highlight=False)
    storage = resolved.values().get("checkpoint_storage")
    origin = ""
    if storage:  # the newest complete one, local or remote (thub.runner.mirror_resume)
        from thub.runner.mirror_resume import newer_remote

        def say(line: str) -> None:
            out.print(line, markup=False, highlight=False)

        fetched = newer_remote(storage, run_dir.checkpoints, found[1] if found else None, say=say, run_id=run_id,
                               skipped=passed)
        if fetched is not None:
            local = f"the newest local one is {found[0].name}" if found else "there is no complete local one"
            origin = f", fetched from {fetched[2]} ({local})"
            trail["resume_fetched_from"] = fetched[2]
            found = (fetched[0], fetched[1])
        else:
            origin = " (local; checkpoint_storage holds none newer)" if found else ""
    if passed:
        trail["resume_skipped"] = passed
    if found:
        total = _total_steps(run_dir, found, resolved.values())
        newest = ", the newest complete checkpoint" if skipped and not origin.startswith(",") else ""
        out.print(f"resuming from {found[0].name} (step {found[1]}{f' of {total}' if total else ''}){newest}"
                  f"{origin}", markup=False, highlight=False)
        truncate_after(run_dir.metrics, found[1])
        return str(found[0])
    if any(path.is_dir() for path in _entries(run_dir.checkpoints)):
        # another layout (mini-trainer's full_state_checkpoints/, verl's global_step_N/): the backend's to find
        out.print(f"no complete {run_dir.checkpoints.name}/checkpoint-N: {resolved.backend.name} "
                  f"resumes from its own checkpoints in {run_dir.checkpoints} if it has one",
                  markup=False, highlight=False)
    else:
        out.print("no complete checkpoint: starting from step 1", markup=False, highlight=False)
    truncate_after(run_dir.metrics, 0)
    return None


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _total_steps(run_dir: RunDirectory, found: tuple[Path, int], params: dict[str, Any]) -> int | None:
    """The run's step count as this attempt will see it: ``max_steps`` when set, else what the
    kept metrics line of the checkpoint's step or the checkpoint's ``trainer_state.json`` says."""
    if isinstance(params.get("max_steps"), int) and params["max_steps"] > 0:
        return int(params["max_steps"])
    for line in read_metrics(run_dir.metrics):
        if line.get("step") == found[1] and isinstance(line.get("max_steps"), int):
            return int(line["max_steps"])
    state = read_json(found[0] / "trainer_state.json") or {}
    return state["max_steps"] if isinstance(state.get("max_steps"), int) and state["max_steps"] > 0 else None
