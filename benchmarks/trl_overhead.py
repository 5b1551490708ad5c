"""thub's overhead on a TRL training run: the same SFT job through `thub train` and through a bare
TRL script, in the same run on the same machine.

    python examples/make_tiny_model.py && python benchmarks/trl_overhead.py [--steps 60] [--repeats 3]

Reports time per training step (TRL's own train_runtime / steps, target ratio <= 1.03), whole
process wall time, and peak RSS, as ratios thub / bare TRL.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import BARE_TRL_SFT, run_once, thub_trl_sft  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

BARE = BARE_TRL_SFT + textwrap.dedent("""\
    output = trainer.train()
    json.dump({"train_runtime": output.metrics["train_runtime"]}, open(out + "/bare.json", "w"))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default=str(ROOT / "examples" / "tiny"))
    parser.add_argument("--data", default=str(ROOT / "examples" / "data" / "chat.jsonl"))
    args = parser.parse_args()
    thub = [sys.executable, "-m", "thub"]
    bare, ours = [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bare_trl.py"
        script.write_text(BARE)
        for i in range(args.repeats):
            out = Path(tmp) / f"bare{i}"
            out.mkdir()
            wall, rss = run_once([sys.executable, str(script), args.model, args.data, str(out), str(args.steps)])
            bare.append((json.loads((out / "bare.json").read_text())["train_runtime"] / args.steps, wall, rss))
            run = Path(tmp) / f"thub{i}"
            wall, rss = run_once([*thub, *thub_trl_sft(args.model, args.data, str(run), args.steps)])
            summary = json.loads((run / "result.json").read_text())["summary"]
            ours.append((summary["train_runtime"] / summary["global_step"], wall, rss))
    print(f"{'':22} {'bare TRL':>10} {'thub':>10} {'ratio':>7}")
    for index, label in enumerate(("time per step (s)", "process wall (s)", "peak RSS (MB)")):
        b = statistics.median(x[index] for x in bare)
        t = statistics.median(x[index] for x in ours)
        print(f"{label:22} {b:10.4f} {t:10.4f} {t / b:7.3f}")
    print("\ntarget: time-per-step ratio <= 1.03 (thub's metrics callback is the only code in the step)")


if __name__ == "__main__":
    main()
