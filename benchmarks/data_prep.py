"""Data preparation (chat template + tokenize + loss mask) against its anchors, in one run.

Runs benchmarks/anchor_dataprep.py (the project's shared anchor script, repetitions interleaved: the same seeded
synthetic chat data, 32k byte-level BPE, ChatML template with ``{% generation %}`` markers, and the
same fresh-subprocess, cold-cache protocol) with ``thub data prepare`` added as ``--extra`` commands,
so that **the whole thub process is timed** (interpreter start, imports, reading, validation,
tokenizing, writing) while the anchors' timed sections exclude their start and imports. Prints
every figure as a ratio against the anchors measured in the same run:

* ceiling: ``tokenizer(batch of 1000)`` on pre-rendered text (target: thub >= 0.88x);
* instructlab-training ``process_data`` (target: thub >= 2x) and TRL ``_prepare_dataset``, when
  importable by this interpreter (or ``--il-python`` / ``--trl-python``);
* a second process: thub ``--num-proc 2`` vs ``--num-proc 1``, and what the second core already
  gives one process: ``--num-proc 1`` vs the same with ``TOKENIZERS_PARALLELISM=false`` (one
  encoding thread);
* CPU seconds (load-independent, ``--cpu-reps``, separate interleaved runs): the ceiling's timed
  section vs the whole thub process, user + system of every process and thread. On a shared
  machine wall-clock ratios move with the load (printed at the start and the end); the CPU ratio
  says how much work thub does per token against the bare encode.

    python benchmarks/data_prep.py [--n 20000] [--reps 3] [--workdir DIR] [--parts ceiling_batch,il,trl_prepare]

The data and tokenizer are generated once and cached in ``--workdir`` (default: a folder under
the system temp dir, keyed by ``--n``). On a shared machine use a smaller ``--n`` and compare ratios only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANCHOR = HERE / "anchor_dataprep.py"
THUB = ("{thub} data prepare {{data}} -m {{model}} -o {{outdir}}/out.jsonl --max-seq-len {{max_seq_len}} --no-cache"
        " --num-proc {procs}")
# The anchor's ceiling_batch section, with CPU time beside wall time (argv: model data batch).
CEILING_CPU = """
import json, sys, time
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    texts = [tok.apply_chat_template(json.loads(line)["messages"], tokenize=False) for line in f]
B = int(sys.argv[3])
wall, cpu = time.perf_counter(), time.process_time()
encs = [tok(texts[i:i + B]) for i in range(0, len(texts), B)]
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000, help="conversations (the anchors use 20000)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", help="cache for the generated data and tokenizer")
    parser.add_argument("--parts", help="anchor parts (default: ceiling_batch, plus il/trl_prepare when importable)")
    parser.add_argument("--il-python", default=sys.executable)
    parser.add_argument("--trl-python", default=sys.executable)
    parser.add_argument("--out", help="results JSON (default: WORKDIR/results.json)")
    parser.add_argument("--cpu-reps", type=int, default=2, help="interleaved CPU-seconds repetitions (0: skip)")
    args = parser.parse_args()
    load_before = os.getloadavg()

    workdir = Path(args.workdir or Path(tempfile.gettempdir()) / f"thub-dataprep-{args.n}")
    parts = args.parts or ",".join(
        ["ceiling_batch"]
        + (["il"] if args.il_python != sys.executable or importlib.util.find_spec("instructlab") else [])
        + (["trl_prepare"] if args.trl_python != sys.executable or importlib.util.find_spec("trl") else []))
    thub = shutil.which("thub") or f"{sys.executable} -m thub"
    out = Path(args.out) if args.out else workdir / "results.json"
    command = [sys.executable, str(ANCHOR), "--workdir", str(workdir), "--n", str(args.n), "--reps", str(args.reps),
               "--parts", parts, "--il-python", args.il_python, "--trl-python", args.trl_python, "--out", str(out),
               "--extra", "thub_np1=" + THUB.format(thub=thub, procs=1),
               "--extra", "thub_np2=" + THUB.format(thub=thub, procs=2),
               "--extra", "thub_np1_1thread=TOKENIZERS_PARALLELISM=false " + THUB.format(thub=thub, procs=1)]
    print(" ".join(command[:8]), "...", flush=True)
    done = subprocess.run(command, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if done.returncode != 0:
        raise SystemExit(done.returncode)
    results = json.loads(out.read_text())
    cpu = cpu_seconds(workdir, thub, args.cpu_reps) if args.cpu_reps > 0 else {}
    results["load_average"] = {"start": load_before, "end": os.getloadavg()}
    results["cpu_seconds"] = cpu
    out.write_text(json.dumps(results, indent=1))
    report(results)


def _rusage_run(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, user+system CPU s of the process and the children it waited for, stdout)."""
    import time

    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    stdout = process.stdout.read().decode() if process.stdout else ""
    _pid, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[:3]} ... exited with {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime, stdout


def cpu_seconds(workdir: Path, thub: str, reps: int) -> dict:
    """Median CPU seconds: the ceiling's timed section vs whole thub processes (interleaved runs)."""
    data, model = workdir / "data.jsonl", workdir / "model"
    out = workdir / "cpu_probe.jsonl"
    env = dict(os.environ, PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    samples: dict[str, list[tuple[float, float]]] = {"ceiling_batch": [], "thub_np1": [], "thub_np2": []}
    for _ in range(reps):
        _, _, line = _rusage_run([sys.executable, "-c", CEILING_CPU, str(model), str(data), "1000"], env)
        timed = json.loads(line.strip().splitlines()[-1])
        samples["ceiling_batch"].append((timed["wall"], timed["cpu"]))
        for procs in (1, 2):
            command = [*thub.split(), "data", "prepare", str(data), "-m", str(model), "-o", str(out),
                       "--max-seq-len", "4096", "--no-cache", "--num-proc", str(procs)]
            wall, used, _ = _rusage_run(command, env)
            samples[f"thub_np{procs}"].append((wall, used))
    out.unlink(missing_ok=True)
    return {name: {"wall_s": statistics.median(w for w, _ in runs), "cpu_s": statistics.median(c for _, c in runs)}
            for name, runs in samples.items()}


def report(results: dict) -> None:
    """Ratios of thub's whole-process tokens/s to each anchor of the same run."""
    rate = {row["method"]: row["tokens_per_s"] for row in results["rows"]}
    one, two = rate.get("extra:thub_np1"), rate.get("extra:thub_np2")
    best = max(filter(None, (one, two)))
    machine = results["machine"]
    print(f"\n{results['dataset']['params']['n']} conversations, {results['dataset']['tokens']['total']:,} tokens; "
          f"{machine['cpus']} CPUs, {machine['platform']}; {results['created']}")
    lines = [("thub (best of --num-proc 1/2) / ceiling", best / rate["ceiling_batch"], ">= 0.88")]
    if "il" in rate:
        lines.append(("thub (best) / instructlab-training process_data", best / rate["il"], ">= 2.0"))
    if "trl_prepare" in rate:
        lines.append(("thub (best) / TRL _prepare_dataset", best / rate["trl_prepare"], "-"))
    if one and two:
        lines.append(("thub --num-proc 2 / --num-proc 1", two / one, "near 2 on 2 free cores"))
    serial = rate.get("extra:thub_np1_1thread")
    if one and serial:
        lines.append(("thub --num-proc 1 / same with one encoding thread", one / serial, "(the 2nd core, in-process)"))
    if one:
        lines.append(("thub --num-proc 1 / ceiling", one / rate["ceiling_batch"], "-"))
    cpu = results.get("cpu_seconds") or {}
    if cpu:
        for name in ("thub_np1", "thub_np2"):
            lines.append((f"CPU s: ceiling timed section / whole {name}",
                          cpu["ceiling_batch"]["cpu_s"] / cpu[name]["cpu_s"], "(load-independent)"))
    for label, value, target in lines:
        print(f"{label:50} {value:6.2f}x   target {target}")
    if cpu:
        print("CPU seconds (median): " + ", ".join(f"{k} {v['cpu_s']:.2f} (wall {v['wall_s']:.2f})"
                                                   for k, v in cpu.items()))
    load = results.get("load_average")
    if load:
        print("load average (1, 5, 15 min) at start: {:.2f} {:.2f} {:.2f}; at end: {:.2f} {:.2f} {:.2f}".format(
            *load["start"], *load["end"]))


if __name__ == "__main__":
    main()
