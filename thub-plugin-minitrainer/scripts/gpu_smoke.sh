#!/usr/bin/env bash
# GPU smoke test for the mini-trainer backend (needs one NVIDIA GPU; not run in CI).
# Tiny local model, 2 steps of sft and osft, metrics + checkpoint checks, then interrupt + --resume.
# Usage: bash thub-plugin-minitrainer/scripts/gpu_smoke.sh [workdir]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${1:-$(mktemp -d)}"
PY="${PYTHON:-python}"
export TESTING="${TESTING:-$($PY -c 'import flash_attn' 2>/dev/null && echo false || echo true)}"  # sdpa without flash-attn
nvidia-smi -L
"$PY" "$ROOT/examples/make_tiny_model.py" --out "$WORK/tiny"
DATA="$ROOT/examples/data/chat.jsonl"
common=(--backend mini-trainer --model-path "$WORK/tiny" --data-path "$DATA" --effective-batch-size 8
        --max-seq-len 256 --max-tokens-per-gpu 1024 --learning-rate 1e-4 --nproc-per-node 1)

check() {  # run dir, expected status, expected last step
  "$PY" - "$@" <<'PY'
import json, sys
from pathlib import Path
out, status, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
result = json.loads((out / "result.json").read_text())
assert result["status"] == status, result
lines = [json.loads(l) for l in (out / "training_metrics.jsonl").read_text().splitlines()]
for line in lines:
    assert all(k in line for k in ("step", "max_steps", "epoch", "loss", "learning_rate", "timestamp")), line
assert [l["step"] for l in lines] == list(range(1, steps + 1)), [l["step"] for l in lines]
if status == "succeeded":
    final = Path(result["final_checkpoint"])
    assert final.name.startswith("samples_") and (final / "config.json").exists(), result
    assert result["checkpoints"], result
print(f"OK {out.name}: {status}, {len(lines)} steps, loss {lines[0]['loss']:.3f} -> {lines[-1]['loss']:.3f}")
PY
}

"$PY" -m thub train sft "${common[@]}" --max-steps 2 --ckpt-output-dir "$WORK/sft" --json
check "$WORK/sft" succeeded 2
"$PY" -m thub train osft "${common[@]}" --max-steps 2 --unfreeze-rank-ratio 0.25 --ckpt-output-dir "$WORK/osft" --json
check "$WORK/osft" succeeded 2

# status, steps, finite loss, the final checkpoint loads
"$PY" -m thub.testing.smoke "$WORK/sft" --status succeeded --steps 2
"$PY" -m thub.testing.smoke "$WORK/osft" --status succeeded --steps 2

# interrupt after the first metrics line, then resume to the end. 6 epochs of 8 steps (64 samples / 8):
# long enough that SIGTERM always arrives mid-run (an 8-step run could finish first)
"$PY" -m thub train osft "${common[@]}" --num-epochs 6 --unfreeze-rank-ratio 0.25 --ckpt-output-dir "$WORK/resume" --json &
pid=$!
for _ in $(seq 1 600); do
  [ -s "$WORK/resume/training_metrics.jsonl" ] && break
  sleep 0.5
done
kill -TERM "$pid"
wait "$pid" || true
"$PY" -m thub.testing.smoke "$WORK/resume" --status interrupted --reload none
ls "$WORK/resume/checkpoints/full_state_checkpoints"   # the on-demand full-state checkpoint
"$PY" -m thub train osft "${common[@]}" --num-epochs 6 --unfreeze-rank-ratio 0.25 --ckpt-output-dir "$WORK/resume" --resume --json
check "$WORK/resume" succeeded 48
"$PY" -m thub.testing.smoke "$WORK/resume" --status succeeded --steps 48
echo "gpu_smoke: all OK ($WORK)"
