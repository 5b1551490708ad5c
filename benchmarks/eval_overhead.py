"""Evaluation overhead: the same local task through `thub eval` and through lm-eval's own CLI,
interleaved (A B A B ...), with the wall time split into phases.

    python examples/make_tiny_model.py && python benchmarks/eval_overhead.py [--rows 400] [--repeats 2] [--json OUT]

A JSONL task of ``--rows`` arithmetic prompts/answers is scored on the tiny model on CPU. `thub eval
MODEL --tasks arith.jsonl --out DIR` runs first once (untimed) to write the harness task it
generates and the exact lm-eval command it recorded (``arguments.command``); the timed lm-eval runs
are that command, so both sides score the same task with the same arguments (the scores are checked
equal). A probe (``sitecustomize`` on ``PYTHONPATH``, active only in these runs) stamps wall-clock
times in the process: interpreter start, ``simple_evaluate`` start/end and the model's construction
inside it. Phases (medians over the repeats):

* start-up: process start -> ``simple_evaluate`` begins (imports; thub: the CLI, the model and task
  resolution, the rows' check and the task YAML; lm-eval: its CLI and task index);
* model load: lm-eval builds its HF model (the same in both);
* evaluation: the rest of ``simple_evaluate`` (task index for thub, requests, metrics, stderr);
* end: ``simple_evaluate`` returns -> the process has exited (thub writes eval/<task>.json).

Issue 28's goal: thub's extra wall time <= 5 % of lm-eval's wall time beyond model load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from _measure import phase_probe  # noqa: E402

PROBE = phase_probe({"lm_eval.evaluator": [("", "simple_evaluate", "evaluate")],
                     "lm_eval.models.huggingface": [("HFLM", "__init__", "model")]})

PHASES = ("start-up", "model load", "evaluation", "end")


def write_task(path: Path, rows: int) -> None:
    """``rows`` prompts/answers (sums of two numbers), fixed by the seed."""
    rng = random.Random(0)
    with path.open("w") as handle:
        for _ in range(rows):
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            handle.write(json.dumps({"prompt": f"What is {a} + {b}?", "answer": f"{a + b}."}) + "\n")


def run(command: list[str], probe_dir: Path, log: Path) -> dict[str, float]:
    """Run once; phase durations in seconds from the probe's stamps."""
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("THUB_")}
    env.update(THUB_PHASE_LOG=str(log), PYTHONPATH=os.pathsep.join(
        filter(None, [str(probe_dir), os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONSTARTUP", None)
    start = time.time()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    stop = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... failed:\n{done.stderr[-3000:]}")
    first: dict[str, float] = {}
    for line in log.read_text().splitlines():
        item = json.loads(line)
        first.setdefault(item["phase"], item["t"])
    load = first["model:end"] - first["model:start"]
    return {"wall": stop - start, "start-up": first["evaluate:start"] - start, "model load": load,
            "evaluation": first["evaluate:end"] - first["evaluate:start"] - load,
            "end": stop - first["evaluate:end"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400, help="examples in the task")
    parser.add_argument("--repeats", type=int, default=2, help="A B pairs")
    parser.add_argument("--model", default=str(ROOT / "examples" / "tiny"))
    parser.add_argument("--json", dest="json_out", help="also write the runs and medians here")
    args = parser.parse_args()
    if not Path(args.model, "config.json").exists():
        raise SystemExit(f"{args.model}: no model; run `python examples/make_tiny_model.py` first")
    runs: dict[str, list[dict[str, float]]] = {"thub": [], "lm-eval": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        probe = work / "probe"
        probe.mkdir()
        (probe / "sitecustomize.py").write_text(PROBE)
        task = work / "arith.jsonl"
        write_task(task, args.rows)

        def thub_eval(out: Path) -> list[str]:
            return [sys.executable, "-m", "thub", "eval", args.model, "--tasks", str(task), "--out", str(out)]

        # one untimed run: the generated task and the exact lm-eval command it recorded
        first = work / "first"
        subprocess.run(thub_eval(first), check=True, capture_output=True, text=True)
        recorded = json.loads((first / "arith.json").read_text())
        (model,) = recorded["models"].values()
        harness = [sys.executable, "-m", "lm_eval", *shlex.split(model["arguments"]["command"])[1:]]
        print("lm-eval:", shlex.join(["lm_eval", *harness[3:]]))
        for i in range(args.repeats):
            order = ("thub", "lm-eval") if i % 2 == 0 else ("lm-eval", "thub")  # warm caches favour neither
            for which in order:
                command = thub_eval(work / f"thub{i}") if which == "thub" else harness
                runs[which].append(run(command, probe, work / "phases.jsonl"))
        again = json.loads((work / "thub0" / "arith.json").read_text())
        (scored,) = again["models"].values()
        if scored["metrics"] != model["metrics"]:
            raise SystemExit(f"thub's scores changed between runs: {model['metrics']} vs {scored['metrics']}")

    def median(which: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[which])

    print(f"\n{args.rows} examples, {args.repeats} runs each; {model['metrics']}")
    print(f"{'phase (median s)':18} {'lm-eval':>9} {'thub':>9} {'thub-lm-eval':>13}")
    for key in (*PHASES, "wall"):
        theirs, ours = median("lm-eval", key), median("thub", key)
        print(f"{key:18} {theirs:9.2f} {ours:9.2f} {ours - theirs:+13.2f}")
    extra = median("thub", "wall") - median("lm-eval", "wall")
    beyond_load = median("lm-eval", "wall") - median("lm-eval", "model load")
    share = extra / beyond_load
    print(f"\nthub - lm-eval wall: {extra:+.2f} s = {share:+.1%} of lm-eval's {beyond_load:.2f} s beyond model load; "
          f"goal <= 5 %: {'met' if share <= 0.05 else 'NOT met'}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"runs": runs, "rows": args.rows, "share": share}, indent=1))


if __name__ == "__main__":
    main()
