"""Start and supervise a training child; turn whatever happens into one honest result.

The parent validates, locks the run directory (one live run per directory) and writes
``thub_run.json`` (:mod:`thub.runner.prepare`), starts the child (``python -m thub.runner.child``
or torchrun) so that it dies with us, follows the metrics stream for progress, events and
divergence, forwards the first SIGINT/SIGTERM so the backend checkpoints and stops (a second one
stops it at once), stops a child that hangs after writing its result, and writes the final
``result.json`` atomically. A signal before the first training step of the attempt stops at
once: there is nothing to checkpoint yet (:class:`RunSignals`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thub.config.resolve import ResolvedConfig
from thub.errors import Interrupted, ThubError
from thub.manager import get_registry
from thub.redact import child_environment
from thub.runner import lifeline, logsink
from thub.runner.batching import world_size
from thub.runner.lock import RunLock
from thub.runner.metrics import DivergenceWatch, MetricsTail, read_metrics
from thub.runner.prepare import prepared_run
from thub.runner.progress import Progress
from thub.runner.result import write_result
from thub.runner.rootcause import disk_full_cause, killed_by_signal_cause, peak_rss_kib, read_section, root_cause
from thub.runner.rundir import RunDirectory, read_json
from thub.runner.signals import RunSignals, early_reason, forward_job_control, nothing_written
from thub.specs import END_KINDS, RunEvent
from thub.surface import option

if TYPE_CHECKING:
    from thub.launch.plan import Plan
    from thub.runner.mirror import Mirror

POLL_SECONDS = 0.2


def _divergence_steps(values: dict[str, Any]) -> int:
    """``divergence_steps`` of the run; an algorithm whose parameters lack it gets its default."""
    if values.get("divergence_steps") is not None:
        return int(values["divergence_steps"])
    from thub.params import BaseParams

    return int(BaseParams.model_fields["divergence_steps"].default)


def _grace_seconds() -> float:
    """How long a child may linger after writing its result (THUB_EXIT_GRACE, default 30 s)."""
    return float(os.environ.get("THUB_EXIT_GRACE", "30"))


def child_command(resolved: ResolvedConfig, run_dir: RunDirectory) -> list[str]:
    """The command that starts the backend: one process, or torchrun for several."""
    python = resolved.backend.python or sys.executable
    params = resolved.values()
    child = ["-m", "thub.runner.child", str(run_dir.path)]
    if resolved.backend.launcher != "torchrun" or world_size(params) == 1:
        return [python, *child]
    from thub.launch.torchrun import torchrun_args

    return [python, "-m", "torch.distributed.run", *torchrun_args(params), *child]


def _plan(resolved: ResolvedConfig) -> Plan:
    """The plan every dry run shows (:func:`thub.launch.plan.plan_for`: the data gate, the
    translation), before anything is written or started (bad input: exit 2); the rows it
    validated are kept in the run directory (:func:`thub.runner.prepare.prepared_run`) for the
    child's ``context.rows()``."""
    from thub.launch.plan import plan_for

    return plan_for(resolved)


def _preflight(resolved: ResolvedConfig, force: bool = False) -> None:
    """Run the backend's preflight doctor checks; a failure stops the launch with its fix
    (with ``force``, it is printed and the launch goes on)."""
    from thub.doctor import blocking, format_problems, preflight
    from thub.ui.output import console

    outcomes = preflight(resolved.backend.name, resolved.values()["ckpt_output_dir"])
    if blocking(outcomes) and not force:
        raise ThubError("preflight checks failed (details: `thub doctor`):\n" + format_problems(outcomes))
    warnings = format_problems(outcomes)
    if warnings:
        console().print(warnings, markup=False)


