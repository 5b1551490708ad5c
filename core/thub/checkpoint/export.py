"""``export``: a finished run's final model made into one verified, self-contained Hugging Face folder.

``thub train ... --export DIR`` (or ``export: DIR`` in the config) runs this at the end of a
successful run, on the final model ``result.json`` names (``final_model``, its layout):

- a PEFT adapter is merged into its base (:func:`thub.checkpoint.merge.merge_adapter`);
- a sharded checkpoint (torch DCP, accelerate's sharded FSDP state, DeepSpeed ZeRO) is
  consolidated (:mod:`thub.checkpoint.consolidate`), with the serving files from the base;
- an HF model folder is copied (its model and serving files, not the trainer's optimizer or RNG
  state; serving files it lacks come from the base), so ``DIR`` never depends on the run directory
  (which retention or ``--overwrite`` may change);

then ``DIR`` is verified (:func:`thub.checkpoint.verify.verify`: against the base's tokenizer and
the final model's logits). The outcome is ``result.json``'s ``export`` entry. Training's status
stays what it was (``succeeded``): a failed export is ``export.ok: false`` with the error or the
first failing check, and ``thub train`` exits 1 (docs/outputs.md). On SLURM the same runs as a
CPU job chained ``afterok`` after training: ``python -m thub.checkpoint.export RUN_DIR DIR``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from thub.errors import ThubError, UsageError

#: what a trainer saves beside the model that a served model does not need (HF Trainer's resume state);
#: ``thub checkpoint push`` never sends these either (:func:`is_training_state`)
TRAINING_STATE = ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin", "scaler.pt")


def is_training_state(name: str) -> bool:
    """Whether a file named ``name`` is trainer resume state (optimizer, scheduler, RNG, trainer state)."""
    return name in TRAINING_STATE or name.startswith("rng_state")


# sharded layouts consolidate reads (final_model's ``next`` names consolidate for exactly these)
_CONSOLIDATE = "thub checkpoint consolidate"


def check_target(out: str) -> None:
    """Refuse (UsageError, exit 2, before training) an ``export`` folder that exists and is not empty:
    the export never writes into or over other files."""
    path = Path(out)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"export: {out}: already exists and is not an empty folder (choose a new folder; "
                         "nothing was written)")


def plan_export(values: dict[str, Any], chained: bool = False) -> dict[str, Any] | None:
    """The ``export`` entry of a run's plan (None without ``export``); refuses a bad target.
    ``chained``: the launcher runs it as a job chained after training (``LauncherSpec.chained_steps``)."""
    out = values.get("export")
    if not out:
        return None
    check_target(str(out))
    return {"path": str(out),
            "when": "after a successful run" + (", as a CPU job chained afterok after training" if chained else ""),
            "steps": ["merge (a PEFT adapter) / consolidate (a sharded checkpoint) / copy (an HF model), by "
                      "result.json final_model's layout", "verify (thub checkpoint verify, logits against the "
                      "final model)"]}


def _base(model_path: str | None) -> str | None:
    """The training input as the base to compare the tokenizer with, where it is a local folder."""
    return model_path if model_path and (Path(model_path) / "config.json").is_file() else None


def _copy(source: Path, out: Path, base: str | None) -> None:
    """The HF model folder's files, without the trainer's resume state, plus the base's serving files
    it lacks; written beside ``out`` and renamed onto it when complete."""
    from thub.checkpoint.consolidate import serving_files

    out.parent.mkdir(parents=True, exist_ok=True)
    # made with the usual mode (0777 less the umask): tempfile.mkdtemp's 0700 stayed on the renamed folder
    staging = out.parent / f".{out.name}.thub-partial-{os.getpid()}-{os.urandom(4).hex()}"
    staging.mkdir()
    try:
        for item in source.iterdir():
            if item.is_file() and not is_training_state(item.name):
                # a new file with the usual mode (copy2 kept the 0600 that safetensors' save_file leaves)
                shutil.copyfile(item, staging / item.name)
        for name, origin in serving_files(source, Path(base) if base else None):
            if not (staging / name).exists():
                shutil.copyfile(origin, staging / name)
        from thub.checkpoint.manifest import write_manifest

        write_manifest(staging, "thub train --export (copy)")  # last: what verify and push check it against
        if out.exists():
            out.rmdir()  # empty: check_target refused anything else
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def export_model(final: dict[str, Any] | None, out: str, model_path: str | None = None) -> dict[str, Any]:
    """Convert ``final`` (a ``final_model`` entry) into ``out`` and verify it. Returns the ``export``
    entry: ``path``, ``source``, ``layout``, ``action``, ``ok``, ``checks`` (each check's outcome),
    ``failed`` (the first failing check) and ``error`` (a conversion that could not be done)."""
    entry: dict[str, Any] = {"path": out, "source": (final or {}).get("path"), "layout": (final or {}).get("layout"),
                             "action": None, "ok": False, "checks": [], "failed": None, "error": None}
    if not final or not final.get("complete"):
        entry["error"] = ("the run saved no final model" if not final else
                          f"the final model {final['path']} is not complete ({final.get('problem')})")
        return entry
    source, target, base = Path(final["path"]), Path(out), _base(model_path)
    verify_args: dict[str, Any] = {}
    try:
        check_target(out)
        if final["layout"] == "peft-adapter":
            from thub.checkpoint.merge import merge_adapter

            entry["action"] = "merge"
            merge_adapter(source, target, None, warn=lambda m: print(f"warning: {m}", file=sys.stderr))
        elif str(final.get("next", "")).startswith(_CONSOLIDATE):
            from thub.checkpoint import consolidate

            entry["action"] = "consolidate"
            consolidate.write(consolidate.plan(source, target, base=base))
            verify_args = {"base": base, "source": str(source)}
        elif final["layout"] == "hf-model":
            entry["action"] = "copy"
            _copy(source, target, base)
            verify_args = {"base": base, "source": str(source)}
        else:
            hint = f": {final['next']}" if final.get("next") else ""
            entry["error"] = f"thub cannot export a {final['layout']} checkpoint{hint}"
            return entry
        from thub.checkpoint.verify import verify

        report = verify(target, **verify_args)
    except ThubError as exc:
        entry["error"] = f"{entry['action'] or 'export'}: {exc}"
        return entry
    except Exception as exc:  # noqa: BLE001 - the run succeeded: its result must still say what failed here
        entry["error"] = f"{entry['action'] or 'export'}: {type(exc).__name__}: {exc}"
        return entry
    entry["checks"] = [{"check": c["check"], "ok": c["ok"]} for c in report["checks"]]
    entry["failed"], entry["ok"] = report["failed"], report["ok"]
    return entry


def describe(entry: dict[str, Any]) -> str:
    """One line on the export's outcome (printed after the run)."""
    if entry["ok"]:
        passed = ", ".join(c["check"] for c in entry["checks"] if c["ok"])
        return f"export: {entry['path']}: {entry['action']} of {entry['source']}, verified ({passed})"
    if entry["error"]:
        return f"export FAILED: {entry['path']}: {entry['error']}"
    failed = entry["failed"] or {}
    return f"export FAILED: {entry['path']}: check {failed.get('check')} failed: {failed.get('message')}"


def export_after_run(run_dir: Path, result: dict[str, Any], out: str, model_path: str | None,
                     quiet: bool = False) -> dict[str, Any]:
    """Export a succeeded run's final model into ``out``, add the ``export`` entry to ``result`` and
    to ``result.json`` (written atomically), print its outcome (stderr under ``quiet``: stdout then
    holds JSON). Returns the result."""
    from thub.redact import redact
    from thub.runner.rundir import write_json_atomic

    if result.get("status") != "succeeded":
        entry = {"path": out, "ok": False, "error": f"not exported: the run's status is {result.get('status')}",
                 "checks": [], "failed": None}
    else:
        from thub.runner.runpaths import rebased

        # the final model where the run directory is now (moved, copied, reached from elsewhere)
        entry = export_model(rebased(run_dir, result).get("final_model"), out, model_path)
    result = {**result, "export": redact(entry)}
    write_json_atomic(run_dir / "result.json", result)
    print(describe(entry), file=sys.stderr if quiet else sys.stdout, flush=True)
    return result


def exit_code(result: dict[str, Any]) -> int:
    """``thub train``'s exit status: 0 succeeded (and exported, where asked), 130 interrupted, else 1."""
    if result.get("status") == "interrupted":
        return 130
    return 0 if result.get("status") == "succeeded" and (result.get("export") or {}).get("ok", True) else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m thub.checkpoint.export RUN_DIR DIR``: the SLURM export job (after training)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m thub.checkpoint.export RUN_DIR DIR", file=sys.stderr)
        return 2
    from thub.checkpoint.layouts import run_parameters
    from thub.runner.rundir import read_json

    run_dir = Path(os.path.abspath(args[0]))
    result = read_json(run_dir / "result.json")
    if result is None:
        print(f"thub: {run_dir / 'result.json'}: no result: the training job wrote none", file=sys.stderr)
        return 1
    model_path = (run_parameters(run_dir) or {}).get("model_path")
    return exit_code(export_after_run(run_dir, result, args[1], str(model_path) if model_path else None))


if __name__ == "__main__":
    sys.exit(main())
