"""CLI start-up against its anchors, in one run: `thub --help`, `thub train sft --help`, `thub plugins`
next to `python -c pass` and `python -c "import click"` (the floor any click CLI pays).

    python benchmarks/cli_startup.py [--repeats 15]

Rounds interleave the commands (A B C A B C ...) so a machine getting busier or quieter favours
none; medians are reported. The plugin-command and entry-point caches are warmed first (one
run each), as they are after any first use. Targets (issue 18): `thub --help` <= 0.15 s and
`thub train sft --help` <= 0.25 s with every backend plugin installed; on a loaded machine compare
the ratios to `import click` instead (anchors: docs/performance.md).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _measure import run_once  # noqa: E402

TARGETS = {"thub --help": 0.15, "thub train sft --help": 0.25}
TRAINING_HUB_HELP_S = 14.5  # Training Hub 0.11.2 `thub --help` (shared/docs/performance-anchors.md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    thub = shutil.which("thub") or str(Path(sys.executable).parent / "thub")
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import click'": [sys.executable, "-c", "import click"],
        "thub --help": [thub, "--help"],
        "thub train sft --help": [thub, "train", "sft", "--help"],
        "thub plugins": [thub, "plugins"],
    }
    for command in cases.values():  # warm: OS file cache, thub's plugin caches
        run_once(command)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, command in cases.items():
            samples[name].append(run_once(command))
    results = {name: (statistics.median(s[0] for s in runs), statistics.median(s[1] for s in runs))
               for name, runs in samples.items()}
    base = results["python -c pass"][0]
    click = results["python -c 'import click'"][0]
    print(f"{'command':26} {'median s':>9} {'peak MB':>8} {'x python':>9} {'x click':>8} {'target':>8}")
    for name, (wall, rss) in results.items():
        target = f"<= {TARGETS[name]:.2f}" if name in TARGETS else ""
        print(f"{name:26} {wall:9.3f} {rss:8.1f} {wall / base:9.2f} {wall / click:8.2f} {target:>8}")
    for name, limit in TARGETS.items():
        wall = results[name][0]
        print(f"{name}: {wall:.3f} s, {'met' if wall <= limit else 'NOT met'} (<= {limit} s); "
              f"{wall - click:+.3f} s over `import click`; {TRAINING_HUB_HELP_S / wall:.0f}x faster than "
              f"Training Hub's {TRAINING_HUB_HELP_S} s")


if __name__ == "__main__":
    main()
