#!/usr/bin/env bash
# GPU smoke test for the unsloth backend: one GPU, a tiny local model, a few steps of LoRA and
# QLoRA. Run it from the repository root in an environment that has thub, thub-plugin-unsloth and
# the [unsloth] extra (with a CUDA torch and the torchvision that matches it).
#   bash thub-plugin-unsloth/scripts/gpu_smoke.sh [OUT_DIR]
# Needs no network: the model is built locally by examples/make_tiny_model.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-$(mktemp -d /tmp/thub-unsloth-smoke.XXXX)}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
PY=${PYTHON:-python}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch; assert torch.cuda.is_available(), 'CUDA torch needed'; print('torch', torch.__version__, torch.version.cuda)"
"$PY" -c "import unsloth; print('unsloth', unsloth.__version__)"
"$PY" -m thub doctor --backend unsloth || true
"$PY" examples/make_tiny_model.py --out "$OUT/model"

for mode in lora qlora; do
  extra=()
  [ "$mode" = qlora ] && extra=(--load-in-4bit)
  "$PY" -m thub train lora_sft --backend unsloth --model-path "$OUT/model" \
    --data-path examples/data/chat.jsonl --ckpt-output-dir "$OUT/$mode" \
    --max-steps 5 --learning-rate 1e-3 --lora-r 8 --save-steps 5 ${extra[@]+"${extra[@]}"} --json > "$OUT/$mode.json"
  "$PY" - "$OUT/$mode" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
result = json.loads((out / "result.json").read_text())
assert result["status"] == "succeeded", result
lines = [json.loads(l) for l in (out / "training_metrics.jsonl").read_text().splitlines()]
assert [l["step"] for l in lines] == [1, 2, 3, 4, 5] and all(l["max_steps"] == 5 for l in lines), lines
assert (out / "final" / "adapter_model.safetensors").exists()
assert "training on CPU" not in (out / "logs" / "train.log").read_text(), "unsloth fell back to CPU"
print(out.name, "ok: loss", [round(l["loss"], 3) for l in lines])
PY
  # status, steps 1..5 once each, finite loss, the adapter loads
  "$PY" -m thub.testing.smoke "$OUT/$mode" --status succeeded --steps 5 --reload adapter
done

# interrupt after the first step (SIGINT saves checkpoint-N at the next step boundary), then resume
"$PY" -m thub train lora_sft --backend unsloth --model-path "$OUT/model" --data-path examples/data/chat.jsonl \
  --ckpt-output-dir "$OUT/resume" --num-epochs 4 --learning-rate 1e-3 --lora-r 8 --json > /dev/null &
pid=$!
for _ in $(seq 1 600); do [ -s "$OUT/resume/training_metrics.jsonl" ] && break; sleep 0.5; done
kill -INT "$pid"
wait "$pid" || true
"$PY" -m thub.testing.smoke "$OUT/resume" --status interrupted --reload none
ls -d "$OUT"/resume/checkpoints/checkpoint-*
"$PY" -m thub train lora_sft --backend unsloth --model-path "$OUT/model" --data-path examples/data/chat.jsonl \
  --ckpt-output-dir "$OUT/resume" --num-epochs 4 --learning-rate 1e-3 --lora-r 8 --resume --json > /dev/null
"$PY" -m thub.testing.smoke "$OUT/resume" --status succeeded --steps 32 --reload adapter   # 64 samples / 8 x 4
echo "unsloth GPU smoke: OK ($OUT)"
