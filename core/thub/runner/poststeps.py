"""The steps after a successful run: ``export`` → ``eval`` → ``push``, one table for every launcher.

:data:`STEPS` is the one definition: each step's parameter (``--export DIR``, ``eval: [tasks]``,
``--push URI``), its ``python -m`` entry point (the SLURM job of the step), the cluster-profile
partition fields it runs on, and where its outcome is recorded in ``result.json``. A local run
runs the enabled steps in order in the parent after training (:func:`run_after`); ``--launcher
slurm`` renders one CPU job per step chained ``afterok`` (:mod:`thub.launch.slurm`), and ``thub
runs wait`` waits for the last and reports each (:mod:`thub.cli.runs`). Either way a step runs
only when training and every earlier step succeeded (a local run records the later ones as not
run; on SLURM their jobs are cancelled by ``--kill-on-invalid-dep``).

- ``export`` (:mod:`thub.checkpoint.export`): outcome ``result.json`` ``export``.
- ``eval`` (:mod:`thub.evaluate`): the export folder when there is one, else the final model,
  scored on the tasks (``eval_base``: the base too); results in ``RUN_DIR/eval/``, the summary in
  ``result.json`` ``eval``, the step's outcome in ``post_run.eval``.
- ``push`` (:mod:`thub.checkpoint.push`): the export folder, else a final model that is an HF
  folder passing verify; private unless ``push_public``; the push in ``result.json`` ``push`` (as
  ``thub checkpoint push`` records it), the step's outcome in ``post_run.push``.

Bad input is refused before training (:func:`plan_steps`: exit 2, nothing written). A failed step
leaves training's status ``succeeded``; ``thub train`` exits 1 (:func:`exit_code`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thub.errors import ThubError, UsageError

#: result.json's entry of the eval and push steps' outcomes (export's is ``export``)
POST_RUN = "post_run"


@dataclass(frozen=True)
class PostStep:
    """One post-run step.

    Attributes:
        name: the step (``export``, ``eval``, ``push``): the SLURM script ``slurm/<name>.sbatch``,
            its log ``logs/slurm-<name>-<job>.out``.
        param: the parameter that turns it on.
        entry: ``python -m`` arguments before ``RUN_DIR`` (the SLURM job's command).
        takes_value: the parameter's value follows ``RUN_DIR`` on the command line (export's DIR).
        partitions: the cluster-profile fields naming its partition, the first set one wins (none
            set: the training partition).
    """

    name: str
    param: str
    entry: tuple[str, ...]
    takes_value: bool
    partitions: tuple[str, ...]

    def outcome(self, result: dict[str, Any] | None) -> dict[str, Any] | None:
        """The step's recorded outcome in ``result`` (None: not recorded yet)."""
        result = result or {}
        found = result.get("export") if self.name == "export" else (result.get(POST_RUN) or {}).get(self.name)
        return found if isinstance(found, dict) else None


STEPS: tuple[PostStep, ...] = (
    PostStep("export", "export", ("thub.checkpoint.export",), True, ("export_partition",)),
    # CPU like the export (the tiny/CI models); a cluster whose evaluation wants GPUs names export_partition so
    PostStep("eval", "eval", ("thub.runner.poststeps", "eval"), False, ("export_partition",)),
    # a login/transfer partition: compute nodes often have no network (issue 29 item 3)
    PostStep("push", "push", ("thub.runner.poststeps", "push"), False, ("push_partition", "export_partition")),
)
BY_NAME = {step.name: step for step in STEPS}


def enabled(values: dict[str, Any]) -> list[PostStep]:
    """The steps ``values`` turns on, in the order they run."""
    return [step for step in STEPS if values.get(step.param)]


# --- before training ------------------------------------------------------------------------------

