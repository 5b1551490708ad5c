"""Launch overhead: the same TRL run through `thub train` and as a bare TRL script, interleaved
(A B A B ...), with thub's extra wall time split into phases.

    python examples/make_tiny_model.py && python benchmarks/launch_overhead.py [--steps 10] [--repeats 2]

Both runs train the same tiny model on the same data with the same settings on CPU. A probe
(``sitecustomize`` on ``PYTHONPATH``, active only in these runs) stamps wall-clock times in every
Python process: interpreter start, thub's data validation and preflight, the start of the child,
and ``Trainer.train`` start/end. Phases (medians over the repeats):

* parent start: process start -> thub begins validating (CLI import, parameter resolution);
* data prep: thub's data validation in the parent (TRL tokenizes inside the library, for both);
* preflight: doctor checks, tracker and model-path checks, run directory and lock;
* child start: thub launches the child -> the child's interpreter runs;
* library start: interpreter start -> ``Trainer.train`` begins (imports, model, dataset);
* training: ``Trainer.train`` itself;  end: ``train`` returns -> the process has exited.

The bare run has only library start, training and end. Issue 18's target: thub's extra wall time
<= 2 s + data prep (on the GPU, mini-trainer; here the trl backend on CPU, always runnable).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import BARE_TRL_SFT, phase_probe, thub_trl_sft  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

PROBE = phase_probe({"thub.runner.supervisor": [("", "_plan", "validate"), ("", "_preflight", "preflight"),
                                                ("", "supervise", "supervise")],
                     "transformers.trainer": [("Trainer", "train", "train")]})

BARE = BARE_TRL_SFT + "trainer.train()\n"

PHASES = ("parent start", "data prep", "preflight", "child start", "library start", "training", "end")


def _run(command: list[str], probe_dir: Path, log: Path) -> dict[str, float]:
    """Run once; phase durations in seconds from the probe's stamps."""
    log.unlink(missing_ok=True)
    env = dict(os.environ, THUB_PHASE_LOG=str(log), PYTHONPATH=os.pathsep.join(
        filter(None, [str(probe_dir), os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONSTARTUP", None)
    start = time.time()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    stop = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... failed:\n{done.stderr[-3000:]}")
    stamps = [json.loads(line) for line in log.read_text().splitlines()]
    first: dict[str, float] = {}
    for item in stamps:  # the first stamp of each phase (the parent's validate, the child's train)
        first.setdefault(item["phase"], item["t"])
    trainer_pid = next(s["pid"] for s in stamps if s["phase"] == "train:start")
    trainer_up = next(s["t"] for s in stamps if s["pid"] == trainer_pid and s["phase"] == "interpreter")
    phases = {"wall": stop - start, "training": first["train:end"] - first["train:start"],
              "end": stop - first["train:end"], "library start": first["train:start"] - trainer_up}
    if "validate:start" in first:  # through thub
        phases["parent start"] = first["validate:start"] - start
        phases["data prep"] = first["validate:end"] - first["validate:start"]
        phases["preflight"] = first["supervise:start"] - first["validate:end"]
        phases["child start"] = trainer_up - first["supervise:start"]
    else:
        phases["library start"] = first["train:start"] - start  # interpreter start included, as for thub's child
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2, help="A B pairs")
    parser.add_argument("--model", default=str(ROOT / "examples" / "tiny"))
    parser.add_argument("--data", default=str(ROOT / "examples" / "data" / "chat.jsonl"))
    parser.add_argument("--json", dest="json_out", help="also write the medians here")
    args = parser.parse_args()
    if not Path(args.model, "config.json").exists():
        raise SystemExit(f"{args.model}: no model; run `python examples/make_tiny_model.py` first")
    bare_runs: list[dict[str, float]] = []
    thub_runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        probe = work / "probe"
        probe.mkdir()
        (probe / "sitecustomize.py").write_text(PROBE)
        script = work / "bare_trl.py"
        script.write_text(BARE)
        for i in range(args.repeats):
            # alternate which goes first, so warm caches favour neither
            order = ("thub", "bare") if i % 2 == 0 else ("bare", "thub")
            for which in order:
                out = work / f"{which}{i}"
                if which == "bare":
                    out.mkdir()
                    bare_runs.append(_run([sys.executable, str(script), args.model, args.data, str(out),
                                           str(args.steps)], probe, work / "phases.jsonl"))
                else:
                    thub_runs.append(_run([sys.executable, "-m", "thub",
                                           *thub_trl_sft(args.model, args.data, str(out), args.steps)],
                                          probe, work / "phases.jsonl"))

    def median(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in runs)

    rows = {key: (median(bare_runs, key), median(thub_runs, key)) for key in ("wall", *PHASES)}
    print(f"{'phase (median s)':18} {'bare TRL':>9} {'thub':>9} {'thub-bare':>10}")
    for key in (*PHASES, "wall"):
        bare, ours = rows[key]
        print(f"{key:18} {bare:9.2f} {ours:9.2f} {ours - bare:+10.2f}")
    extra = rows["wall"][1] - rows["wall"][0]
    prep = rows["data prep"][1]
    own = statistics.median(sum(r[k] for k in ("parent start", "data prep", "preflight", "child start"))
                            for r in thub_runs)
    print(f"\nthub - bare wall: {extra:+.2f} s ({rows['wall'][1] / rows['wall'][0]:.3f}x); target <= 2 s + data prep "
          f"({2 + prep:.2f} s): {'met' if extra <= 2 + prep else 'NOT met'}")
    print(f"thub's own phases (parent start + data prep + preflight + child start): {own:.2f} s; the library "
          "phases differ only by noise when the runs are alike (a loaded machine shows it in `training`)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"bare": bare_runs, "thub": thub_runs,
                                                   "median": {k: {"bare": b, "thub": t} for k, (b, t) in rows.items()}},
                                                  indent=1))


if __name__ == "__main__":
    main()
