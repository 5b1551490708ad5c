"""Selecting and running doctor checks: concurrently, each under its own timeout.

A check is data (:class:`~thub.specs.CheckSpec`); this module turns a list of them into
:class:`Outcome` objects. Whatever a check does, the run goes on: a check that raises, returns
something that is not a :class:`~thub.specs.CheckResult`, or runs past its ``timeout`` becomes an
``error`` outcome (flutter's asyncGuard, expo's try/catch).

Checks run in daemon threads rather than a ``ThreadPoolExecutor``: a thread cannot be killed, and
the executor's workers are joined at interpreter exit, so one check hung on a dead NFS mount
would keep ``thub doctor`` from exiting after it has already reported the timeout.
"""

from __future__ import annotations

import fnmatch
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from thub.errors import UsageError, did_you_mean
from thub.specs import CheckContext, CheckResult, CheckSpec, CheckStatus

#: Display and severity order of statuses (worst last).
STATUSES: tuple[CheckStatus, ...] = ("ok", "skip", "warn", "fail", "error")

#: A check tagged ``slow`` (it imports torch, walks caches, spawns an interpreter) is run and
#: listed after the quick ones of its plugin, as brew does.
SLOW_TAG = "slow"
PREFLIGHT_TAG = "preflight"


@dataclass(frozen=True)
class Outcome:
    """One check's result together with what identifies the check and how long it took."""

    id: str
    title: str
    plugin: str
    tags: tuple[str, ...]
    result: CheckResult
    duration_ms: float

    @property
    def status(self) -> CheckStatus:
        return self.result.status

    def to_dict(self) -> dict[str, object]:
        """The JSON form used by ``thub doctor --json`` (see ``REPORT_SCHEMA``)."""
        return {
            "id": self.id,
            "title": self.title,
            "plugin": self.plugin,
            "tags": list(self.tags),
            "status": self.result.status,
            "summary": self.result.summary,
            "details": list(self.result.details),
            "fix": self.result.fix,
            "docs": self.result.docs,
            "duration_ms": round(self.duration_ms, 1),
        }


def make_context(
    backend: str | None = None,
    output_dir: str | None = None,
    env: Mapping[str, str] | None = None,
    config: str | None = None,
) -> CheckContext:
    """A :class:`CheckContext` holding a snapshot of the environment (``os.environ`` by default).

    Checks read variables from ``context.env`` rather than ``os.environ`` so that a test, or
    ``thub train`` checking the environment its child will get, can hand them another one.
    ``config``: a run's config file, for the checks that look at its parameters (trackers).
    """
    return CheckContext(backend=backend, output_dir=output_dir, env=dict(os.environ if env is None else env),
                        config=config)


def order_checks(checks: Iterable[CheckSpec], plugin_order: Sequence[str] = ()) -> list[CheckSpec]:
    """Group by plugin (in ``plugin_order``, then first-seen), keep registration order, slow last."""
    checks = list(checks)
    rank: dict[str, int] = {name: i for i, name in enumerate(plugin_order)}
    for spec in checks:
        rank.setdefault(spec.provenance.plugin, len(rank))
    position = {id(spec): i for i, spec in enumerate(checks)}
    return sorted(
        checks,
        key=lambda s: (rank[s.provenance.plugin], SLOW_TAG in s.tags, position[id(s)]),
    )


def select_checks(
    checks: Mapping[str, CheckSpec],
    ids: Sequence[str] = (),
    tags: Sequence[str] = (),
    backend: str | None = None,
) -> list[CheckSpec]:
    """The checks a doctor run should consider, in registration order.

    * ``ids``: exact check ids, or shell patterns (``core.*``); an id that matches nothing is a
      :class:`~thub.errors.UsageError` with a did-you-mean (exit code 2).
    * ``tags``: keep checks carrying at least one of them.
    * ``backend``: keep general checks (no ``backends`` declared) and those declared for it.
    """
    selected = list(checks.values())
    if ids:
        wanted: set[str] = set()
        for pattern in ids:
            if any(ch in pattern for ch in "*?["):
                matched = fnmatch.filter(checks, pattern)
            else:
                matched = [pattern] if pattern in checks else []
            if not matched:
                raise UsageError(
                    f"unknown check {pattern!r}{did_you_mean(pattern, checks)}; "
                    "see `thub doctor --list-checks`"
                )
            wanted.update(matched)
        selected = [spec for spec in selected if spec.id in wanted]
    if tags:
        selected = [spec for spec in selected if spec.tags & set(tags)]
    if backend is not None:
        selected = [spec for spec in selected if not spec.backends or backend in spec.backends]
    return selected


def _error(summary: str, details: Iterable[str] = ()) -> CheckResult:
    return CheckResult(
        "error",
        summary,
        tuple(details),
        fix="This is a bug in the check, not in your environment: report it to the plugin's "
        "authors with the output of `thub doctor -v --json` and `thub env`.",
    )


def _crash_result(stage: str, exc: BaseException) -> CheckResult:
    # The innermost frames are where the check went wrong; the runner's own frame is noise.
    frames = traceback.extract_tb(exc.__traceback__)[1:][-3:]
    details = [f"{frame.filename}:{frame.lineno} in {frame.name}: {frame.line or ''}".rstrip(": ")
               for frame in frames]
    return _error(f"check crashed in {stage}: {type(exc).__name__}: {exc}", details)