def _plan_eval(values: dict[str, Any]) -> dict[str, Any]:
    from thub.evaluate.evaluators import check_ready, choose
    from thub.evaluate.tasks import resolve_tasks
    from thub.manager import get_registry

    try:
        spec = choose(get_registry(), None)
        check_ready(spec)
        tasks = resolve_tasks(list(values["eval"]), tuple(spec.task_files))
    except UsageError as exc:
        raise UsageError(f"eval: {str(exc).replace('--tasks ', '', 1)} (nothing was written)") from None
    return {"tasks": [{"name": t.name, "path": t.path} for t in tasks], "evaluator": spec.name,
            "base": bool(values.get("eval_base")),
            "model": "the export folder" if values.get("export") else "the final model"}


def _plan_push(values: dict[str, Any]) -> dict[str, Any]:
    from thub.checkpoint.push import parse_target
    from thub.checkpoint.storage import missing_package, visible_schemes
    from thub.specs import load_object

    uri = str(values["push"])
    try:
        target = parse_target(uri)
    except UsageError as exc:
        raise UsageError(f"push: {str(exc).replace('--to ', '', 1)}") from None
    spec = target.spec
    assert spec is not None  # parse_target sets it
    public = bool(values.get("push_public"))
    if public and not spec.visibility:
        raise UsageError(f"push_public: only an {visible_schemes()} target has a visibility "
                         f"({target.scheme}:// has none)")
    if not values.get("export") and "lora_r" in values:
        # an adapter run's final model is no servable folder: push what export merges
        raise UsageError(f"push {target.shown}: this run saves a LoRA adapter, not a model folder: set export "
                         "(--export DIR) to merge and verify it first; push sends the export folder")
    needs = missing_package(spec)
    if needs:
        raise UsageError(f"push {target.shown}: {target.scheme}:// needs {needs}, which is not installed: "
                         f"python -m pip install {needs}")
    if spec.check:  # the scheme's own refusal before training (mlflow: a tracking URI)
        try:
            load_object(spec.check)(target, values)
        except UsageError as exc:
            raise UsageError(f"push {target.shown}: {exc}") from None
    if spec.local:
        folder = Path(target.location)
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise UsageError(f"push {target.shown}: already holds files; push to a new or empty path "
                             "(nothing was written)")
    return {"to": target.shown, "kind": target.scheme,
            "private": (not public) if spec.visibility else None,
            "source": values.get("export") or "the final model (an HF folder that thub checkpoint verify passes)"}


_PLANNERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"eval": _plan_eval, "push": _plan_push}


def plan_steps(values: dict[str, Any], chained: bool = False) -> dict[str, Any] | None:
    """The ``post_run`` entry of a run's plan: each enabled step after export with what it will do
    (export's own entry is the plan's ``export``); None when none is. Raises UsageError (exit 2)
    for anything that would make a step fail after training. ``chained``: the launcher runs each
    step as a job chained after training (``LauncherSpec.chained_steps``)."""
    entries = {}
    for step in enabled(values):
        if step.name in _PLANNERS:
            entry = _PLANNERS[step.name](values)
            earlier = [s.name for s in enabled(values) if STEPS.index(s) < STEPS.index(step)]
            when = "after a successful run" + (f" and its {' and '.join(earlier)}" if earlier else "")
            entries[step.name] = {**entry, "when": when + (", as a CPU job chained afterok" if chained else "")}
    return entries or None


# --- after training -------------------------------------------------------------------------------

def _as_served(model: Any, label: str, step: int | None, info: Any) -> Any:
    """A plain folder's :class:`~thub.evaluate.models.EvalModel` as the run serves it: its label and
    step, the run's ``max_seq_len``, and its chat template only where the run trained on chat rows."""
    model.label, model.step, model.max_seq_len = label, step, info.max_seq_len
    model.apply_chat_template = bool(model.apply_chat_template and info.chat)
    return model


