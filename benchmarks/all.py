"""Every issue-18 figure against its anchor, in one run (each script prints its own ratios).

    python examples/make_tiny_model.py && python benchmarks/all.py [--quick]

1. start-up: cli_startup.py (`thub --help`, `thub train sft --help` vs `python`, `import click`);
2. data preparation: data_prep.py (whole `thub data prepare` process vs the tokenizer ceiling,
   instructlab-training and TRL, measured in the same run);
3. launch overhead: launch_overhead.py (thub vs bare TRL, interleaved, split into phases);
4. memory estimate: estimate_accuracy.py (exact static memory on CPU; the +-15 % comparison
   against torch.cuda.max_memory_allocated needs a GPU and says "skipped: no CUDA" without one);
5. consolidation: checkpoint_consolidate.py (`thub checkpoint consolidate` vs torch's dcp_to_torch_save
   on a 0.5 B-parameter FSDP2 DCP checkpoint: peak RSS and wall ratios; docs/checkpoints.md, issue 27).

``--quick`` uses small sizes (5,000 conversations, 2 repetitions) for a shared machine; the
recorded figures live in docs/performance.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = [
        ("start-up", ["cli_startup.py", "--repeats", "10" if args.quick else "15"]),
        ("data preparation",
         ["data_prep.py", "--n", "5000" if args.quick else "20000", "--reps", "2" if args.quick else "3"]),
        ("launch overhead", ["launch_overhead.py", "--repeats", "2" if args.quick else "3"]),
        ("memory estimate", ["estimate_accuracy.py"]),
        ("consolidation", ["checkpoint_consolidate.py", "--layers", "12" if args.quick else "24"]),
        ("evaluation overhead", ["eval_overhead.py", "--rows", "200" if args.quick else "400"]),
    ]
    failed = []
    for title, command in runs:
        print(f"\n=== {title}: {' '.join(command)}", flush=True)
        if subprocess.run([sys.executable, str(HERE / command[0]), *command[1:]]).returncode != 0:
            failed.append(title)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