class _Supervisor:
    def __init__(self, resolved: ResolvedConfig, run_dir: RunDirectory, progress: Progress, signals: RunSignals,
                 lock: RunLock | None = None) -> None:
        self.resolved = resolved
        self.run_dir = run_dir
        self.progress = progress
        self.lock = lock
        self.registry = get_registry()
        # the lines already there were kept from an earlier attempt (--resume): not this attempt's steps
        self.kept = read_metrics(run_dir.metrics)
        self.metrics = MetricsTail(run_dir.metrics, offset=_size(run_dir.metrics))
        self.events = MetricsTail(run_dir.events)
        self.signals = signals.received
        self.last_metrics: dict[str, Any] | None = self.kept[-1] if self.kept else None
        self.stepped = False  # a training step of this attempt was logged
        self.stopped_early: int | None = None  # the signal that stopped it before its first step
        self.checkpoints: list[dict[str, Any]] = []
        self.divergence = DivergenceWatch(_divergence_steps(resolved.values()))
        self.diverged: str | None = None  # the "diverged at step K" message once it happened
        self.killed_by_signal: int | None = None  # the second signal that stopped the child at once
        self.log_offset = 0  # where this attempt's section of the log starts
        self.peak_kib: int | None = None  # the child's peak resident memory, sampled while it runs
        self.mirror: Mirror | None = None  # checkpoint_storage's upload worker (thub.runner.mirror)

    def fire(self, kind: str, data: dict[str, Any]) -> None:
        try:
            self.registry.fire(RunEvent(kind, str(self.run_dir.path), self.resolved.algorithm.name,  # type: ignore[arg-type]
                                        self.resolved.backend.name, data))
        except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
            # an observer plugin must not end the supervisor (and orphan or lose the run)
            print(f"thub: an event hook raised {type(exc).__name__} on the {kind} event; ignored",
                  file=sys.stderr)

    def _pump(self) -> None:
        for line in self.metrics.poll():
            self.last_metrics = line
            self.stepped = True
            self.progress.update(line)
            self.fire("metrics", line)
            if self.diverged is None:
                self.diverged = self.divergence.update(line)
        for event in self.events.poll():
            self.checkpoints.append({"path": event["path"], "step": event["step"]})
            self.fire("checkpoint", {"path": event["path"], "step": event["step"]})
            if self.mirror is not None:  # queued for upload beside training: never blocks this loop
                self.mirror.offer(event["path"], event["step"])

    def _start_log_section(self) -> None:
        """Note where this attempt starts in the (appended) log, and mark it for readers."""
        log = self.run_dir.log_file
        self.log_offset = log.stat().st_size if log.exists() else 0
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            with os.fdopen(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as handle:
                handle.write(f"==== thub: attempt started {stamp} (pid {os.getpid()}) ====\n".encode())
        except OSError:
            pass  # a full disk: the failure is reported from the filesystem, not from this line

    def _forward(self, pid: int) -> None:
        """Act on a new signal: before the first step, stop at once (nothing to checkpoint yet);
        after it, ask for checkpoint-and-stop; a second one (even one that came within the same
        poll interval) stops it now."""
        self._pump()  # the steps logged until now decide which
        if len(self.signals) >= 2:
            self.killed_by_signal = self.signals[-1]
            _signal_group(pid, signal.SIGKILL)
        elif not self.stepped:
            self.stopped_early = self.signals[0]
            _signal_group(pid, signal.SIGKILL)
        else:
            _signal_group(pid, signal.SIGTERM)

    def run(self, command: list[str]) -> tuple[int | None, bool]:
        """Run the child to its end; returns (exit code, whether it had to be stopped).

        A signal that came before the child was started starts none (exit code None)."""
        self._start_log_section()
        if self.signals:
            self.stopped_early = self.signals[0]
            return None, False
        env = dict(os.environ, PYTHONUNBUFFERED="1", THUB_RUN_DIR=str(self.run_dir.path))
        env.update(child_environment(self.run_dir.path))  # the real values of redacted parameters
        env[lifeline.PARENT_ENV] = str(os.getpid())
        # the parent-liveness pipe (thub.runner.lifeline): the child reads EOF once we are gone
        read_end, write_end = os.pipe()
        pass_fds = [read_end]
        if "torch.distributed.run" not in command:
            env[lifeline.PIPE_ENV] = str(read_end)  # torchrun's workers would not inherit it
        if self.lock is not None and self.lock.fd is not None:
            pass_fds.append(self.lock.fd)  # the child holds the run directory's lock with us
        stopped = False
        # the child's output reaches the log through thub.redact (a library's "?token=..." never does)
        sink = logsink.start(self.run_dir.log_file, env)
        assert sink.stdin is not None
        try:
            with sink.stdin as log:
                # Own session: a terminal's Ctrl-C reaches only us, and we forward it once.
                child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, pass_fds=pass_fds,
                                         preexec_fn=lifeline.death_signal_preexec())
                log.close()  # the child holds the pipe now: the sink ends when the child's side closes
                restore_job_control = forward_job_control(child.pid)  # Ctrl-Z stops the training too
                os.close(read_end)  # the child has its copy; ours would keep the pipe open for nothing
                read_end = -1
                if self.lock is not None:
                    self.lock.set_child(child.pid)
                forwarded = 0
                result_seen: float | None = None
                diverged_since: float | None = None
                while child.poll() is None:
                    self._pump()
                    self.peak_kib = peak_rss_kib(child.pid) or self.peak_kib
                    if len(self.signals) > forwarded:
                        forwarded = len(self.signals)
                        self._forward(child.pid)
                    if self.diverged and diverged_since is None:
                        diverged_since = time.time()
                        _signal_group(child.pid, signal.SIGTERM)
                    elif diverged_since is not None and time.time() - diverged_since > _grace_seconds():
                        _signal_group(child.pid, signal.SIGKILL)
                    if result_seen is None and self.run_dir.result.exists():
                        result_seen = time.time()
                    if result_seen is not None and time.time() - result_seen > _grace_seconds():
                        stopped = True
                        _signal_group(child.pid, signal.SIGTERM)
                        try:
                            child.wait(5)
                        except subprocess.TimeoutExpired:
                            _signal_group(child.pid, signal.SIGKILL)
                        break
                    time.sleep(POLL_SECONDS)
                code = child.wait()
                restore_job_control()
                logsink.finish(sink)  # every line is in the log before its root cause is read
                self._pump()
        finally:
            logsink.finish(sink)
            os.close(write_end)  # (the child also sees EOF if we die before this)
            if read_end >= 0:
                os.close(read_end)  # Popen failed
        return code, stopped


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def run_training(
    resolved: ResolvedConfig,
    *,
    overwrite: bool = False,
    resume: bool = False,
    command_line: list[str] | None = None,
    quiet_json: bool = False,
    force_launch: bool = False,
    plan: Plan | None = None,
) -> dict[str, Any]:
    """Run one training job to its end and return the content of ``result.json``.

    ``force_launch`` launches despite failing preflight checks, so that the library's own
    failure (e.g. a CUDA call on a CPU machine) is what the result reports. The run directory
    is locked from before it is touched until the run ends: a second process exits 2. ``plan``:
    the run's plan (:func:`thub.launch.plan.plan_for`) where the caller built it already (``thub
    compare`` plans every backend first); else it is built here, before anything is written.
    """
    params = resolved.values()
    run_dir = RunDirectory(Path(params["ckpt_output_dir"]))
    created = not run_dir.path.exists()
    started = time.time()
    # SIGINT/SIGTERM: until the first step, stop at once (thub.runner.signals)
    with RunSignals() as signals:
        try:
            result = _launch(resolved, run_dir, signals, overwrite=overwrite, resume=resume,
                             command_line=command_line, quiet_json=quiet_json, force_launch=force_launch,
                             plan=plan)
        except Interrupted as stop:
            # prepared_run's result.json where the directory holds the run; else nothing was written
            result = stop.result or nothing_written(resolved, run_dir, stop.signum, started)
            Progress(enabled=not quiet_json).finish(result)
            return result
    if (result.get("built") or {}).get("refused"):
        from thub.runner.built import DataMismatch

        if created:  # stopped before step 1 as bad input: leave nothing behind (a rerun needs no --overwrite)
            import shutil

            shutil.rmtree(run_dir.path, ignore_errors=True)
        raise DataMismatch(result["error"])
    from thub.runner.poststeps import enabled, run_after

    if enabled(params) and result.get("role") != "worker":  # export -> eval -> push (thub.runner.poststeps)
        result = run_after(run_dir.path, result, params, quiet=quiet_json)
    return result


