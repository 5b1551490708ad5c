#!/usr/bin/env bash
# GPU smoke test for the instructlab-training backend: tiny local model, a few sft steps on one GPU,
# then checks thub's metrics stream, the hf_format checkpoints, result.json, and a resume.
# Needs: an NVIDIA GPU, a CUDA torch, instructlab-training 0.16.* and this plugin installed.
# Usage: thub-plugin-instructlab/scripts/gpu_smoke.sh [PYTHON]   (run from the repository root)
set -euo pipefail
PY=${1:-.venv/bin/python}
WORK=$(mktemp -d /tmp/thub-ilab-smoke.XXXXXX)
trap 'echo "work dir: $WORK"' EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PY" -c "import torch; assert torch.cuda.is_available(), 'CUDA torch needed'; print('torch', torch.__version__, torch.version.cuda)"
"$PY" -c "import instructlab.training, importlib.metadata as m; print('instructlab-training', m.version('instructlab-training'))"

"$PY" examples/make_tiny_model.py --out "$WORK/model" >/dev/null
RUN="$WORK/run"
COMMON=(--backend instructlab-training --set "model_path=$WORK/model" --set "data_path=examples/data/chat.jsonl"
        --set "ckpt_output_dir=$RUN" --set max_seq_len=256 --set effective_batch_size=4 --set learning_rate=1e-4
        --set save_samples=8 --set nproc_per_node=1)

echo "== dry run"; "$PY" -m thub train sft "${COMMON[@]}" --set num_epochs=1 --dry-run | tail -40
echo "== epoch 1"; "$PY" -m thub train sft "${COMMON[@]}" --set num_epochs=1

"$PY" - "$RUN" <<'PYEOF'
import json, sys, pathlib
run = pathlib.Path(sys.argv[1])
result = json.loads((run / "result.json").read_text())
assert result["status"] == "succeeded", result
lines = [json.loads(l) for l in (run / "training_metrics.jsonl").read_text().splitlines()]
assert lines, "no metrics"
for line in lines:
    for key in ("step", "max_steps", "epoch", "loss", "learning_rate", "timestamp"):
        assert line.get(key) is not None, (key, line)
assert lines[-1]["step"] == lines[-1]["max_steps"], lines[-1]
ckpts = sorted((run / "hf_format").glob("samples_*"))
assert ckpts, "no hf_format checkpoint"
assert result["checkpoints"] and result["final_checkpoint"], result
assert (run / "full_state").is_dir(), "no full_state for resume"
summary = result["summary"]
print("steps", len(lines), "loss", lines[0]["loss"], "->", lines[-1]["loss"], "ckpts", [c.name for c in ckpts])
print("data kept", summary.get("data_kept_samples"), "dropped short", summary.get("data_dropped_short"))
PYEOF

# reload the last checkpoint with transformers
"$PY" - "$RUN" <<'PYEOF'
import sys, pathlib
from transformers import AutoModelForCausalLM
ckpt = sorted((pathlib.Path(sys.argv[1]) / "hf_format").glob("samples_*"), key=lambda p: int(p.name.split("_")[1]))[-1]
AutoModelForCausalLM.from_pretrained(ckpt)
print("reloaded", ckpt)
PYEOF

"$PY" -m thub.testing.smoke "$RUN" --status succeeded --steps 0   # contiguous steps, finite loss, reloads

echo "== interrupt and resume"
# 3 epochs of 16 steps (64 samples / effective_batch_size 4). SIGINT only once full_state/epoch_0 is complete
# (training_metadata.json is written after accelerate's save_state) and the next step is logged,
# so the interrupt never lands while full_state/ is being written.
RUN2="$WORK/run2"
COMMON2=("${COMMON[@]/ckpt_output_dir=$RUN/ckpt_output_dir=$RUN2}")
"$PY" -m thub train sft "${COMMON2[@]}" --set num_epochs=3 &
PID=$!
for _ in $(seq 1 1200); do
  if [ -f "$RUN2/full_state/epoch_0/training_metadata.json" ] && [ -s "$RUN2/training_metrics.jsonl" ] &&
     [ "$("$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step'])" \
           "$RUN2/training_metrics.jsonl")" -ge 17 ]; then
    break
  fi
  sleep 0.5
done
kill -INT "$PID" || true
wait "$PID" || true
"$PY" -m thub.testing.smoke "$RUN2" --status interrupted --reload none
"$PY" -m thub train sft "${COMMON2[@]}" --set num_epochs=3 --resume
# steps continue after the resumed epoch (instructlab restarts its counter at 1): 1..48, each once
"$PY" -m thub.testing.smoke "$RUN2" --status succeeded --steps 48
echo "GPU SMOKE OK"