def _execute(spec: CheckSpec, context: CheckContext) -> CheckResult:
    """Run one check's ``applies`` and ``run``; never raises (except KeyboardInterrupt)."""
    if spec.applies is not None:
        try:
            applies = spec.applies(context)
        except Exception as exc:  # noqa: BLE001 - a broken check must not stop the others
            return _crash_result("applies()", exc)
        if not applies:
            return CheckResult("skip", "not applicable here")
    try:
        result = spec.run(context)
    except Exception as exc:  # noqa: BLE001
        return _crash_result("run()", exc)
    if not isinstance(result, CheckResult):
        return _error(f"check returned {type(result).__name__}, not CheckResult")
    if result.status not in STATUSES:
        return _error(f"check returned unknown status {result.status!r}")
    return result


class _Job:
    def __init__(self, spec: CheckSpec, context: CheckContext, timeout: float, changed: threading.Event) -> None:
        self.spec = spec
        self.changed = changed
        self.timeout = timeout
        self.result: CheckResult | None = None
        self.started = 0.0
        self.duration_ms = 0.0
        self.thread = threading.Thread(
            target=self._run, args=(context,), name=f"thub-check-{spec.id}", daemon=True
        )

    def _run(self, context: CheckContext) -> None:
        start = time.perf_counter()
        result = _execute(self.spec, context)
        self.duration_ms = (time.perf_counter() - start) * 1000
        self.result = result
        self.changed.set()

    def start(self) -> None:
        self.started = time.perf_counter()
        self.thread.start()


def run_checks(
    specs: Sequence[CheckSpec],
    context: CheckContext | None = None,
    *,
    max_workers: int = 8,
    timeout: float | None = None,
    scale: float = 1.0,
    timed_out: Callable[[CheckSpec, float], CheckResult] | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run ``specs`` concurrently; return one :class:`Outcome` per spec, in the given order.

    At most ``max_workers`` checks run at once. Each gets ``spec.timeout`` seconds (or
    ``timeout`` when given, which overrides every spec) times ``scale``, counted from its own
    start; one that is still running then becomes ``timed_out(spec, seconds)`` (default: an
    ``error`` outcome saying so) and is abandoned in its daemon thread.
    ``on_done(outcome)``, when given, is called in this thread as each check finishes
    (for live progress).
    """
    context = context or make_context()
    changed = threading.Event()
    jobs = [_Job(spec, context, (spec.timeout if timeout is None else timeout) * scale, changed) for spec in specs]
    pending = list(jobs)
    running: list[_Job] = []
    outcomes: dict[int, Outcome] = {}

    def finish(job: _Job, result: CheckResult, duration_ms: float) -> None:
        spec = job.spec
        outcome = Outcome(
            id=spec.id,
            title=spec.title,
            plugin=spec.provenance.plugin,
            tags=tuple(sorted(spec.tags)),
            result=result if result.docs or not spec.docs else _with_docs(result, spec.docs),
            duration_ms=duration_ms,
        )
        outcomes[id(job)] = outcome
        if on_done is not None:
            on_done(outcome)

    while pending or running:
        while pending and len(running) < max(1, max_workers):
            job = pending.pop(0)
            job.start()
            running.append(job)
        # Sleep until a check finishes or the nearest deadline passes. Clearing before the scan
        # means a check that finishes during the scan wakes the next wait at once.
        soonest = min(job.started + job.timeout for job in running)
        changed.wait(timeout=max(0.0, soonest - time.perf_counter()))
        changed.clear()
        now = time.perf_counter()
        for job in list(running):
            if job.result is not None:
                running.remove(job)
                finish(job, job.result, job.duration_ms)
            elif now - job.started >= job.timeout:
                running.remove(job)
                late = timed_out(job.spec, job.timeout) if timed_out is not None else _timeout_result(job)
                finish(job, late, (now - job.started) * 1000)
    return [outcomes[id(job)] for job in jobs]


def _timeout_result(job: _Job) -> CheckResult:
    return CheckResult(
        "error",
        f"check timed out after {job.timeout:g} s",
        ("something it probes hangs (nvidia-smi, a network filesystem, a library import) "
         "or the machine is overloaded",),
        fix=f"thub doctor {job.spec.id} -v --timeout {max(60, job.timeout * 4):g}   "
        "# rerun alone with more time",
    )


def _with_docs(result: CheckResult, docs: str) -> CheckResult:
    import dataclasses

    return dataclasses.replace(result, docs=docs)


def counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """``{status: n}`` for every status, plus ``total``."""
    found: dict[str, int] = {status: 0 for status in STATUSES}
    total = 0
    for outcome in outcomes:
        found[outcome.status] += 1
        total += 1
    return {"total": total, **found}


def exit_code(outcomes: Iterable[Outcome], strict: bool = False) -> int:
    """0 when nothing failed, 1 on a ``fail`` or ``error`` (or a ``warn`` when ``strict``)."""
    bad = {"fail", "error", "warn"} if strict else {"fail", "error"}
    return 1 if any(outcome.status in bad for outcome in outcomes) else 0