def _launch(resolved: ResolvedConfig, run_dir: RunDirectory, signals: RunSignals, *, overwrite: bool, resume: bool,
            command_line: list[str] | None, quiet_json: bool, force_launch: bool,
            plan: Plan | None = None) -> dict[str, Any]:
    """Plan (bad input: exit 2, nothing written), prepare the directory, supervise the child."""
    data = (plan or _plan(resolved)).data
    params = resolved.values()
    from thub.trackers.check import validate as validate_trackers

    validate_trackers(resolved)  # a missing tracker package or unreachable store: exit 2, nothing written
    from thub.trackers import prepare_launch

    prepare_launch(params, resolved.backend)  # each tracker's once-only setup (a new local store, under its lock)
    _preflight(resolved, force=force_launch)
    from thub.config.model_path import check_model_path

    check_model_path(params)  # a mistyped path, no config.json, no chat template: exit 2, nothing written
    from thub.launch.torchrun import is_head_node

    head = is_head_node()
    # the other nodes of a multi-node job (PET_NODE_RANK > 0) share node 0's directory: not theirs to lock
    with prepared_run(resolved, run_dir, data, overwrite=overwrite, resume=resume,
                      command_line=command_line or ["thub.api"], head=head) as prepared:
        # under Kubeflow / plain multi-node (PET_* set), only node 0 owns result.json
        return supervise(resolved, run_dir, child_command(resolved, run_dir), command_line=command_line,
                         resume_from=prepared.resume_from, quiet_json=quiet_json, head=head, lock=prepared.lock,
                         signals=signals)


