"""The training child's data entry: reading back the rows the parent validated (``thub_data/``)
against validating them again, as it did before (issue 16).

    python benchmarks/data_entry.py [--n 20000] [--reps 5]

The demo chat rows repeated to ``--n`` rows; repetitions interleave the two so a machine getting
busier favours neither; medians and their ratio are reported (compare ratios, not seconds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from thub.data.training import load_training_data, save_training_data, validate_training_data

DEMO = Path(__file__).parents[1] / "examples" / "data" / "chat.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    lines = DEMO.read_text().splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "chat.jsonl"
        data.write_text("".join(lines[i % len(lines)] for i in range(args.n)))
        params = {"data_path": str(data), "seed": 42}
        kept = Path(tmp) / "thub_data"
        started = time.perf_counter()
        assert save_training_data(validate_training_data(params), kept)
        print(f"parent: validate + keep {args.n} rows: {time.perf_counter() - started:.3f} s")
        timings: dict[str, list[float]] = {"validate again": [], "read back": []}
        for _ in range(args.reps):
            for name, read in (("validate again", lambda: validate_training_data(params)),
                               ("read back", lambda: load_training_data(params, kept))):
                started = time.perf_counter()
                assert read() is not None
                timings[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    for name, value in medians.items():
        print(f"child: {name:15} {value:.3f} s")
    print(f"read back / validate again: {medians['read back'] / medians['validate again']:.2f}")


if __name__ == "__main__":
    main()