def _export_plan(run_dir: Path, folder: str, values: dict[str, Any]) -> Any:
    """The evaluation of the export folder as the run's ``final`` (its results filed with the run):
    what will be served, whatever the final model's layout was (an adapter merged, a sharded
    checkpoint consolidated: nothing merged again, nothing refused as sharded); the export's verify
    checked its tokenizer and chat template against the training input. ``eval_base``: the base too."""
    from thub.evaluate.models import EvalModel, read_run
    from thub.evaluate.run import plan
    from thub.manager import get_registry

    eval_plan = plan(folder, list(values["eval"]), out=run_dir / "eval")
    info = read_run(run_dir, get_registry())
    reached = (info.result or {}).get("reached_step")
    eval_plan.run = info
    eval_plan.models = [_as_served(eval_plan.models[0], "final", reached if isinstance(reached, int) else None,
                                   info)]
    eval_plan.models[0].template = {"status": "ok", "by": "the export's verify (tokenizer and chat template)"}
    if values.get("eval_base"):
        base = info.base_model
        if not base:
            raise UsageError(f"{run_dir}: thub_run.json names no model_path: nothing to compare with (eval_base)")
        if Path(base).expanduser().is_dir():
            origin = _as_served(plan(base, list(values["eval"]), print_only=True).models[0], "base", 0, info)
        else:  # a hub id: the harness loads it (its template, if any, is unknown here)
            origin = EvalModel("base", base, base, 0, None, apply_chat_template=info.chat,
                               max_seq_len=info.max_seq_len)
        origin.template = {"status": "reference"}
        eval_plan.models.insert(0, origin)
    return eval_plan


