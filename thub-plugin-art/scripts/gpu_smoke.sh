#!/usr/bin/env bash
# GPU smoke test for the ART backend: one GPU, a small instruct model, 2 iterations of LoRA GRPO
# with the built-in `math` reward. Run from the repository root in an environment with thub,
# thub-plugin-art and its [backend] extra (openpipe-art[backend]).
#   MODEL=/path/or/hub-id bash thub-plugin-art/scripts/gpu_smoke.sh [OUT_DIR]
# MODEL defaults to Qwen/Qwen2.5-0.5B-Instruct (from the hub cache or the network). ART installs
# its vLLM runtime with uv on first use unless ART_VLLM_RUNTIME_BIN points to one.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-$(mktemp -d /tmp/thub-art-smoke.XXXX)}
mkdir -p "$OUT"
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export THUB_EXIT_GRACE=${THUB_EXIT_GRACE:-30}
PY=${PYTHON:-python}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true   # leftovers hold memory
"$PY" -c "import importlib.metadata as m; print('openpipe-art', m.version('openpipe-art'), 'torch', m.version('torch'))"
"$PY" -m thub doctor --backend art || true

# arithmetic the model sometimes gets wrong: reward variance, so ART does not skip the step
"$PY" - "$OUT/grpo.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(32):
        a, b = random.randint(10, 99), random.randint(10, 99)
        f.write(json.dumps({"question": f"What is {a}*{b}? Answer with the number only.", "answer": str(a * b)}) + "\n")
PY

"$PY" -m thub train lora_grpo --backend art --model-path "$MODEL" --data-path "$OUT/grpo.jsonl" \
  --ckpt-output-dir "$OUT/run" --reward math --num-iterations 2 --group-size 4 --prompt-batch-size 4 \
  --max-tokens 32 --lora-r 8 --gpu-memory-utilization 0.3 --concurrency 8 --json > "$OUT/result.json"

"$PY" - "$OUT/run" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
result = json.loads((out / "result.json").read_text())
assert result["status"] == "succeeded", result
lines = [json.loads(l) for l in (out / "training_metrics.jsonl").read_text().splitlines()]
assert [l["step"] for l in lines] == [1, 2] and all(l["max_steps"] == 2 for l in lines), lines
assert all("reward" in l and l["total_rollouts"] == 16 for l in lines), lines
log = (out / "logs" / "train.log").read_text()
print("rewards", [l["reward"] for l in lines], "losses", [l.get("loss") for l in lines])
print("checkpoints", result.get("checkpoints"), "note:", result.get("note"))
print("cleanup warnings:", [l for l in log.splitlines() if "WARNING: ART cleanup" in l])
PY
# status, steps 1..2 once each, finite reward, the LoRA checkpoint loads as an adapter
"$PY" -m thub.testing.smoke "$OUT/run" --status succeeded --steps 2 --metric reward --reload adapter

# interrupt after the first iteration, then --resume continues at the next one (model.get_step())
args=(--backend art --model-path "$MODEL" --data-path "$OUT/grpo.jsonl" --ckpt-output-dir "$OUT/resume" --reward math
      --num-iterations 3 --group-size 4 --prompt-batch-size 4 --max-tokens 32 --lora-r 8 --gpu-memory-utilization 0.3
      --concurrency 8)
"$PY" -m thub train lora_grpo "${args[@]}" --json > /dev/null &
pid=$!
for _ in $(seq 1 1200); do [ -s "$OUT/resume/training_metrics.jsonl" ] && break; sleep 0.5; done
kill -INT "$pid"
wait "$pid" || true
"$PY" -m thub.testing.smoke "$OUT/resume" --status interrupted --metric reward --reload none
"$PY" -m thub train lora_grpo "${args[@]}" --resume --json > /dev/null
"$PY" -m thub.testing.smoke "$OUT/resume" --status succeeded --steps 3 --metric reward --reload adapter
echo "ART GPU smoke: OK ($OUT)"
