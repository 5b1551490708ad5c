#!/usr/bin/env bash
# The README's first command: set up .venv (CPU torch, thub, the trl backend, the tiny model) and
# run the demo (SFT on the CPU). Safe to run again: what is there is kept.
#
# usage: bash scripts/setup.sh [--no-demo]
# env:   PYTHON (python3): the interpreter that creates .venv
set -euo pipefail
cd "$(dirname "$0")/.."

demo=1
[ "${1:-}" = "--no-demo" ] && demo=0

PY=${PYTHON:-python3}
pip() { python -m pip --disable-pip-version-check "$@"; }
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  . .venv/bin/activate
  pip install --quiet --upgrade pip
fi
. .venv/bin/activate

# A CPU build of torch: on PyPI a plain `torch` is the CUDA build (GBs of nvidia-* wheels), so
# torch 2.13.0+cpu comes from the PyTorch CPU index (https://download.pytorch.org/whl/cpu).
# First without it: torch is already installed, or pip finds the wheel on disk (pip's find-links).
TORCH="torch==2.13.0+cpu"
if ! pip install --quiet "$TORCH" 2>/dev/null; then
  pip install --quiet "$TORCH" --extra-index-url https://download.pytorch.org/whl/cpu
fi
# thub (editable, with the test tools) and the TRL backend, which trains on a CPU.
pip install --quiet -e ".[test]" -e ./thub-plugin-trl
# A tiny random Llama + BPE tokenizer with a chat template: no download.
[ -f examples/tiny/config.json ] || python examples/make_tiny_model.py >/dev/null

# The README shows this same command (tests/test_first_contact_round2.py): --overwrite because
# runs/demo-sft holds a finished run once the demo has run (a second setup.sh, or the README's step).
demo_command=(thub train sft --backend trl --config examples/configs/sft.yaml --overwrite)
if [ "$demo" = 1 ]; then
  echo "== ${demo_command[*]}" >&2
  "${demo_command[@]}"
  echo "Set up. Next: . .venv/bin/activate, then the README's tour; tests: bash scripts/test-all.sh" >&2
fi