def _refused(run_dir: RunDirectory) -> str | None:
    """The message of a data mismatch that stopped the run before step 1, if that is what happened."""
    from thub.runner.built import read_built

    built = read_built(run_dir.path)
    return str(built.get("message")) if built and built.get("refused") else None


def _drop_incomplete_checkpoints(run_dir: RunDirectory, since: float) -> list[str]:
    """Remove the half-written checkpoints this attempt left (after a full disk: they can never
    be resumed from, and the space they hold is what result.json needs). Only folders written
    since the attempt started: an older foreign ``checkpoint-N`` is not ours to delete."""
    import shutil

    _found, skipped = run_dir.resume_point()
    removed = []
    for path, _problem in skipped:
        try:
            if path.stat().st_mtime < since:
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    return removed


def supervise(
    resolved: ResolvedConfig,
    run_dir: RunDirectory,
    command: list[str],
    *,
    command_line: list[str] | None = None,
    resume_from: str | None = None,
    quiet_json: bool = False,
    head: bool = True,
    lock: RunLock | None = None,
    signals: RunSignals | None = None,
) -> dict[str, Any]:
    """Run ``command`` for a prepared run directory and write ``result.json``.

    Also used by a scheduler's node worker (thub.launch.worker). ``head=False`` is a node that
    does not own the run's result (other nodes of a multi-node job): a clean exit without a
    result of its own is then success, and it writes nothing, so it never clobbers the head's.
    ``lock`` is the run directory's lock, handed on to the child. ``signals``: the run's
    handler (:func:`run_training` installs it at the start); without one, it is installed here.
    """
    with contextlib.nullcontext(signals) if signals is not None else RunSignals() as handler:
        handler.follow()  # from here until result.json is written, a signal is recorded and acted on
        return _supervise(resolved, run_dir, command, handler, command_line=command_line, resume_from=resume_from,
                          quiet_json=quiet_json, head=head, lock=lock)


