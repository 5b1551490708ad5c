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
* a second process: thub ``--num-proc 2`` vs ``--num-proc 1``.

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
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANCHOR = HERE / "anchor_dataprep.py"
THUB = ("{thub} data prepare {{data}} -m {{model}} -o {{outdir}}/out.jsonl --max-seq-len {{max_seq_len}} --no-cache"
        " --num-proc {procs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000, help="conversations (the anchors use 20000)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", help="cache for the generated data and tokenizer")
    parser.add_argument("--parts", help="anchor parts (default: ceiling_batch, plus il/trl_prepare when importable)")
    parser.add_argument("--il-python", default=sys.executable)
    parser.add_argument("--trl-python", default=sys.executable)
    parser.add_argument("--out", help="results JSON (default: WORKDIR/results.json)")
    args = parser.parse_args()

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
               "--extra", "thub_np2=" + THUB.format(thub=thub, procs=2)]
    print(" ".join(command[:8]), "...", flush=True)
    done = subprocess.run(command, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if done.returncode != 0:
        raise SystemExit(done.returncode)
    report(json.loads(out.read_text()))


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
    if one:
        lines.append(("thub --num-proc 1 / ceiling", one / rate["ceiling_batch"], "-"))
    for label, value, target in lines:
        print(f"{label:50} {value:6.2f}x   target {target}")


if __name__ == "__main__":
    main()
