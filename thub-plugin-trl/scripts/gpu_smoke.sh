#!/usr/bin/env bash
# GPU smoke test for the trl backend on CUDA: bf16 and, with two or more GPUs, two processes over
# NCCL (torchrun). Tiny local model (no network); sft and lora_sft, an interrupt + --resume, and
# grpo. Every run is checked by thub.testing.smoke: status, steps 1..N each once, finite loss or
# reward, the checkpoint reloads. Not run in CI (no GPU there).
#   bash thub-plugin-trl/scripts/gpu_smoke.sh [OUT_DIR]      (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-$(mktemp -d /tmp/thub-trl-smoke.XXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch; assert torch.cuda.is_available(), 'CUDA torch needed'; print('torch', torch.__version__, torch.version.cuda, 'bf16', torch.cuda.is_bf16_supported())"
GPUS=$("$PY" -c "import torch; print(min(torch.cuda.device_count(), 2))")
"$PY" examples/make_tiny_model.py --out "$OUT/model"
DATA=examples/data/chat.jsonl
common=(--backend trl --model-path "$OUT/model" --data-path "$DATA" --learning-rate 1e-3 --effective-batch-size 8
        --nproc-per-node "$GPUS")

# the plan: bf16 on a GPU that has it (fp16 otherwise), and the batch split over the processes
"$PY" -m thub train sft "${common[@]}" --ckpt-output-dir "$OUT/plan" --dry-run --json > "$OUT/plan.json"
"$PY" - "$OUT/plan.json" "$GPUS" <<'PY'
import json, sys
plan, gpus = json.load(open(sys.argv[1])), int(sys.argv[2])
config = plan["translation"]["config"]
assert config["bf16"] is True and config["use_cpu"] is False, config
assert plan["translation"]["world_size"] == gpus, plan["translation"]["world_size"]
assert config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] * gpus == 8, config
print("plan: bf16, world size", gpus)
PY

# NCCL_DEBUG=INFO: NCCL announces itself in the log when the processes talk over it
NCCL_DEBUG=INFO "$PY" -m thub train sft "${common[@]}" --max-steps 6 --ckpt-output-dir "$OUT/sft" --json > /dev/null
"$PY" -m thub.testing.smoke "$OUT/sft" --status succeeded --steps 6 --reload model
"$PY" - "$OUT/sft" "$GPUS" <<'PY'
import sys, pathlib
log, gpus = (pathlib.Path(sys.argv[1]) / "logs" / "train.log").read_text(), int(sys.argv[2])
assert log.count("thub: prepared") == gpus, f"expected {gpus} training processes"
if gpus >= 2:
    assert "NCCL INFO" in log, "two processes, but NCCL never initialised"
print("processes:", gpus, "| NCCL:", "NCCL INFO" in log)
PY
"$PY" -m thub train lora_sft "${common[@]}" --max-steps 6 --lora-r 8 --ckpt-output-dir "$OUT/lora" --json > /dev/null
"$PY" -m thub.testing.smoke "$OUT/lora" --status succeeded --steps 6 --reload adapter

# interrupt: the callback saves checkpoint-N at the next step boundary; --resume continues at N+1
"$PY" -m thub train sft "${common[@]}" --num-epochs 8 --ckpt-output-dir "$OUT/resume" --json > /dev/null &
pid=$!
for _ in $(seq 1 600); do [ -s "$OUT/resume/training_metrics.jsonl" ] && break; sleep 0.5; done
kill -INT "$pid"
wait "$pid" || true
"$PY" -m thub.testing.smoke "$OUT/resume" --status interrupted --reload none
ls -d "$OUT"/resume/checkpoints/checkpoint-*
"$PY" -m thub train sft "${common[@]}" --num-epochs 8 --ckpt-output-dir "$OUT/resume" --resume --json > /dev/null
"$PY" -m thub.testing.smoke "$OUT/resume" --status succeeded --steps 64 --reload model   # 64 samples / 8 x 8

"$PY" -m thub train grpo --backend trl --model-path "$OUT/model" --data-path examples/data/grpo.jsonl \
  --reward math --group-size 4 --prompt-batch-size 4 --max-tokens 16 --max-steps 2 --nproc-per-node "$GPUS" \
  --ckpt-output-dir "$OUT/grpo" --json > /dev/null
"$PY" -m thub.testing.smoke "$OUT/grpo" --status succeeded --steps 2 --metric reward --reload model
echo "trl GPU smoke: OK ($OUT)"