def _eval(run_dir: Path, result: dict[str, Any], values: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    from thub.evaluate.run import execute, plan

    export = result.get("export") or {}
    if export.get("ok"):
        eval_plan = _export_plan(run_dir, str(export["path"]), values)
    else:
        eval_plan = plan(str(run_dir), list(values["eval"]), base=bool(values.get("eval_base")))
    done = execute(eval_plan, say=say)
    final = next((m for m in eval_plan.models if m.label == "final"), None)
    return {"ok": True, "error": None, "model": final.model_path if final else None,
            "labels": [m.label for m in eval_plan.models], "tasks": [t.name for t in eval_plan.tasks],
            "results": str(eval_plan.eval_dir), "written": done["written"]}


def _push(run_dir: Path, result: dict[str, Any], values: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    from thub.checkpoint import push as pushing
    from thub.runner.runpaths import rebased

    result = rebased(run_dir, result)  # its paths where the run directory is now
    if values.get("export"):
        source = str((result.get("export") or {}).get("path") or values["export"])
    else:
        final = result.get("final_model") or {}
        if final.get("layout") != "hf-model" or not final.get("complete"):
            raise ThubError(f"the final model {final.get('path')} is a {final.get('layout')} checkpoint, not a "
                            "model folder: set export (--export DIR) to make it one; push sends the export folder")
        source = str(final["path"])
    plan = pushing.plan_push(source, str(values["push"]), public=bool(values.get("push_public")), run=str(run_dir))
    say(f"push: sending {len(plan['files'])} files of {source} to {plan['to']}")
    done = pushing.push(plan)
    pushing.record(done)
    pushing.notify(done)
    return {"ok": True, "error": None, "to": done["to"], "kind": done["kind"], "source": source,
            "private": done.get("private"), "revision": done.get("revision"), "url": done.get("url"),
            "files": len(done["files"]) + len(done["generated"])}


_RUNNERS = {"eval": _eval, "push": _push}


def _record(run_dir: Path, name: str, outcome: dict[str, Any]) -> dict[str, Any]:
    """Add ``outcome`` as ``post_run.<name>`` to ``result.json`` (re-read: the step itself may have
    written its own entries there) and return the result."""
    from thub.redact import redact
    from thub.runner.rundir import read_json, write_json_atomic

    path = run_dir / "result.json"
    result = read_json(path) or {}
    result = {**result, POST_RUN: {**(result.get(POST_RUN) or {}), name: redact(outcome)}}
    write_json_atomic(path, result)
    return result


def run_step(step: PostStep, run_dir: Path, result: dict[str, Any], values: dict[str, Any],
             say: Callable[[str], None]) -> dict[str, Any]:
    """Run one step after ``eval`` or ``push`` (export runs through :func:`thub.checkpoint.export.export_after_run`),
    record its outcome in ``result.json`` and print it; returns the result. A failure is the outcome
    (``ok: false`` with the error), never an exception: training's result stands."""
    if result.get("status") != "succeeded":
        outcome = {"ok": False, "error": f"not run: the run's status is {result.get('status')}"}
    else:
        try:
            outcome = _RUNNERS[step.name](run_dir, result, values, say)
        except ThubError as exc:
            outcome = {"ok": False, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - training succeeded: its result must still say what failed here
            outcome = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result = _record(run_dir, step.name, outcome)
    say(describe(step.name, outcome))
    return result


def run_after(run_dir: Path, result: dict[str, Any], values: dict[str, Any], quiet: bool = False) -> dict[str, Any]:
    """Run the enabled steps of a finished local run in order (each only when every earlier one
    succeeded; the rest are recorded as not run); returns the final result."""
    out = sys.stderr if quiet else sys.stdout  # under --json stdout holds the result only

    def say(message: str) -> None:
        print(message, file=out, flush=True)

    failed: str | None = None
    for step in enabled(values):
        if failed is not None:
            outcome = {"ok": False, "error": f"not run: the {failed} step failed"}
            if step.name == "export":
                continue  # (export is first: never after a failure)
            result = _record(run_dir, step.name, outcome)
            say(describe(step.name, outcome))
            continue
        if step.name == "export":
            from thub.checkpoint.export import export_after_run

            result = export_after_run(run_dir, result, values["export"], values.get("model_path"), quiet=quiet)
        else:
            result = run_step(step, run_dir, result, values, say)
        if result.get("status") == "succeeded" and not (step.outcome(result) or {}).get("ok"):
            failed = step.name  # (a run that did not succeed: each step says so itself)
    return result


def describe(name: str, outcome: dict[str, Any] | None) -> str:
    """One line on a step's outcome (what ``thub train`` and ``thub runs wait`` print)."""
    if name == "export" and outcome is not None:
        from thub.checkpoint.export import describe as describe_export

        return describe_export(outcome)
    if outcome is None:
        return f"{name}: no outcome recorded"
    if not outcome.get("ok"):
        return f"{name} FAILED: {outcome.get('error')}"
    if name == "eval":
        return (f"eval: {', '.join(outcome['labels'])} scored on {', '.join(outcome['tasks'])}; results in "
                f"{outcome['results']}")
    if name == "push":
        visibility = " (private)" if outcome.get("private") else " (public)" if outcome.get("private") is False else ""
        return f"push: {outcome['source']} -> {outcome['url'] or outcome['to']}{visibility}, {outcome['files']} files"
    return f"{name}: done"


def exit_code(result: dict[str, Any]) -> int:
    """``thub train``'s exit status: 0 succeeded and every post-run step recorded succeeded,
    130 interrupted, else 1."""
    if result.get("status") == "interrupted":
        return 130
    if result.get("status") != "succeeded":
        return 1
    outcomes = [step.outcome(result) for step in STEPS]
    return 0 if all(o is None or o.get("ok") for o in outcomes) else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m thub.runner.poststeps STEP RUN_DIR``: a post-run step's SLURM job (after
    training and the earlier steps), with the run's recorded parameters."""
    args = sys.argv[1:] if argv is None else argv
    names = [s.name for s in STEPS if s.name in _RUNNERS]
    if len(args) != 2 or args[0] not in names:
        print(f"usage: python -m thub.runner.poststeps {{{','.join(names)}}} RUN_DIR", file=sys.stderr)
        return 2
    from thub.checkpoint.layouts import run_parameters
    from thub.redact import real_values
    from thub.runner.rundir import read_json

    run_dir = Path(os.path.abspath(args[1]))
    result = read_json(run_dir / "result.json")
    if result is None:
        print(f"thub: {run_dir / 'result.json'}: no result: the training job wrote none", file=sys.stderr)
        return 1
    values = real_values(run_parameters(run_dir) or {}, run_dir)
    result = run_step(BY_NAME[args[0]], run_dir, result, values, lambda m: print(m, flush=True))
    return 0 if (BY_NAME[args[0]].outcome(result) or {}).get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