def _supervise(resolved: ResolvedConfig, run_dir: RunDirectory, command: list[str], signals: RunSignals, *,
               command_line: list[str] | None, resume_from: str | None, quiet_json: bool, head: bool,
               lock: RunLock | None) -> dict[str, Any]:
    progress = Progress(enabled=not quiet_json)
    supervisor = _Supervisor(resolved, run_dir, progress, signals, lock)
    started = time.time()
    storage = resolved.values().get("checkpoint_storage") if head else None
    if storage:
        from thub.runner.mirror import Mirror

        # an earlier attempt's events (--resume) are read again from the file's start: not offered twice
        supervisor.mirror = Mirror(storage, run_dir.path, skip=len(read_metrics(run_dir.events)))
    supervisor.fire("started", {"resume_from": resume_from, "command": command_line})
    with progress:
        progress.kept(supervisor.kept)  # the steps an earlier attempt trained, said once: not shown as trained now
        code, stopped = supervisor.run(command)
    mirrored = supervisor.mirror.finish() if supervisor.mirror is not None else None  # bounded wait, reported

    result = read_json(run_dir.result)
    if not head:
        # a worker node: the run's result belongs to the node that holds rank 0; never clobber it
        return {"status": "succeeded" if code == 0 else "failed", "role": "worker", "exit_code": code}
    saved = result is not None and result.get("status") == "succeeded"
    base = {"algorithm": resolved.algorithm.name, "backend": resolved.backend.name, "exit_code": code}
    if supervisor.stopped_early is not None and not saved:
        result = {**base, "status": "interrupted", "reason": early_reason(supervisor.stopped_early, resume_from),
                  "final_checkpoint": None}
        removed = _drop_incomplete_checkpoints(run_dir, started)  # (none before a first step; never one left)
        if removed:
            result["note"] = f"removed the half-written {', '.join(removed)}"
    elif supervisor.diverged:
        # thub stopped it (checkpoint and stop): the child's own exit is clean, the run is not
        result = {**base, "status": "failed", "error": supervisor.diverged, "root_cause": [supervisor.diverged],
                  "final_checkpoint": None, "exit_code": code if code not in (0, None) else 1,
                  "note": f"stopped by thub after the divergence; the training process exited with code {code}"}
    elif result is None and (refusal := _refused(run_dir)):
        # the library built other data than thub validated, measured before step 1 (thub.runner.built);
        # whatever the exit code (torchrun's, when rank 0 stopped for it)
        result = {**base, "status": "failed", "error": refusal, "root_cause": [refusal], "final_checkpoint": None}
    elif supervisor.killed_by_signal is not None and not saved:
        name = signal.Signals(supervisor.killed_by_signal).name
        reason = (f"stopped at once by a second signal ({name}); no checkpoint was saved for the stop: "
                  f"{option('resume')} continues from the latest complete one")
        result = {**base, "status": "interrupted", "reason": reason, "final_checkpoint": None}
    elif saved and result is not None and code not in (0, None) and not stopped:
        # the model and result were saved; a crash while the library shuts down (vLLM/Ray
        # teardown) does not undo that
        result["note"] = f"the child exited with code {code} after writing its result; see {run_dir.log_file}"
    elif result is None or code not in (0, None) and not stopped:
        section = read_section(run_dir.log_file, supervisor.log_offset)  # this attempt's log, read once
        cause = root_cause(section)
        full = disk_full_cause(section, run_dir.path) if code not in (0, None) else None
        # killed by a signal nobody here sent (the OOM killer): that is the cause, not the last log line
        killed = (killed_by_signal_cause(code, supervisor.peak_kib)
                  if code is not None and code < 0 and not supervisor.signals else None)
        headline = full or killed
        cause = [headline] if headline else cause
        result = {
            **base,
            "status": "interrupted" if supervisor.signals and result is None and code in (-15, 143) else "failed",
            "error": cause[-1] if cause else f"child exited with code {code}",
            "root_cause": cause,
        }
        if full:
            removed = _drop_incomplete_checkpoints(run_dir, started)
            if removed:
                result["note"] = f"removed the half-written {', '.join(removed)} (the disk is full)"
    assert result is not None  # every branch above leaves one (for the type checker)
    if stopped:
        result["note"] = f"the child did not exit within {_grace_seconds():g} s of writing its result and was stopped"
    if result["status"] == "interrupted" and not result.get("reason") and supervisor.signals:
        name = signal.Signals(supervisor.signals[0]).name
        result["reason"] = f"stopped by {name} (checkpoint and stop at the next step boundary)"
    if mirrored is not None and supervisor.mirror is not None:  # failed uploads: warnings, never a failed run
        result["checkpoint_storage"] = mirrored
        result["warnings"] = [*(result.get("warnings") or []), *supervisor.mirror.warnings]
    # the run's fields, redaction and the atomic write: shared with an orphaned child (thub.runner.child)
    result = write_result(run_dir, result, started=started, model_path=resolved.values()["model_path"],
                          checkpoints=supervisor.checkpoints, last_metrics=supervisor.last_metrics)
    # the end event is named after the run's status, as result.json says it
    supervisor.fire(result["status"] if result["status"] in END_KINDS else "failed", result)
    progress.finish(result)
    return result
